//! Sleep and wake (Note [sleep]), through the emulator: what the device and
//! the host hold after each step, read from the emulator's own counters,
//! and the bytes of every live block across a cycle.

use super::support::{
    allocator, budget, check_fill, emu_lock, fill, host_usage, set_capacity, teardown_clean, usage, Baseline, Vmm, DEV,
    GIB, MIB, PAGE,
};
use crate::core::backing::expandable::PieceRule;
use crate::core::*;
use crate::error::Error;

const EXP_2M: &str = "expandable_segments:true,page_size:2m";

/// One page per physical handle, so pages and handles can be counted.
fn paged() -> DeviceAllocator {
    let a = allocator(EXP_2M);
    a.set_piece_rule(PieceRule::fixed(PAGE));
    a
}

/// Blocks of both pools, each filled with its own byte.
fn live_blocks(a: &DeviceAllocator) -> Vec<(usize, usize, u8)> {
    let sizes = [3 * MIB, 10 * MIB, 4096, 100 * 1024, 7 * MIB + 5, 512];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let addr = a.malloc(size, Stream::DEFAULT).unwrap();
            let byte = 0x11 * (i as u8 + 1);
            fill(addr, size, byte);
            (addr, size, byte)
        })
        .collect()
}

fn host_delta(before: (u64, u64)) -> (i64, i64) {
    let now = host_usage();
    (now.0 as i64 - before.0 as i64, now.1 as i64 - before.1 as i64)
}

/// Offload: afterwards the device holds nothing of the allocator's (no
/// handle, no mapping) but its ranges stay reserved, the host holds one
/// buffer per mapped run; wake maps the same addresses again and every
/// byte reads back as it was.
#[test]
fn offload_gives_back_every_page_and_wake_restores_every_byte() {
    let _g = emu_lock();
    let base = Baseline::take();
    let host0 = host_usage();
    budget(GIB);
    let a = paged();
    let blocks = live_blocks(&a);
    // Cached memory too: a freed block's pages.
    let spare = a.malloc(6 * MIB, Stream::DEFAULT).unwrap();
    a.free(spare).unwrap();
    let ranges = base.vmm().reserved_ranges;
    let mapped = base.vmm().mapped_bytes as u64;
    let live: u64 = a.stats().unwrap().reserved_bytes;
    assert!(live > 0 && mapped > 0);

    let freed = a.sleep(SleepMode::Offload).unwrap();
    assert!(a.is_asleep());
    assert_eq!(freed as u64, live, "sleep reports every byte it gave back");
    let zero = Vmm { physical_count: 0, physical_bytes: 0, mapped_bytes: 0, reserved_ranges: ranges };
    assert_eq!(base.vmm(), zero, "asleep: no handle and no mapping left, every range still reserved");
    assert_eq!(a.stats().unwrap().reserved_bytes, 0);
    let (host_bytes, host_blocks) = host_delta(host0);
    assert!(host_blocks >= 2, "one buffer per run: the small and the large pool's ranges at least");
    assert!(host_bytes as u64 >= mapped - 6 * MIB as u64, "the live pages are on the host ({host_bytes} bytes)");
    for &(addr, size, _) in &blocks {
        assert!(a.query(addr).unwrap().size >= size, "the directory still knows {addr:#x}");
    }
    a.check_invariants().unwrap();

    a.wake().unwrap();
    assert!(!a.is_asleep());
    assert_eq!(host_delta(host0), (0, 0), "every host buffer was freed");
    for &(addr, size, byte) in &blocks {
        assert!(check_fill(addr, size, byte), "block {addr:#x} of {size} bytes reads back as written");
    }
    assert_eq!(base.vmm().reserved_ranges, ranges, "no range was reserved or released");
    a.check_invariants().unwrap();
    for &(addr, ..) in &blocks {
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
}

/// Keep: only cached memory goes; what stays is exactly the pages under
/// live blocks, and the allocator serves requests while asleep.
#[test]
fn keep_leaves_exactly_the_pages_under_live_blocks() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let blocks = live_blocks(&a);
    let spare = a.malloc(20 * MIB, Stream::DEFAULT).unwrap();
    a.free(spare).unwrap();
    let host0 = host_usage();
    a.sleep(SleepMode::Keep).unwrap();
    // Distinct pages under the live blocks, by address.
    let mut pages: Vec<usize> =
        blocks.iter().flat_map(|&(addr, size, _)| (addr / PAGE)..=((addr + size - 1) / PAGE)).collect();
    pages.sort_unstable();
    pages.dedup();
    let v = base.vmm();
    assert_eq!(v.physical_bytes as usize, pages.len() * PAGE, "device memory = pages under live blocks");
    assert_eq!(v.mapped_bytes, v.physical_bytes);
    assert_eq!(host_delta(host0), (0, 0), "keep copies nothing");
    let p = a.malloc(MIB, Stream::DEFAULT).expect("a kept pool serves requests while asleep");
    a.free(p).unwrap();
    a.wake().unwrap();
    for &(addr, size, byte) in &blocks {
        assert!(check_fill(addr, size, byte));
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
}

/// While asleep (offload/discard): a malloc is INVALID_ARGUMENT naming
/// sleep, on a known stream and on a new one; a free of a sleeping block is
/// allowed; sleep again and wake twice are OK.
#[test]
fn asleep_refuses_allocations_and_allows_frees() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let blocks = live_blocks(&a);
    a.wake().expect("wake while awake is OK");
    a.sleep(SleepMode::Discard).unwrap();
    let host0 = host_usage();
    assert_eq!(a.sleep(SleepMode::Offload).unwrap(), 0, "sleep while asleep is OK and does nothing");
    assert_eq!(host_delta(host0), (0, 0));
    match a.malloc(4096, Stream::DEFAULT) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("asleep"), "{m}"),
        other => panic!("malloc while asleep: {other:?}"),
    }
    let s = super::support::new_stream();
    assert!(matches!(a.malloc(8 * MIB, s), Err(Error::InvalidArgument(_))), "a new stream sleeps too");
    a.free(blocks[1].0).expect("freeing a sleeping block");
    a.check_invariants().unwrap();
    a.wake().unwrap();
    a.wake().unwrap();
    let p = a.malloc(4096, s).expect("awake again");
    a.free(p).unwrap();
    for &(addr, ..) in blocks.iter().filter(|b| b.0 != blocks[1].0) {
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
    super::support::drop_stream(s);
}

/// 100 cycles with allocations and frees between them: asleep and awake,
/// the device and the host hold exactly what they held after the first
/// cycle (a leak of one page or one host buffer fails).
#[test]
fn hundred_cycles_hold_exactly_what_the_first_left() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator(EXP_2M);
    let blocks = live_blocks(&a);
    type Held = (Vmm, (u64, u64));
    let mut first: Option<(Held, Held)> = None;
    for cycle in 0..100 {
        a.sleep(SleepMode::Offload).unwrap();
        let asleep = (base.vmm(), host_usage());
        a.wake().unwrap();
        // Work between cycles: allocations that come and go.
        let tmp: Vec<usize> = (0..4).map(|i| a.malloc((i + 1) * 3 * MIB + cycle, Stream::DEFAULT).unwrap()).collect();
        for p in tmp {
            a.free(p).unwrap();
        }
        a.empty_cache().unwrap();
        let awake = (base.vmm(), host_usage());
        match &first {
            None => first = Some((asleep, awake)),
            Some(f) => assert_eq!((asleep, awake), *f, "cycle {cycle}: memory held moved"),
        }
    }
    for &(addr, size, byte) in &blocks {
        assert!(check_fill(addr, size, byte), "after 100 cycles");
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
}

/// A wake that does not fit is OUT_OF_MEMORY and changes nothing: still
/// asleep, no handle more, the host buffers still there; once room is
/// made, wake restores every byte.
#[test]
fn wake_that_does_not_fit_is_out_of_memory_and_changes_nothing() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let blocks = live_blocks(&a);
    a.sleep(SleepMode::Offload).unwrap();
    let (asleep, host) = (base.vmm(), host_usage());
    let u = usage(DEV);
    // Room for two pages only: the sleeping blocks need more.
    set_capacity(u.malloc_bytes + u.physical_bytes + 2 * PAGE as u64);
    match a.wake() {
        Err(Error::OutOfMemory(m)) => assert!(m.contains("still asleep"), "{m}"),
        other => panic!("wake on a full device: {other:?}"),
    }
    assert!(a.is_asleep());
    assert_eq!((base.vmm(), host_usage()), (asleep, host), "the failed wake changed nothing");
    assert!(matches!(a.malloc(4096, Stream::DEFAULT), Err(Error::InvalidArgument(_))));
    budget(GIB);
    a.wake().unwrap();
    for &(addr, size, byte) in &blocks {
        assert!(check_fill(addr, size, byte));
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
}

/// Fixed segments: with live blocks, offload and discard are UNSUPPORTED
/// and change nothing; keep works; with no live block, offload works.
#[test]
fn fixed_segments_with_live_blocks_cannot_offload() {
    let _g = emu_lock();
    budget(GIB);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    fill(p, 3 * MIB, 0x5a);
    let before = usage(DEV);
    for mode in [SleepMode::Offload, SleepMode::Discard] {
        match a.sleep(mode) {
            Err(Error::Unsupported(m)) => assert!(m.contains("expandable"), "{m}"),
            other => panic!("{mode:?} in fixed mode: {other:?}"),
        }
        assert!(!a.is_asleep());
    }
    assert_eq!(usage(DEV).malloc_bytes, before.malloc_bytes, "nothing given back");
    let q = a.malloc(4096, Stream::DEFAULT).expect("still awake");
    a.free(q).unwrap();
    a.sleep(SleepMode::Keep).unwrap();
    assert!(check_fill(p, 3 * MIB, 0x5a));
    a.wake().unwrap();
    a.free(p).unwrap();
    a.sleep(SleepMode::Offload).expect("no live block: nothing to offload");
    assert_eq!(usage(DEV).malloc_count, 0, "sleep gave the cached segment back");
    a.wake().unwrap();
    super::support::finish(a);
}

/// Teardown while asleep frees the host buffers and leaves no handle.
#[test]
fn teardown_while_asleep_frees_host_buffers() {
    let _g = emu_lock();
    let base = Baseline::take();
    let host0 = host_usage();
    budget(GIB);
    let a = paged();
    let _blocks = live_blocks(&a);
    a.sleep(SleepMode::Offload).unwrap();
    assert!(host_delta(host0).1 > 0);
    a.teardown().unwrap();
    assert_eq!(host_delta(host0), (0, 0), "teardown freed every offload buffer");
    let zero = Vmm { physical_count: 0, physical_bytes: 0, mapped_bytes: 0, reserved_ranges: 0 };
    assert_eq!(base.vmm(), zero);
}

/// Sleep copies one run per call: the runtime sees one D2H copy per run
/// of mapped pages, not one per block (six blocks in two runs here).
#[test]
fn one_copy_per_mapped_run() {
    let _g = emu_lock();
    let base = Baseline::take();
    let host0 = host_usage();
    budget(GIB);
    let a = paged();
    let blocks = live_blocks(&a);
    a.sleep(SleepMode::Offload).unwrap();
    // The blocks lie back to back in each pool's range: one run each.
    assert_eq!(host_delta(host0).1, 2, "one host buffer (one copy) per run");
    a.wake().unwrap();
    for &(addr, ..) in &blocks {
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
}

/// Pools sleep by their own config (`sleep_pools`, what `npualloc_sleep`
/// calls): an offload pool's blocks come back intact, a discard pool's are
/// mapped again at the same addresses, the default pool (keep) keeps its
/// pages and serves requests while asleep; only the offload pool's bytes
/// go to the host. While asleep, the offload and discard pools refuse
/// allocations and the default pool does not.
#[test]
fn pools_sleep_by_their_own_mode() {
    use crate::core::pools::config::PoolConfig;
    let _g = emu_lock();
    let base = Baseline::take();
    let host0 = host_usage();
    budget(GIB);
    let a = paged();
    let s = super::support::new_stream();
    let mode = |m| PoolConfig { sleep: m, ..PoolConfig::default() };
    let (off, dis) =
        (a.pool_create(mode(SleepMode::Offload)).unwrap(), a.pool_create(mode(SleepMode::Discard)).unwrap());
    let kept = a.malloc(5 * MIB, s).unwrap();
    fill(kept, 5 * MIB, 0x33);
    a.pool_begin(off, Some(s)).unwrap();
    let weights = a.malloc(9 * MIB, s).unwrap();
    fill(weights, 9 * MIB, 0x77);
    a.pool_end(off, Some(s)).unwrap();
    a.pool_begin(dis, Some(s)).unwrap();
    let kv = a.malloc(6 * MIB, s).unwrap();
    a.pool_end(dis, Some(s)).unwrap();
    let kept_pages = (5 * MIB).div_ceil(PAGE);

    a.sleep_pools().unwrap();
    let v = base.vmm();
    assert_eq!(v.physical_bytes as usize, kept_pages * PAGE, "only the default pool's pages stay");
    let host = host_delta(host0);
    assert_eq!(host, (((9 * MIB).div_ceil(PAGE) * PAGE) as i64, 1), "one buffer, the offload pool's run");
    let p = a.malloc(MIB, s).expect("the kept default pool serves while asleep");
    a.free(p).unwrap();
    for pool in [off, dis] {
        a.pool_begin(pool, Some(s)).unwrap();
        match a.malloc(4096, s) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("asleep") && m.contains(&format!("pool {pool}")), "{m}")
            }
            other => panic!("pool {pool} asleep: {other:?}"),
        }
        a.pool_end(pool, Some(s)).unwrap();
    }
    assert!(check_fill(kept, 5 * MIB, 0x33));

    a.wake().unwrap();
    assert_eq!(host_delta(host0), (0, 0));
    assert!(check_fill(weights, 9 * MIB, 0x77), "the offload pool's block reads back");
    fill(kv, 6 * MIB, 0x01);
    assert!(check_fill(kv, 6 * MIB, 0x01), "the discard pool's block is device memory again");
    a.check_invariants().unwrap();
    for addr in [kept, weights, kv] {
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
    super::support::drop_stream(s);
}

/// A pool created while asleep sleeps by its mode: an offload pool refuses
/// allocations until wake, a keep pool serves.
#[test]
fn a_pool_created_while_asleep_sleeps_by_its_mode() {
    use crate::core::pools::config::PoolConfig;
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let s = super::support::new_stream();
    let mode = |m| PoolConfig { sleep: m, ..PoolConfig::default() };
    let kept = a.malloc(MIB, s).unwrap();
    a.sleep_pools().unwrap();
    let off = a.pool_create(mode(SleepMode::Offload)).unwrap();
    let keep = a.pool_create(mode(SleepMode::Keep)).unwrap();
    a.pool_begin(off, Some(s)).unwrap();
    match a.malloc(4096, s) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("asleep") && m.contains(&format!("pool {off}")), "{m}"),
        other => panic!("an offload pool made while asleep served: {other:?}"),
    }
    a.pool_end(off, Some(s)).unwrap();
    a.pool_begin(keep, Some(s)).unwrap();
    let k = a.malloc(4096, s).expect("a keep pool serves while asleep");
    a.pool_end(keep, Some(s)).unwrap();
    a.wake().unwrap();
    a.pool_begin(off, Some(s)).unwrap();
    let w = a.malloc(4096, s).expect("awake, the offload pool serves");
    a.pool_end(off, Some(s)).unwrap();
    for addr in [kept, k, w] {
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
    super::support::drop_stream(s);
}

/// Runs of pieces of different sizes, several runs in one range: wake maps
/// each piece with a handle of its own size at its own pages (handles are
/// allocated in the order the runs are woken), and every byte reads back.
#[test]
fn runs_of_mixed_pieces_wake_in_place() {
    let _g = emu_lock();
    let base = Baseline::take();
    let host0 = host_usage();
    budget(GIB);
    let a = paged();
    let mut blocks = Vec::new();
    let mut block = |a: &DeviceAllocator, size: usize, byte: u8| {
        let addr = a.malloc(size, Stream::DEFAULT).unwrap();
        fill(addr, size, byte);
        blocks.push((addr, size, byte));
        addr
    };
    block(&a, 4 * MIB, 1);
    a.set_piece_rule(PieceRule::fixed(4 * PAGE));
    let gap = block(&a, 8 * MIB, 2);
    block(&a, 8 * MIB, 3);
    a.set_piece_rule(PieceRule::fixed(PAGE));
    block(&a, 6 * MIB, 4);
    a.set_piece_rule(PieceRule::fixed(2 * PAGE));
    block(&a, 4 * MIB, 5);
    // A hole: the range's mapped pages become two runs.
    a.free(gap).unwrap();
    blocks.retain(|b| b.0 != gap);
    a.sleep(SleepMode::Offload).unwrap();
    assert_eq!(base.vmm().physical_bytes, 0);
    assert_eq!(host_delta(host0).1, 2, "two runs in the large pool's range");
    a.wake().unwrap();
    for &(addr, size, byte) in &blocks {
        assert!(check_fill(addr, size, byte), "block {addr:#x} ({byte})");
    }
    a.check_invariants().unwrap();
    for &(addr, ..) in &blocks {
        a.free(addr).unwrap();
    }
    teardown_clean(a, &base);
}

/// What the allocating hook below needs.
struct HookCtx {
    a: *const DeviceAllocator,
    pool: u64,
    got: std::sync::atomic::AtomicUsize,
}

/// Allocates 3 MiB from `pool` on another thread (as torch_npu's task queue
/// would), the first time only.
unsafe extern "C" fn allocating_hook(user: *mut std::ffi::c_void, _device: i32) {
    use std::sync::atomic::Ordering;
    // SAFETY: the test passes a HookCtx that outlives every sleep it makes.
    let ctx = unsafe { &*(user as *const HookCtx) };
    if ctx.got.load(Ordering::Relaxed) != 0 {
        return;
    }
    // SAFETY: the allocator outlives the hook's registration (the test
    // removes the hook before dropping it).
    let (a, pool) = (unsafe { &*ctx.a }, ctx.pool);
    let addr = std::thread::scope(|s| {
        s.spawn(move || {
            a.pool_begin(pool, None).unwrap();
            let addr = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
            a.pool_end(pool, None).unwrap();
            addr
        })
        .join()
        .unwrap()
    });
    fill(addr, 3 * MIB, 0x4e);
    ctx.got.store(addr, Ordering::Relaxed);
}

/// The before-release hook runs before sleep takes any lock: a hook that
/// allocates from the pool about to sleep (a host draining its queue on
/// another thread) succeeds instead of deadlocking, and its block sleeps
/// with the others.
#[test]
fn the_before_release_hook_may_allocate() {
    use crate::core::pools::config::PoolConfig;
    use std::sync::atomic::Ordering;
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged();
    let pool = a.pool_create(PoolConfig { sleep: SleepMode::Offload, ..PoolConfig::default() }).unwrap();
    let ctx = HookCtx { a: &a, pool, got: Default::default() };
    a.set_before_release(Some((allocating_hook, &ctx as *const HookCtx as *mut std::ffi::c_void)));
    a.sleep_pools().unwrap();
    let addr = ctx.got.load(Ordering::Relaxed);
    assert_ne!(addr, 0, "the hook ran and allocated");
    assert_eq!(base.vmm().physical_bytes, 0, "the hook's block sleeps too");
    a.wake().unwrap();
    assert!(check_fill(addr, 3 * MIB, 0x4e));
    a.set_before_release(None);
    a.free(addr).unwrap();
    teardown_clean(a, &base);
}
