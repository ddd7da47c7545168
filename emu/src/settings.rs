//! Runtime settings torch_npu makes at initialization: the float-overflow
//! (saturation) mode and the op timeouts. The emulator runs no ops, so it
//! only keeps and checks the values (docs/runtime-behaviour.md "Runtime settings").
//!
//! - `aclrtSetDeviceSatMode`: a mode outside [0, 2) (SATURATION 0, INFNAN 1)
//!   is 107000 (`ApiErrorDecorator::SetDeviceSatMode`); otherwise the mode of
//!   the process (and of the current device, `ApiImpl::SetDeviceSatMode`).
//!   `aclrtGetDeviceSatMode`: NULL is 100000; the mode last set, SATURATION
//!   before any (**guess**: the runtime's initial mode is not read here).
//! - `aclrtSetOpWaitTimeout`, `aclrtSetOpExecuteTimeOut` (src/acl/aclrt_impl/
//!   event.cpp): kept. `aclrtSetOpExecuteTimeOutV2`: NULL `actualTimeout` is
//!   100000 (ACL layer); without a current context 107002
//!   (`ApiImpl::SetOpExecuteTimeOutV2`); the runtime answers the timeout
//!   rounded to its kernel-credit interval, the emulator the timeout itself
//!   (no interval is modelled).

use crate::error::{require, AclResult, ACL_ERROR_RT_PARAM_INVALID};
use crate::faults::Api;
use crate::ffi::{acl_entry, write_out};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

const SATURATION: i32 = 0;
const UNDEF: i32 = 2;

static SAT_MODE: AtomicI32 = AtomicI32::new(SATURATION);
static OP_WAIT_TIMEOUT: AtomicU64 = AtomicU64::new(0);
static OP_EXECUTE_TIMEOUT_US: AtomicU64 = AtomicU64::new(0);

fn set_sat_mode(mode: i32) -> AclResult<()> {
    if !(SATURATION..UNDEF).contains(&mode) {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    SAT_MODE.store(mode, Ordering::Relaxed);
    Ok(())
}

unsafe fn execute_timeout_v2(timeout: u64, actual: *mut u64) -> AclResult<()> {
    require(!actual.is_null())?;
    crate::context::current()?;
    OP_EXECUTE_TIMEOUT_US.store(timeout, Ordering::Relaxed);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(actual, timeout) }
}

/// Sets the float-overflow mode: SATURATION (0) or INFNAN (1).
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDeviceSatMode(mode: i32) -> crate::aclError {
    acl_entry!(Api::SetDeviceSatMode, { set_sat_mode(mode) })
}

/// The float-overflow mode last set (SATURATION before any).
///
/// # Safety
/// `mode` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceSatMode(mode: *mut i32) -> crate::aclError {
    // SAFETY: NULL is refused by write_out; the caller promises it is writable.
    acl_entry!(Api::GetDeviceSatMode, { unsafe { write_out(mode, SAT_MODE.load(Ordering::Relaxed)) } })
}

/// Keeps the op wait timeout (seconds); no op runs here.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpWaitTimeout(timeout: u32) -> crate::aclError {
    acl_entry!(Api::SetOpWaitTimeout, {
        OP_WAIT_TIMEOUT.store(u64::from(timeout), Ordering::Relaxed);
        Ok(())
    })
}

/// Keeps the op execute timeout (seconds); no op runs here.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpExecuteTimeOut(timeout: u32) -> crate::aclError {
    acl_entry!(Api::SetOpExecuteTimeOut, {
        OP_EXECUTE_TIMEOUT_US.store(u64::from(timeout) * 1_000_000, Ordering::Relaxed);
        Ok(())
    })
}

/// Keeps the op execute timeout (microseconds) and answers it as the
/// actual one; needs a current context.
///
/// # Safety
/// `actualTimeout` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetOpExecuteTimeOutV2(timeout: u64, actualTimeout: *mut u64) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::SetOpExecuteTimeOutV2, { unsafe { execute_timeout_v2(timeout, actualTimeout) } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sat_modes() {
        assert_eq!(set_sat_mode(-1), Err(ACL_ERROR_RT_PARAM_INVALID));
        assert_eq!(set_sat_mode(2), Err(ACL_ERROR_RT_PARAM_INVALID));
        assert_eq!(set_sat_mode(1), Ok(()));
        assert_eq!(SAT_MODE.load(Ordering::Relaxed), 1);
        assert_eq!(set_sat_mode(0), Ok(()));
    }
}
