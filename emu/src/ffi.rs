//! Plumbing shared by every exported function: the panic boundary, out-pointer
//! writes, opaque handle encoding and poison-tolerant locking.

use crate::error::{AclResult, ACL_ERROR_INVALID_PARAM};
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

/// Body of an exported ACL function: catches panics (a panic must never cross
/// the C boundary), counts the call (`calls`), applies fault injection first, turns the body's
/// `AclResult<()>` into an aclError (a failure is kept as the thread's last
/// error, `last_error`), and then spends the call's cost. The
/// body has dropped every lock it took by then, so costs overlap across
/// threads.
macro_rules! acl_entry {
    ($api:expr, $body:block) => {{
        $crate::calls::note($api);
        let run = || -> $crate::error::AclResult<()> {
            $crate::faults::check($api)?;
            $body
        };
        let status = match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)) {
            Ok(result) => $crate::error::status(result),
            Err(_) => $crate::error::ACL_ERROR_RT_INTERNAL_ERROR,
        };
        if status != $crate::error::ACL_SUCCESS {
            $crate::last_error::record($api, status);
        }
        $crate::cost::spend($api);
        status
    }};
}

/// Body of an `aclemu_*` control function: panic boundary only, no faults.
macro_rules! emu_entry {
    ($body:block) => {{
        let run = || -> $crate::error::AclResult<()> { $body };
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(run)) {
            Ok(result) => $crate::error::status(result),
            Err(_) => $crate::error::ACL_ERROR_RT_INTERNAL_ERROR,
        }
    }};
}

pub(crate) use {acl_entry, emu_entry};

/// Writes `value` through a caller's out-pointer; NULL is INVALID_PARAM.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, value: T) -> AclResult<()> {
    if out.is_null() {
        return Err(ACL_ERROR_INVALID_PARAM);
    }
    // SAFETY: non-NULL, and the caller promises it is writable.
    unsafe { out.write(value) };
    Ok(())
}

/// Writes through an optional out-pointer, skipping NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub unsafe fn write_opt<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-NULL, and the caller promises it is writable.
        unsafe { out.write(value) };
    }
}

/// Kinds of opaque handle. Each kind gets its own tag in bits 40..48 of the
/// pointer value, so a handle of one kind passed as another is rejected
/// instead of being looked up by accident. The values are never dereferenced.
#[derive(Clone, Copy)]
#[repr(u64)]
pub enum Kind {
    Stream = 0x51,
    Event = 0x52,
    Desc = 0x53,
    Physical = 0x54,
    Model = 0x55,
    Context = 0x56,
}

const TAG_SHIFT: u32 = 40;
const ID_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// The C-side pointer for id `id` of kind `kind`.
pub fn handle(kind: Kind, id: u64) -> *mut c_void {
    debug_assert!(id != 0 && id <= ID_MASK);
    (((kind as u64) << TAG_SHIFT) | id) as usize as *mut c_void
}

/// The id inside a handle of kind `kind`, or `None` if it is not one.
pub fn handle_id(kind: Kind, ptr: *const c_void) -> Option<u64> {
    let raw = ptr as usize as u64;
    let id = raw & ID_MASK;
    (raw >> TAG_SHIFT == kind as u64 && id != 0).then_some(id)
}

/// Locks `m`, ignoring poison: a panic caught at the boundary must not make
/// the emulator unusable for the rest of the test run, and every state
/// transition below is written so that a half-done one stays consistent.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
