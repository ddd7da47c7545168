//! aclrtReserveMemAddress / aclrtReleaseMemAddress: PROT_NONE,
//! MAP_NORESERVE ranges aligned to 2 MiB, owned by the current device.

use super::{vmm, Reservation, GRANULARITY};
use crate::device;
use crate::error::{
    require, AclResult, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, write_out};
use crate::host_map;
use crate::usage;
use std::collections::BTreeMap;
use std::ffi::c_void;

const ALIGN: usize = GRANULARITY as usize;

/// Maps `len` bytes of inaccessible address space at an ALIGN boundary.
fn map_none_aligned(len: usize) -> Option<usize> {
    let padded = len.checked_add(ALIGN)?;
    // SAFETY: a fresh anonymous mapping touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            padded,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let base = p as usize;
    let start = (base + ALIGN - 1) & !(ALIGN - 1);
    let end = start + len;
    // SAFETY: trimming the unaligned head and the tail of our own mapping.
    unsafe {
        if start > base {
            host_map::unmap(p, start - base);
        }
        if base + padded > end {
            host_map::unmap(end as *mut c_void, base + padded - end);
        }
    }
    Some(start)
}

unsafe fn reserve(
    out: *mut *mut c_void,
    size: usize,
    expect: *mut c_void,
    flags: u64,
) -> AclResult<()> {
    require(!out.is_null() && size != 0)?;
    // flags: 0, or 1 (kept for older callers that passed the huge-page flag).
    require(flags <= 1)?;
    // expectPtr: only NULL ("let the system choose") is supported here.
    require(expect.is_null())?;
    let dev = device::current()?;
    let len = size
        .checked_add(ALIGN - 1)
        .map(|n| n & !(ALIGN - 1))
        .ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    let start = map_none_aligned(len).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    vmm().reservations.insert(
        start,
        Reservation {
            len,
            device: dev,
            mappings: BTreeMap::new(),
        },
    );
    usage::add(&usage::of(dev).reserved_ranges, 1);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, start as *mut c_void) }
}

fn release(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let mut v = vmm();
    let r = v
        .reservations
        .get(&(ptr as usize))
        .ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    // [doc] Unmap everything in the range first.
    if !r.mappings.is_empty() {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let r = v
        .reservations
        .remove(&(ptr as usize))
        .expect("looked up above");
    // SAFETY: the range was ours, has no mappings and left the registry.
    unsafe { host_map::unmap(ptr, r.len) };
    usage::sub(&usage::of(r.device).reserved_ranges, 1);
    Ok(())
}

/// Reserves `size` bytes of address space (rounded up to 2 MiB). alignment
/// is ignored (documented as reserved); expectPtr must be NULL; flags 0 or 1.
///
/// # Safety
/// `virPtr` must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtReserveMemAddress(
    virPtr: *mut *mut c_void,
    size: usize,
    _alignment: usize,
    expectPtr: *mut c_void,
    flags: u64,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::ReserveMemAddress, {
        unsafe { reserve(virPtr, size, expectPtr, flags) }
    })
}

/// Releases a reservation by its start address; refused (107000) while
/// anything in it is mapped.
///
/// # Safety
/// Nothing may use the range afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtReleaseMemAddress(virPtr: *mut c_void) -> crate::aclError {
    acl_entry!(Api::ReleaseMemAddress, { release(virPtr) })
}
