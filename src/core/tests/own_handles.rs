//! Handles of their own (Note [handles of their own]): on a roomy device a
//! large request as large as a fresh handle maps exactly the pages it
//! lacks, one handle per run, nothing ahead; near a full device it takes
//! the rule's small handles like any other request.

use super::support::{
    allocator, budget, check_accounting, check_fill, emu_lock, fail_nth, fill, set_capacity, teardown_clean, Baseline,
    GIB, MIB,
};
use crate::core::*;

#[test]
fn a_request_as_large_as_a_fresh_handle_maps_one_handle_of_what_it_lacks() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    // A fresh handle would be 48 MiB (half of 98 MiB allocated, at most
    // 48): the 98 MiB request takes one handle of 98 MiB, not three of
    // 48 MiB with the last mapped ahead to 144 MiB.
    let p = a.malloc(98 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (1, 1, 98 * MIB as u64));
    assert_eq!(base.vmm().physical_count, 1);
    check_accounting(&a, &base, None, "after a request with a handle of its own");
    fill(p, 98 * MIB, 0x3C);
    assert!(check_fill(p, 98 * MIB, 0x3C), "every page of the block is backed");
    // A smaller request after it takes the rule's handle, mapped ahead.
    let q = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(q, p + 98 * MIB);
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.reserved_bytes), (2, (98 + 48) * MIB as u64));
    // Freed, the block's handle is wholly free and goes back whole.
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.reserved_bytes, 48 * MIB as u64, "the 98 MiB handle went back with its block");
    check_accounting(&a, &base, None, "after empty_cache");
    a.free(q).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn near_a_full_device_a_large_request_takes_the_rules_small_handles() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator("");
    // On 1 GiB a fresh handle is a 128th of the free memory, 8 MiB, less
    // than the 32 MiB the allocator's use asks for: the device is not
    // roomy, and 40 MiB takes at least five such handles (they shrink with
    // what is left), so that a small block left in one pins at most 8 MiB,
    // not 40.
    let p = a.malloc(40 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert!(s.num_maps >= 5, "{} handles for 40 MiB", s.num_maps);
    assert_eq!(s.num_maps, s.num_physical_mallocs);
    assert_eq!(base.vmm().physical_count, s.num_maps as i64);
    check_accounting(&a, &base, None, "after growth on a small device");
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}

#[test]
fn a_refused_handle_of_its_own_is_retried_at_the_rules_size() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let a = allocator("");
    // The 98 MiB handle is refused: the run is covered by a 48 MiB handle
    // (the rule's size), then by one of its own for the 50 MiB left.
    fail_nth("aclrtMallocPhysical", 1);
    let p = a.malloc(98 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_maps, s.num_physical_mallocs, s.reserved_bytes), (2, 2, 98 * MIB as u64));
    assert_eq!(s.num_alloc_retries, 0, "no OOM retry: the smaller handle fit at once");
    check_accounting(&a, &base, None, "after a refused handle of its own");
    fill(p, 98 * MIB, 0x6B);
    assert!(check_fill(p, 98 * MIB, 0x6B));
    a.free(p).unwrap();
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}
