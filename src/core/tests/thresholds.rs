//! `release_threshold_mb` and `garbage_collection_threshold` with
//! expandable segments (Note [unused memory of expandable ranges]): they
//! give back wholly free handles, never a handle a live block pins, and a
//! moved handle's old address on the way; garbage collection keeps reserved
//! memory under its threshold as it does with fixed segments.

use super::support::{
    allocator, check_accounting, emu_lock, fail_nth, fault_pending, hold_stream, new_stream, release_stream,
    set_capacity, teardown_clean, Baseline, GIB, MIB,
};
use crate::core::{DeviceAllocator, Stats};
use crate::runtime::Stream;

/// Puts the emulator's capacity back when a test ends, even by a panic.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        set_capacity(1 << 30);
    }
}

fn stats(a: &DeviceAllocator) -> Stats {
    a.stats().unwrap()
}

/// Reserved bytes no live block uses.
fn cached(a: &DeviceAllocator) -> u64 {
    let s = stats(a);
    s.reserved_bytes - s.allocated_bytes
}

/// `release_threshold_mb:0`: the free of a large block unmaps its handle
/// and frees it (after synchronizing its stream); the range stays.
#[test]
fn release_threshold_zero_gives_a_freed_blocks_handle_back() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,release_threshold_mb:0");
    let p = a.malloc(64 * MIB, Stream::DEFAULT).unwrap();
    let before = stats(&a);
    assert_eq!(before.reserved_bytes, 64 * MIB as u64, "setup: the block has a handle of its own");
    a.free(p).unwrap();
    let after = stats(&a);
    assert_eq!(after.reserved_bytes, 0, "the freed block's handle stayed cached");
    assert_eq!(after.cached_handle_bytes, 0);
    assert_eq!(after.num_physical_frees - before.num_physical_frees, 1);
    assert_eq!(after.num_syncs - before.num_syncs, 1, "its stream is synchronized once");
    assert_eq!(base.vmm().physical_count, 0, "the emulator still holds the handle");
    assert_eq!(base.vmm().mapped_bytes, 0);
    assert_eq!(base.vmm().reserved_ranges, 1, "the range goes only once it held nothing before");
    check_accounting(&a, &base, None, "after the free");
    // The range serves the next request.
    let q = a.malloc(64 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(q, p);
    a.free(q).unwrap();
    assert_eq!(stats(&a).reserved_bytes, 0);
    teardown_clean(a, &base);
}

/// With a threshold of 64 MiB, frees of 40 MiB blocks keep cached memory
/// within it (nothing pinned: each block has its own handle), giving back
/// what passes it.
#[test]
fn a_release_threshold_keeps_cached_memory_within_it() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,map_ahead:false,release_threshold_mb:64");
    let blocks: Vec<usize> = (0..8).map(|_| a.malloc(40 * MIB, Stream::DEFAULT).unwrap()).collect();
    let start = stats(&a);
    assert_eq!((start.reserved_bytes, start.num_physical_mallocs), (320 * MIB as u64, 8), "setup: a handle each");
    for (i, p) in blocks.into_iter().enumerate() {
        a.free(p).unwrap();
        let c = cached(&a);
        assert!(c <= 64 * MIB as u64, "after free {i}: {} MiB cached over a 64 MiB threshold", c >> 20);
        check_accounting(&a, &base, None, "after a free");
    }
    let end = stats(&a);
    assert_eq!(end.num_physical_frees, 7, "all but one block's handle went back");
    assert_eq!(end.reserved_bytes, 40 * MIB as u64);
    teardown_clean(a, &base);
}

/// A handle a live block pins stays (cached memory is that block's
/// handle's free part), and frees of blocks on it cost no synchronization
/// and no device call, however many; its own free gives the handle back.
#[test]
fn a_pinned_handle_stays_and_its_frees_cost_no_synchronization() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,release_threshold_mb:0");
    let q = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let handle = stats(&a).reserved_bytes;
    assert!(handle >= 30 * MIB as u64, "setup: the fresh handle was not mapped ahead ({} MiB)", handle >> 20);
    let before = stats(&a);
    let syncs = base.syncs();
    for _ in 0..200 {
        let r = a.malloc(20 * MIB, Stream::DEFAULT).unwrap();
        a.free(r).unwrap();
    }
    let after = stats(&a);
    assert_eq!(after.num_syncs, before.num_syncs, "frees on a pinned handle synchronized");
    assert_eq!(base.syncs(), syncs, "the emulator saw synchronizations");
    assert_eq!(
        (after.num_maps, after.num_unmaps, after.num_physical_mallocs, after.num_physical_frees),
        (before.num_maps, before.num_unmaps, before.num_physical_mallocs, before.num_physical_frees),
        "frees on a pinned handle made device calls"
    );
    assert_eq!(after.reserved_bytes, handle, "cached memory is what the live block pins");
    a.free(q).unwrap();
    let last = stats(&a);
    assert_eq!(last.reserved_bytes, 0, "the last block's free left its handle cached");
    assert_eq!(last.num_syncs - after.num_syncs, 1);
    teardown_clean(a, &base);
}

/// A moved handle (Note [moves of wholly free handles]) freed with cached
/// memory over the threshold: its old address is unmapped, then the handle
/// goes back. (The first block's free waits for another stream, so that
/// the threshold does not give its handle back before it can move.)
#[test]
fn the_release_threshold_unmaps_a_moved_handles_old_address() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,map_ahead:false,release_threshold_mb:16");
    let other = new_stream();
    let old = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    let spacer = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    a.record_stream(old, other).unwrap();
    hold_stream(other);
    let syncs = stats(&a).num_syncs;
    a.free(old).unwrap();
    assert_eq!(stats(&a).num_syncs, syncs, "a free still waiting for another stream synchronized");
    release_stream(other);
    // 33 MiB fits no hole: past the spacer it lacks 16 pages, which the
    // first block's handle, free now, covers.
    let grown = a.malloc(33 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(a.retired_bytes(), 32 * MIB, "setup: the handle did not move");
    let before = stats(&a);
    a.free(grown).unwrap();
    let after = stats(&a);
    assert_eq!(a.retired_bytes(), 0, "the old address is still mapped");
    assert_eq!(after.num_physical_frees - before.num_physical_frees, 1, "the moved handle was not freed");
    assert_eq!(after.reserved_bytes, 4 * MIB as u64, "only the spacer's handle stays");
    assert!(cached(&a) <= 16 * MIB as u64);
    check_accounting(&a, &base, None, "after the moved handle went");
    a.free(spacer).unwrap();
    teardown_clean(a, &base);
    super::support::drop_stream(other);
}

/// `moved_handle` under a release threshold: the 32 MiB block is freed
/// while `other` still has work on it (held), so the threshold cannot give
/// its handle back before it moves.
pub(super) fn moved_past_a_waiting_free(a: &DeviceAllocator, other: Stream) -> (usize, usize, usize) {
    let old = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    let spacer = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    a.record_stream(old, other).unwrap();
    hold_stream(other);
    a.free(old).unwrap();
    release_stream(other);
    let grown = a.malloc(33 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(a.retired_bytes(), 32 * MIB, "setup: the handle did not move");
    (old, spacer, grown)
}

/// Garbage collection's allocator (16 GiB device, a limit of 8 GiB, the
/// threshold 0.005 of it) after a 32 MiB block's handle moved under a
/// 33 MiB request past a 3 MiB spacer, all three freed: the moved handle's
/// old address is mapped still, and nothing is live.
fn gc_after_a_move() -> DeviceAllocator {
    let a = allocator(
        "expandable_segments:true,map_ahead:false,per_process_memory_fraction:0.5,garbage_collection_threshold:0.005",
    );
    let (_, spacer, grown) = moved_handle(&a);
    a.free(grown).unwrap();
    a.free(spacer).unwrap();
    a
}

/// A 32 MiB block and a 3 MiB spacer after it, the block freed, then a
/// 33 MiB request that fits no hole and takes the block's handle, moved
/// past the spacer: (old address, spacer, the 33 MiB block).
fn moved_handle(a: &DeviceAllocator) -> (usize, usize, usize) {
    let old = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    let spacer = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    a.free(old).unwrap();
    let grown = a.malloc(33 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(a.retired_bytes(), 32 * MIB, "setup: the handle did not move");
    (old, spacer, grown)
}

/// Garbage collection's scene on a 1 GiB device with a limit of 512 MiB
/// and a threshold of 256 MiB (when `config` asks for it): three 64 MiB
/// blocks with a 2 MiB spacer after each, the three freed, then a 96 MiB
/// request that fits no hole, then a 64 MiB one. Returns the stats after
/// the 96 MiB request and after the 64 MiB one.
fn gc_scene(config: &str) -> (Stats, Stats) {
    set_capacity(GIB as u64);
    let base = Baseline::take();
    let a = allocator(&format!("per_process_memory_fraction:0.5,{config}"));
    let mut big = Vec::new();
    let mut spacers = Vec::new();
    for _ in 0..3 {
        big.push(a.malloc(64 * MIB, Stream::DEFAULT).unwrap());
        spacers.push(a.malloc(2 * MIB, Stream::DEFAULT).unwrap());
    }
    for p in big {
        a.free(p).unwrap();
    }
    let grown = a.malloc(96 * MIB, Stream::DEFAULT).unwrap();
    let after_growth = stats(&a);
    let hole = a.malloc(64 * MIB, Stream::DEFAULT).unwrap();
    let after_hole = stats(&a);
    if config.contains("expandable_segments:true") {
        check_accounting(&a, &base, None, "garbage collection's scene");
    }
    for p in spacers.into_iter().chain([grown, hole]) {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    (after_growth, after_hole)
}

const TARGET: u64 = 256 * MIB as u64;

/// With garbage collection, a growth past the threshold first gives back
/// the oldest free memory, with either segment kind: reserved memory never
/// passes threshold x limit, and the youngest hole is still cached for the
/// next request. Without it, reserved memory passes it.
#[test]
fn garbage_collection_gives_old_free_memory_back_before_growing() {
    let _g = emu_lock();
    let _c = Guard;
    for kind in ["expandable_segments:false", "expandable_segments:true"] {
        let (grown, hole) = gc_scene(&format!("{kind},garbage_collection_threshold:0.5"));
        assert!(
            grown.reserved_bytes_peak <= TARGET,
            "{kind}: reserved reached {} MiB over a threshold of 256 MiB",
            grown.reserved_bytes_peak >> 20
        );
        let given_back = grown.num_device_frees + grown.num_physical_frees;
        assert!(given_back > 0, "{kind}: nothing was given back");
        assert_eq!(
            (hole.num_device_mallocs, hole.num_physical_mallocs),
            (grown.num_device_mallocs, grown.num_physical_mallocs),
            "{kind}: the youngest hole did not serve the 64 MiB request"
        );
        assert!(grown.num_syncs > 0, "{kind}: memory went back unsynchronized");
        let (control, _) = gc_scene(kind);
        assert!(
            control.reserved_bytes_peak > TARGET,
            "{kind}: without garbage collection the scene stays under its threshold ({} MiB)",
            control.reserved_bytes_peak >> 20
        );
        assert_eq!(control.num_device_frees + control.num_physical_frees, 0, "{kind}: control gave memory back");
    }
}

/// Garbage collection gives back a moved handle wholly free again: its old
/// address is unmapped in a first round, the handle freed in a second.
/// 16 GiB with a limit of 8 GiB is roomy (handles move); the threshold is
/// 0.005 of the limit, about 41 MiB.
#[test]
fn garbage_collection_unmaps_a_moved_handles_old_address() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(16 << 30);
    let base = Baseline::take();
    let a = gc_after_a_move();
    let before = stats(&a);
    assert_eq!(before.reserved_bytes, 36 * MIB as u64);
    // 60 MiB lacks 12 pages past the mapped ones: 36 + 24 MiB passes the
    // threshold, and only the moved handle and the spacer's are free.
    let p = a.malloc(60 * MIB, Stream::DEFAULT).unwrap();
    let after = stats(&a);
    assert_eq!(a.retired_bytes(), 0, "the old address is still mapped");
    assert_eq!(after.num_physical_frees - before.num_physical_frees, 2, "both handles go back");
    assert_eq!(after.reserved_bytes, 60 * MIB as u64, "something stayed besides the new block's pages");
    check_accounting(&a, &base, None, "after garbage collection");
    a.free(p).unwrap();
    teardown_clean(a, &base);
}

const UNMAP: &str = "aclrtUnmapMem";

/// Disarms the emulator's armed unmap failure when a test ends.
struct Disarm;

impl Drop for Disarm {
    fn drop(&mut self) {
        fail_nth(UNMAP, 0);
    }
}

/// The release threshold's scene with the old address's unmap refused: the
/// free still succeeds, the old address stays mapped and retired, and no
/// second round asks the runtime again in the same free; `empty_cache`
/// then gives everything back.
#[test]
fn a_refused_old_address_unmap_ends_the_release_thresholds_work() {
    let _g = emu_lock();
    let _c = Guard;
    let _d = Disarm;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,map_ahead:false,release_threshold_mb:16");
    let other = new_stream();
    let (old, spacer, grown) = moved_past_a_waiting_free(&a, other);
    let before = stats(&a);
    fail_nth(UNMAP, 1);
    a.free(grown).unwrap();
    assert_eq!(fault_pending(UNMAP), 0, "setup: the free made no unmap");
    let after = stats(&a);
    assert_eq!(a.retired_bytes(), 32 * MIB, "the refused old address was unmapped after all");
    assert_eq!(after.num_unmaps, before.num_unmaps, "the refused unmap was asked again in the same free");
    assert_eq!(after.num_physical_frees, before.num_physical_frees, "a handle went back while mapped twice");
    a.check_invariants().unwrap();
    // The old address, still mapped to the moved handle, is handed to no one.
    let q = a.malloc(32 * MIB, Stream::DEFAULT).unwrap();
    assert!(q + 32 * MIB <= old || q >= old + 32 * MIB, "a request got the retired old address");
    a.free(q).unwrap();
    a.free(spacer).unwrap();
    a.empty_cache().unwrap();
    assert_eq!((a.retired_bytes(), stats(&a).reserved_bytes), (0, 0), "empty_cache left memory");
    teardown_clean(a, &base);
    super::support::drop_stream(other);
}

/// Garbage collection's scene with the old address's unmap refused: the
/// growth is still served (the ladder's release pass, a later pass, asks
/// again), nothing is lost or leaked, and `empty_cache` gives it all back.
#[test]
fn a_refused_old_address_unmap_in_garbage_collection_loses_nothing() {
    let _g = emu_lock();
    let _c = Guard;
    let _d = Disarm;
    set_capacity(16 << 30);
    let base = Baseline::take();
    let a = gc_after_a_move();
    fail_nth(UNMAP, 1);
    let p = a.malloc(60 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(fault_pending(UNMAP), 0, "setup: garbage collection made no unmap");
    a.check_invariants().unwrap();
    check_accounting(&a, &base, None, "after the refused unmap");
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    assert_eq!((a.retired_bytes(), stats(&a).reserved_bytes), (0, 0), "empty_cache left memory");
    teardown_clean(a, &base);
}
