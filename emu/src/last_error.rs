//! The thread's last error: aclrtGetLastError, aclrtPeekAtLastError,
//! aclGetRecentErrMsg (docs/runtime-behaviour.md "Last error").
//!
//! What the runtime does:
//! - `aclrtGetLastError` / `aclrtPeekAtLastError` (`aclrtGetLastErrorImpl`,
//!   `aclrtPeekAtLastErrorImpl` in src/acl/aclrt_impl/context.cpp): a level
//!   other than `ACL_RT_THREAD_LEVEL` (0) is 100000; otherwise the code of
//!   the thread's last failed runtime call (`rtGetLastError` /
//!   `rtPeekAtLastError`, src/runtime/api/api_c.cc), which Get clears and
//!   Peek keeps; 0 when there is none. The runtime records a failure on its
//!   way out (`GetRtExtErrCodeAndSetGlobalErr`, src/runtime/api/
//!   api_global_err.cc), so checks of the ACL layer (the 100000 range),
//!   which return before the runtime is called, are not kept; nor are
//!   107002 and 207000, which the runtime returns without recording them
//!   (`rtGetDevice` in api_c_device.cc: "special state"; `rtMemcpyAsync`,
//!   `rtEventCreateExWithFlag` in api_c.cc).
//! - `aclGetRecentErrMsg` (`aclGetRecentErrMsgImpl`, src/acl/aclrt_impl/
//!   acl.cpp): the recent error text, NULL when there is none. The
//!   emulator keeps one line per thread naming the last failed call and its
//!   code (any layer), hands it out once and then answers NULL until the
//!   next failure (**guess**: the runtime's message store is drained by the
//!   read). The pointer stays valid until the thread's next call of it.
//!
//! None of the three is itself recorded as a failure.

use crate::api::Api;
use crate::error::{
    aclError, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    ACL_ERROR_RT_PARAM_INVALID, ACL_SUCCESS,
};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CString};

/// Codes at or above this come from the runtime (or the driver below it).
const FIRST_RUNTIME_CODE: aclError = ACL_ERROR_RT_PARAM_INVALID;
/// Runtime codes returned without being recorded.
const NOT_RECORDED: [aclError; 2] = [ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_FEATURE_NOT_SUPPORT];
const ACL_RT_THREAD_LEVEL: i32 = 0;

thread_local! {
    /// The last failed runtime call's code on this thread, 0 for none.
    static LAST: Cell<aclError> = const { Cell::new(ACL_SUCCESS) };
    /// The last failure's message, not yet read.
    static MESSAGE: RefCell<Option<(Api, aclError)>> = const { RefCell::new(None) };
    /// The message last handed out (its pointer must outlive the call).
    static HANDED_OUT: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records a failed call (called by `acl_entry!` on every failure, outside
/// its panic boundary: nothing here may panic, so a call made while the
/// thread's locals are being destroyed records nothing).
pub fn record(api: Api, code: aclError) {
    if code >= FIRST_RUNTIME_CODE && !NOT_RECORDED.contains(&code) {
        let _ = LAST.try_with(|c| c.set(code));
    }
    let _ = MESSAGE.try_with(|m| {
        if let Ok(mut slot) = m.try_borrow_mut() {
            *slot = Some((api, code));
        }
    });
}

fn last(level: i32, clear: bool) -> aclError {
    if level != ACL_RT_THREAD_LEVEL {
        return ACL_ERROR_INVALID_PARAM;
    }
    LAST.with(|c| if clear { c.replace(ACL_SUCCESS) } else { c.get() })
}

fn recent_message() -> *const c_char {
    let Some((api, code)) = MESSAGE.with(|m| m.borrow_mut().take()) else {
        return std::ptr::null();
    };
    let text = format!("acl-emu: {} failed with error {code}", api.name());
    let text = CString::new(text).unwrap_or_default();
    HANDED_OUT.with(|h| h.borrow_mut().insert(text).as_ptr())
}

/// Counts the call, runs `f` behind a panic boundary, then spends `api`'s cost.
fn entry<T>(api: Api, on_panic: T, f: impl FnOnce() -> T) -> T {
    crate::calls::note(api);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(on_panic);
    crate::cost::spend(api);
    out
}

/// The thread's last runtime error, cleared (0 when none); 100000 for a
/// level other than 0.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetLastError(level: i32) -> aclError {
    entry(Api::GetLastError, crate::error::ACL_ERROR_RT_INTERNAL_ERROR, || last(level, true))
}

/// The thread's last runtime error, kept (0 when none); 100000 for a level
/// other than 0.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtPeekAtLastError(level: i32) -> aclError {
    entry(Api::PeekAtLastError, crate::error::ACL_ERROR_RT_INTERNAL_ERROR, || last(level, false))
}

/// The thread's last failure as text, once; NULL when there is none.
///
/// # Safety
/// No arguments. The text is valid until the thread calls this again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    entry(Api::GetRecentErrMsg, std::ptr::null(), recent_message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_layer_codes_are_not_runtime_errors() {
        std::thread::spawn(|| {
            record(Api::Malloc, ACL_ERROR_INVALID_PARAM);
            record(Api::GetDevice, ACL_ERROR_RT_CONTEXT_NULL);
            record(Api::MemcpyAsync, ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
            assert_eq!(last(0, false), ACL_SUCCESS);
            record(Api::Malloc, 207_001);
            assert_eq!(last(1, false), ACL_ERROR_INVALID_PARAM);
            assert_eq!(last(0, false), 207_001);
            assert_eq!(last(0, true), 207_001);
            assert_eq!(last(0, false), ACL_SUCCESS);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn messages_are_handed_out_once() {
        std::thread::spawn(|| {
            assert!(recent_message().is_null());
            record(Api::Free, 107_000);
            let text = recent_message();
            assert!(!text.is_null());
            // SAFETY: non-NULL and valid until the next call on this thread.
            let text = unsafe { std::ffi::CStr::from_ptr(text) }.to_str().unwrap().to_string();
            assert_eq!(text, "acl-emu: aclrtFree failed with error 107000");
            assert!(recent_message().is_null());
        })
        .join()
        .unwrap();
    }
}
