//! aclrtCreateEventExWithFlag: the runtime's flag checks, COMPLETE before the
//! first record, which flags streams can wait for (docs/runtime-behaviour.md
//! "Events and streams").

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;

/// ACL_EVENT_DEFAULT as torch_npu defines it: STREAM_MARK | DDSYNC | TIME_LINE.
const TORCH_NPU_DEFAULT: u32 = 0xE;
const TIME_LINE: u32 = 0x8;

fn ex_event(flag: u32) -> *mut c_void {
    let mut e = null_mut();
    // SAFETY: a live out-pointer.
    assert_eq!(unsafe { aclrtCreateEventExWithFlag(&mut e, flag) }, 0, "flag {flag:#x}");
    e
}

#[test]
fn flags_are_checked_as_the_runtime_does() {
    let dev = Dev::take();
    let mut e = null_mut();
    // SAFETY: live out-pointers; NULL for the first call.
    unsafe {
        assert_eq!(aclrtCreateEventExWithFlag(null_mut(), 1), INVALID_PARAM);
        for bad in [0, 0x10, 0x20, 0x80, 0x20 | 0x1, 0x10 | 0x4, 0x40 | 0x1] {
            assert_eq!(aclrtCreateEventExWithFlag(&mut e, bad), RT_PARAM_INVALID, "flag {bad:#x}");
        }
        // IPC alone is valid (emu/tests/ipc.rs shares such events).
        for good in [0x1, 0x2, 0x4, TIME_LINE, TORCH_NPU_DEFAULT, 0xF, 0x40] {
            let e = ex_event(good);
            assert_eq!(aclrtDestroyEvent(e), 0);
        }
    }
    dev.assert_clean();
}

#[test]
fn complete_until_recorded_then_ordered_like_any_event() {
    let dev = Dev::take();
    let (s, t) = (stream(), stream());
    let e = ex_event(TORCH_NPU_DEFAULT);
    let old = event();
    assert_eq!(status(e), COMPLETE, "an Ex event starts COMPLETE");
    assert_eq!(status(old), NOT_READY, "an old-mode event starts NOT_READY");
    let a = malloc(64);
    // SAFETY: live locals and emulator handles.
    unsafe {
        // Waiting before the first record orders nothing and is no error.
        assert_eq!(aclrtStreamWaitEvent(t, e), 0);
        let mut st = 9;
        assert_eq!(aclrtStreamQuery(t, &mut st), 0);
        assert_eq!(st, 0, "a wait for an unrecorded Ex event was queued");
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclrtStreamWaitEvent(t, e), 0);
        assert_eq!(aclrtMemsetAsync(a, 64, 6, 64, t), 0);
        assert_eq!(aclrtStreamQuery(t, &mut st), 0);
        assert_eq!(st, 1, "t must wait for s");
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtSynchronizeStream(t), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyEvent(old), 0);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(t), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_time_line_only_event_cannot_be_waited_for() {
    let dev = Dev::take();
    let s = stream();
    let e = ex_event(TIME_LINE);
    // SAFETY: emulator handles.
    unsafe {
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtStreamWaitEvent(s, e), RT_FEATURE_NOT_SUPPORT);
        assert_eq!(aclrtSynchronizeEvent(e), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}
