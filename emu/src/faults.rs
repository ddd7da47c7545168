//! Fault injection: `aclemu_fail_nth("aclrtMalloc", n)` makes the n-th next
//! call of that ACL function fail with its out-of-memory code (207001 for the
//! allocating calls) or 507000, before the call does anything else.
//!
//! `aclemu_fault_pending` reads the remaining count back.
//!
//! One armed count per function, process-wide. The check on every call is a
//! single relaxed atomic load while nothing is armed.

use crate::error::{aclError, AclResult, ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION};
use std::ffi::c_char;
use std::sync::atomic::{AtomicI32, Ordering};

pub use crate::api::Api;
use crate::api::COUNT;

/// Remaining calls until the armed failure, per function; 0 = disarmed.
static ARMED: [AtomicI32; COUNT] = [const { AtomicI32::new(0) }; COUNT];

/// The code an injected failure returns: the documented out-of-memory code
/// for the allocating calls, an internal error for the rest.
fn fault_code(api: Api) -> aclError {
    match api {
        Api::Malloc | Api::MallocAlign32 | Api::MallocHost | Api::MallocPhysical => ACL_ERROR_RT_MEMORY_ALLOCATION,
        _ => ACL_ERROR_RT_INTERNAL_ERROR,
    }
}

/// True if this call of `api` is the armed one (and disarms it).
pub fn should_fail(api: Api) -> bool {
    let slot = &ARMED[api as usize];
    if slot.load(Ordering::Relaxed) == 0 {
        return false;
    }
    // Count down; only the call that takes the count from 1 to 0 fails.
    let prev = slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n > 0).then(|| n - 1));
    prev == Ok(1)
}

/// `Err(fault code)` if this call of `api` must fail.
pub fn check(api: Api) -> AclResult<()> {
    if should_fail(api) {
        Err(fault_code(api))
    } else {
        Ok(())
    }
}

/// Arms (n >= 1) or disarms (n = 0) a failure of the n-th next call of the
/// ACL function named `function`. Returns 0, or -1 for an unknown name, a
/// NULL name or a negative n.
///
/// # Safety
/// `function` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_fail_nth(function: *const c_char, n: i32) -> i32 {
    let run = || {
        if n < 0 {
            return -1;
        }
        // SAFETY: NULL or NUL-terminated per the contract above.
        match unsafe { Api::by_c_name(function) } {
            Some(api) => {
                ARMED[api as usize].store(n, Ordering::Release);
                0
            }
            None => -1,
        }
    };
    std::panic::catch_unwind(run).unwrap_or(-1)
}

/// How many calls of the ACL function named `function` remain until its
/// armed failure (n for the n-th next call; 0 once it fired or when nothing is
/// armed). Lets a test learn whether an armed fault was reached, and, armed
/// with a large n, how many calls a scenario made. -1 for an unknown or NULL
/// name.
///
/// # Safety
/// `function` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_fault_pending(function: *const c_char) -> i32 {
    let run = || {
        // SAFETY: NULL or NUL-terminated per the contract above.
        match unsafe { Api::by_c_name(function) } {
            Some(api) => ARMED[api as usize].load(Ordering::Acquire),
            None => -1,
        }
    };
    std::panic::catch_unwind(run).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_counts_down_to_the_armed_call() {
        // aclrtAllocatorGetByStream is called by no other emulator test.
        let name = c"aclrtAllocatorGetByStream";
        let api = Api::by_name("aclrtAllocatorGetByStream").unwrap();
        // SAFETY: valid C strings.
        unsafe {
            assert_eq!(aclemu_fault_pending(name.as_ptr()), 0);
            assert_eq!(aclemu_fault_pending(c"aclrtNope".as_ptr()), -1);
            assert_eq!(aclemu_fault_pending(std::ptr::null()), -1);
            assert_eq!(aclemu_fail_nth(name.as_ptr(), 3), 0);
            assert_eq!(aclemu_fault_pending(name.as_ptr()), 3);
            assert!(!should_fail(api));
            assert_eq!(aclemu_fault_pending(name.as_ptr()), 2);
            assert!(!should_fail(api));
            assert!(should_fail(api));
            assert_eq!(aclemu_fault_pending(name.as_ptr()), 0);
            assert!(!should_fail(api));
        }
    }
}
