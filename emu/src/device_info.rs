//! What the emulated machine says about itself: how many devices, the SoC
//! name, and the CANN package versions (none: no CANN is installed).
//!
//! The runtime's answers (docs/runtime-behaviour.md "Device facts"):
//! - `aclrtGetDeviceCount` (`aclrtGetDeviceCountImpl`, src/acl/aclrt_impl/
//!   device.cpp): NULL is 100000, else the number of devices; it needs no
//!   current device and sets none.
//! - `aclrtGetSocName` (`aclrtGetSocNameImpl`, acl_rt_impl_base.cpp): the SoC
//!   version string, NULL when it cannot be read. The emulator models an
//!   Atlas A2 card (its memory and event rules are the 910B's), so it says
//!   `Ascend910B1`, or `ACLEMU_SOC_NAME` when set.
//! - `aclsysGetCANNVersion` (`aclsysGetCANNVersionImpl`, acl.cpp): NULL is
//!   100000; the versions are read from `$ASCEND_HOME_PATH/share/info`, and
//!   without `ASCEND_HOME_PATH` the answer is 100003
//!   (ACL_ERROR_INVALID_FILE). The emulator has no CANN installation: it
//!   always answers 100003, and 100000 for a name outside the enum.
//! - `aclsysGetVersionStr` (`aclsysGetVersionStrImpl`): NULL arguments are
//!   100000; an unknown package 100003, as the emulator answers for all.

use crate::device;
use crate::error::{require, AclResult, ACL_ERROR_INVALID_FILE};
use crate::faults::{self, Api};
use crate::ffi::{acl_entry, write_out};
use std::ffi::{c_char, c_void, CString};
use std::sync::LazyLock;

/// The SoC the emulator stands for.
const DEFAULT_SOC: &str = "Ascend910B1";

/// The SoC name, from `ACLEMU_SOC_NAME` or the default, NUL-terminated.
static SOC_NAME: LazyLock<CString> = LazyLock::new(|| {
    let name = std::env::var("ACLEMU_SOC_NAME").ok().filter(|n| !n.trim().is_empty());
    CString::new(name.unwrap_or_else(|| DEFAULT_SOC.to_string())).unwrap_or_else(|_| c"Ascend910B1".into())
});

/// The last `aclCANNPackageName` value (`ACL_PKG_NAME_DRIVER`).
const LAST_PACKAGE_NAME: u32 = 7;

unsafe fn device_count(count: *mut u32) -> AclResult<()> {
    let n = u32::try_from(device::count()).unwrap_or(u32::MAX);
    // SAFETY: NULL is refused by write_out; the caller promises it is writable.
    unsafe { write_out(count, n) }
}

fn cann_version(name: u32, version: *mut c_void) -> AclResult<()> {
    require(!version.is_null() && name <= LAST_PACKAGE_NAME)?;
    Err(ACL_ERROR_INVALID_FILE)
}

fn version_str(package: *mut c_char, version: *mut c_char) -> AclResult<()> {
    require(!package.is_null() && !version.is_null())?;
    Err(ACL_ERROR_INVALID_FILE)
}

/// The number of emulated devices (`ACLEMU_DEVICE_COUNT`, default 8).
///
/// # Safety
/// `count` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::GetDeviceCount, { unsafe { device_count(count) } })
}

/// The SoC name (`Ascend910B1` unless `ACLEMU_SOC_NAME` says otherwise),
/// valid for the life of the process; NULL only under an injected fault.
///
/// # Safety
/// No arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSocName() -> *const c_char {
    crate::calls::note(Api::GetSocName);
    let run = || {
        let name = if faults::should_fail(Api::GetSocName) { std::ptr::null() } else { SOC_NAME.as_ptr() };
        crate::cost::spend(Api::GetSocName);
        name
    };
    std::panic::catch_unwind(run).unwrap_or(std::ptr::null())
}

/// A CANN package's version: always 100003, as the runtime answers where
/// no CANN is installed (100000 for NULL or an unknown package).
///
/// # Safety
/// `version` is not written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetCANNVersion(name: u32, version: *mut c_void) -> crate::aclError {
    acl_entry!(Api::GetCANNVersion, { cann_version(name, version) })
}

/// A package's version string: always 100003 (no CANN installed); 100000
/// for NULL arguments.
///
/// # Safety
/// Neither pointer is read or written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetVersionStr(package: *mut c_char, version: *mut c_char) -> crate::aclError {
    acl_entry!(Api::GetVersionStr, { version_str(package, version) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ACL_ERROR_INVALID_PARAM;

    #[test]
    fn versions_are_absent() {
        let mut buf = [0u8; 8];
        let p = buf.as_mut_ptr().cast::<c_void>();
        assert_eq!(cann_version(0, p), Err(ACL_ERROR_INVALID_FILE));
        assert_eq!(cann_version(LAST_PACKAGE_NAME + 1, p), Err(ACL_ERROR_INVALID_PARAM));
        assert_eq!(cann_version(0, std::ptr::null_mut()), Err(ACL_ERROR_INVALID_PARAM));
    }
}
