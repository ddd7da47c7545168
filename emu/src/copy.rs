//! aclrtMemcpy2d / aclrtMemcpy2dAsync: the documented checks
//! (docs/acl-api.md §5), then a row-by-row copy of host memory. The async call
//! queues the copy on its stream, so a held stream performs it only at
//! release or synchronize.
//!
//! Check order, as in the runtime (RB "2D copies"): width or height 0
//! succeeds before any other check; NULL pointers, width > pitch and bad
//! kinds are ACL-layer errors (100000; RT `memory.cpp`,
//! `CheckMemcpy2dParam`, which accepts DEFAULT); the 5242880-row and
//! 5000000-byte limits and pitch arithmetic overflow are runtime errors
//! (107000; RT `api_error.cc`, `ApiErrorDecorator::MemCopy2DCheckParam`);
//! only then is a sync D2D copy not supported (207000; `MemCopy2DSync`).
//!
//! DEFAULT is resolved from the addresses (RB "2D copies",
//! `MemcpyKindAutoCorrect`): between two device buffers the sync call gives
//! 107000, and between two host buffers both calls give 107000. A queued
//! copy pins its device-side extents until it runs (Note [pins]).
//!
//! With pageable (not `aclrtMallocHost`) host memory the runtime
//! synchronizes the stream and copies at once. The emulator does so only
//! with `ACLEMU_PAGEABLE_COPY=sync`: by default such a copy is queued like a
//! pinned one, because the allocator's own tests queue device-to-host copies
//! into plain host buffers to keep memory in use on a held stream.

use crate::error::{require, AclResult, ACL_ERROR_RT_FEATURE_NOT_SUPPORT, ACL_ERROR_RT_PARAM_INVALID};
use crate::faults::Api;
use crate::ffi::acl_entry;
use crate::queue::{engine, Work};
use crate::violation::Span;
use crate::{memory, vmm};
use std::ffi::c_void;
use std::sync::LazyLock;

const H2D: u32 = 1;
const D2H: u32 = 2;
const D2D: u32 = 3;
const DEFAULT: u32 = 4;
const MAX_HEIGHT: usize = 5 * 1024 * 1024;
const MAX_WIDTH: usize = 5_000_000;

/// A validated 2D copy (addresses kept as integers so it can be queued).
#[derive(Clone, Copy, Debug)]
pub struct Copy2d {
    dst: usize,
    dpitch: usize,
    src: usize,
    spitch: usize,
    width: usize,
    height: usize,
}

impl Copy2d {
    /// A one-row copy of `len` bytes (the 1D calls in `memcpy`), which the
    /// 2D limits do not apply to. `len` must not be 0.
    pub fn linear(dst: usize, src: usize, len: usize) -> Copy2d {
        debug_assert!(len > 0);
        Copy2d { dst, dpitch: len, src, spitch: len, width: len, height: 1 }
    }

    /// The bytes from the first destination row's start to the last one's end.
    pub fn dst_span(&self) -> Span {
        (self.dst, self.dst + self.dpitch * (self.height - 1) + self.width)
    }

    /// The bytes from the first source row's start to the last one's end.
    pub fn src_span(&self) -> Span {
        (self.src, self.src + self.spitch * (self.height - 1) + self.width)
    }

    /// Copies `height` rows of `width` bytes.
    ///
    /// # Safety
    /// Both buffers must still be valid for the pitched extent.
    pub unsafe fn run(&self) {
        for row in 0..self.height {
            let src = (self.src + row * self.spitch) as *const u8;
            let dst = (self.dst + row * self.dpitch) as *mut u8;
            // SAFETY: validated extent; `copy` tolerates overlap.
            unsafe { std::ptr::copy(src, dst, self.width) };
        }
    }
}

/// Where a copy goes, after DEFAULT is resolved.
#[derive(Debug, PartialEq, Eq)]
enum Direction {
    HostOrUnknown,
    DeviceToDevice,
    HostToHost,
}

/// The pure checks. `Ok(None)` means an allowed no-op.
pub fn check(
    dst: usize,
    dpitch: usize,
    src: usize,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
) -> AclResult<Option<Copy2d>> {
    if width == 0 || height == 0 {
        return Ok(None);
    }
    require(dst != 0 && src != 0)?;
    require(width <= spitch && width <= dpitch)?;
    require(matches!(kind, H2D | D2H | D2D | DEFAULT))?;
    if height > MAX_HEIGHT || width > MAX_WIDTH {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let span = |base: usize, pitch: usize| {
        pitch.checked_mul(height - 1).and_then(|n| n.checked_add(width)).and_then(|n| base.checked_add(n))
    };
    span(dst, dpitch).zip(span(src, spitch)).ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    Ok(Some(Copy2d { dst, dpitch, src, spitch, width, height }))
}

pub fn is_device(addr: usize) -> bool {
    memory::is_device_block(addr) || vmm::is_mapped(addr)
}

/// D2D, or for DEFAULT what the two addresses say.
fn direction(kind: u32, copy: &Copy2d) -> Direction {
    match kind {
        D2D => Direction::DeviceToDevice,
        DEFAULT => match (is_device(copy.dst), is_device(copy.src)) {
            (true, true) => Direction::DeviceToDevice,
            (false, false) => Direction::HostToHost,
            _ => Direction::HostOrUnknown,
        },
        _ => Direction::HostOrUnknown,
    }
}

/// True with `ACLEMU_PAGEABLE_COPY=sync`: async copies touching pageable
/// host memory run at once, after the stream's queued work.
pub static PAGEABLE_SYNC: LazyLock<bool> =
    LazyLock::new(|| std::env::var("ACLEMU_PAGEABLE_COPY").is_ok_and(|v| v.trim() == "sync"));

/// The device-side extents of a copy: what it pins while queued.
pub fn device_extents(copy: &Copy2d) -> Vec<Span> {
    [copy.dst_span(), copy.src_span()].into_iter().filter(|span| is_device(span.0)).collect()
}

/// True if an end of the copy is host memory not from aclrtMallocHost.
pub fn touches_pageable(copy: &Copy2d) -> bool {
    [copy.dst, copy.src].into_iter().any(|addr| !is_device(addr) && !memory::is_host_block(addr))
}

fn memcpy_2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
) -> AclResult<()> {
    let Some(copy) = check(dst as usize, dpitch, src as usize, spitch, width, height, kind)? else {
        return Ok(());
    };
    match direction(kind, &copy) {
        // DEFAULT resolved to D2D: the runtime's parameter check.
        Direction::DeviceToDevice if kind == DEFAULT => Err(ACL_ERROR_RT_PARAM_INVALID),
        Direction::DeviceToDevice => Err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT),
        Direction::HostToHost => Err(ACL_ERROR_RT_PARAM_INVALID),
        Direction::HostOrUnknown => {
            // A synchronous copy while a capture is active (`capture`).
            let dev = crate::device::current_or(0);
            if !engine().capture.sync_call_allowed(dev) {
                return Err(crate::capture::ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
            }
            // SAFETY: the caller passes buffers valid for the pitched extent.
            unsafe { copy.run() };
            Ok(())
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn memcpy_2d_async(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: *mut c_void,
) -> AclResult<()> {
    let Some(copy) = check(dst as usize, dpitch, src as usize, spitch, width, height, kind)? else {
        return Ok(());
    };
    if direction(kind, &copy) == Direction::HostToHost {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let pins = device_extents(&copy);
    let pageable = *PAGEABLE_SYNC && touches_pageable(&copy);
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    // "Asynchronous 2D memory copy": a stream of another context is 107003.
    crate::context::check_stream(key)?;
    if pageable && eng.capture.is_capturing(key) {
        // The runtime: pageable copies do not support graph capture.
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    if pageable {
        // The runtime synchronizes the stream, then copies: queued last on
        // an emptied stream, the copy runs at once even on a held stream.
        eng.finish(key, u64::MAX);
        eng.submit_now(key, Work::Copy { copy, pins });
    } else {
        eng.submit(key, Work::Copy { copy, pins });
    }
    Ok(())
}

/// Synchronous 2D copy: H2D and D2H (D2D gives 207000).
///
/// # Safety
/// Buffers must be valid for `pitch * (height - 1) + width` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
) -> crate::aclError {
    acl_entry!(Api::Memcpy2d, { memcpy_2d(dst, dpitch, src, spitch, width, height, kind) })
}

/// Asynchronous 2D copy (H2D, D2H, D2D) queued on `stream` (NULL = default).
///
/// # Safety
/// Buffers must be valid for the pitched extent until the stream finishes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn aclrtMemcpy2dAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: u32,
    stream: *mut c_void,
) -> crate::aclError {
    acl_entry!(Api::Memcpy2dAsync, { memcpy_2d_async(dst, dpitch, src, spitch, width, height, kind, stream) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_extent_wins_over_null() {
        assert!(check(0, 0, 0, 0, 0, 5, 9).unwrap().is_none());
        assert!(check(0, 0, 0, 0, 5, 0, 9).unwrap().is_none());
    }

    #[test]
    fn limits_are_runtime_errors() {
        assert_eq!(check(8, 16, 8, 16, 8, MAX_HEIGHT + 1, H2D).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
        assert_eq!(check(8, usize::MAX, 8, usize::MAX, MAX_WIDTH + 1, 1, H2D).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
        assert_eq!(check(8, usize::MAX, 8, 16, 8, 3, H2D).unwrap_err(), ACL_ERROR_RT_PARAM_INVALID);
    }

    #[test]
    fn kinds() {
        for kind in [0, 5, 6, 7, 99] {
            assert_eq!(check(8, 16, 8, 16, 8, 1, kind).unwrap_err(), crate::error::ACL_ERROR_INVALID_PARAM);
        }
        for kind in [H2D, D2H, D2D, DEFAULT] {
            assert!(check(8, 16, 8, 16, 8, 1, kind).unwrap().is_some());
        }
    }
}
