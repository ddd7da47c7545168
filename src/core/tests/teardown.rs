//! Teardown: what it does with live blocks, and with memory a stream it
//! could not wait for may still use.

use super::support::{
    allocator, drop_stream, emu_lock, fail_nth, hold_stream, new_stream, release_stream, set_capacity, usage, DEV, MIB,
};
use crate::core::*;

#[test]
fn teardown_leaves_memory_a_stream_it_could_not_wait_for_may_still_use() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let (s1, s2) = (new_stream(), new_stream());
    let p = a.malloc(4096, s1).unwrap();
    let q = a.malloc(4096, s2).unwrap();
    let (busy_base, _) = a.segment_of(p).unwrap();
    hold_stream(s1);
    // Teardown synchronizes s1 first (it was met first): that wait fails.
    fail_nth("aclrtSynchronizeStream", 1);
    let e = a.teardown().expect_err("a failed wait is reported");
    assert!(e.to_string().contains("left allocated"), "{e}");
    // s1's segment is still there; s2's (synchronized) was returned.
    assert_eq!(usage(DEV).malloc_count, 1);
    let _ = q;
    release_stream(s1);
    let rt = a.runtime().clone();
    rt.on_device(DEV, || rt.free(busy_base)).unwrap();
    drop_stream(s1);
    drop_stream(s2);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn teardown_with_live_blocks_reports_and_releases_them() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    let report = a.teardown().unwrap();
    assert_eq!(
        report,
        TeardownReport { live_blocks: 2, live_bytes: (1 << 20) + (30 << 20), ..TeardownReport::default() }
    );
    assert_eq!(usage(DEV).malloc_count, 0);
    assert!(matches!(a.malloc(1, Stream::DEFAULT), Err(Error::Internal(_))));
}

/// Teardown runs once: a second call does nothing (it used to free each
/// fixed segment's allocation a second time).
#[test]
fn a_second_teardown_does_nothing() {
    let _g = emu_lock();
    for config in ["expandable_segments:false", ""] {
        let a = allocator(config);
        let p = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
        a.free(p).unwrap();
        a.teardown().unwrap();
        let calls = usage(DEV);
        let again = a.teardown().expect("a second teardown succeeds");
        assert_eq!(again, TeardownReport::default(), "{config}");
        assert_eq!(usage(DEV), calls, "{config}: the second teardown called the runtime");
    }
}
