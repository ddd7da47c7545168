//! Tests of Note [mapping ahead while growth is frequent]: a fresh handle
//! maps ahead of the request while its stream grows often, over its life or
//! in a burst, and only what the request lacks once the stream has served
//! many requests per fresh handle.

use super::support::{
    allocator, budget, check_accounting, drop_stream, emu_lock, new_stream, set_capacity, teardown_clean, Baseline,
    GIB, MIB,
};
use crate::core::backing::expandable::{
    growth_is_frequent, in_burst, RecentHandles, AHEAD_WHILE_REQUESTS_PER_HANDLE, BURST_HANDLES, BURST_REQUESTS,
};
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

#[test]
fn a_burst_is_burst_handles_within_burst_requests() {
    let (k, n) = (BURST_HANDLES, BURST_REQUESTS);
    // A burst holds the lifetime bound's rate.
    assert_eq!(n, k as u64 * AHEAD_WHILE_REQUESTS_PER_HANDLE);
    assert!(!in_burst(0, []), "a first handle is no burst");
    let mut recent = RecentHandles::default();
    // k - 2 handles made just now: the next one is not yet the k-th.
    for _ in 0..k - 2 {
        recent.push(100_000);
    }
    assert!(!in_burst(100_001, recent.iter()));
    // One more, and the next handle completes a burst...
    recent.push(100_010);
    assert!(in_burst(100_011, recent.iter()));
    // ...while the oldest of them is fewer than n requests back.
    assert!(in_burst(100_000 + n - 1, recent.iter()));
    assert!(!in_burst(100_000 + n, recent.iter()));
    // Only the last k - 1 handles are kept: older ones do not count.
    let mut spaced = RecentHandles::default();
    for at in [0, 100_000, 100_001] {
        spaced.push(at);
    }
    for _ in 0..k - 1 {
        spaced.push(200_000 + n);
    }
    assert_eq!(spaced.iter().count(), k - 1);
    assert!(spaced.iter().all(|at| at == 200_000 + n));
    // Both pools of a stream: their kept handles count together.
    let (mut large, mut small) = (RecentHandles::default(), RecentHandles::default());
    for i in 0..(k - 1) as u64 {
        if i % 2 == 0 {
            large.push(50 + i)
        } else {
            small.push(50 + i)
        }
    }
    assert!(!in_burst(60, large.iter()));
    assert!(in_burst(60, large.iter().chain(small.iter())));
    // Counts above the stream's (from before its counts were taken out)
    // are not recent, and nothing overflows.
    assert!(!in_burst(0, [u64::MAX; 4]));
    assert!(in_burst(u64::MAX, [u64::MAX; 4]));
}

/// Fresh handles a phase of 64 growths of 3 MiB (each block held) takes on
/// a roomy device after `hits` small malloc/free pairs served from the
/// cache (the first of them made the stream's only earlier handle); it
/// holds less than one 48 MiB handle ahead of what it uses at its end.
fn phase_handles(hits: usize) -> u64 {
    let base = Baseline::take();
    budget(64 * GIB);
    let a = allocator("");
    for _ in 0..hits {
        let p = a.malloc(4096, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
    }
    let before = a.stats().unwrap();
    let held: Vec<usize> = (0..64).map(|_| a.malloc(3 * MIB, Stream::DEFAULT).unwrap()).collect();
    let after = a.stats().unwrap();
    check_accounting(&a, &base, None, "after the phase");
    let ahead = after.reserved_bytes - before.reserved_bytes - 64 * 3 * MIB as u64;
    assert!(ahead < 48 * MIB as u64, "the phase holds {ahead} bytes ahead after {hits} hits");
    for p in held {
        a.free(p).unwrap();
    }
    teardown_clean(a, &base);
    after.num_physical_mallocs - before.num_physical_mallocs
}

/// A stream that served many requests and then starts growing again maps
/// ahead once the phase's handles make a burst: a few handles more than a
/// new stream, not one per growth (by the lifetime counts alone, the phase
/// after 100,000 hits would take one handle per request).
#[test]
fn a_growth_phase_after_many_hits_maps_ahead_once_in_a_burst() {
    let _g = emu_lock();
    let new = phase_handles(0);
    let late = phase_handles(100_000);
    assert!(new <= 6, "setup: a new stream took {new} handles for 64 x 3 MiB");
    // The burst's first BURST_HANDLES - 1 handles map what each request
    // lacks, then handles map ahead as on a new stream (9 handles against
    // 5; 64 with the lifetime rule alone).
    assert!(late < new + BURST_HANDLES as u64, "after 100,000 hits the phase took {late} handles, a new stream {new}");
    assert!(late > new, "the phase's first handles map only what each request lacks ({late} / {new})");
    set_capacity(1 << 30);
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

/// (reserved bytes, fresh handles) stream S2 adds on a roomy device with
/// 5000 small hits then a 30 MiB and a 10 MiB request, after a stream S1
/// made 13 large handles, the last after 20,000 small hits, and gave them
/// back; with `reuse` S1 is forgotten first and S2 takes over its entry,
/// else S2 gets an entry of its own (the allocator's history, and so the
/// handles' size, is the same either way).
fn second_stream_growth(reuse: bool) -> (u64, u64) {
    let base = Baseline::take();
    budget(64 * GIB);
    let a = allocator("");
    let s1 = new_stream();
    let mut held: Vec<usize> = (0..12).map(|_| a.malloc(64 * MIB, s1).unwrap()).collect();
    for _ in 0..20_000 {
        let p = a.malloc(4096, s1).unwrap();
        a.free(p).unwrap();
    }
    held.push(a.malloc(64 * MIB, s1).unwrap());
    for p in held {
        a.free(p).unwrap();
    }
    a.empty_cache().unwrap();
    assert_eq!(base.vmm().physical_count, 0, "setup: S1's handles outlived empty_cache");
    if reuse {
        a.forget_stream(s1).unwrap();
    }
    let s2 = new_stream();
    for _ in 0..5000 {
        let p = a.malloc(4096, s2).unwrap();
        a.free(p).unwrap();
    }
    let before = a.stats().unwrap();
    let x = a.malloc(30 * MIB, s2).unwrap();
    let y = a.malloc(10 * MIB, s2).unwrap();
    let after = a.stats().unwrap();
    assert_eq!(a.streams_served(), if reuse { 1 } else { 2 }, "setup: S2 took S1's entry over, or did not");
    check_accounting(&a, &base, None, "after S2's growths");
    a.free(x).unwrap();
    a.free(y).unwrap();
    for s in [s1, s2] {
        a.forget_stream(s).unwrap();
        drop_stream(s);
    }
    teardown_clean(a, &base);
    (after.reserved_bytes - before.reserved_bytes, after.num_physical_mallocs - before.num_physical_mallocs)
}

/// A stream on a retired entry grows as on a new one: the entry's count of
/// fresh handles starts again with its request counts: S2 must not count
/// S1's handles and map a handle ahead for its 30 MiB, where on a new entry
/// 5000 requests and no handle say it grows rarely.
#[test]
fn a_reused_stream_entry_paces_growth_as_a_new_one() {
    let _g = emu_lock();
    let (new, reused) = (second_stream_growth(false), second_stream_growth(true));
    assert_eq!(reused, new, "S2 on S1's entry grew otherwise than on a new entry");
    // 5000 hits and no fresh handle yet: each request maps what it lacks.
    assert_eq!(new, (40 * MIB as u64, 2));
    set_capacity(1 << 30);
}
