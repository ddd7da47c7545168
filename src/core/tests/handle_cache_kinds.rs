//! The handle cache is keyed by size alone, shared by both pools of the
//! device, and a cached handle carries its page attr: a 1 GiB-page handle
//! (`ACL_HBM_MEM_HUGE1G`) maps only at a 1 GiB boundary
//! (docs/runtime-behaviour.md "where a 1 GiB-page handle may be mapped"),
//! which a small-pool page (2 MiB) need not be. These tests pin why no
//! handle is ever offered where it does not fit: a large-pool range takes
//! only whole numbers of its pages, and no small-pool handle (at most
//! `SMALL_PIECE_CAP`, 8 MiB) is one of 1 GiB or 20 MiB; a small-pool
//! placement reaches at most its floor of 4 MiB past what it needs (two
//! pages), far below the 512 small pages of a 1 GiB handle. The cache
//! belongs to one device's allocator, so no other device's handle is in it.

use super::support::{allocator, emu_lock, fail_nth, set_capacity, teardown_clean, Baseline, GIB, MIB};
use crate::core::DeviceAllocator;
use crate::runtime::Stream;

/// Puts the emulator back when a test ends, even by a panic.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        fail_nth("aclrtFreePhysical", 0);
        set_capacity(1 << 30);
    }
}

/// Frees `p` and leaves its handle in the cache: empty_cache unmaps it, and
/// its free is refused once. Returns the bytes cached.
fn cache_handle_of(a: &DeviceAllocator, p: usize) -> usize {
    a.free(p).unwrap();
    fail_nth("aclrtFreePhysical", 1);
    assert!(a.empty_cache().is_err(), "the refused free is not reported");
    let (mapped, cached) = a.own_accounting();
    assert_eq!(mapped, 0, "empty_cache left a free page mapped");
    cached
}

fn physical_mallocs(a: &DeviceAllocator) -> u64 {
    a.stats().unwrap().num_physical_mallocs
}

/// A cached 1 GiB-page handle of the large pool is never offered to the
/// small pool, even where its range has room for 512 small pages: small
/// requests get fresh handles, and the large pool's next request takes it.
#[test]
fn a_gib_page_handle_stays_for_the_large_pool() {
    let _g = emu_lock();
    let _c = Guard;
    // 64 GiB: the small range is 4 GiB, room for a 1 GiB handle.
    set_capacity(64 << 30);
    let base = Baseline::take();
    let a = allocator("page_size:1g");
    let x = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(cache_handle_of(&a, x), GIB);
    let before = physical_mallocs(&a);
    let small: Vec<usize> = (0..64).map(|_| a.malloc(512 << 10, Stream::DEFAULT).unwrap()).collect();
    assert!(physical_mallocs(&a) > before, "the small pool made no handle of its own");
    let (mapped, cached) = a.own_accounting();
    assert_eq!(cached, GIB, "the small pool took the 1 GiB-page handle");
    assert!(mapped < 64 * MIB, "the small pool mapped {mapped} bytes");
    let before = physical_mallocs(&a);
    let y = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(physical_mallocs(&a), before, "the large pool made a handle with one cached");
    assert_eq!(a.own_accounting().1, 0);
    let (range, _) = a.segment_of(y).unwrap();
    assert_eq!(range % GIB, 0);
    a.free(y).unwrap();
    for p in small {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
}

/// A cached small-pool handle is never offered to a large-pool range of
/// 1 GiB or 20 MiB pages: the large request makes a handle of its own.
#[test]
fn a_small_pool_handle_stays_for_the_small_pool() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    for config in ["page_size:1g", "page_size:20m"] {
        let base = Baseline::take();
        let a = allocator(config);
        let z = a.malloc(4096, Stream::DEFAULT).unwrap();
        let cached = cache_handle_of(&a, z);
        assert!(cached > 0 && cached <= 8 * MIB, "{config}: {cached} bytes cached");
        let before = physical_mallocs(&a);
        let y = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
        assert!(physical_mallocs(&a) > before, "{config}: the large pool made no handle of its own");
        assert_eq!(a.own_accounting().1, cached, "{config}: the large pool took the small pool's handle");
        a.free(y).unwrap();
        teardown_clean(a, &base);
    }
}
