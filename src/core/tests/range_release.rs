//! Releasing an expandable range (empty_cache, teardown) clears only the
//! directory entries its mapping made: a range is as large as the device
//! (64 GiB here, three 32 GiB leaves of the directory) while its pages
//! cover a few MiB, and clearing the whole range walked or made a leaf for
//! every 32 GiB of it.

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity, teardown_clean, Baseline, MIB};
use crate::core::DeviceAllocator;

/// Puts the emulated device's size back when a test ends, even by a panic.
struct CapacityGuard;

impl Drop for CapacityGuard {
    fn drop(&mut self) {
        set_capacity(1 << 30);
    }
}

/// Granules of 2 MiB a mapping of `bytes` (reserved) can have registered,
/// with one more per range (two ranges: the large and the small pool's).
fn granules(bytes: u64) -> usize {
    (bytes as usize).div_ceil(2 * MIB) + 2
}

/// A large and a small block on a fresh stream of `a`, freed again:
/// returns the bytes reserved while they were live.
fn use_and_free(a: &DeviceAllocator) -> (crate::runtime::Stream, usize, u64) {
    let s = new_stream();
    let big = a.malloc(256 * MIB, s).unwrap();
    let small = a.malloc(4096, s).unwrap();
    let reserved = a.stats().unwrap().reserved_bytes;
    assert!(a.query(big).is_ok() && a.query(small).is_ok());
    a.free(big).unwrap();
    a.free(small).unwrap();
    (s, big, reserved)
}

#[test]
fn empty_cache_clears_only_the_mapped_part_of_a_device_sized_range() {
    let _g = emu_lock();
    let _c = CapacityGuard;
    set_capacity(64 << 30);
    let base = Baseline::take();
    let a = allocator("");
    let (s, big, reserved) = use_and_free(&a);
    let (leaves, visited) = a.directory_cost();
    a.empty_cache().unwrap();
    assert_eq!(base.vmm().reserved_ranges, 0, "empty_cache released the ranges");
    let (leaves_after, visited_after) = a.directory_cost();
    assert_eq!(leaves_after, leaves, "the release made a directory leaf");
    assert!(
        visited_after - visited <= granules(reserved),
        "the release looked at {} granules for {reserved} bytes ever mapped",
        visited_after - visited
    );
    assert!(a.query(big).is_err(), "the directory still knows a released range");
    // The addresses may come back: the directory learns them again.
    let again = a.malloc(256 * MIB, s).unwrap();
    assert_eq!(a.query(again).unwrap().size, 256 * MIB);
    a.free(again).unwrap();
    teardown_clean(a, &base);
    drop_stream(s);
}

#[test]
fn teardown_clears_only_the_mapped_part_of_a_device_sized_range() {
    let _g = emu_lock();
    let _c = CapacityGuard;
    set_capacity(64 << 30);
    let base = Baseline::take();
    let a = allocator("");
    let (s, _, reserved) = use_and_free(&a);
    let (leaves, visited) = a.directory_cost();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    let (leaves_after, visited_after) = a.directory_cost();
    assert_eq!(leaves_after, leaves, "teardown made a directory leaf");
    assert!(
        visited_after - visited <= granules(reserved),
        "teardown looked at {} granules for {reserved} bytes ever mapped",
        visited_after - visited
    );
    let v = base.vmm();
    assert_eq!((v.reserved_ranges, v.physical_count), (0, 0), "teardown left ranges or handles");
    drop_stream(s);
}
