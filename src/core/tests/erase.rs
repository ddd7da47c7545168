//! `erase_stream`: undoing a `record_stream` so that a free waits only for
//! the block's other streams (torch_npu's `eraseStream`).

use super::support::{
    allocator, drop_stream, emu_lock, hold_stream, new_stream, release_stream, set_capacity, usage, DEV,
};
use crate::core::*;

#[test]
fn an_erased_stream_is_not_waited_for_at_free() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.erase_stream(p, s1).unwrap();
    a.free(p).unwrap();
    assert_eq!(a.stats().unwrap().pending_free_bytes, 0, "nothing waits for the held stream");
    let q = a.malloc(8192, Stream::DEFAULT).unwrap();
    assert_eq!(p, q, "the block is reused at once on its own stream");
    a.free(q).unwrap();
    release_stream(s1);
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn erasing_one_stream_keeps_the_wait_for_the_others() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let (s1, s2) = (new_stream(), new_stream());
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    a.record_stream(p, s2).unwrap();
    hold_stream(s2);
    a.erase_stream(p, s1).unwrap();
    a.free(p).unwrap();
    assert!(a.stats().unwrap().pending_free_bytes > 0, "the free waits for s2");
    let q = a.malloc(8192, Stream::DEFAULT).unwrap();
    assert_ne!(p, q, "the block is not reused while s2 may use it");
    a.free(q).unwrap();
    release_stream(s2);
    a.teardown().unwrap();
    drop_stream(s1);
    drop_stream(s2);
}

#[test]
fn erase_of_a_stream_never_recorded_is_ok_and_of_an_unknown_pointer_changes_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    let before = a.stats().unwrap();
    a.erase_stream(p, s1).unwrap();
    a.erase_stream(p, Stream::DEFAULT).unwrap();
    let bogus = Stream::from_raw(0x5eed_0000 as crate::sys::aclrtStream);
    a.erase_stream(p, bogus).unwrap();
    assert!(matches!(a.erase_stream(p + 4096, s1), Err(Error::UnknownPointer(m)) if m.contains("erase_stream")));
    assert!(matches!(a.erase_stream(0x1000, s1), Err(Error::UnknownPointer(_))));
    assert_eq!(a.stats().unwrap(), before, "nothing changed");
    a.free(p).unwrap();
    assert!(matches!(a.erase_stream(p, s1), Err(Error::UnknownPointer(_))), "a freed block is unknown");
    a.teardown().unwrap();
    drop_stream(s1);
}
