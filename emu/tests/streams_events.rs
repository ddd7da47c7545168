//! Streams and events: the recorded-status enum, holds, synchronize calls,
//! stream waits, NULL (default) streams and handle validation
//! (docs/acl-api.md §3, §5 "Streams and events").

mod common;
use ascendcl::*;
use common::*;
use std::ptr::null_mut;

#[test]
fn recorded_status_enum_values() {
    assert_eq!(ACL_EVENT_RECORDED_STATUS_NOT_READY, NOT_READY);
    assert_eq!(ACL_EVENT_RECORDED_STATUS_COMPLETE, COMPLETE);
}

#[test]
fn free_running_stream_completes_at_once() {
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // Never recorded: an old-mode event is NOT_READY.
    assert_eq!(status(e), NOT_READY);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtRecordEvent(e, s) }, 0);
    assert_eq!(status(e), COMPLETE);
    assert_eq!(dev.usage().streams, 1);
    assert_eq!(dev.usage().events, 1);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn hold_record_query_release() {
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn synchronize_stream_finishes_held_work_and_counts() {
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        let before = dev.syncs();
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(dev.syncs(), before + 1);
        assert_eq!(status(e), COMPLETE);
        // The hold applies again to later work.
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn synchronize_event_finishes_up_to_the_event_and_counts() {
    let dev = Dev::take();
    let (s, e1, e2) = (stream(), event(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e1, s), 0);
        assert_eq!(aclrtRecordEvent(e2, s), 0);
        let before = dev.syncs();
        assert_eq!(aclrtSynchronizeEvent(e1), 0);
        assert_eq!(dev.syncs(), before + 1);
        assert_eq!(status(e1), COMPLETE);
        assert_eq!(status(e2), NOT_READY);
        // A never-recorded event synchronizes at once (still counted).
        let e3 = event();
        assert_eq!(aclrtSynchronizeEvent(e3), 0);
        assert_eq!(dev.syncs(), before + 2);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(status(e2), COMPLETE);
        for e in [e1, e2, e3] {
            assert_eq!(aclrtDestroyEvent(e), 0);
        }
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn synchronize_device_finishes_every_stream_and_counts() {
    let dev = Dev::take();
    let (a, b, ea, eb, ed) = (stream(), stream(), event(), event(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        for (s, e) in [(a, ea), (b, eb), (null_mut(), ed)] {
            assert_eq!(aclemu_stream_hold(s), 0);
            assert_eq!(aclrtRecordEvent(e, s), 0);
            assert_eq!(status(e), NOT_READY);
        }
        let before = dev.syncs();
        assert_eq!(aclrtSynchronizeDevice(), 0);
        assert_eq!(dev.syncs(), before + 1);
        for e in [ea, eb, ed] {
            assert_eq!(status(e), COMPLETE);
            assert_eq!(aclrtDestroyEvent(e), 0);
        }
        for s in [a, b, null_mut()] {
            assert_eq!(aclemu_stream_release(s), 0);
        }
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn stream_wait_event_blocks_later_work_until_the_event_completes() {
    let dev = Dev::take();
    let (a, b, e, f) = (stream(), stream(), event(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclrtRecordEvent(e, a), 0);
        assert_eq!(aclrtStreamWaitEvent(b, e), 0);
        assert_eq!(aclrtRecordEvent(f, b), 0);
        // b is not held but waits for a.
        assert_eq!(status(f), NOT_READY);
        assert_eq!(aclemu_stream_release(a), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(status(f), COMPLETE);
        // Waiting on a complete event is a no-op; the NULL stream is the
        // default stream; a never-recorded event cannot be waited on.
        assert_eq!(aclrtStreamWaitEvent(b, e), 0);
        assert_eq!(aclrtStreamWaitEvent(null_mut(), e), 0);
        let g = event();
        assert_eq!(aclrtStreamWaitEvent(b, g), RT_PARAM_INVALID);
        assert_eq!(aclrtRecordEvent(f, b), 0);
        assert_eq!(status(f), COMPLETE);
        for x in [e, f, g] {
            assert_eq!(aclrtDestroyEvent(x), 0);
        }
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn synchronizing_a_waiting_stream_forces_its_dependency() {
    let dev = Dev::take();
    let (a, b, e, f) = (stream(), stream(), event(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclrtRecordEvent(e, a), 0);
        assert_eq!(aclrtStreamWaitEvent(b, e), 0);
        assert_eq!(aclrtRecordEvent(f, b), 0);
        assert_eq!(aclrtSynchronizeStream(b), 0);
        assert_eq!(status(f), COMPLETE);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclemu_stream_release(a), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyEvent(f), 0);
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn event_flags() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let s = stream();
        let mut e = null_mut();
        assert_eq!(aclrtCreateEventWithFlag(null_mut(), 1), INVALID_PARAM);
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x4), INVALID_PARAM);
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x8000_0000), INVALID_PARAM);
        assert_eq!(aclrtCreateEvent(null_mut()), INVALID_PARAM);
        // The runtime refuses the flags 0 and ACL_EVENT_IPC alone.
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0), RT_PARAM_INVALID);
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x40), RT_PARAM_INVALID);
        assert_eq!(dev.usage().events, 0);
        // Without ACL_EVENT_SYNC an event cannot be waited on: not supported.
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x2), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtStreamWaitEvent(s, e), RT_FEATURE_NOT_SUPPORT);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x1 | 0x2), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtStreamWaitEvent(s, e), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn null_and_unknown_handles() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let (s, e) = (stream(), event());
        let mut st = 0u32;
        assert_eq!(aclrtCreateStream(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtDestroyStream(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtRecordEvent(null_mut(), s), INVALID_PARAM);
        assert_eq!(aclrtQueryEventStatus(null_mut(), &mut st), INVALID_PARAM);
        assert_eq!(aclrtQueryEventStatus(e, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtSynchronizeEvent(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtStreamWaitEvent(s, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtDestroyEvent(null_mut()), INVALID_PARAM);
        // Handles of the wrong kind or made up.
        let junk = 0x1234usize as *mut std::ffi::c_void;
        assert_eq!(aclrtSynchronizeStream(junk), RT_INVALID_HANDLE);
        assert_eq!(aclrtRecordEvent(s, s), RT_INVALID_HANDLE);
        assert_eq!(aclrtRecordEvent(e, e), RT_INVALID_HANDLE);
        assert_eq!(aclemu_stream_hold(e), RT_INVALID_HANDLE);
        // Destroyed handles.
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(s), RT_INVALID_HANDLE);
        assert_eq!(aclrtSynchronizeStream(s), RT_INVALID_HANDLE);
        assert_eq!(aclemu_stream_release(s), RT_INVALID_HANDLE);
        assert_eq!(aclrtDestroyEvent(e), RT_INVALID_HANDLE);
        assert_eq!(aclrtQueryEventStatus(e, &mut st), RT_INVALID_HANDLE);
        assert_eq!(aclrtSynchronizeEvent(e), RT_INVALID_HANDLE);
    }
    dev.assert_clean();
}

#[test]
fn null_stream_is_the_default_stream() {
    let dev = Dev::take();
    let e = event();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(null_mut()), 0);
        assert_eq!(aclrtRecordEvent(e, null_mut()), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(null_mut()), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtSynchronizeStream(null_mut()), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
    }
    dev.assert_clean();
}

#[test]
fn destroying_a_held_stream_finishes_its_work() {
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtDestroyEvent(e), 0);
    }
    dev.assert_clean();
}

#[test]
fn events_and_streams_belong_to_their_creation_device() {
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // Another thread with no current context cannot record on the stream
    // (107002); once it makes the stream's context current it can.
    let mut ctx = null_mut();
    // SAFETY: a live local out-pointer.
    assert_eq!(unsafe { aclrtGetCurrentContext(&mut ctx) }, 0);
    let (su, eu, cu) = (s as usize, e as usize, ctx as usize);
    let before = dev.syncs();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    on_fresh_thread(move || unsafe {
        let (s, e) = (su as *mut std::ffi::c_void, eu as *mut std::ffi::c_void);
        assert_eq!(aclrtRecordEvent(e, s), RT_CONTEXT_NULL);
        assert_eq!(aclrtSetCurrentContext(cu as *mut std::ffi::c_void), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtSynchronizeEvent(e), 0);
        assert_eq!(aclrtSynchronizeStream(s), 0);
    });
    assert_eq!(dev.syncs(), before + 2);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn sync_events_are_limited_per_device() {
    let dev = Dev::take();
    let mut events = Vec::with_capacity(65536);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        for _ in 0..65536 {
            events.push(event());
        }
        let mut e = null_mut();
        assert_eq!(aclrtCreateEvent(&mut e), RT_NO_EVENT_RESOURCE);
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x1 | 0x2), RT_NO_EVENT_RESOURCE);
        // Events without SYNC do not count.
        assert_eq!(aclrtCreateEventWithFlag(&mut e, 0x2), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyEvent(events.pop().unwrap()), 0);
        events.push(event());
        for e in events {
            assert_eq!(aclrtDestroyEvent(e), 0);
        }
    }
    dev.assert_clean();
}
