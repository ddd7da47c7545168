//! The segment observer: every range and piece of device memory the
//! allocator holds is announced once, in order (RESERVE before the MAPs in
//! it, MAP after the runtime mapped it, UNMAP before the runtime unmaps or
//! frees it, RELEASE after the range's last UNMAP), over random sequences in
//! every mode; the emulator's own counters are read inside each event to
//! check "before" and "after"; and `held_segments` (what
//! `npualloc_for_each_segment` replays) always equals what was announced.

use super::random::ops::{disarm_faults, random_size, FAULTS};
use super::support::{
    allocator, drop_stream, emu_lock, fail_nth, finish, new_stream, set_capacity, usage, Rng, DEV, GIB, MIB,
};
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
                if self.ranges.get(&addr) != Some(&(size, p.pool)) {
                    errs.push(format!("no such range was reserved in pool {}", p.pool));
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
                if self.mapped.get(&addr) != Some(&(size, handle, p.pool)) {
                    errs.push(format!("not mapped so in pool {} (told {:?})", p.pool, self.mapped.get(&addr)));
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
    // Each range's pool as the snapshot (the stream entries) says.
    for seg in a.snapshot().unwrap().segments.iter().filter(|s| s.expandable) {
        let told = m.ranges.get(&seg.address).map(|r| r.1);
        assert_eq!(told, Some(seg.pool_id), "{at}: the range at {:#x} was told in another pool", seg.address);
    }
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
    check(&a, &model, "all freed");
    a.check_invariants().unwrap();
    // Cached memory left for teardown to give back, with events.
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
    set_capacity(64 * GIB as u64);
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
    set_capacity(64 * GIB as u64);
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

/// A fresh model and an allocator on `config` observed into it.
fn observed(config: &str) -> (Box<Mutex<Model>>, DeviceAllocator) {
    let model = Box::new(Mutex::new(Model { base: Some(usage(DEV)), ..Model::default() }));
    let a = allocator(config);
    a.set_segment_observer(Some((observe, &*model as *const Mutex<Model> as *mut c_void)));
    (model, a)
}

fn ended(model: &Mutex<Model>, at: &str) {
    let m = model.lock().unwrap();
    assert!(m.errors.is_empty(), "{at}: {:#?}", m.errors);
    assert!(m.ranges.is_empty() && m.mapped.is_empty(), "{at}: left {:?} {:?}", m.ranges, m.mapped);
}

/// A wholly free handle moved where a request grows is a MAP at its new
/// address and, when its old one is unmapped, an UNMAP there; a request
/// that needs a new range and fails gives the range back with RELEASE.
#[test]
fn moves_the_ladder_and_failed_ranges_are_announced() {
    let _g = emu_lock();
    // Roomy: handles move only where free memory does not shrink them.
    set_capacity(64 * GIB as u64);
    let (model, a) = observed("map_ahead:false");
    let big = a.malloc(64 * MIB, Stream::DEFAULT).unwrap();
    let pin = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    a.free(big).unwrap();
    let grown = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    assert!(a.stats().unwrap().num_handle_moves > 0, "the free handle moved");
    check(&a, &model, "after a move");
    a.empty_cache().unwrap();
    check(&a, &model, "old address unmapped");
    a.free(grown).unwrap();
    a.free(pin).unwrap();
    a.teardown().unwrap();
    ended(&model, "moves");

    // A small device: the ladder gives back, and a request no device holds
    // makes a range, fails, and gives it back.
    set_capacity(256 * MIB as u64);
    let (model, a) = observed("");
    let s = new_stream();
    let mut live: Vec<usize> =
        (0..6).map(|i| a.malloc((20 + i) * MIB, if i % 2 == 0 { s } else { Stream::DEFAULT }).unwrap()).collect();
    for p in live.drain(..3) {
        a.free(p).unwrap();
    }
    let p = a.malloc(120 * MIB, Stream::DEFAULT).expect("the ladder gives the other stream's cache back");
    check(&a, &model, "after the ladder");
    assert!(a.malloc(4 * GIB, s).is_err());
    check(&a, &model, "after a refused request");
    a.free(p).unwrap();
    for p in live {
        a.free(p).unwrap();
    }
    a.teardown().unwrap();
    ended(&model, "ladder");
    drop_stream(s);
    set_capacity(64 * GIB as u64);
}

/// A stream forgotten and its entry taken over by another stream of a
/// private pool: the events of the new owner's memory name the new pool.
#[test]
fn a_revived_entry_announces_its_new_pool() {
    let _g = emu_lock();
    set_capacity(64 * GIB as u64);
    let (model, a) = observed("");
    let s0 = new_stream();
    let p = a.malloc(8 * MIB, s0).unwrap();
    a.free(p).unwrap();
    a.forget_stream(s0).unwrap();
    check(&a, &model, "forgotten");
    let pool = a.pool_create(PoolConfig::default()).unwrap();
    let s1 = new_stream();
    a.pool_begin(pool, Some(s1)).unwrap();
    let q = a.malloc(8 * MIB, s1).unwrap();
    a.pool_end(pool, Some(s1)).unwrap();
    check(&a, &model, "revived in a pool");
    assert!(model.lock().unwrap().mapped.values().any(|m| m.2 == pool), "the pool's memory names the pool");
    a.free(q).unwrap();
    a.pool_destroy(pool).unwrap();
    a.teardown().unwrap();
    ended(&model, "revival");
    drop_stream(s0);
    drop_stream(s1);
}

/// Every runtime call that may fail fails once, at each of its first
/// calls, in sequences of growth, give-back, sleep and teardown: after each
/// step what the observer was told is what the allocator holds.
#[test]
fn refused_runtime_calls_leave_the_observer_right() {
    let _g = emu_lock();
    set_capacity(64 * GIB as u64);
    for config in ["", "map_ahead:false", "expandable_segments:false"] {
        for function in FAULTS {
            for nth in 1..=3 {
                let at = format!("{config:?} {function} #{nth}");
                let (model, a) = observed(config);
                let s = new_stream();
                fail_nth(function, nth);
                let mut live = Vec::new();
                for (i, size) in [30 * MIB, 3 * MIB, 60 * MIB, 500 << 10, 90 * MIB].into_iter().enumerate() {
                    if let Ok(p) = a.malloc(size, if i % 2 == 0 { s } else { Stream::DEFAULT }) {
                        live.push(p);
                    }
                    check(&a, &model, &format!("{at}: malloc {i}"));
                }
                for p in live.drain(..).step_by(2).collect::<Vec<_>>() {
                    let _ = a.free(p);
                }
                let _ = a.empty_cache();
                check(&a, &model, &format!("{at}: empty_cache"));
                if config != "expandable_segments:false" {
                    let _ = a.sleep(SleepMode::Discard);
                    check(&a, &model, &format!("{at}: sleep"));
                    let _ = a.wake();
                    check(&a, &model, &format!("{at}: wake"));
                }
                disarm_faults();
                let _ = a.empty_cache();
                check(&a, &model, &format!("{at}: disarmed"));
                // A failed teardown is not tried again (teardown runs once).
                let _ = a.teardown();
                ended(&model, &at);
                drop_stream(s);
            }
        }
    }
}

/// Whether `slow_unmap` holds UNMAP events, and whether one is inside it.
static HOLD_UNMAPS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static IN_UNMAP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// An observer that waits inside UNMAP while `HOLD_UNMAPS` is set, as one
/// whose library deregisters in a collective that waits for every rank.
unsafe extern "C" fn slow_unmap(_: *mut c_void, _: i32, event: i32, _: *mut c_void, _: usize, _: *mut c_void, _: u64) {
    use std::sync::atomic::Ordering::SeqCst;
    if event == SegmentEvent::Unmap as i32 && HOLD_UNMAPS.load(SeqCst) {
        IN_UNMAP.store(true, SeqCst);
        while HOLD_UNMAPS.load(SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// `npualloc_set_segment_observer`: the observer runs "with no npualloc lock held that a malloc or
/// free on another stream needs". While a free's give-back (the release
/// threshold) waits inside UNMAP, another stream's growth, frees that would
/// pass the threshold too, and a hit all finish; what those frees left
/// cached goes back with the next free that gives memory back (here the
/// one that held the give-back).
#[test]
fn another_streams_mallocs_and_frees_go_on_while_the_observer_waits() {
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::mpsc::RecvTimeoutError;
    use std::time::{Duration, Instant};
    let _g = emu_lock();
    let a = allocator("release_threshold_mb:0,map_ahead:false");
    a.set_segment_observer(Some((slow_unmap, std::ptr::null_mut())));
    let (s1, s2) = (new_stream(), new_stream());
    let held = a.malloc(8 * MIB, s1).unwrap();
    HOLD_UNMAPS.store(true, SeqCst);
    // Liveness bounds, not timings: each is minutes beyond what it waits for.
    let bound = Duration::from_secs(60);
    std::thread::scope(|scope| {
        let a = &a;
        let giving_back = scope.spawn(move || a.free(held).unwrap());
        let since = Instant::now();
        while !IN_UNMAP.load(SeqCst) {
            assert!(since.elapsed() < bound && !giving_back.is_finished(), "the free never reached its UNMAP");
            std::thread::yield_now();
        }
        let (done, other) = std::sync::mpsc::channel();
        let others = scope.spawn(move || {
            let x = a.malloc(4 * MIB, s2).unwrap();
            a.free(x).unwrap();
            // Its memory stayed cached: a hit.
            let again = a.malloc(4 * MIB, s2).unwrap();
            assert_eq!(again, x);
            a.free(again).unwrap();
            let y = a.malloc(MIB, s2).unwrap();
            a.free(y).unwrap();
            done.send(()).unwrap();
        });
        let waited = other.recv_timeout(bound);
        HOLD_UNMAPS.store(false, SeqCst);
        giving_back.join().unwrap();
        // A panic of the other thread is reported here, as itself.
        others.join().unwrap();
        assert!(waited != Err(RecvTimeoutError::Timeout), "another stream's malloc or free waited for the observer");
    });
    IN_UNMAP.store(false, SeqCst);
    // The other stream's frees found the give-back busy (its hit shows its
    // memory stayed): the holder gave that back too before it let go.
    let st = a.stats().unwrap();
    assert_eq!(st.reserved_bytes, 0, "{st:?}");
    finish(a);
    drop_stream(s1);
    drop_stream(s2);
}
