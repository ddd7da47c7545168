//! Tests of expandable segments (Note [expandable segments on ACL VMM]), through the emulator.
//!
//! Every expectation is computed from the scenario (page counts from block
//! sizes and offsets) and checked against the emulator's own counters, not
//! only against the allocator's statistics. The emulator is process-wide, so
//! each test takes `emu_lock()` and compares the emulator's counters with the
//! values it read at its start.
//!
//! Growth, holes, recycling, empty_cache, teardown and page sizes here; a
//! failed growth in `growth_failure`, other streams' work in `streams`.

mod growth_failure;
mod streams;

use super::support::{
    allocator, budget, check_accounting, check_fill, drop_stream, emu_lock, fail_nth, fill, hold_stream, new_stream,
    queue_copy_out, release_stream, set_capacity, teardown_clean, usage, Baseline, Vmm, DEV, GIB, MIB, PAGE,
};
use crate::core::backing::expandable::PieceRule;
use crate::core::*;

const EXP_2M: &str = "expandable_segments:true,page_size:2m";

/// An allocator whose growth maps one page per physical handle, so counts
/// of maps and handles equal counts of pages (handles of several pages have
/// their own tests).
fn paged(config: &str) -> DeviceAllocator {
    let a = allocator(config);
    a.set_piece_rule(PieceRule::fixed(PAGE));
    a
}

/// Distinct pages of `page` bytes (relative to `base`) under the given blocks.
fn pages_under(base: usize, page: usize, blocks: &[(usize, usize)]) -> usize {
    let mut pages: Vec<usize> =
        blocks.iter().flat_map(|&(addr, size)| (addr - base) / page..=(addr + size - 1 - base) / page).collect();
    pages.sort_unstable();
    pages.dedup();
    pages.len()
}

#[test]
fn growth_maps_pages_one_range_per_stream_and_kind() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged(EXP_2M);
    assert!(a.is_expandable());

    let p1 = a.malloc(4096, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes, s.segments), (1, 1, PAGE as u64, 1));
    assert_eq!(s.num_device_mallocs, 0, "no aclrtMalloc in expandable mode");
    assert_eq!(
        base.vmm(),
        Vmm { physical_count: 1, physical_bytes: PAGE as i64, mapped_bytes: PAGE as i64, reserved_ranges: 1 }
    );

    // A large block in its own range: 3 MiB at offset 0 needs pages 0 and 1.
    let p2 = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes, s.segments), (3, 3, 3 * PAGE as u64, 2));
    let (range_base, range_size) = a.segment_of(p2).unwrap();
    assert_eq!(p2, range_base, "the first block starts the range");
    assert_ne!(a.segment_of(p1).unwrap().0, range_base, "small and large blocks use different ranges");
    assert!(range_size >= (1 << 30), "the range covers the whole device ({range_size} bytes)");

    // The next 3 MiB follow at once: [3, 6) MiB shares page 1, maps page 2.
    let p3 = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(p3, p2 + 3 * MIB);
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes, s.segments), (4, 4, 4 * PAGE as u64, 2));

    // More small blocks fit the mapped small page.
    let p4 = a.malloc(5000, Stream::DEFAULT).unwrap();
    assert_eq!(a.segment_of(p4).unwrap(), a.segment_of(p1).unwrap());
    assert_eq!(a.stats().unwrap().num_maps, 4);

    // A second stream gets its own ranges: one small, one large.
    let s1 = new_stream();
    let q1 = a.malloc(4096, s1).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.segments), (5, 3));
    assert_ne!(a.segment_of(q1).unwrap().0, a.segment_of(p1).unwrap().0);
    let q2 = a.malloc(12 * MIB, s1).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.segments), (11, 11, 4));
    assert_eq!(s.reserved_bytes, 11 * PAGE as u64);
    assert_eq!(s.allocated_bytes as usize, 4096 + 3 * MIB + 3 * MIB + 5120 + 4096 + 12 * MIB);
    assert_eq!(
        base.vmm(),
        Vmm {
            physical_count: 11,
            physical_bytes: 11 * PAGE as i64,
            mapped_bytes: 11 * PAGE as i64,
            reserved_ranges: 4
        }
    );
    check_accounting(&a, &base, Some(PAGE), "after growth");

    // Freeing maps and unmaps nothing: pages stay until reclaimed.
    for p in [p1, p2, p3, p4, q1, q2] {
        a.free(p).unwrap();
    }
    let s = a.stats().unwrap();
    assert_eq!((s.num_unmaps, s.reserved_bytes), (0, 11 * PAGE as u64));
    teardown_clean(a, &base);
    drop_stream(s1);
    set_capacity(1 << 30);
}

#[test]
fn growth_with_20m_pages() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("expandable_segments:true,page_size:20m");
    let big = 20 * MIB;
    let p1 = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (1, big as u64), "one 20 MiB page under a 3 MiB block");
    let p2 = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(p2, p1 + 3 * MIB);
    assert_eq!(a.stats().unwrap().num_maps, 1, "the second block fits the mapped page");
    // [6, 25) MiB crosses into the second page.
    let p3 = a.malloc(19 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (2, 2, 2 * big as u64));
    // The small pool keeps 2 MiB pages: one handle of three, a 128th of
    // the 984 MiB left rounded down to pages, mapped ahead.
    let p4 = a.malloc(100, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    let small = 3 * PAGE;
    assert_eq!((s.num_maps, s.reserved_bytes, s.segments), (3, (2 * big + small) as u64, 2));
    assert_eq!(base.vmm().mapped_bytes, (2 * big + small) as i64);
    check_accounting(&a, &base, None, "20 MiB and 2 MiB pages");
    for p in [p1, p2, p3, p4] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_hole_is_filled_before_the_tail() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged(EXP_2M);
    let x = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    let y = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    let z = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!((y, z), (x + 4 * MIB, x + 8 * MIB));
    assert_eq!(a.stats().unwrap().num_maps, 6);
    a.free(y).unwrap();
    let mapped_before = base.vmm().mapped_bytes;
    let before = a.stats().unwrap();
    assert_eq!(before.num_unmaps, 0, "a free unmaps nothing");

    let h = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert!(h >= y && h + 3 * MIB <= z, "the request went to the hole [{y:#x}, {z:#x}), got {h:#x}");
    let after = a.stats().unwrap();
    assert_eq!(
        (after.num_maps, after.num_physical_mallocs, after.reserved_bytes),
        (before.num_maps, before.num_physical_mallocs, before.reserved_bytes),
        "filling a mapped hole maps nothing new"
    );
    assert_eq!(base.vmm().mapped_bytes, mapped_before);

    // The 1 MiB left of the hole cannot take 5 MiB: the tail grows by
    // [12, 17) MiB = pages 6, 7 and 8.
    let t = a.malloc(5 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(t, z + 4 * MIB);
    assert_eq!(a.stats().unwrap().num_maps, before.num_maps + 3);
    check_accounting(&a, &base, Some(PAGE), "after hole filling");
    for p in [x, z, h, t] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn reused_holes_are_mapped_whichever_hole_is_chosen() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged(EXP_2M);
    // x [0, 4) | y [4, 8) | z [8, 16) | w [16, 20) MiB.
    let x = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    let y = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    let z = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let w = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    a.free(x).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.stats().unwrap().reserved_bytes as usize, 8 * PAGE, "x's two pages were returned");
    a.free(z).unwrap();
    // Two holes fit 3 MiB: x's (smaller, unmapped) and z's (mapped). Either
    // choice is fine; the block must be mapped and usable.
    let maps = a.stats().unwrap().num_maps;
    let h = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    a.check_invariants().unwrap();
    assert!(h == x || h == z, "{h:#x} is in neither hole");
    let new_pages = if h == x { 2 } else { 0 };
    assert_eq!(a.stats().unwrap().num_maps, maps + new_pages);
    fill(h, 3 * MIB, 0x4B);
    assert!(check_fill(h, 3 * MIB, 0x4B));
    check_accounting(&a, &base, Some(PAGE), "after reusing a hole");
    for p in [y, w, h] {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn pages_freed_elsewhere_are_recycled_without_new_physical_memory() {
    let _g = emu_lock();
    let base = Baseline::take();
    // Room for exactly 12 pages.
    budget(24 * MIB);
    let a = paged(EXP_2M);
    let x = a.malloc(16 * MIB, Stream::DEFAULT).unwrap();
    let y = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    fill(y, 8 * MIB, 0x3C);
    let s = a.stats().unwrap();
    assert_eq!((s.num_physical_mallocs, s.reserved_bytes), (12, 24 * MIB as u64));
    a.free(x).unwrap();

    // Another stream's range needs 8 pages; the device has none left, so the
    // 8 pages under x must move.
    let s1 = new_stream();
    let z = a.malloc(16 * MIB, s1).unwrap();
    assert_ne!(a.segment_of(z).unwrap().0, a.segment_of(y).unwrap().0);
    fill(z, 16 * MIB, 0xC3);
    let s = a.stats().unwrap();
    assert_eq!(s.num_physical_mallocs, 12, "no new physical memory: x's pages were reused");
    assert_eq!(s.num_physical_frees, 0);
    assert_eq!(s.num_unmaps, 8, "exactly x's pages were unmapped");
    assert_eq!(s.num_maps, 12 + 8);
    assert!(s.num_physical_mallocs < s.num_maps);
    assert_eq!(s.reserved_bytes, 24 * MIB as u64, "reserved did not grow");
    assert_eq!(s.num_ooms, 0);
    assert_eq!(
        base.vmm(),
        Vmm { physical_count: 12, physical_bytes: 24 * MIB as i64, mapped_bytes: 24 * MIB as i64, reserved_ranges: 2 }
    );
    assert!(check_fill(y, 8 * MIB, 0x3C), "a live block lost its data while pages moved");
    check_accounting(&a, &base, Some(PAGE), "after recycling");
    a.free(y).unwrap();
    a.free(z).unwrap();
    teardown_clean(a, &base);
    drop_stream(s1);
    set_capacity(1 << 30);
}

#[test]
fn empty_cache_returns_every_free_page() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = paged(EXP_2M);
    // Large range: x [0, 3) MiB, y [3, 5.5) MiB, z [5.5, 13.5) MiB.
    let x = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    let y = a.malloc(5 * MIB / 2, Stream::DEFAULT).unwrap();
    let z = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let (large_base, _) = a.segment_of(x).unwrap();
    assert_eq!((y, z), (x + 3 * MIB, x + 11 * MIB / 2));
    // Small range: two blocks on one page, one freed.
    let s1 = a.malloc(4096, Stream::DEFAULT).unwrap();
    let s2 = a.malloc(4096, Stream::DEFAULT).unwrap();
    let (small_base, _) = a.segment_of(s1).unwrap();
    fill(y, 5 * MIB / 2, 0x77);
    assert_eq!(a.stats().unwrap().num_maps as usize, 7 + 1);
    a.free(x).unwrap();
    a.free(z).unwrap();
    a.free(s2).unwrap();
    // Every page below each range's top is mapped: z's free run reaches
    // from 5.5 MiB to the top (page 6 ends at 14 MiB).
    assert_eq!(a.stats().unwrap().largest_free_block, 17 * MIB as u64 / 2);

    a.empty_cache().unwrap();
    // Holes now: only y's pages 1 and 2 and the small page stay mapped, so
    // the longest mapped free run is the small page past s1.
    assert_eq!(a.stats().unwrap().largest_free_block, (PAGE - 4096) as u64);
    // Pages under live blocks: y's pages 1 and 2 (each shared with a freed
    // block) and the small page.
    let live_pages = pages_under(large_base, PAGE, &[(y, 5 * MIB / 2)]) + pages_under(small_base, PAGE, &[(s1, 4096)]);
    assert_eq!(live_pages, 3);
    let s = a.stats().unwrap();
    assert_eq!(s.reserved_bytes as usize, live_pages * PAGE, "empty_cache kept a page no live block uses");
    assert_eq!(s.num_unmaps, 8 - 3);
    assert_eq!(s.num_physical_frees, 8 - 3, "the unmapped pages went back to the runtime");
    assert_eq!(
        base.vmm(),
        Vmm {
            physical_count: live_pages as i64,
            physical_bytes: (live_pages * PAGE) as i64,
            mapped_bytes: (live_pages * PAGE) as i64,
            reserved_ranges: 2,
        }
    );
    assert_eq!(a.own_accounting(), (live_pages * PAGE, 0), "no handle left in the cache");
    assert!(check_fill(y, 5 * MIB / 2, 0x77), "a live block lost data in empty_cache");
    check_accounting(&a, &base, Some(PAGE), "after the first empty_cache");

    a.free(y).unwrap();
    a.free(s1).unwrap();
    a.empty_cache().unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.reserved_bytes, s.allocated_bytes), (0, 0));
    let emu = base.vmm();
    assert_eq!((emu.physical_count, emu.physical_bytes, emu.mapped_bytes), (0, 0, 0), "pages left after empty_cache");
    assert_eq!(emu.reserved_ranges, 0, "ranges that hold nothing go back with empty_cache");
    assert_eq!((s.segments, s.address_space_bytes), (0, 0), "the stats still count a released range");
    check_accounting(&a, &base, Some(PAGE), "after the second empty_cache");
    assert!(a.query(y).is_err() && a.block_range(large_base).unwrap().is_none());

    // The allocator still works: a new range for the next request.
    let again = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(base.vmm().reserved_ranges, 1);
    fill(again, 3 * MIB, 0x11);
    assert!(check_fill(again, 3 * MIB, 0x11));
    a.free(again).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn teardown_leaks_nothing() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(24 * MIB);
    let a = paged(EXP_2M);
    let s1 = new_stream();
    let s2 = new_stream();
    // Live blocks in four ranges, a freed block with mapped pages, handles
    // moved by the OOM ladder, and a free waiting for a held stream.
    let x = a.malloc(16 * MIB, Stream::DEFAULT).unwrap();
    let _y = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    let _small = a.malloc(512, Stream::DEFAULT).unwrap();
    a.free(x).unwrap();
    let _z = a.malloc(6 * MIB, s1).unwrap();
    let _small1 = a.malloc(1000, s1).unwrap();
    let w = a.malloc(2 * MIB, Stream::DEFAULT).unwrap();
    a.record_stream(w, s2).unwrap();
    hold_stream(s2);
    a.free(w).unwrap();
    check_accounting(&a, &base, Some(PAGE), "before teardown");
    let emu = base.vmm();
    assert!(emu.mapped_bytes > 0 && emu.reserved_ranges == 4, "{emu:?}");

    let report = a.teardown().unwrap();
    assert_eq!(report.live_blocks, 4);
    let zero = Vmm { physical_count: 0, physical_bytes: 0, mapped_bytes: 0, reserved_ranges: 0 };
    assert_eq!(base.vmm(), zero, "teardown left VMM resources behind");
    let u = usage(DEV);
    assert_eq!(u.events, base.0.events, "teardown left an event behind");
    release_stream(s2);
    drop_stream(s1);
    drop_stream(s2);
    set_capacity(1 << 30);
}

#[test]
fn one_gib_pages_in_the_large_pool() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("expandable_segments:true,page_size:1g");
    let x = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (1, 1, GIB as u64));
    assert_eq!(base.vmm().mapped_bytes, GIB as i64);
    assert_eq!(base.vmm().physical_count, 1, "one 1 GiB handle, not 512 small ones");
    let (range_base, _) = a.segment_of(x).unwrap();
    // 1 GiB pages map only at 1 GiB boundaries: the range starts at one
    // (the emulator reserves ranges above 512 MiB 1 GiB-aligned, as the
    // runtime does; `reserve_refused` covers a misaligned reservation).
    assert_eq!(range_base % GIB, 0);

    // [100 MiB, 1124 MiB) crosses into the second page.
    let y = a.malloc(GIB, Stream::DEFAULT).unwrap();
    assert_eq!(y, x + 100 * MIB);
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (2, 2 * GIB as u64));
    // Data across the page boundary.
    let edge = range_base + GIB - 4096;
    fill(edge, 8192, 0x9D);
    assert!(check_fill(edge, 8192, 0x9D));

    // The small pool still maps 2 MiB pages, mapped ahead in a handle of
    // four: its cap, below a 128th of the 6 GiB left.
    let z = a.malloc(4096, Stream::DEFAULT).unwrap();
    let small = 4 * PAGE;
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (3, (2 * GIB + small) as u64));
    assert_eq!(
        base.vmm(),
        Vmm {
            physical_count: 3,
            physical_bytes: (2 * GIB + small) as i64,
            mapped_bytes: (2 * GIB + small) as i64,
            reserved_ranges: 2,
        }
    );
    check_accounting(&a, &base, None, "1 GiB and 2 MiB pages");
    a.free(x).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.stats().unwrap().reserved_bytes as usize, 2 * GIB + small, "both 1 GiB pages hold part of y");
    a.free(y).unwrap();
    a.free(z).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(base.vmm().physical_count, 0);
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}
