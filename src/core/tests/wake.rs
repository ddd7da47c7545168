//! Wake (Note [sleep]; `core::wake`), through the emulator: sleeping pages
//! stay their blocks' while asleep, a wake that fails part-way changes
//! nothing, a wake short of memory gives back the awake pools' cache first,
//! and pools wake one at a time.

use super::support::{
    allocator, budget, check_fill, emu_lock, fail_nth, fault_pending, fill, host_usage, new_stream, usage, Baseline,
    Vmm, DEV, GIB, MIB, PAGE,
};
use crate::core::backing::expandable::PieceRule;
use crate::core::pools::config::PoolConfig;
use crate::core::*;
use crate::error::Error;

/// One page per physical handle, so pages, handles and maps can be counted.
pub(super) fn paged() -> DeviceAllocator {
    let a = allocator("expandable_segments:true,page_size:2m");
    a.set_piece_rule(PieceRule::fixed(PAGE));
    a
}

pub(super) fn pool(a: &DeviceAllocator, sleep: SleepMode) -> u64 {
    a.pool_create(PoolConfig { sleep, ..PoolConfig::default() }).unwrap()
}

/// `size` bytes from `pool` on `s`, filled with `byte`.
fn block_in(a: &DeviceAllocator, pool: u64, s: Stream, size: usize, byte: u8) -> (usize, usize, u8) {
    if pool != 0 {
        a.pool_begin(pool, Some(s)).unwrap();
    }
    let addr = a.malloc(size, s).unwrap();
    if pool != 0 {
        a.pool_end(pool, Some(s)).unwrap();
    }
    fill(addr, size, byte);
    (addr, size, byte)
}

/// Whether a malloc routed to `pool` on `s` is refused as asleep.
pub(super) fn refused(a: &DeviceAllocator, pool: u64, s: Stream) -> bool {
    a.pool_begin(pool, Some(s)).unwrap();
    let got = a.malloc(4096, s);
    a.pool_end(pool, Some(s)).unwrap();
    match got {
        Err(Error::InvalidArgument(m)) => m.contains("asleep"),
        Ok(p) => {
            a.free(p).unwrap();
            false
        }
        Err(_) => false,
    }
}

fn pages_of(addr: usize, size: usize) -> std::ops::RangeInclusive<usize> {
    (addr / PAGE)..=((addr + size - 1) / PAGE)
}

fn capture(s: Stream) {
    // SAFETY: a live emulator stream the test created; mode 0 is global.
    assert_eq!(unsafe { ascendcl::aclmdlRICaptureBegin(s.raw(), 0) }, 0);
}

fn end_capture(s: Stream) {
    let mut model = std::ptr::null_mut();
    // SAFETY: the stream is capturing; `model` is a valid out-pointer.
    assert_eq!(unsafe { ascendcl::aclmdlRICaptureEnd(s.raw(), &mut model) }, 0);
    // SAFETY: the model the capture just made, never executed.
    assert_eq!(unsafe { ascendcl::aclmdlRIDestroy(model) }, 0);
}

/// A stream that starts capturing while asleep becomes a graph stream when
/// the host records a sleeping block on it, and its requests are served
/// (a capture cannot be refused). They must not land on a page of a
/// sleeping run, even a free block's part of a page a live block shares:
/// such a page stays its run's until wake, which then maps exactly what
/// sleep unmapped and restores every byte.
#[test]
fn a_sleeping_page_is_never_mapped_for_anyone_else() {
    let _g = emu_lock();
    // A device of its own: a graph stream's memory is left to the runtime
    // at teardown (Note [capture]), which the other tests' counts of
    // device DEV must not see.
    const GRAPH_DEV: i32 = 3;
    let config = crate::config::Config::parse("expandable_segments:true,page_size:2m").unwrap();
    let a = DeviceAllocator::with_runtime(config, GRAPH_DEV, crate::runtime::Runtime::emulated()).unwrap();
    a.set_piece_rule(PieceRule::fixed(PAGE));
    let rt = crate::runtime::Runtime::emulated();
    rt.set_device(GRAPH_DEV).unwrap();
    let s = rt.create_stream().unwrap();
    let mapped = || {
        let mut u: ascendcl::aclemu_usage = Default::default();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { ascendcl::aclemu_get_usage(GRAPH_DEV, &mut u) }, 0);
        u.mapped_bytes
    };
    let before = mapped();
    // Small pool: the free rest of the first page; large pool: the free
    // rest of the second page.
    let small = block_in(&a, 0, s, 100 * 1024, 0x21);
    let large = block_in(&a, 0, s, 3 * MIB, 0x42);
    a.sleep(SleepMode::Offload).unwrap();
    assert_eq!(mapped(), before);
    capture(s);
    a.record_stream(small.0, s).unwrap();
    let g_small = a.malloc(100 * 1024, s).expect("a graph stream is served while asleep");
    let g_large = a.malloc(2 * MIB, s).expect("a graph stream is served while asleep");
    end_capture(s);
    for (g, size) in [(g_small, 100 * 1024), (g_large, 2 * MIB)] {
        for (addr, len, _) in [small, large] {
            assert!(
                pages_of(g, size).all(|p| !pages_of(addr, len).contains(&p)),
                "{g:#x} was placed on a page of the sleeping block at {addr:#x}"
            );
        }
    }
    a.check_invariants().unwrap();
    a.wake().expect("wake maps the sleeping runs where nothing else was mapped");
    assert!(!a.is_asleep());
    for (addr, size, byte) in [small, large] {
        assert!(check_fill(addr, size, byte), "{addr:#x} reads back as it was");
    }
    a.check_invariants().unwrap();
    for addr in [small.0, large.0, g_small, g_large] {
        a.free(addr).unwrap();
    }
    a.teardown().unwrap();
    rt.on_device(GRAPH_DEV, || rt.destroy_stream(s)).unwrap();
}

/// The end of a test that woke its blocks: each reads back its fill byte and
/// is freed (`what` prefixes the message), then the allocator is torn down
/// clean and the stream destroyed.
pub(super) fn read_back_and_finish(
    a: DeviceAllocator,
    base: &Baseline,
    s: Stream,
    blocks: &[(usize, usize, u8)],
    what: &str,
) {
    for &(addr, size, byte) in blocks {
        assert!(check_fill(addr, size, byte), "{what}{addr:#x} reads back");
        a.free(addr).unwrap();
    }
    super::support::teardown_clean(a, base);
    super::support::drop_stream(s);
}

/// Blocks in the default pool on two streams and in an offload pool: many
/// shards, several runs each (holes between blocks).
pub(super) fn many_runs(a: &DeviceAllocator, s: Stream, off: u64) -> Vec<(usize, usize, u8)> {
    let mut blocks = Vec::new();
    let mut byte = 0x10;
    for (pool, stream) in [(0, Stream::DEFAULT), (0, s), (off, s)] {
        let mut hole = Vec::new();
        for size in [3 * MIB, 5 * MIB, 4 * MIB, 200 * 1024, 300 * 1024, 700 * 1024] {
            byte += 1;
            blocks.push(block_in(a, pool, stream, size, byte));
            hole.push(block_in(a, pool, stream, size, 0).0);
        }
        // Freed, then given back: holes split the ranges into runs.
        for h in hole {
            a.free(h).unwrap();
        }
    }
    a.empty_cache().unwrap();
    blocks
}

/// A paged allocator on a 1 GiB device with `many_runs` blocks, its offload
/// pool asleep: the allocator, the stream, the pool and the blocks.
pub(super) fn asleep_in_runs() -> (DeviceAllocator, Stream, u64, Vec<(usize, usize, u8)>) {
    budget(GIB);
    let a = paged();
    let s = new_stream();
    let off = pool(&a, SleepMode::Offload);
    let blocks = many_runs(&a, s, off);
    a.sleep(SleepMode::Offload).unwrap();
    (a, s, off, blocks)
}

/// A wake whose Nth runtime call of `function` fails, part-way through the
/// runs: OUT_OF_MEMORY (or the copy's error), still asleep, the device and
/// the host hold exactly what they held asleep, every sleeping pool still
/// refuses allocations; the next wake restores every byte.
fn wake_failing_at(function: &str, nth: i32, oom: bool) {
    let base = Baseline::take();
    let (a, s, off, blocks) = asleep_in_runs();
    let (asleep, host) = (base.vmm(), host_usage());
    assert!(host.1 >= 6, "several runs slept ({} host buffers)", host.1);
    fail_nth(function, nth);
    let got = a.wake();
    let pending = fault_pending(function);
    fail_nth(function, 0);
    assert_eq!(pending, 0, "{function} #{nth}: the failure fired");
    match got {
        Err(Error::OutOfMemory(m)) if oom => assert!(m.contains("nothing changed"), "{m}"),
        Err(Error::Runtime { context, .. }) if !oom => assert!(context.contains("nothing changed"), "{context}"),
        other => panic!("{function} #{nth} failing in a wake: {other:?}"),
    }
    assert!(a.is_asleep(), "{function} #{nth}: still asleep");
    assert_eq!((base.vmm(), host_usage()), (asleep, host), "{function} #{nth}: the failed wake changed nothing");
    assert!(refused(&a, off, s) && refused(&a, 0, s), "{function} #{nth}: the pools still sleep");
    a.check_invariants().unwrap();
    a.wake().expect("the next wake succeeds");
    read_back_and_finish(a, &base, s, &blocks, &format!("{function} #{nth}: "));
}

#[test]
fn a_map_refused_mid_wake_changes_nothing() {
    let _g = emu_lock();
    for nth in [1, 4, 9] {
        wake_failing_at("aclrtMapMem", nth, true);
    }
}

/// A physical allocation refused once, part-way through the handles a
/// wake needs: those allocated are freed, the awake pools' cache goes back
/// and the wake tries once more, which succeeds, every byte intact.
#[test]
fn a_physical_allocation_refused_once_mid_wake_is_tried_again() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let s = new_stream();
    let off = pool(&a, SleepMode::Offload);
    let blocks = many_runs(&a, s, off);
    a.sleep(SleepMode::Offload).unwrap();
    fail_nth("aclrtMallocPhysical", 5);
    a.wake().expect("the second try gets every handle");
    fail_nth("aclrtMallocPhysical", 0);
    let s_ = a.stats().unwrap();
    assert_eq!(base.vmm().physical_bytes as u64, s_.reserved_bytes, "no handle of the first try is left");
    read_back_and_finish(a, &base, s, &blocks, "");
}

#[test]
fn a_copy_back_refused_mid_wake_changes_nothing() {
    let _g = emu_lock();
    wake_failing_at("aclrtMemcpy2d", 3, false);
}

/// A device filled by the default pool's cached memory: wake gives that
/// memory back (as the OOM ladder would) and succeeds.
#[test]
fn wake_gives_back_the_awake_pools_cache_first() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let s = new_stream();
    let off = pool(&a, SleepMode::Offload);
    let weights = block_in(&a, off, s, 9 * MIB, 0x77);
    a.sleep_pools().unwrap();
    // The device has 64 MiB of room; the default pool caches all of it.
    let u = usage(DEV);
    super::support::set_capacity(u.malloc_bytes + u.physical_bytes + 64 * MIB as u64);
    let filled: Vec<usize> = (0..4).map(|_| a.malloc(16 * MIB, Stream::DEFAULT).unwrap()).collect();
    for p in filled {
        a.free(p).unwrap();
    }
    assert_eq!(base.vmm().physical_bytes as usize, 64 * MIB, "the device is full of cached memory");
    a.wake().expect("the cached memory goes back and wake fits");
    assert!(check_fill(weights.0, weights.1, weights.2));
    assert_eq!(base.vmm().physical_bytes as usize, 10 * MIB, "only the woken pages are held");
    a.free(weights.0).unwrap();
    super::support::teardown_clean(a, &base);
    super::support::drop_stream(s);
}

/// A private pool's cached memory is its own (Note [pools]): wake takes
/// it only from a pool with `use_on_oom`, as the OOM ladder does. With a
/// plain pool's cache filling the device, wake is OUT_OF_MEMORY, nothing
/// changed and that cache still there; with `use_on_oom`, wake succeeds.
#[test]
fn wake_takes_a_private_pools_cache_only_with_use_on_oom() {
    let _g = emu_lock();
    for use_on_oom in [false, true] {
        let base = Baseline::take();
        budget(GIB);
        let a = paged();
        let s = new_stream();
        let off = pool(&a, SleepMode::Offload);
        let own = a.pool_create(PoolConfig { sleep: SleepMode::Keep, use_on_oom, ..Default::default() }).unwrap();
        let weights = block_in(&a, off, s, 9 * MIB, 0x77);
        a.sleep_pools().unwrap();
        let u = usage(DEV);
        super::support::set_capacity(u.malloc_bytes + u.physical_bytes + 32 * MIB as u64);
        let cached: Vec<usize> = (0..2).map(|_| block_in(&a, own, s, 16 * MIB, 0).0).collect();
        for p in cached {
            a.free(p).unwrap();
        }
        assert_eq!(base.vmm().physical_bytes as usize, 32 * MIB, "the device is full of the pool's cache");
        let got = a.wake();
        if use_on_oom {
            got.expect("a use_on_oom pool's cache goes back for the wake");
            assert!(check_fill(weights.0, weights.1, weights.2));
        } else {
            match got {
                Err(Error::OutOfMemory(m)) => assert!(m.contains("nothing changed"), "{m}"),
                other => panic!("wake took a private pool's cache: {other:?}"),
            }
            assert!(a.is_asleep());
            assert_eq!(base.vmm().physical_bytes as usize, 32 * MIB, "the pool's cache stays");
            budget(GIB);
            a.wake().unwrap();
            assert!(check_fill(weights.0, weights.1, weights.2));
        }
        a.free(weights.0).unwrap();
        super::support::teardown_clean(a, &base);
        super::support::drop_stream(s);
    }
}

/// The pools wake one at a time: waking the offload pool brings its
/// blocks back (intact) and only them; the discard pool still refuses
/// allocations and the allocator counts as asleep until it wakes too. A
/// pool never created is INVALID_ARGUMENT and wakes nothing.
#[test]
fn pools_wake_one_at_a_time() {
    let _g = emu_lock();
    let base = Baseline::take();
    let host0 = host_usage();
    budget(GIB);
    let a = paged();
    let s = new_stream();
    let (weights, kv) = (pool(&a, SleepMode::Offload), pool(&a, SleepMode::Discard));
    let w = block_in(&a, weights, s, 9 * MIB, 0x5c);
    let k = block_in(&a, kv, s, 6 * MIB, 0);
    a.sleep_pools().unwrap();
    let asleep = base.vmm();
    assert_eq!(asleep.physical_bytes, 0);
    match a.wake_with(&[weights, 77]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("pool 77"), "{m}"),
        other => panic!("waking a pool never created: {other:?}"),
    }
    assert_eq!(base.vmm(), asleep, "nothing was woken");
    a.wake_with(&[weights]).unwrap();
    assert!(a.is_asleep(), "the kv pool still sleeps");
    assert!(check_fill(w.0, w.1, w.2), "the weights read back");
    assert_eq!(base.vmm().physical_bytes as usize, 10 * MIB, "the weights' pages only");
    assert_eq!(host_usage(), host0, "the weights' host copy is freed");
    assert!(refused(&a, kv, s), "the kv pool refuses allocations");
    assert!(!refused(&a, weights, s), "the weights pool serves");
    a.wake_with(&[weights]).expect("waking an awake pool again is OK");
    a.check_invariants().unwrap();
    a.wake_with(&[kv]).unwrap();
    assert!(!a.is_asleep());
    assert!(!refused(&a, kv, s));
    fill(k.0, k.1, 0x66);
    assert!(check_fill(k.0, k.1, 0x66) && check_fill(w.0, w.1, w.2));
    a.free(w.0).unwrap();
    a.free(k.0).unwrap();
    super::support::teardown_clean(a, &base);
    super::support::drop_stream(s);
}

/// A pool destroyed while asleep keeps its live blocks (`npualloc_pool_destroy`
/// says so), asleep: naming it in a partial wake brings them back.
#[test]
fn a_pool_destroyed_while_asleep_wakes_by_name() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let s = new_stream();
    let (gone, other) = (pool(&a, SleepMode::Offload), pool(&a, SleepMode::Offload));
    let g = block_in(&a, gone, s, 5 * MIB, 0x3e);
    let o = block_in(&a, other, s, 3 * MIB, 0x3f);
    a.sleep_pools().unwrap();
    a.pool_destroy(gone).unwrap();
    a.wake_with(&[gone]).unwrap();
    assert!(check_fill(g.0, g.1, g.2), "the destroyed pool's block reads back");
    assert!(a.is_asleep() && refused(&a, other, s), "the other pool still sleeps");
    assert_eq!(base.vmm().physical_bytes as usize, 6 * MIB, "the destroyed pool's pages only");
    a.wake_with(&[other]).unwrap();
    assert!(!a.is_asleep() && check_fill(o.0, o.1, o.2));
    a.free(g.0).unwrap();
    a.free(o.0).unwrap();
    super::support::teardown_clean(a, &base);
    super::support::drop_stream(s);
}

/// 100 cycles of sleep, a partial wake of the weights, work in the default
/// pool, then the kv cache's wake: asleep, half awake and awake, the
/// device and the host hold exactly what they held in the first cycle (a
/// leak of one page or one host buffer fails).
#[test]
fn hundred_cycles_with_partial_wakes_hold_exactly_what_the_first_left() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("expandable_segments:true");
    let s = new_stream();
    let (weights, kv) = (pool(&a, SleepMode::Offload), pool(&a, SleepMode::Discard));
    let w: Vec<_> = (0..3).map(|i| block_in(&a, weights, s, (i + 1) * 5 * MIB + 4096, 0x30 + i as u8)).collect();
    let k = block_in(&a, kv, s, 24 * MIB, 0);
    let kept = block_in(&a, 0, s, 7 * MIB, 0x99);
    type Held = (Vmm, (u64, u64));
    let mut first: Option<[Held; 3]> = None;
    for cycle in 0..100 {
        a.sleep_pools().unwrap();
        let asleep = (base.vmm(), host_usage());
        a.wake_with(&[weights]).unwrap();
        let half = (base.vmm(), host_usage());
        let tmp: Vec<usize> = (0..3).map(|i| a.malloc((i + 1) * 2 * MIB + cycle * 512, s).unwrap()).collect();
        for p in tmp {
            a.free(p).unwrap();
        }
        a.wake_with(&[kv]).unwrap();
        assert!(!a.is_asleep());
        a.empty_cache().unwrap();
        let awake = (base.vmm(), host_usage());
        match &first {
            None => first = Some([asleep, half, awake]),
            Some(f) => assert_eq!([asleep, half, awake], *f, "cycle {cycle}: memory held moved"),
        }
    }
    for &(addr, size, byte) in w.iter().chain([&kept]) {
        assert!(check_fill(addr, size, byte), "after 100 cycles");
        a.free(addr).unwrap();
    }
    a.free(k.0).unwrap();
    super::support::teardown_clean(a, &base);
    super::support::drop_stream(s);
}
