//! Running out of memory: the recovery ladder and its report, retried
//! runtime failures, and the memory fraction.

use super::support::{allocator, emu_lock, fail_nth, finish, set_capacity};
use crate::core::*;

#[test]
fn oom_ladder_releases_cache_then_fails_cleanly() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(50 << 20, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_device_frees, 1, "the cached 40 MiB segment was released to make room");
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    let Error::OutOfMemory(msg) = &err else { panic!("expected OOM, got {err:?}") };
    for needle in [
        "cannot allocate 30.00 MiB (31457280 bytes, rounded to 31457280) on device",
        "reports ",
        " free of 64.00 MiB.",
        "This allocator holds 50.00 MiB: 50.00 MiB allocated, 0.00 MiB cached in free blocks, \
         0.00 MiB cached as unmapped physical handles, 0.00 MiB freed but waiting for other streams' work",
        "Tried: releasing cached memory.",
        "Last failure: aclrtMalloc failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001).",
    ] {
        assert!(msg.contains(needle), "OOM message lacks '{needle}': {msg}");
    }
    assert!(!msg.contains("does not hold"), "nothing else holds memory on this device: {msg}");
    assert_eq!(a.stats().unwrap().num_ooms, 1);
    a.check_invariants().unwrap();
    a.free(q).unwrap();
    let r = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    a.free(r).unwrap();
    finish(a);
    set_capacity(1 << 30);
}

#[test]
fn injected_device_failure_is_retried() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    fail_nth("aclrtMalloc", 1);
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().num_alloc_retries, 1);
    fail_nth("aclrtMalloc", 1);
    fail_nth("aclrtMalloc", 0);
    a.free(p).unwrap();
    finish(a);
}

#[test]
fn memory_fraction_caps_reserved_memory() {
    let _g = emu_lock();
    set_capacity(100 << 20);
    let a = allocator("per_process_memory_fraction:0.5");
    let p = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    assert!(matches!(&err, Error::OutOfMemory(m) if m.contains("memory fraction")), "{err}");
    a.set_memory_fraction(1.0).unwrap();
    let q = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    assert!(a.set_memory_fraction(-0.1).is_err());
    a.free(p).unwrap();
    a.free(q).unwrap();
    finish(a);
    set_capacity(1 << 30);
}
