//! aclrtGetLastError, aclrtPeekAtLastError and aclGetRecentErrMsg: what a
//! failed call leaves behind on its thread
//! (docs/runtime-behaviour.md "Last error").

mod common;
use ascendcl::*;
use common::*;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

fn recent() -> Option<String> {
    // SAFETY: no arguments; the result is NULL or valid until the next call.
    let p = unsafe { aclGetRecentErrMsg() };
    // SAFETY: non-NULL and NUL-terminated.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string())
}

#[test]
fn a_runtime_failure_is_kept_until_read() {
    let _dev = Dev::take();
    on_fresh_thread(|| {
        // SAFETY: plain values; the freed pointer was never allocated.
        unsafe {
            assert_eq!(aclrtPeekAtLastError(0), 0);
            assert_eq!(aclrtSetDevice(0), 0);
            assert_eq!(aclrtFree(0x1000 as *mut c_void), RT_PARAM_INVALID);
            assert_eq!(aclrtPeekAtLastError(0), RT_PARAM_INVALID);
            assert_eq!(aclrtPeekAtLastError(0), RT_PARAM_INVALID, "peek cleared it");
            // Only the thread level exists.
            assert_eq!(aclrtPeekAtLastError(1), INVALID_PARAM);
            assert_eq!(aclrtGetLastError(1), INVALID_PARAM);
            assert_eq!(aclrtGetLastError(0), RT_PARAM_INVALID);
            assert_eq!(aclrtGetLastError(0), 0, "get did not clear it");
            assert_eq!(aclrtResetDevice(0), 0);
        }
        assert_eq!(recent().as_deref(), Some("acl-emu: aclrtFree failed with error 107000"));
        assert_eq!(recent(), None, "the message is handed out once");
    });
    // Another thread saw none of it.
    // SAFETY: no pointer arguments.
    assert_eq!(unsafe { aclrtPeekAtLastError(0) }, 0);
}

#[test]
fn acl_layer_rejections_and_the_special_states_are_not_kept() {
    on_fresh_thread(|| {
        // SAFETY: NULL and live out-pointers.
        unsafe {
            assert_eq!(aclrtMalloc(null_mut(), 64, 0), INVALID_PARAM);
            let mut d = -1;
            assert_eq!(aclrtGetDevice(&mut d), RT_CONTEXT_NULL);
            assert_eq!(aclrtPeekAtLastError(0), 0);
        }
        // The message store still names the last failed call.
        assert_eq!(recent().as_deref(), Some("acl-emu: aclrtGetDevice failed with error 107002"));
    });
}
