//! Tests of Note [moves of wholly free handles]: a large-pool placement that
//! would make a fresh handle maps a wholly free handle of its range again
//! instead, retires the old address until a reclaim unmaps it, and counts
//! the handle once.
//!
//! The scene (`map_ahead:false`, 2 MiB pages, so each handle is what a
//! request lacks): `a` (32 MiB) at the range's start on handle H1 (16
//! pages), a spacer of 3 MiB on H2 (2 pages), then `a` is freed: H1 lies
//! wholly in the free hole. A request of 33 MiB fits no hole: it goes past
//! the spacer, where its first page is H2's and the other 16 pages lack
//! mapping, exactly what H1 covers.

use super::support::{
    allocator, check_accounting, check_fill, emu_lock, fail_nth, fill, new_stream, set_capacity, teardown_clean,
    Baseline, MIB,
};
use crate::core::{DeviceAllocator, SleepMode};
use crate::runtime::Stream;

/// Puts the emulator back when a test ends, even by a panic.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        fail_nth("aclrtUnmapMem", 0);
        set_capacity(1 << 30);
    }
}

/// The scene after the move; the allocator, and (old address of H1, the
/// spacer, the 33 MiB block).
struct Scene {
    a: DeviceAllocator,
    old: usize,
    spacer: usize,
    grown: usize,
    /// (maps, physical mallocs) the 33 MiB request made.
    calls: (u64, u64),
}

fn scene(config: &str, stream: Stream) -> Scene {
    let a = allocator(&format!("map_ahead:false,{config}"));
    let old = a.malloc(32 * MIB, stream).unwrap();
    let spacer = a.malloc(3 * MIB, stream).unwrap();
    assert_eq!(spacer, old + 32 * MIB, "the spacer follows the first block");
    a.free(old).unwrap();
    let s = a.stats().unwrap();
    let grown = a.malloc(33 * MIB, stream).unwrap();
    assert_eq!(grown, spacer + 3 * MIB, "the request goes past the spacer");
    let t = a.stats().unwrap();
    let calls = (t.num_maps - s.num_maps, t.num_physical_mallocs - s.num_physical_mallocs);
    Scene { a, old, spacer, grown, calls }
}

/// The runtime maps the retired span besides what the allocator counts.
fn mapped_with_retired(a: &DeviceAllocator, base: &Baseline, retired: usize) {
    assert_eq!(a.retired_bytes(), retired);
    check_accounting(a, base, None, "with a retired span");
}

#[test]
fn a_wholly_free_handle_moves_where_a_larger_request_grows() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let Scene { a, old, spacer, grown, calls } = scene("", Stream::DEFAULT);
    assert_eq!(calls, (1, 0), "one map and no physical allocation: H1 moved");
    let s = a.stats().unwrap();
    assert_eq!(s.num_handle_moves, 1, "the move is not counted");
    assert_eq!(s.reserved_bytes, 36 * MIB as u64, "H1 and H2, each counted once");
    assert_eq!(s.reserved_bytes_peak, 36 * MIB as u64);
    assert_eq!(base.vmm().physical_count, 2);
    mapped_with_retired(&a, &base, 32 * MIB);
    // The old address is handed to no one before a reclaim.
    let later: Vec<usize> =
        [30 * MIB, 12 * MIB, 4 * MIB].iter().map(|&n| a.malloc(n, Stream::DEFAULT).unwrap()).collect();
    for &p in &later {
        assert!(!(old..old + 32 * MIB).contains(&p), "{p:#x} lies on the retired span");
    }
    for p in later {
        a.free(p).unwrap();
    }
    // Data written at the new address before the flush survives it.
    fill(grown, 33 * MIB, 0x6b);
    a.empty_cache().unwrap();
    assert_eq!(a.retired_bytes(), 0);
    check_accounting(&a, &base, None, "after empty_cache");
    assert!(check_fill(grown, 33 * MIB, 0x6b), "the moved handle's bytes changed");
    fill(grown, 33 * MIB, 0x2c);
    assert!(check_fill(grown, 33 * MIB, 0x2c), "the moved handle takes writes");
    // H1 and H2 still mapped, each once; the old address free again.
    assert_eq!(base.vmm().mapped_bytes, 36 * MIB as i64);
    let again = a.malloc(30 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(again, old, "the old address is free again after the reclaim");
    fill(again, 30 * MIB, 0x11);
    assert!(check_fill(grown, 33 * MIB, 0x2c), "the old address maps another handle now");
    for p in [again, spacer, grown] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
}

/// `handle_moves:false`: a fresh handle, and a higher peak.
#[test]
fn without_handle_moves_a_fresh_handle_is_made() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let Scene { a, calls, .. } = scene("handle_moves:false", Stream::DEFAULT);
    assert_eq!(calls, (1, 1), "no move: one fresh handle mapped");
    assert_eq!(a.retired_bytes(), 0);
    let s = a.stats().unwrap();
    assert_eq!(s.num_handle_moves, 0, "a fresh handle counted as a move");
    assert_eq!(s.reserved_bytes_peak, 68 * MIB as u64, "H1 kept in its hole besides a fresh handle");
    check_accounting(&a, &base, None, "no move");
    teardown_clean(a, &base);
}

/// Teardown with a span still retired unmaps both addresses and frees the
/// handle once: nothing is left in the emulator.
#[test]
fn teardown_with_a_retired_span_frees_each_handle_once() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let sc = scene("", Stream::DEFAULT);
    assert_eq!(sc.a.retired_bytes(), 32 * MIB);
    // Live blocks too: teardown gives back everything.
    teardown_clean(sc.a, &base);
}

/// forget_stream flushes the stream's retired spans with its free pages.
#[test]
fn forget_stream_unmaps_a_retired_span() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let stream = new_stream();
    let Scene { a, spacer, grown, .. } = scene("", stream);
    mapped_with_retired(&a, &base, 32 * MIB);
    fill(grown, 33 * MIB, 0x3e);
    a.forget_stream(stream).unwrap();
    assert_eq!(a.retired_bytes(), 0);
    check_accounting(&a, &base, None, "after forget_stream");
    assert_eq!(base.vmm().mapped_bytes, 36 * MIB as i64, "the old address is still mapped");
    assert!(check_fill(grown, 33 * MIB, 0x3e));
    a.free(spacer).unwrap();
    a.free(grown).unwrap();
    teardown_clean(a, &base);
    super::support::drop_stream(stream);
}

/// Sleep unmaps a retired span and does not sleep it: wake maps only the
/// live pages, the moved handle's bytes come back.
#[test]
fn sleep_unmaps_a_retired_span_and_wake_maps_only_live_pages() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let Scene { a, spacer, grown, .. } = scene("", Stream::DEFAULT);
    mapped_with_retired(&a, &base, 32 * MIB);
    fill(grown, 33 * MIB, 0x47);
    a.sleep(SleepMode::Offload).unwrap();
    assert_eq!(a.retired_bytes(), 0);
    assert_eq!(base.vmm().mapped_bytes, 0, "asleep: nothing mapped, the old address neither");
    assert_eq!(base.vmm().physical_count, 0);
    a.wake().unwrap();
    check_accounting(&a, &base, None, "after wake");
    assert_eq!(base.vmm().mapped_bytes, 36 * MIB as i64, "wake mapped the old address again");
    assert!(check_fill(grown, 33 * MIB, 0x47), "the moved handle's bytes did not survive sleep");
    a.free(spacer).unwrap();
    a.free(grown).unwrap();
    teardown_clean(a, &base);
}

/// A refused unmap of the old address leaves it retired (still mapped,
/// charged once, handed to no one) for that pass; empty_cache's next pass
/// unmaps it, and the refusal is still reported.
#[test]
fn a_refused_unmap_keeps_the_span_retired_until_the_next_pass() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let Scene { a, old, spacer, grown, .. } = scene("", Stream::DEFAULT);
    fill(grown, 33 * MIB, 0x3a);
    fail_nth("aclrtUnmapMem", 1);
    assert!(a.empty_cache().is_err(), "the refused unmap is not reported");
    assert_eq!(a.retired_bytes(), 0, "the next pass did not unmap the span");
    check_accounting(&a, &base, None, "after the refused unmap and the next pass");
    assert_eq!(a.stats().unwrap().reserved_bytes, 36 * MIB as u64);
    assert!(check_fill(grown, 33 * MIB, 0x3a), "the moved handle's bytes changed");
    assert_eq!(a.malloc(30 * MIB, Stream::DEFAULT).unwrap(), old);
    a.free(old).unwrap();
    a.free(spacer).unwrap();
    a.free(grown).unwrap();
    teardown_clean(a, &base);
}

/// A snapshot shows the retired span as address space, no block: the
/// segment's blocks add up to its size, which counts H1 once.
#[test]
fn a_snapshot_shows_no_block_on_a_retired_span() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let Scene { a, old, .. } = scene("", Stream::DEFAULT);
    let snap = a.snapshot().unwrap();
    let seg = snap.segments.iter().find(|s| s.address == old).expect("the large range");
    assert_eq!(seg.size, 36 * MIB);
    assert_eq!(seg.blocks.iter().map(|b| b.size).sum::<usize>(), 36 * MIB);
    assert!(seg.blocks.iter().all(|b| b.address >= old + 32 * MIB), "a block lies on the retired span");
    teardown_clean(a, &base);
}

/// A private pool's handles do not move (a graph may replay on the old
/// addresses): the same scene routed to a pool makes a fresh handle.
#[test]
fn a_private_pool_makes_no_move() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("map_ahead:false");
    let pool = a.pool_create(crate::core::pools::config::PoolConfig::default()).unwrap();
    let stream = new_stream();
    a.pool_begin(pool, Some(stream)).unwrap();
    let old = a.malloc(32 * MIB, stream).unwrap();
    let spacer = a.malloc(3 * MIB, stream).unwrap();
    a.free(old).unwrap();
    let before = a.stats().unwrap().num_physical_mallocs;
    let grown = a.malloc(33 * MIB, stream).unwrap();
    assert_eq!(grown, spacer + 3 * MIB);
    assert_eq!(a.stats().unwrap().num_physical_mallocs - before, 1, "a fresh handle, no move");
    assert_eq!(a.retired_bytes(), 0);
    a.pool_end(pool, Some(stream)).unwrap();
    a.free(spacer).unwrap();
    a.free(grown).unwrap();
    a.pool_destroy(pool).unwrap();
    teardown_clean(a, &base);
    super::support::drop_stream(stream);
}

/// A placement that moved a handle and then failed (the map of a fresh
/// handle for the rest of its run refused) puts the handle back: its old
/// address is mapped and free again, nothing is retired or leaked.
#[test]
fn a_failed_placement_puts_a_moved_handle_back() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("map_ahead:false");
    let old = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    let spacer = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    a.free(old).unwrap();
    // 35 MiB past the spacer lacks 17 pages: H1 moves for 16, a fresh
    // handle is made for the last one and its map is refused.
    fail_nth("aclrtMapMem", 2);
    assert!(a.malloc(35 * MIB, Stream::DEFAULT).is_err(), "the refused map is not reported");
    fail_nth("aclrtMapMem", 0);
    assert_eq!(a.retired_bytes(), 0, "the move was not undone");
    check_accounting(&a, &base, None, "after the undone move");
    let maps = a.stats().unwrap().num_maps;
    let again = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(again, old, "the old address is not free and mapped again");
    assert_eq!(a.stats().unwrap().num_maps, maps, "the old pages were not mapped");
    a.free(again).unwrap();
    a.free(spacer).unwrap();
    teardown_clean(a, &base);
}

/// A moved handle wholly free again moves again before any reclaim: both
/// old addresses stay retired, the handle is counted once, and one
/// empty_cache unmaps both and leaves it mapped at its latest address.
#[test]
fn a_moved_handle_moves_again() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let Scene { a, spacer, grown, .. } = scene("", Stream::DEFAULT);
    // A second spacer past the moved handle, then its block freed: H1 lies
    // wholly in the 33 MiB hole between the spacers.
    let spacer2 = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(spacer2, grown + 33 * MIB);
    // A live 64 MiB block past it: old addresses stay within the memory in
    // use, and H1's two would not without it.
    let ballast = a.malloc(64 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(ballast, spacer2 + 3 * MIB);
    a.free(grown).unwrap();
    let s = a.stats().unwrap();
    // 34 MiB fits no hole; past the ballast it lacks 17 pages.
    let far = a.malloc(34 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(far, ballast + 64 * MIB);
    let t = a.stats().unwrap();
    assert_eq!(
        (t.num_maps - s.num_maps, t.num_physical_mallocs - s.num_physical_mallocs),
        (2, 1),
        "H1 moved for 16 pages, a fresh handle for the last one"
    );
    assert_eq!((s.num_handle_moves, t.num_handle_moves), (1, 2), "the second move is not counted");
    mapped_with_retired(&a, &base, 64 * MIB);
    fill(far, 34 * MIB, 0x5c);
    a.empty_cache().unwrap();
    assert_eq!(a.retired_bytes(), 0);
    check_accounting(&a, &base, None, "after both old addresses went");
    assert!(check_fill(far, 34 * MIB, 0x5c), "the twice-moved handle's bytes changed");
    for p in [spacer, spacer2, ballast, far] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
}

/// Near a full device (fresh handles shrink to a 128th of free memory)
/// nothing moves: a large handle moved under a small run would be pinned
/// whole by it, where the rule's small handles stay movable.
#[test]
fn a_device_short_of_memory_makes_no_move() {
    let _g = emu_lock();
    let _c = Guard;
    // 1 GiB: a 128th of it is 8 MiB, below the rule's 32 MiB.
    set_capacity(1 << 30);
    let base = Baseline::take();
    let Scene { a, calls, .. } = scene("", Stream::DEFAULT);
    assert_eq!(a.retired_bytes(), 0, "a handle moved on a device short of memory");
    assert!(calls.1 >= 1, "no fresh handle was made");
    check_accounting(&a, &base, None, "no move");
    teardown_clean(a, &base);
}

/// Moves (maps without a physical allocation) made by a 100 MiB request
/// after a 64 MiB block with a handle of its own was freed, on an
/// allocator that served `hits` cache hits in between, with the default
/// config (mapping ahead while growth is frequent).
fn moves_after(hits: usize) -> u64 {
    let base = Baseline::take();
    let a = allocator("");
    let x = a.malloc(64 * MIB, Stream::DEFAULT).unwrap();
    let spacer = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    for _ in 0..hits {
        let p = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
    }
    a.free(x).unwrap();
    let s = a.stats().unwrap();
    let c = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    let t = a.stats().unwrap();
    check_accounting(&a, &base, None, "after the 100 MiB request");
    fill(c, 100 * MIB, 0x4d);
    assert!(check_fill(c, 100 * MIB, 0x4d));
    for p in [spacer, c] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    (t.num_maps - s.num_maps) - (t.num_physical_mallocs - s.num_physical_mallocs)
}

/// While the stream grows often a move's extra calls matter more than its
/// memory: a fresh allocator makes fresh handles; after thousands of
/// requests on two handles the same request moves the freed one (Note
/// [moves of wholly free handles]).
#[test]
fn moves_wait_until_growth_is_rare() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    assert_eq!(moves_after(0), 0, "a move while the stream grows often");
    assert!(moves_after(5000) >= 1, "no move once growth is rare");
}

/// The scene with everything freed afterwards: (allocator, retired bytes
/// before the frees).
fn scene_all_freed(config: &str, stream: Stream) -> (DeviceAllocator, usize) {
    let Scene { a, spacer, grown, .. } = scene(config, stream);
    let retired = a.retired_bytes();
    a.free(spacer).unwrap();
    a.free(grown).unwrap();
    (a, retired)
}

/// After a move, `empty_cache` with nothing allocated gives back every
/// handle and the range, as without moves (the moved handle's new pages
/// are free to detach only once its old address is unmapped: a third pass).
#[test]
fn empty_cache_after_a_move_gives_everything_back() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    for config in ["handle_moves:false", ""] {
        let base = Baseline::take();
        let (a, retired) = scene_all_freed(config, Stream::DEFAULT);
        assert_eq!(retired > 0, config.is_empty(), "[{config}] the scene moved a handle");
        a.empty_cache().unwrap();
        check_accounting(&a, &base, None, "after empty_cache");
        assert_eq!(a.stats().unwrap().reserved_bytes, 0, "[{config}] reserved after empty_cache");
        assert_eq!(base.vmm().reserved_ranges, 0, "[{config}] a range is left reserved after empty_cache");
        teardown_clean(a, &base);
    }
}

/// The same through `forget_stream`: its range and handles all go back.
#[test]
fn forget_stream_after_a_move_gives_everything_back() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    for config in ["handle_moves:false", ""] {
        let base = Baseline::take();
        let stream = new_stream();
        let (a, retired) = scene_all_freed(config, stream);
        assert_eq!(retired > 0, config.is_empty(), "[{config}] the scene moved a handle");
        a.forget_stream(stream).unwrap();
        assert_eq!(base.vmm().reserved_ranges, 0, "[{config}] forget_stream left a range");
        assert_eq!(base.vmm().physical_count, 0, "[{config}] forget_stream left a handle");
        teardown_clean(a, &base);
        super::support::drop_stream(stream);
    }
}

/// A request that grows by a MiB each time, after its predecessor is
/// freed, would move the same handle again and again, each move leaving an
/// old address mapped: they stay within the memory the range maps in use.
#[test]
fn old_addresses_stay_within_the_memory_in_use() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("map_ahead:false");
    let mut spacers = Vec::new();
    let mut prev = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    let mut moved = false;
    for k in 0..150 {
        spacers.push(a.malloc(2 * MIB, Stream::DEFAULT).unwrap());
        a.free(prev).unwrap();
        prev = a.malloc((33 + k) * MIB, Stream::DEFAULT).unwrap();
        let s = a.stats().unwrap();
        moved |= a.retired_bytes() > 0;
        assert!(
            a.retired_bytes() as u64 <= s.reserved_bytes,
            "k={k}: {} MiB of old addresses for {} MiB reserved",
            a.retired_bytes() >> 20,
            s.reserved_bytes >> 20
        );
    }
    assert!(moved, "the loop never moved a handle");
    check_accounting(&a, &base, None, "after the loop");
    a.free(prev).unwrap();
    for p in spacers {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
}

#[test]
fn no_handle_moves_with_reserved_headroom() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    // The scene, in reserved_headroom's 4 MiB handles mapped nothing ahead,
    // with a headroom never exceeded: a move is the only way not to make
    // fresh handles for the 33 MiB request, and none is made.
    let a = allocator("reserved_headroom:100");
    let old = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    let spacer = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    a.free(old).unwrap();
    let s = a.stats().unwrap();
    let grown = a.malloc(33 * MIB, Stream::DEFAULT).unwrap();
    let t = a.stats().unwrap();
    assert!(grown > spacer, "the request goes past the spacer");
    assert_eq!(a.retired_bytes(), 0, "no old address retired");
    assert_eq!(t.num_physical_mallocs - s.num_physical_mallocs, 8, "eight fresh 4 MiB handles, none moved");
    assert_eq!(t.num_maps - s.num_maps, 8);
    for p in [grown, spacer] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
}
