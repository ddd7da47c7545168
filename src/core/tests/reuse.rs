//! Tests of the exact-size reuse lists (Note [exact-size reuse] in `reuse`).

use super::support::{allocator, drop_stream, emu_lock, finish, new_stream, set_capacity};
use crate::core::*;

const FIXED: &str = "expandable_segments:false";

/// Blocks the allocator holds for reuse right now.
fn held(a: &DeviceAllocator) -> usize {
    a.held_blocks().0
}

#[test]
fn a_freed_small_block_serves_the_next_request_of_its_size() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in [FIXED, ""] {
        let a = allocator(config);
        let p = a.malloc(4000, Stream::DEFAULT).unwrap();
        let q = a.malloc(4000, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
        assert_eq!(held(&a), 1, "{config}");
        let s = a.stats().unwrap();
        assert_eq!((s.allocated_bytes, s.active_blocks, s.num_frees), (4096, 1, 1), "{config}: a held block is freed");
        // 4000 rounds to 4096 like the held block: exact size, same stream.
        let r = a.malloc(4090, Stream::DEFAULT).unwrap();
        assert_eq!(r, p, "{config}");
        assert_eq!(held(&a), 0);
        let s = a.stats().unwrap();
        assert_eq!((s.allocated_bytes, s.requested_bytes, s.active_blocks), (8192, 8090, 2), "{config}");
        a.free(q).unwrap();
        a.free(r).unwrap();
        finish(a);
    }
}

#[test]
fn a_held_block_is_freed_memory_to_every_other_call() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(FIXED);
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    assert_eq!(held(&a), 1);
    match a.free(p) {
        Err(Error::UnknownPointer(m)) => assert!(m.contains("already freed"), "{m}"),
        other => panic!("double free of a held block: {other:?}"),
    }
    assert!(matches!(a.record_stream(p, Stream::DEFAULT), Err(Error::UnknownPointer(_))));
    assert!(a.query(p).is_err());
    assert_eq!(a.block_range(p + 100).unwrap(), None);
    assert!(a.segment_of(p).is_err());
    // Nothing above changed the state.
    assert_eq!(held(&a), 1);
    assert_eq!(a.stats().unwrap().num_frees, 1);
    finish(a);
}

#[test]
fn another_size_or_stream_does_not_take_a_held_block() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(FIXED);
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(8192 + 512, Stream::DEFAULT).unwrap();
    let r = a.malloc(8192, s1).unwrap();
    assert_ne!(q, p);
    assert_ne!(r, p);
    assert_eq!(held(&a), 1, "still held for its own size and stream");
    for x in [q, r] {
        a.free(x).unwrap();
    }
    a.check_invariants().unwrap();
    drop_stream(s1);
    finish(a);
}

#[test]
fn only_small_blocks_used_by_one_stream_are_held() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(FIXED);
    let s1 = new_stream();
    let big = a.malloc(2 << 20, Stream::DEFAULT).unwrap();
    a.free(big).unwrap();
    assert_eq!(held(&a), 0, "large blocks go back to the free index");
    let shared = a.malloc(4096, Stream::DEFAULT).unwrap();
    a.record_stream(shared, s1).unwrap();
    a.free(shared).unwrap();
    assert_eq!(held(&a), 0, "a block other streams used waits for their events instead");
    let limit1 = a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    a.free(limit1).unwrap();
    assert_eq!(held(&a), 1, "1 MiB is the largest small block");
    a.check_invariants().unwrap();
    drop_stream(s1);
    finish(a);
}

#[test]
fn held_blocks_coalesce_before_the_allocator_grows() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(FIXED);
    // Four 512 KiB blocks fill one 2 MiB small segment.
    let ps: Vec<usize> = (0..4).map(|_| a.malloc(512 << 10, Stream::DEFAULT).unwrap()).collect();
    assert_eq!(a.stats().unwrap().segments, 1);
    for p in ps {
        a.free(p).unwrap();
    }
    assert_eq!(held(&a), 4);
    // 1 MiB fits only once the held blocks merge: no new segment.
    let q = a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.segments, s.num_device_mallocs), (1, 1));
    assert_eq!(held(&a), 0);
    a.free(q).unwrap();
    finish(a);
}

#[test]
fn empty_cache_returns_held_blocks_to_the_device() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in [FIXED, ""] {
        let a = allocator(config);
        let p = a.malloc(4096, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
        assert_eq!(held(&a), 1);
        a.empty_cache().unwrap();
        assert_eq!(held(&a), 0);
        assert_eq!(a.stats().unwrap().reserved_bytes, 0, "{config}");
        finish(a);
    }
}

#[test]
fn the_byte_limit_bounds_what_is_held() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false,reuse_cache_mb:0");
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    assert_eq!(held(&a), 0, "reuse_cache_mb:0 turns reuse off");
    finish(a);

    let a = allocator("expandable_segments:false,reuse_cache_mb:1");
    let ps: Vec<usize> = (0..3).map(|_| a.malloc(512 << 10, Stream::DEFAULT).unwrap()).collect();
    for p in ps {
        a.free(p).unwrap();
    }
    assert_eq!(held(&a), 2, "two 512 KiB blocks fill a 1 MiB limit");
    assert_eq!(a.held_blocks().1, 1 << 20);
    finish(a);
}

/// Held blocks of sizes nobody asks for again starve the small segment: the
/// request that drains them is served by the drain alone, so the lists rest
/// for the next 256 frees (nothing held, nothing lost, no growth) and then
/// hold again (Note [resting reuse lists]).
#[test]
fn held_blocks_that_starve_the_pool_rest_the_lists() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(FIXED);
    // Ten pairs of distinct sizes, 110 to 146 KiB: each freed block is held
    // and the next is carved after it.
    for i in 0..10 {
        let p = a.malloc((110 << 10) + (i << 12), Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
    }
    assert_eq!(held(&a), 10);
    // 1 MiB does not fit beside them: the drain serves it, in one segment.
    let q = a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.segments, s.num_device_mallocs, held(&a)), (1, 1, 0));
    a.free(q).unwrap();
    assert_eq!(held(&a), 0, "the lists rest: the free was not held");
    for _ in 0..254 {
        let p = a.malloc(4096, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
        assert_eq!(held(&a), 0);
    }
    // The 256th refused free ends the rest; the next one is held.
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    assert_eq!(held(&a), 0);
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    assert_eq!(held(&a), 1);
    let s = a.stats().unwrap();
    assert_eq!((s.segments, s.num_device_mallocs, s.allocated_bytes), (1, 1, 0));
    finish(a);
}
