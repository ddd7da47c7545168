//! Validated 2D copies (docs/runtime-behaviour.md "2D copies"): the checks live in [`crate::memcpy2d`]; these shims add the allocator's
//! block lookup and call the runtime.

use super::handle::{npualloc_allocator, Allocator};
use super::status::npualloc_status;
use crate::error::{Error, Result};
use crate::memcpy2d::{check_copy, check_rules, Checked, Copy2d};
use crate::runtime::{Runtime, Stream};
use crate::sys::aclrtStream;
use std::ffi::c_void;

/// Runs the documented rules, and with an allocator the bounds checks; returns the allocator, if any.
///
/// # Safety
/// A non-NULL `a` must satisfy [`Allocator::from_handle`].
#[inline]
unsafe fn validate<'a>(a: *const npualloc_allocator, c: &Copy2d) -> Result<(Checked, Option<&'a Allocator>)> {
    if a.is_null() {
        return Ok((check_rules(c)?, None));
    }
    // SAFETY: forwarded from the caller's contract.
    let allocator = unsafe { Allocator::from_handle(a) }?;
    // An unusable allocator (e.g. a poisoned lock) must surface as its own error, not as "unknown pointer".
    let mut lookup_error: Option<Error> = None;
    let checked = check_copy(c, |addr| {
        allocator.core.block_range(addr).unwrap_or_else(|e| {
            lookup_error.get_or_insert(e);
            None
        })
    });
    checked.map(|checked| (checked, Some(allocator))).map_err(|e| lookup_error.unwrap_or(e))
}

/// [`validate`], then the copy on the runtime it runs on: the allocator's, else the default library (loaded once per
/// process); a no-op calls nothing. With `stream` (an async copy, `c.is_async`) it is enqueued there.
///
/// # Safety
/// As for [`validate`]; the regions are valid for the copy (an async one's until `stream` has run it).
unsafe fn perform(a: *const npualloc_allocator, c: &Copy2d, stream: Option<Stream>) -> Result<()> {
    // SAFETY: forwarded from the caller's contract.
    let (checked, allocator) = unsafe { validate(a, c) }?;
    if checked == Checked::NoOp {
        return Ok(());
    }
    let rt = allocator.map_or_else(|| Runtime::load(None), |a| Ok(a.core.runtime().clone()))?;
    let (dst, src) = (c.dst as *mut c_void, c.src as *const c_void);
    // SAFETY: the arguments passed the runtime's documented rules (and, with an allocator, the owning block's
    // bounds); the host side and the regions' lifetime are the caller's contract. kind is 1 to 4 here (never 3 for
    // a synchronous copy), so the cast is exact.
    unsafe { rt.memcpy2d(dst, c.dpitch, src, c.spitch, c.width, c.height, c.kind as u32, stream) }
        .map_err(|e| Error::runtime(e, if c.is_async { "2D copy (async)" } else { "2D copy" }))
}

/// Checks a 2D copy without performing it or calling the runtime, by the rules `npualloc_memcpy2d` (`is_async == 0`)
/// or `npualloc_memcpy2d_async` (`is_async != 0`) would apply: NPUALLOC_OK if the copy would be attempted (or is a
/// no-op). With `a` NULL only the runtime's documented rules are checked, in its order: width 0 or height 0 is a
/// successful no-op (checked first, so NULL pointers are then accepted); a NULL `dst` or `src`, `width > dpitch`,
/// `width > spitch`, a kind other than ACL_MEMCPY_HOST_TO_DEVICE (1), ACL_MEMCPY_DEVICE_TO_HOST (2),
/// ACL_MEMCPY_DEVICE_TO_DEVICE (3) and ACL_MEMCPY_DEFAULT (4), `height > 5242880` and `width > 5000000` are
/// NPUALLOC_ERR_INVALID_ARGUMENT with a message naming the rule; then a synchronous DEVICE_TO_DEVICE copy is
/// NPUALLOC_ERR_UNSUPPORTED (the runtime's 207000). With an allocator, each device side of the copy must also lie in
/// a live block it owns (NPUALLOC_ERR_UNKNOWN_POINTER otherwise; interior pointers are fine), and so must the last byte
/// touched, `(height-1)*pitch + width - 1` past the pointer (NPUALLOC_ERR_COPY_OUT_OF_BOUNDS otherwise). For
/// ACL_MEMCPY_DEFAULT the device sides are the ends in the allocator's blocks, and a synchronous copy with both ends in
/// them is NPUALLOC_ERR_INVALID_ARGUMENT (the runtime resolves it to device-to-device and answers 107000).
///
/// # Safety
/// `a` is NULL or a live handle. `dst` and `src` are only compared with the allocator's blocks, never dereferenced.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn npualloc_check_memcpy2d(
    a: *const npualloc_allocator,
    dst: *const c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: i32,
    is_async: i32,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_check_memcpy2d", {
        let is_async = is_async != 0;
        let c = Copy2d { dst: dst as usize, dpitch, src: src as usize, spitch, width, height, kind, is_async };
        // SAFETY: handle validity is the caller's contract; dead handles are refused.
        unsafe { validate(a, &c) }.map(drop)
    })
}

/// Validates a 2D copy as `npualloc_check_memcpy2d(a, ..., is_async = 0)` does (with its statuses; nothing is copied
/// then), then performs it with `aclrtMemcpy2d` on the allocator's runtime or, with `a` NULL, the default ACL library
/// (`NPUALLOC_ACL_LIBRARY`, else `$ASCEND_HOME_PATH/lib64/libascendcl.so`, else the loader's search). Width 0 or
/// height 0 returns NPUALLOC_OK without calling the runtime. Also returns NPUALLOC_ERR_RUNTIME_UNAVAILABLE if `a` is
/// NULL and libascendcl cannot be loaded, NPUALLOC_ERR_RUNTIME if `aclrtMemcpy2d` fails (the message names its
/// aclError).
///
/// # Safety
/// `a` is NULL or a live handle. Every byte the copy touches (`height` rows of `width` bytes, `dpitch` and `spitch`
/// apart) lies in memory valid for the copy's direction, as `aclrtMemcpy2d` requires; npualloc checks this only for
/// the device side of blocks it owns.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn npualloc_memcpy2d(
    a: *const npualloc_allocator,
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: i32,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_memcpy2d", {
        let c = Copy2d { dst: dst as usize, dpitch, src: src as usize, spitch, width, height, kind, is_async: false };
        // SAFETY: handle validity and the regions are the caller's contract; dead handles are refused.
        unsafe { perform(a, &c, None) }
    })
}

/// Validates a 2D copy as `npualloc_check_memcpy2d(a, ..., is_async = 1)` does (with its statuses; nothing is enqueued
/// then), then enqueues it on `stream` (NULL: the default stream) with `aclrtMemcpy2dAsync`; the copy is complete only
/// once the stream has been synchronized. A NULL `a`, a zero width or height and the runtime's failures are as for
/// `npualloc_memcpy2d`.
///
/// # Safety
/// As for `npualloc_memcpy2d`, and both regions stay valid until the stream has run the copy.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn npualloc_memcpy2d_async(
    a: *const npualloc_allocator,
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: i32,
    stream: aclrtStream,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_memcpy2d_async", {
        let c = Copy2d { dst: dst as usize, dpitch, src: src as usize, spitch, width, height, kind, is_async: true };
        // SAFETY: as in npualloc_memcpy2d; the caller keeps both regions alive until the stream completes.
        unsafe { perform(a, &c, Some(Stream::from_raw(stream))) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use npualloc_status::*;

    #[test]
    fn null_allocator_rules_only() {
        let p = 0x1000 as *const c_void;
        // SAFETY: a is NULL; pointers are never dereferenced by the check.
        unsafe {
            assert_eq!(npualloc_check_memcpy2d(std::ptr::null(), p, 64, p, 64, 64, 4, 1, 0), NPUALLOC_OK);
            assert_eq!(
                npualloc_check_memcpy2d(std::ptr::null(), p, 64, p, 64, 65, 4, 1, 0),
                NPUALLOC_ERR_INVALID_ARGUMENT
            );
            // A sync D2D copy is not supported (the runtime's 207000).
            assert_eq!(npualloc_check_memcpy2d(std::ptr::null(), p, 64, p, 64, 64, 4, 3, 0), NPUALLOC_ERR_UNSUPPORTED);
            assert_eq!(npualloc_check_memcpy2d(std::ptr::null(), p, 64, p, 64, 64, 4, 3, 1), NPUALLOC_OK);
            // DEFAULT is accepted; without an allocator the runtime resolves it.
            assert_eq!(npualloc_check_memcpy2d(std::ptr::null(), p, 64, p, 64, 64, 4, 4, 0), NPUALLOC_OK);
            let null = std::ptr::null();
            assert_eq!(npualloc_check_memcpy2d(std::ptr::null(), null, 64, null, 64, 0, 4, 1, 0), NPUALLOC_OK);
            assert_eq!(
                npualloc_check_memcpy2d(std::ptr::null(), null, 64, p, 64, 8, 4, 1, 0),
                NPUALLOC_ERR_INVALID_ARGUMENT
            );
            // A zero-size copy never reaches the runtime, even with NULL pointers.
            assert_eq!(npualloc_memcpy2d(std::ptr::null(), std::ptr::null_mut(), 0, null, 0, 0, 0, 99), NPUALLOC_OK);
            assert_eq!(
                npualloc_memcpy2d_async(
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    0,
                    null,
                    0,
                    5,
                    0,
                    99,
                    std::ptr::null_mut()
                ),
                NPUALLOC_OK
            );
        }
    }

    #[test]
    fn bad_handle_is_invalid_argument() {
        let junk = [0u64; 8];
        let p = 0x1000 as *const c_void;
        // SAFETY: junk is readable memory that is not an allocator.
        let st = unsafe { npualloc_check_memcpy2d(junk.as_ptr().cast(), p, 64, p, 64, 64, 4, 1, 0) };
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT);
    }
}
