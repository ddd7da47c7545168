//! aclInit / aclFinalize. Nothing else requires aclInit (the emulator is
//! lenient there); only the documented repeat codes are modelled.

use crate::error::{ACL_ERROR_REPEAT_FINALIZE, ACL_ERROR_REPEAT_INITIALIZE};
use crate::faults::Api;
use crate::ffi::acl_entry;
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Initializes ACL. A second call returns 100002 (ACL_ERROR_REPEAT_INITIALIZE),
/// which callers may ignore. The config path is not read.
///
/// # Safety
/// `config_path` is not dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclInit(_config_path: *const c_char) -> crate::aclError {
    acl_entry!(Api::Init, {
        match INITIALIZED.swap(true, Ordering::AcqRel) {
            false => Ok(()),
            true => Err(ACL_ERROR_REPEAT_INITIALIZE),
        }
    })
}

/// Finalizes ACL; 100037 (ACL_ERROR_REPEAT_FINALIZE) if not initialized.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalize() -> crate::aclError {
    acl_entry!(Api::Finalize, {
        match INITIALIZED.swap(false, Ordering::AcqRel) {
            true => Ok(()),
            false => Err(ACL_ERROR_REPEAT_FINALIZE),
        }
    })
}
