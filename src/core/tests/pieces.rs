//! Tests of multi-page physical handles, mapped-first placement, the
//! address-space size and `reserved_headroom` (Note [expandable segments on
//! ACL VMM]), through the emulator, with the default 2 MiB pages. Tests of
//! moving handles pin fresh handles to 4 MiB (`floor_pieces`).

use super::support::{
    allocator, budget, check_accounting, check_fill, drop_stream, emu_lock, fail_nth, fill, new_stream, set_capacity,
    teardown_clean, Baseline, DEV, GIB, MIB, PAGE,
};
use crate::core::backing::expandable::PieceRule;
use crate::core::*;

/// An allocator whose fresh handles are always 4 MiB (two pages) at most,
/// however empty the device.
fn floor_pieces(config: &str) -> DeviceAllocator {
    let a = allocator(config);
    a.set_piece_rule(PieceRule::fixed(4 * MIB));
    a
}

#[test]
fn growth_maps_ahead_of_demand_on_a_roomy_device() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    assert!(a.is_expandable());
    // 10 MiB at the start of the large range: one 32 MiB handle, mapped
    // ahead over the free pages after the block.
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (1, 1, 32 * MIB as u64));
    let v = base.vmm();
    assert_eq!((v.physical_count, v.mapped_bytes), (1, 32 * MIB as i64));
    check_accounting(&a, &base, None, "after a growth mapped ahead");
    fill(p, 10 * MIB, 0x5A);
    assert!(check_fill(p, 10 * MIB, 0x5A), "every page of the block is backed");
    // The next requests fit the pages mapped ahead: no call at all.
    let q = a.malloc(12 * MIB, Stream::DEFAULT).unwrap();
    let r = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!((q, r), (p + 10 * MIB, p + 22 * MIB));
    assert_eq!(a.stats().unwrap().num_maps, 1);
    // 40 MiB more, from 30 MiB: lacks [32, 70) MiB. With 70 MiB allocated
    // a fresh handle is half of that, 35 MiB, rounded down to 34 MiB: the
    // request is larger, so it gets a handle of its own, the 38 MiB it
    // lacks, nothing mapped ahead (Note [handles of their own]).
    let t = a.malloc(40 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(t, p + 30 * MIB);
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (2, 2, 70 * MIB as u64));
    check_accounting(&a, &base, None, "after growth past a handle");
    for x in [p, q, r, t] {
        a.free(x).unwrap();
    }
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_small_pool_handle_is_at_most_four_pages() {
    // Every stream has a small pool, and a live small block pins its whole
    // handle: on a roomy device a large-pool handle is 32 MiB, a small-pool
    // one at most 8 MiB, mapped ahead.
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    let p = a.malloc(512, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (1, 4 * PAGE as u64), "one handle of four 2 MiB pages");
    check_accounting(&a, &base, None, "after a small growth");
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn under_a_memory_fraction_handles_follow_the_limit() {
    // 8 GiB device, 256 MiB allowed: a 128th of what the limit leaves is
    // under the 4 MiB floor, so a 10 MiB request maps 4 MiB handles (three,
    // the last mapped ahead), not the 32 MiB a roomy device gets.
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    a.set_memory_fraction(256.0 / 8192.0).unwrap();
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (3, 12 * MIB as u64));
    check_accounting(&a, &base, None, "after a growth under a limit");
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn mapping_ahead_cuts_the_calls_of_a_growing_sequence() {
    // 64 requests of 8 MiB, each kept: without mapping ahead, one handle
    // each (64 pairs of calls).
    let run = |rule: Option<PieceRule>| {
        let _g = emu_lock();
        let base = Baseline::take();
        budget(8 * GIB);
        let a = allocator("");
        if let Some(rule) = rule {
            a.set_piece_rule(rule);
        }
        let blocks: Vec<usize> = (0..64).map(|_| a.malloc(8 * MIB, Stream::DEFAULT).unwrap()).collect();
        let s = a.stats().unwrap();
        check_accounting(&a, &base, None, "after a growing sequence");
        for b in blocks {
            a.free(b).unwrap();
        }
        teardown_clean(a, &base);
        set_capacity(1 << 30);
        (s.num_maps, s.num_physical_mallocs, s.reserved_bytes)
    };
    let no_ahead = PieceRule::for_config(&crate::config::Config::parse("map_ahead:false").unwrap());
    assert!(!no_ahead.ahead);
    assert_eq!(run(Some(no_ahead)), (64, 64, 512 * MIB as u64));
    // Mapped ahead: 32 MiB handles until half of what is allocated is more,
    // then growing ones up to 48 MiB (12, a fifth of the calls); the last
    // reaches past the 512 MiB asked for.
    let (maps, phys, reserved) = run(None);
    assert_eq!((maps, phys), (12, 12));
    assert!(reserved >= 512 * MIB as u64 && reserved <= 512 * MIB as u64 * 6 / 5, "{reserved} bytes held");
}

#[test]
fn fresh_handles_shrink_to_4_mib_as_the_device_fills() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("");
    // 1000 MiB of a 1 GiB device: handles of a 128th of the memory left
    // (8 MiB at first), shrinking to 4 MiB; fewer than the 250 a 4 MiB
    // rule would map, more than the 125 of 8 MiB handles.
    let big = a.malloc(1000 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert!(s.num_maps > 125 && s.num_maps < 250, "{} handles for 1000 MiB", s.num_maps);
    assert_eq!(s.num_maps, s.num_physical_mallocs);
    // 24 MiB left: a 128th of it is under the floor, so 8 MiB is two 4 MiB
    // handles, none mapped ahead.
    let small = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let t = a.stats().unwrap();
    assert_eq!((t.num_maps - s.num_maps, t.num_physical_mallocs - s.num_physical_mallocs), (2, 2));
    assert_eq!(base.vmm().physical_bytes, 1008 * MIB as i64);
    check_accounting(&a, &base, None, "after growth on a filling device");
    fill(small, 8 * MIB, 0x11);
    assert!(check_fill(small, 8 * MIB, 0x11));
    a.free(big).unwrap();
    a.free(small).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_refused_handle_mapped_ahead_is_retried_at_the_size_the_request_needs() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    // The 32 MiB handle is refused: the 10 MiB the block needs comes as
    // one handle (not 4 MiB ones), nothing mapped ahead.
    fail_nth("aclrtMallocPhysical", 1);
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (1, 1, 10 * MIB as u64));
    assert_eq!(s.num_alloc_retries, 0, "no OOM retry: the smaller handle fit at once");
    check_accounting(&a, &base, None, "after a refused handle mapped ahead");
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_refused_large_handle_is_retried_at_4_mib() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("");
    // The runtime refuses the first handle, 8 MiB (a 128th of the free
    // gigabyte), as a device whose free memory is fragmented or held
    // elsewhere would: a 4 MiB handle is tried instead, and the next six
    // MiB ask afresh.
    fail_nth("aclrtMallocPhysical", 1);
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (2, 2, 10 * MIB as u64));
    assert_eq!(s.num_alloc_retries, 0, "no OOM retry: the smaller handle fit at once");
    assert_eq!(base.vmm().physical_count, 2);
    check_accounting(&a, &base, None, "after a refused handle");
    fill(p, 10 * MIB, 0x42);
    assert!(check_fill(p, 10 * MIB, 0x42));
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn handles_in_a_hole_move_whole_under_memory_pressure() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    // Moves with a synchronization (the OOM ladder's), not the moves of
    // wholly free handles that need none (tests `handle_moves`).
    let a = floor_pieces("handle_moves:false");
    let x = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let sep = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    fill(sep, 2 * MIB, 0x77);
    a.free(x).unwrap();
    let before = a.stats().unwrap();
    assert_eq!(before.reserved_bytes, 10 * MIB as u64);
    // Room for one more 4 MiB handle only: 12 MiB at the tail must reuse
    // the two 4 MiB handles of the 8 MiB hole.
    budget(4 * MIB);
    let c = a.malloc(12 * MIB, Stream::DEFAULT).unwrap();
    assert!(c > sep, "the request does not fit the hole; it goes past the separator");
    let s = a.stats().unwrap();
    assert!(
        s.num_physical_mallocs - before.num_physical_mallocs <= 1,
        "the hole's handles backed the request: {} new handles",
        s.num_physical_mallocs - before.num_physical_mallocs
    );
    assert!(s.num_unmaps >= 2, "the hole's two handles were unmapped");
    assert_eq!(s.reserved_bytes, 14 * MIB as u64);
    assert!(base.syncs() >= 1, "unmapping synchronized the stream first");
    check_accounting(&a, &base, None, "after moving handles");
    fill(c, 12 * MIB, 0x33);
    assert!(check_fill(sep, 2 * MIB, 0x77), "the separator's data survived the moves");
    a.free(c).unwrap();
    a.free(sep).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_mapped_hole_wins_over_a_better_fitting_unmapped_one() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("");
    // An unmapped 6 MiB hole: freed, then emptied.
    let h2 = a.malloc(6 * MIB, Stream::DEFAULT).unwrap();
    let sep1 = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    a.free(h2).unwrap();
    a.empty_cache().unwrap();
    // A mapped 8 MiB hole after it.
    let h1 = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    assert!(h1 > sep1, "8 MiB does not fit the 6 MiB hole");
    let sep2 = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    a.free(h1).unwrap();
    let maps = a.stats().unwrap().num_maps;
    // Best fit is the 6 MiB hole, which would need three new handles.
    let r = a.malloc(5 * MIB, Stream::DEFAULT).unwrap();
    assert!(r >= h1 && r + 5 * MIB <= h1 + 8 * MIB, "placed in the mapped hole, got {r:#x} (hole at {h1:#x})");
    assert_eq!(a.stats().unwrap().num_maps, maps, "nothing was mapped");
    check_accounting(&a, &base, None, "after a mapped-first placement");
    for p in [r, sep1, sep2] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn ranges_are_the_device_and_a_sixteenth_of_it() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("");
    let rt = a.runtime().clone();
    let (_, total) = rt.on_device(DEV, || rt.mem_info()).unwrap();
    let big = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    let small = a.malloc(4096, Stream::DEFAULT).unwrap();
    let round = |n: usize| n.div_ceil(PAGE) * PAGE;
    assert_eq!(a.segment_of(big).unwrap().1, round(total));
    assert_eq!(a.segment_of(small).unwrap().1, round(total / 16));
    a.free(big).unwrap();
    a.free(small).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

/// 8 MiB freed behind a 2 MiB separator, then 12 MiB: reserved bytes after.
fn hole_then_larger_request(config: &str) -> (u64, u64, u64) {
    let base = Baseline::take();
    budget(GIB);
    let a = floor_pieces(config);
    let x = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let sep = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    a.free(x).unwrap();
    let c = a.malloc(12 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    check_accounting(&a, &base, None, config);
    let syncs = base.syncs();
    a.free(c).unwrap();
    a.free(sep).unwrap();
    teardown_clean(a, &base);
    (s.reserved_bytes, s.num_unmaps, syncs)
}

#[test]
fn reserved_headroom_moves_free_handles_instead_of_growing() {
    let _g = emu_lock();
    // Without a headroom or handle moves the hole stays mapped and the
    // request maps 12 MiB.
    let (reserved, unmaps, _) = hole_then_larger_request("handle_moves:false");
    assert_eq!((reserved, unmaps), (22 * MIB as u64, 0));
    // Handle moves (the default) map the hole's two wholly free handles
    // again under the request, with no unmap and no synchronization.
    let (reserved, unmaps, syncs) = hole_then_larger_request("");
    assert_eq!((reserved, unmaps, syncs), (14 * MIB as u64, 0, 0));
    // With headroom 0, reserved may not pass the peak allocated (14 MiB):
    // the hole's two 4 MiB handles move, one 4 MiB handle is new.
    let (reserved, unmaps, syncs) = hole_then_larger_request("reserved_headroom:0");
    assert_eq!((reserved, unmaps), (14 * MIB as u64, 2));
    assert!(syncs >= 1, "the stream was synchronized before the unmaps");
    // A headroom wide enough for the growth moves nothing.
    let (reserved, unmaps, _) = hole_then_larger_request("reserved_headroom:1");
    assert_eq!((reserved, unmaps), (22 * MIB as u64, 0));
    set_capacity(1 << 30);
}

/// Stream A leaves an 8 MiB free hole; stream B then asks for 12 MiB:
/// (reserved, unmaps) after B's request.
fn other_streams_hole_then_request(config: &str) -> (u64, u64) {
    let base = Baseline::take();
    budget(GIB);
    let a = floor_pieces(config);
    let (s_a, s_b) = (new_stream(), new_stream());
    let x = a.malloc(8 * MIB, s_a).unwrap();
    let sep = a.malloc(2 * MIB, s_a).unwrap();
    a.free(x).unwrap();
    let c = a.malloc(12 * MIB, s_b).unwrap();
    fill(c, 12 * MIB, 0x5A);
    let s = a.stats().unwrap();
    check_accounting(&a, &base, None, config);
    assert!(check_fill(c, 12 * MIB, 0x5A), "{config}: data of the request");
    a.free(c).unwrap();
    a.free(sep).unwrap();
    a.check_invariants().unwrap();
    teardown_clean(a, &base);
    drop_stream(s_a);
    drop_stream(s_b);
    (s.reserved_bytes, s.num_unmaps)
}

#[test]
fn reserved_headroom_moves_another_streams_free_handles() {
    let _g = emu_lock();
    // Without a headroom A's hole stays mapped and B maps all 12 MiB.
    assert_eq!(other_streams_hole_then_request(""), (22 * MIB as u64, 0));
    // With headroom 0 (peak allocated 14 MiB), B's growth takes A's two
    // 4 MiB handles (A's stream synchronized, B's lock not held for it)
    // and one new one. Three unmaps: A's two, and the new handle B had
    // mapped before it stopped to ask (mapped again on the retry).
    assert_eq!(other_streams_hole_then_request("reserved_headroom:0"), (14 * MIB as u64, 3));
    set_capacity(1 << 30);
}

/// An allocator with a free 16 MiB hole whose first 8 MiB `empty_cache`
/// unmapped, and the unmapped tail above a 2 MiB separator: (allocator,
/// hole address, separator).
fn half_mapped_hole(config: &str) -> (DeviceAllocator, usize, usize) {
    budget(GIB);
    let a = floor_pieces(config);
    let x = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let y = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let sep = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    a.free(x).unwrap();
    a.empty_cache().unwrap();
    a.free(y).unwrap();
    (a, x, sep)
}

/// `want` bytes asked of `half_mapped_hole`: the request's offset from the
/// hole and the maps it made.
fn half_mapped_hole_then(config: &str, want: usize) -> (usize, u64) {
    let base = Baseline::take();
    let (a, x, sep) = half_mapped_hole(config);
    let maps = a.stats().unwrap().num_maps;
    let q = a.malloc(want, Stream::DEFAULT).unwrap();
    let made = a.stats().unwrap().num_maps - maps;
    check_accounting(&a, &base, None, config);
    fill(q, want, 0x3C);
    assert!(check_fill(q, want, 0x3C), "{config}: every page under the request is backed");
    a.free(q).unwrap();
    a.free(sep).unwrap();
    teardown_clean(a, &base);
    (q - x, made)
}

#[test]
fn with_a_headroom_a_request_goes_where_the_fewest_pages_are_missing() {
    let _g = emu_lock();
    // 10 MiB: no mapped run fits. Best fit is the hole's start, which lacks
    // four pages (two 4 MiB handles); its end lacks one.
    assert_eq!(half_mapped_hole_then("", 10 * MIB), (0, 2));
    assert_eq!(half_mapped_hole_then("reserved_headroom:100", 10 * MIB), (6 * MIB, 1));
    // 8 MiB fits the mapped half: mapped-first placement, with or without.
    assert_eq!(half_mapped_hole_then("", 8 * MIB), (8 * MIB, 0));
    assert_eq!(half_mapped_hole_then("reserved_headroom:100", 8 * MIB), (8 * MIB, 0));
    set_capacity(1 << 30);
}

#[test]
fn a_refused_growth_at_the_most_mapped_spot_leaves_the_free_block_whole() {
    let _g = emu_lock();
    let base = Baseline::take();
    let (a, _, sep) = half_mapped_hole("reserved_headroom:100");
    // The hole's end lacks one page, but the device has none left.
    budget(0);
    assert!(matches!(a.malloc(10 * MIB, Stream::DEFAULT), Err(Error::OutOfMemory(_))));
    a.check_invariants().expect("the refused request left the hole split");
    budget(GIB);
    // The OOM ladder gave the hole's pages back; the request fits again.
    let q = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    fill(q, 10 * MIB, 0x6B);
    assert!(check_fill(q, 10 * MIB, 0x6B));
    a.free(q).unwrap();
    a.free(sep).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_failed_map_of_a_handle_mapped_ahead_leaves_nothing_behind() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    // The 32 MiB handle (10 MiB asked, the rest ahead) is obtained, then its
    // map fails: the request fails and gives the handle back.
    fail_nth("aclrtMapMem", 1);
    let r = a.malloc(10 * MIB, Stream::DEFAULT);
    assert!(matches!(r, Err(Error::Runtime { .. })), "{r:?}");
    let s = a.stats().unwrap();
    assert_eq!((s.allocated_bytes, s.reserved_bytes), (0, 0));
    assert_eq!((s.num_physical_mallocs, s.num_physical_frees, s.num_maps), (1, 1, 0));
    let v = base.vmm();
    assert_eq!((v.physical_count, v.physical_bytes, v.mapped_bytes), (0, 0, 0));
    check_accounting(&a, &base, None, "after a failed map of a handle mapped ahead");
    // The fault cleared: the same request maps one 32 MiB handle.
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (1, 32 * MIB as u64));
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}
