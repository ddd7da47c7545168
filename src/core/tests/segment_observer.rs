//! The segment observer: every range and piece of device memory the
//! allocator holds is announced once, in order (RESERVE before the MAPs in
//! it, MAP after the runtime mapped it, UNMAP before the runtime unmaps or
//! frees it, RELEASE after the range's last UNMAP), over random sequences in
//! every mode; the emulator's own counters are read inside each event to
//! check "before" and "after"; and `held_segments` (what
//! `npualloc_for_each_segment` replays) always equals what was announced.

use super::random::ops::random_size;
use super::support::{allocator, drop_stream, emu_lock, new_stream, usage, Rng, DEV, MIB};
use crate::core::hooks::{SegmentEvent, SegmentPiece};
use crate::core::pools::config::{PoolConfig, SleepMode};
use crate::core::*;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// What the observer was told, and what went wrong.
#[derive(Default)]
struct Model {
    /// Reserved ranges: address to (bytes, pool).
    ranges: BTreeMap<usize, (usize, u64)>,
    /// Mapped memory: address to (bytes, handle, pool); a fixed segment's
    /// handle is null.
    mapped: BTreeMap<usize, (usize, usize, u64)>,
    /// The emulator's counters when the test began.
    base: Option<ascendcl::aclemu_usage>,
    events: usize,
    errors: Vec<String>,
}

impl Model {
    fn vmm_mapped(&self) -> usize {
        self.mapped.values().filter(|m| m.1 != 0).map(|m| m.0).sum()
    }

    fn fixed(&self) -> (usize, usize) {
        let fixed = self.mapped.values().filter(|m| m.1 == 0);
        (fixed.clone().count(), fixed.map(|m| m.0).sum())
    }

    fn on(&mut self, event: SegmentEvent, p: SegmentPiece) {
        self.events += 1;
        let u = usage(DEV);
        let base = self.base.expect("the test set the base");
        let emu_mapped = (u.mapped_bytes - base.mapped_bytes) as usize;
        let emu_ranges = (u.reserved_ranges - base.reserved_ranges) as usize;
        let emu_mallocs = (u.malloc_count - base.malloc_count) as usize;
        let (addr, size, handle) = (p.addr, p.size, p.handle as usize);
        let mut errs: Vec<String> = Vec::new();
        match event {
            SegmentEvent::Reserve => {
                if self.ranges.insert(addr, (size, p.pool)).is_some() {
                    errs.push("reserved twice".into());
                }
                if emu_ranges != self.ranges.len() {
                    errs.push(format!(
                        "the runtime holds {emu_ranges} ranges after it, the observer knows {}",
                        self.ranges.len()
                    ));
                }
            }
            SegmentEvent::Release => {
                if self.ranges.get(&addr).map(|r| r.0) != Some(size) {
                    errs.push("no such range was reserved".into());
                }
                if self.mapped.range(addr..addr + size).next().is_some() {
                    errs.push("released with memory still mapped in it".into());
                }
                if emu_ranges != self.ranges.len() {
                    errs.push(format!(
                        "the runtime holds {emu_ranges} ranges before it, the observer knows {}",
                        self.ranges.len()
                    ));
                }
                self.ranges.remove(&addr);
            }
            SegmentEvent::Map => {
                let inside = |(&r, &(len, _)): (&usize, &(usize, u64))| addr + size <= r + len;
                if handle != 0 && !self.ranges.range(..=addr).next_back().is_some_and(inside) {
                    errs.push("mapped outside every reserved range".into());
                }
                if self.mapped.range(..addr + size).next_back().is_some_and(|(&m, &(len, _, _))| m + len > addr) {
                    errs.push("overlaps memory mapped already".into());
                }
                self.mapped.insert(addr, (size, handle, p.pool));
                if handle != 0 && emu_mapped != self.vmm_mapped() {
                    errs.push(format!(
                        "the runtime maps {emu_mapped} bytes after it, the observer knows {}",
                        self.vmm_mapped()
                    ));
                }
                if handle == 0 && emu_mallocs != self.fixed().0 {
                    errs.push(format!(
                        "the runtime holds {emu_mallocs} allocations after it, the observer knows {}",
                        self.fixed().0
                    ));
                }
            }
            SegmentEvent::Unmap => {
                if self.mapped.get(&addr).map(|m| (m.0, m.1)) != Some((size, handle)) {
                    errs.push("not mapped so".into());
                }
                if handle != 0 && emu_mapped != self.vmm_mapped() {
                    errs.push(format!(
                        "the runtime maps {emu_mapped} bytes before it, the observer knows {}",
                        self.vmm_mapped()
                    ));
                }
                if handle == 0 && emu_mallocs != self.fixed().0 {
                    errs.push(format!(
                        "the runtime holds {emu_mallocs} allocations before it, the observer knows {}",
                        self.fixed().0
                    ));
                }
                self.mapped.remove(&addr);
            }
        }
        for e in errs {
            if self.errors.len() < 20 {
                self.errors.push(format!("{event:?} at {addr:#x}+{size:#x}: {e}"));
            }
        }
    }

    /// The announced state as `held_segments` lists it.
    fn listing(&self) -> Vec<(SegmentEvent, usize, usize, usize, u64)> {
        let mut out: Vec<_> = self
            .ranges
            .iter()
            .map(|(&a, &(s, pool))| (SegmentEvent::Reserve, a, s, 0, pool))
            .chain(self.mapped.iter().map(|(&a, &(s, h, pool))| (SegmentEvent::Map, a, s, h, pool)))
            .collect();
        out.sort_by_key(|e| (e.1, e.0 as i32));
        out
    }
}

unsafe extern "C" fn observe(
    user: *mut c_void,
    device: i32,
    event: i32,
    addr: *mut c_void,
    size: usize,
    handle: *mut c_void,
    pool: u64,
) {
    // SAFETY: the test passes its `Mutex<Model>`, which outlives the allocator.
    let m = unsafe { &*(user as *const Mutex<Model>) };
    let mut m = m.lock().unwrap();
    if device != DEV {
        m.errors.push(format!("event for device {device}"));
    }
    let event = match event {
        1 => SegmentEvent::Reserve,
        2 => SegmentEvent::Release,
        3 => SegmentEvent::Map,
        4 => SegmentEvent::Unmap,
        other => {
            m.errors.push(format!("event {other}"));
            return;
        }
    };
    m.on(event, SegmentPiece { addr: addr as usize, size, handle, pool });
}

fn held(a: &DeviceAllocator) -> Vec<(SegmentEvent, usize, usize, usize, u64)> {
    let mut out: Vec<_> =
        a.held_segments().into_iter().map(|(e, p)| (e, p.addr, p.size, p.handle as usize, p.pool)).collect();
    out.sort_by_key(|e| (e.1, e.0 as i32));
    out
}

fn check(a: &DeviceAllocator, model: &Mutex<Model>, at: &str) {
    let m = model.lock().unwrap();
    assert!(m.errors.is_empty(), "{at}: {:#?}", m.errors);
    assert_eq!(held(a), m.listing(), "{at}: what the allocator holds is not what the observer was told");
}

/// One seed's sequence on `config`: mallocs and frees on two streams and
/// in a private pool, empty_cache, and with `sleeps` sleep and wake.
fn run(config: &str, seed: u64, sleeps: bool) {
    let model = Mutex::new(Model { base: Some(usage(DEV)), ..Model::default() });
    let a = allocator(config);
    a.set_segment_observer(Some((observe, &model as *const Mutex<Model> as *mut c_void)));
    let streams = [new_stream(), new_stream()];
    let pool = a.pool_create(PoolConfig::default()).unwrap();
    let mut rng = Rng::new(seed);
    let mut live: Vec<usize> = Vec::new();
    for step in 0..200 {
        let at = format!("{config:?} seed {seed} step {step}");
        match rng.below(16) {
            0..=6 => {
                let s = streams[rng.index(2)];
                let routed = rng.below(4) == 0;
                if routed {
                    a.pool_begin(pool, Some(s)).unwrap();
                }
                let size =
                    if rng.below(10) == 0 { 40 * MIB + rng.below(40 << 20) as usize } else { random_size(&mut rng) };
                if let Ok(p) = a.malloc(size, s) {
                    live.push(p);
                }
                if routed {
                    a.pool_end(pool, Some(s)).unwrap();
                }
            }
            7..=12 if !live.is_empty() => a.free(live.swap_remove(rng.index(live.len()))).unwrap(),
            13 => {
                a.empty_cache().unwrap();
            }
            14 if sleeps => {
                a.sleep(SleepMode::Discard).unwrap();
                check(&a, &model, &format!("{at} asleep"));
                a.wake().unwrap();
            }
            _ => {}
        }
        check(&a, &model, &at);
    }
    for p in live {
        a.free(p).unwrap();
    }
    a.pool_destroy(pool).unwrap();
    a.empty_cache().unwrap();
    check(&a, &model, "after the last empty_cache");
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    {
        let m = model.lock().unwrap();
        assert!(m.errors.is_empty(), "teardown: {:#?}", m.errors);
        assert!(
            m.ranges.is_empty() && m.mapped.is_empty(),
            "after teardown the observer still has {:?} {:?}",
            m.ranges,
            m.mapped
        );
        assert!(m.events > 0);
    }
    for s in streams {
        drop_stream(s);
    }
}

#[test]
fn every_piece_is_announced_in_order_and_listed_as_announced() {
    let _g = emu_lock();
    for config in [
        "",
        "map_ahead:false",
        "reserved_headroom:0",
        "page_size:20m",
        "expandable_segments:false",
        "expandable_segments:false,max_split_size_mb:24",
    ] {
        let sleeps = !config.starts_with("expandable_segments:false");
        for seed in 0..3 {
            run(config, seed, sleeps);
        }
    }
}

/// A private pool's memory carries its pool id; the default pool's 0.
#[test]
fn events_name_the_pool() {
    let _g = emu_lock();
    let model = Mutex::new(Model { base: Some(usage(DEV)), ..Model::default() });
    let a = allocator("");
    a.set_segment_observer(Some((observe, &model as *const Mutex<Model> as *mut c_void)));
    let s = new_stream();
    let pool = a.pool_create(PoolConfig::default()).unwrap();
    a.pool_begin(pool, Some(s)).unwrap();
    let p = a.malloc(8 * MIB, s).unwrap();
    a.pool_end(pool, Some(s)).unwrap();
    let q = a.malloc(8 * MIB, s).unwrap();
    {
        let m = model.lock().unwrap();
        let pools: std::collections::BTreeSet<u64> = m.mapped.values().map(|v| v.2).collect();
        assert_eq!(pools, [0, pool].into_iter().collect(), "one piece for each pool");
        let holds = |addr: usize, want: u64| {
            m.mapped.iter().any(|(&at, &(len, _, pool))| at <= addr && addr < at + len && pool == want)
        };
        assert!(holds(p, pool) && holds(q, 0));
    }
    check(&a, &model, "two pools");
    a.free(p).unwrap();
    a.free(q).unwrap();
    a.pool_destroy(pool).unwrap();
    // Removed: nothing more is told.
    a.set_segment_observer(None);
    let before = model.lock().unwrap().events;
    a.empty_cache().unwrap();
    a.teardown().unwrap();
    assert_eq!(model.lock().unwrap().events, before, "a removed observer was called");
    drop_stream(s);
}
