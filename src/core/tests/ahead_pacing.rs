//! Tests of Note [mapping ahead while growth is frequent]: a fresh handle
//! maps ahead of the request while its stream grows often, and only what
//! the request lacks once the stream has served many requests per fresh
//! handle.

use super::support::{allocator, budget, check_accounting, emu_lock, set_capacity, teardown_clean, Baseline, GIB, MIB};
use crate::core::backing::expandable::{growth_is_frequent, AHEAD_WHILE_REQUESTS_PER_HANDLE};
use crate::core::*;

#[test]
fn growth_is_frequent_below_the_requests_per_handle_bound() {
    let n = AHEAD_WHILE_REQUESTS_PER_HANDLE;
    // The first fresh handle always maps ahead.
    assert!(growth_is_frequent(0, 0));
    assert!(growth_is_frequent(n - 1, 0));
    // n requests served without a handle: the first one maps only what it needs.
    assert!(!growth_is_frequent(n, 0));
    // Two handles so far: frequent until 3n requests.
    assert!(growth_is_frequent(3 * n - 1, 2));
    assert!(!growth_is_frequent(3 * n, 2));
    // No overflow at the extremes.
    assert!(growth_is_frequent(u64::MAX - 1, u64::MAX));
    assert!(!growth_is_frequent(u64::MAX, 0));
}

/// Reserved bytes a 10 MiB request adds on a roomy device after a 30 MiB
/// block filled most of the first (32 MiB) handle and `hits` small
/// malloc/free pairs were served from the cache.
fn growth_after(hits: usize) -> u64 {
    let base = Baseline::take();
    budget(64 * GIB);
    let a = allocator("");
    let held = a.malloc(30 * MIB, Stream::DEFAULT).unwrap();
    for _ in 0..hits {
        let p = a.malloc(4096, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
    }
    let before = a.stats().unwrap();
    let q = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let after = a.stats().unwrap();
    assert_eq!(after.num_physical_mallocs, before.num_physical_mallocs + 1, "one fresh handle for the 10 MiB");
    check_accounting(&a, &base, None, "after the growth");
    a.free(q).unwrap();
    a.free(held).unwrap();
    teardown_clean(a, &base);
    after.reserved_bytes - before.reserved_bytes
}

#[test]
fn a_stream_that_grows_rarely_maps_only_what_a_request_lacks() {
    let _g = emu_lock();
    // Growing often (two requests, two handles so far): the 10 MiB request
    // lacks 8 MiB past the first handle, and its fresh handle is the rule's
    // 32 MiB, mapped ahead.
    assert_eq!(growth_after(0), 32 * MIB as u64);
    // After 5000 requests served by two handles, the fresh handle covers the
    // 8 MiB the request lacks and nothing more.
    assert_eq!(growth_after(5000), 8 * MIB as u64);
    set_capacity(1 << 30);
}
