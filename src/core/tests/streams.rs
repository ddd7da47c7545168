//! Streams: which streams an allocator accepts, and stream-ordered reuse
//! (Note [stream-ordered reuse] in `stream_order`): blocks freed on one
//! stream are not reused on another, and a block other streams used waits
//! for their work.

use super::support::{
    allocator, drop_stream, emu_lock, fail_nth, finish, hold_stream, new_stream, release_stream, set_capacity, usage,
    DEV,
};
use crate::core::*;

#[test]
fn a_stream_the_runtime_does_not_know_is_refused_changing_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("");
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    let gone = new_stream();
    drop_stream(gone);
    let bogus = Stream::from_raw(0x5eed_0000 as crate::sys::aclrtStream);
    let before = a.stats().unwrap();
    for s in [bogus, gone] {
        let e = a.malloc(4096, s).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("not a live stream")), "{e}");
        let e = a.record_stream(p, s).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("not a live stream")), "{e}");
    }
    assert_eq!(a.stats().unwrap(), before, "nothing changed");
    assert_eq!(a.streams_served(), 1, "no slot was given to a bad stream");
    // A live stream met for the first time passes the check, once.
    let s = new_stream();
    let q = a.malloc(4096, s).unwrap();
    a.record_stream(p, s).unwrap();
    assert_eq!(a.streams_served(), 2);
    a.free(q).unwrap();
    a.free(p).unwrap();
    drop_stream(s);
    finish(a);
}

#[test]
fn other_streams_do_not_reuse_freed_blocks() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(4096, s1).unwrap();
    let info = a.query(q).unwrap();
    assert_eq!(info.stream, s1);
    assert_ne!(a.segment_of(q).unwrap().0, p & !((2 << 20) - 1), "stream s1 got its own segment");
    assert_eq!(a.stats().unwrap().segments, 2);
    a.free(q).unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn record_stream_defers_reuse_until_the_event_completes() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    assert!(matches!(a.free(p), Err(Error::UnknownPointer(m)) if m.contains("already freed")));
    let q = a.malloc(8192, Stream::DEFAULT).unwrap();
    assert_ne!(p, q, "the block waits for s1's event");
    a.free(q).unwrap();
    let snap = a.snapshot_json().unwrap();
    assert!(snap.contains("pending-free"));
    release_stream(s1);
    a.empty_cache().unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.reserved_bytes, 0, "after the event completed the segment was free and released");
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    let u = usage(DEV);
    assert_eq!((u.malloc_count, u.events), (0, 0));
}

#[test]
fn a_cross_stream_free_that_can_neither_record_nor_wait_changes_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    let before = a.stats().unwrap();
    // No event on s1, and no waiting for it either: reusing the block could
    // race s1's work, so the free is refused and the block stays live.
    fail_nth("aclrtRecordEvent", 1);
    fail_nth("aclrtSynchronizeStream", 1);
    assert!(matches!(a.free(p), Err(e @ Error::Runtime { .. }) if e.to_string().contains("stays allocated")));
    assert_eq!(a.stats().unwrap(), before);
    assert_eq!(a.query(p).unwrap().addr, p);
    a.check_invariants().unwrap();
    // Freed for real once the runtime answers again; it waits for s1.
    hold_stream(s1);
    a.free(p).unwrap();
    assert_ne!(a.malloc(8192, Stream::DEFAULT).inspect(|&q| a.free(q).unwrap()).unwrap(), p);
    release_stream(s1);
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    let u = usage(DEV);
    assert_eq!((u.malloc_count, u.events), (0, 0));
}

#[test]
fn an_event_that_could_not_be_recorded_is_kept_for_reuse() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    // The record fails (the free waits for s1 instead); destroying the
    // unrecorded event would fail too.
    fail_nth("aclrtRecordEvent", 1);
    fail_nth("aclrtDestroyEvent", 1);
    a.free(p).unwrap();
    fail_nth("aclrtDestroyEvent", 0);
    assert_eq!(usage(DEV).events, 1, "the event is held, in the pool");
    a.teardown().unwrap();
    drop_stream(s1);
    assert_eq!(usage(DEV).events, 0, "teardown destroyed it");
}

#[test]
fn empty_cache_syncs_only_streams_that_used_the_memory() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let s2 = new_stream();
    let p = a.malloc(4096, s1).unwrap();
    let q = a.malloc(4096, s2).unwrap();
    a.free(p).unwrap();
    let before = usage(DEV).syncs;
    a.empty_cache().unwrap();
    assert_eq!(usage(DEV).syncs - before, 1, "only s1's segment was free, so only s1 was synchronized");
    assert_eq!(a.stats().unwrap().segments, 1);
    a.free(q).unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    drop_stream(s2);
}
