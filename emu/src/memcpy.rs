//! 1D copies and memsets: aclrtMemcpy, aclrtMemcpyAsync, aclrtMemset,
//! aclrtMemsetAsync (docs/runtime-behaviour.md "Copies and memsets").
//!
//! The checks, in the runtime's order:
//! - a count of 0 succeeds before anything else (`aclrtMemcpyImpl`,
//!   `aclrtMemsetImpl`, ... in src/acl/aclrt_impl/memory.cpp);
//! - NULL pointers and a kind outside `aclrtMemcpyKind` (0 to 5,
//!   `MemcpyKindTranslate`) are ACL-layer errors, 100000;
//! - a count above `destMax` is the runtime's, 107000
//!   (`ApiErrorDecorator::MemCopySync`, `MemcpyAsync`, `MemsetAsync` in
//!   src/runtime/api/impl/api_error.cc; the emulator applies the same check
//!   to the synchronous memset, whose driver call gets the same limit);
//! - a synchronous copy onto itself (`dst == src`) succeeds doing nothing.
//!
//! Then the emulator checks that every end the kind names as device memory
//! (DEFAULT: what the addresses say) lies inside one live aclrtMalloc block
//! or mapping, else 107000: on the host, a copy there would write a wild
//! address (the code is our choice; the driver refuses addresses it did not
//! map). A synchronous call writes at once; a write into memory that queued
//! work of a stream pins is a violation (Note [pins]). An async call is
//! queued on its stream (NULL: the default stream) and pins its device
//! extents until it runs, like the 2D copies, so a buffer freed or reused
//! under it is seen; a stream of another context is 107003, no current
//! context 107002 (`ApiImpl::MemcpyAsync`, `ApiImpl::MemsetAsync` in
//! src/runtime/api/impl/api_impl.cc). With `ACLEMU_PAGEABLE_COPY=sync`, an async copy
//! touching pageable host memory first finishes the stream, then copies.

use crate::copy::{self, Copy2d};
use crate::error::{require, AclResult, ACL_ERROR_RT_PARAM_INVALID};
use crate::faults::Api;
use crate::ffi::acl_entry;
use crate::queue::{engine, Work};
use crate::violation::{self, Span};
use std::ffi::c_void;

const H2H: u32 = 0;
const H2D: u32 = 1;
const D2H: u32 = 2;
const D2D: u32 = 3;
/// ACL_MEMCPY_DEFAULT (4): the direction the addresses say.
#[cfg(test)]
const DEFAULT: u32 = 4;
/// ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: host to device through a staging buffer.
const H2BUF2D: u32 = 5;

/// A validated memset, addresses kept as integers so it can be queued.
#[derive(Clone, Copy, Debug)]
pub struct Fill {
    dst: usize,
    len: usize,
    value: u8,
}

impl Fill {
    /// The bytes it writes.
    pub fn span(&self) -> Span {
        (self.dst, self.dst + self.len)
    }

    /// Writes `len` bytes of `value`.
    ///
    /// # Safety
    /// The range must still be valid for writes.
    pub unsafe fn run(&self) {
        // SAFETY: validated range, per the contract above.
        unsafe { std::ptr::write_bytes(self.dst as *mut u8, self.value, self.len) };
    }
}

/// Which ends of a copy of `kind` are device memory: (dst, src).
fn device_ends(kind: u32, dst: usize, src: usize) -> (bool, bool) {
    match kind {
        H2H => (false, false),
        H2D | H2BUF2D => (true, false),
        D2H => (false, true),
        D2D => (true, true),
        _ => (copy::is_device(dst), copy::is_device(src)),
    }
}

/// 107000 unless `span` lies in live device memory.
fn require_device(span: Span) -> AclResult<()> {
    if violation::still_device_memory(&[span]) {
        Ok(())
    } else {
        Err(ACL_ERROR_RT_PARAM_INVALID)
    }
}

/// The checks shared by both copies; `Ok(None)` is an allowed no-op.
/// `sync`: a copy onto itself is then a no-op, before the device checks.
fn check_copy(
    dst: usize,
    dest_max: usize,
    src: usize,
    count: usize,
    kind: u32,
    sync: bool,
) -> AclResult<Option<Copy2d>> {
    if count == 0 {
        return Ok(None);
    }
    require(dst != 0 && src != 0 && kind <= H2BUF2D)?;
    if count > dest_max || dst.checked_add(count).is_none() || src.checked_add(count).is_none() {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    if sync && dst == src {
        return Ok(None);
    }
    let (dst_dev, src_dev) = device_ends(kind, dst, src);
    if dst_dev {
        require_device((dst, dst + count))?;
    }
    if src_dev {
        require_device((src, src + count))?;
    }
    Ok(Some(Copy2d::linear(dst, src, count)))
}

/// The checks shared by both memsets; `Ok(None)` is an allowed no-op.
fn check_fill(dst: usize, max: usize, value: i32, count: usize) -> AclResult<Option<Fill>> {
    if count == 0 {
        return Ok(None);
    }
    require(dst != 0)?;
    if count > max || dst.checked_add(count).is_none() {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    // The device stores the value's low byte, as memset does.
    Ok(Some(Fill { dst, len: count, value: value as u8 }))
}

/// The fill's range, if it is device memory (what it pins while queued).
fn fill_pins(fill: &Fill) -> Vec<Span> {
    let span = fill.span();
    if violation::still_device_memory(&[span]) {
        vec![span]
    } else {
        Vec::new()
    }
}

fn memcpy(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: u32) -> AclResult<()> {
    let Some(copy) = check_copy(dst as usize, dest_max, src as usize, count, kind, true)? else {
        return Ok(());
    };
    let mut eng = engine();
    // `ApiImpl::MemCopySync`: refused while a capture forbids synchronous calls.
    if !eng.capture.sync_call_allowed(crate::device::current_or(0)) {
        return Err(crate::capture::ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    }
    eng.write_now(copy.dst_span());
    drop(eng);
    // SAFETY: the caller passes buffers valid for `count` bytes; device ends
    // were checked to be live device memory.
    unsafe { copy.run() };
    Ok(())
}

fn memcpy_async(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: *mut c_void,
) -> AclResult<()> {
    let Some(copy) = check_copy(dst as usize, dest_max, src as usize, count, kind, false)? else {
        return Ok(());
    };
    let pins = copy::device_extents(&copy);
    let pageable = *copy::PAGEABLE_SYNC && copy::touches_pageable(&copy);
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    // `ApiImpl::MemcpyAsync`: a current context, and a stream of it (107003).
    crate::context::check_stream(key)?;
    if pageable && eng.capture.is_capturing(key) {
        // As the 2D copy: pageable copies do not support graph capture.
        return Err(crate::error::ACL_ERROR_RT_PARAM_INVALID);
    }
    if pageable {
        eng.finish(key, u64::MAX);
        eng.submit_now(key, Work::Copy { copy, pins });
    } else {
        eng.submit(key, Work::Copy { copy, pins });
    }
    Ok(())
}

fn memset(dst: *mut c_void, max: usize, value: i32, count: usize) -> AclResult<()> {
    let Some(fill) = check_fill(dst as usize, max, value, count)? else {
        return Ok(());
    };
    let mut eng = engine();
    // `ApiImpl::MemSetSync`: refused while a capture forbids synchronous calls.
    if !eng.capture.sync_call_allowed(crate::device::current_or(0)) {
        return Err(crate::capture::ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    }
    eng.write_now(fill.span());
    drop(eng);
    // SAFETY: the caller passes a buffer valid for `count` bytes.
    unsafe { fill.run() };
    Ok(())
}

fn memset_async(dst: *mut c_void, max: usize, value: i32, count: usize, stream: *mut c_void) -> AclResult<()> {
    let Some(fill) = check_fill(dst as usize, max, value, count)? else {
        return Ok(());
    };
    let pins = fill_pins(&fill);
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    // `ApiImpl::MemsetAsync`: a current context, and a stream of it (107003).
    crate::context::check_stream(key)?;
    eng.submit(key, Work::Fill { fill, pins });
    Ok(())
}

/// Copies `count` bytes at once (any kind, D2D included).
///
/// # Safety
/// `dst` must be valid for `count` bytes of writes, `src` for reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
) -> crate::aclError {
    acl_entry!(Api::Memcpy, { memcpy(dst, destMax, src, count, kind) })
}

/// Queues a copy of `count` bytes on `stream` (NULL: the default stream).
///
/// # Safety
/// Both buffers must stay valid until the stream has run the copy.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: *mut c_void,
) -> crate::aclError {
    acl_entry!(Api::MemcpyAsync, { memcpy_async(dst, destMax, src, count, kind, stream) })
}

/// Sets `count` bytes to the low byte of `value` at once.
///
/// # Safety
/// `devPtr` must be valid for `count` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemset(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
) -> crate::aclError {
    acl_entry!(Api::Memset, { memset(devPtr, maxCount, value, count) })
}

/// Queues a memset of `count` bytes on `stream` (NULL: the default stream).
///
/// # Safety
/// `devPtr` must stay valid until the stream has run the memset.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemsetAsync(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
    stream: *mut c_void,
) -> crate::aclError {
    acl_entry!(Api::MemsetAsync, { memset_async(devPtr, maxCount, value, count, stream) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ACL_ERROR_INVALID_PARAM;

    #[test]
    fn count_zero_wins_over_everything() {
        assert!(check_copy(0, 0, 0, 0, 99, false).unwrap().is_none());
        assert!(check_fill(0, 0, 1, 0).unwrap().is_none());
    }

    #[test]
    fn acl_layer_then_runtime_checks() {
        assert_eq!(check_copy(0, 8, 8, 8, H2H, false).unwrap_err(), ACL_ERROR_INVALID_PARAM);
        assert_eq!(check_copy(8, 8, 8, 8, 6, false).unwrap_err(), ACL_ERROR_INVALID_PARAM);
        assert_eq!(check_copy(8, 4, 16, 8, H2H, false).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
        assert!(check_copy(8, 8, 16, 8, H2H, false).unwrap().is_some());
        assert_eq!(check_fill(0, 8, 0, 8).unwrap_err(), ACL_ERROR_INVALID_PARAM);
        assert_eq!(check_fill(8, 4, 0, 8).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
    }

    #[test]
    fn device_ends_need_device_memory() {
        // A host address named as the device end of a copy is refused.
        let host = [0u8; 16];
        let at = host.as_ptr() as usize;
        assert_eq!(check_copy(at, 16, at + 8, 8, H2D, false).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
        assert_eq!(check_copy(at, 16, at + 8, 8, D2H, false).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
        // DEFAULT resolves host to host here, which is fine.
        assert!(check_copy(at, 16, at + 8, 8, DEFAULT, false).unwrap().is_some());
    }

    #[test]
    fn memset_keeps_the_low_byte() {
        assert_eq!(check_fill(8, 8, 0x1ff, 8).unwrap().unwrap().value, 0xff);
    }
}
