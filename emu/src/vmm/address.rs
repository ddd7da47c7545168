//! aclrtReserveMemAddress / aclrtReleaseMemAddress: PROT_NONE,
//! MAP_NORESERVE ranges, with the driver's rules (RB "Virtual memory"):
//! neither call needs a current context or device (the runtime passes both
//! on to the driver, which reserves from the process's one SVM range; RB
//! VMM, "what reserving and releasing need"), so a range reserved while a
//! context is current counts in its device's usage and one reserved without
//! any in no device's; a non-zero alignment is refused (107000); one
//! reservation is at most 128 GiB (207001), the limit the driver documents
//! for Ascend910B and Ascend910_93 (`ascend_hal_base.h`,
//! `halMemAddressReserve`: "The maximum virtual memory(no page) applied for
//! at a time is 128GB"); above 512 MiB the size is rounded up to 1 GiB and
//! the address 1 GiB-aligned, below it 2 MiB; every range takes the
//! process's address window (207001 when it is full, see `device`).
//!
//! Test control: `aclemu_misalign_reservations(n)` places the next `n`
//! reservations above 512 MiB one 2 MiB granule past a 1 GiB boundary, as a
//! runtime that promises only its 2 MiB granularity may (the allocator must
//! not rely on more, see its `reserve_aligned`).

use super::{vmm, Reservation, GRANULARITY, GRANULARITY_1G};
use crate::device;
use crate::error::{require, AclResult, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID};
use crate::faults::Api;
use crate::ffi::{acl_entry, emu_entry, write_out};
use crate::host_map;
use crate::usage;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

/// The largest reservation the driver accepts on 910B / 910_93: 128 GiB
/// (`svm_define.h`: `DEVMM_MAPPEDSZ_PER_DEV`, `1 << 37`).
pub const MAX_RESERVATION: usize = 128 << 30;
/// Above this size reservations come from the base heap, in whole GiB.
const BASE_HEAP_THRESHOLD: usize = 512 << 20;

/// Reservations above 512 MiB still to be placed off their 1 GiB boundary
/// (`aclemu_misalign_reservations`).
static MISALIGN: AtomicU32 = AtomicU32::new(0);

/// How far past its alignment the next reservation aligned to `align`
/// starts: one 2 MiB granule while `aclemu_misalign_reservations` asks for
/// it and the alignment is above that granule, else 0.
fn shift_for(align: usize) -> usize {
    let granule = GRANULARITY as usize;
    if align <= granule || MISALIGN.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let took = MISALIGN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    if took.is_ok() {
        granule
    } else {
        0
    }
}

/// The alignment (and size granule) of a reservation of `size` bytes.
fn align_for(size: usize) -> usize {
    if size > BASE_HEAP_THRESHOLD {
        GRANULARITY_1G as usize
    } else {
        GRANULARITY as usize
    }
}

/// Maps `len` bytes of inaccessible address space `shift` bytes past an
/// `align` boundary.
fn map_none_aligned(len: usize, align: usize, shift: usize) -> Option<usize> {
    let padded = len.checked_add(align)?.checked_add(shift)?;
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
    let start = ((base + align - 1) & !(align - 1)) + shift;
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
    alignment: usize,
    expect: *mut c_void,
    flags: u64,
) -> AclResult<()> {
    require(!out.is_null() && size != 0)?;
    // flags: 0, or 1 (kept for older callers that passed the huge-page flag).
    require(flags <= 1)?;
    // expectPtr: only NULL ("let the system choose") is supported here.
    require(expect.is_null())?;
    // The driver's parameter check refuses any alignment (RB).
    if alignment != 0 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    // No current context is needed: the device current now, if any, is
    // only whose usage counts the range.
    let owner = device::current().ok();
    if size > MAX_RESERVATION {
        return Err(ACL_ERROR_RT_MEMORY_ALLOCATION);
    }
    let align = align_for(size);
    let len = size.checked_add(align - 1).map(|n| n & !(align - 1)).ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?;
    device::take_address(len as u64)?;
    let Some(start) = map_none_aligned(len, align, shift_for(align)) else {
        device::return_address(len as u64);
        return Err(ACL_ERROR_RT_MEMORY_ALLOCATION);
    };
    vmm().reservations.insert(
        start,
        Reservation { len, owner, mapped_device: None, mapped_imported: None, mappings: BTreeMap::new() },
    );
    if let Some(id) = owner {
        usage::add(&usage::of(id).reserved_ranges, 1);
    }
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, start as *mut c_void) }
}

fn release(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let mut v = vmm();
    let r = v.reservations.get(&(ptr as usize)).ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    // [doc] Unmap everything in the range first.
    if !r.mappings.is_empty() {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let r = v.reservations.remove(&(ptr as usize)).expect("looked up above");
    drop(v);
    // SAFETY: the range was ours, has no mappings and left the registry.
    unsafe { host_map::unmap(ptr, r.len) };
    device::return_address(r.len as u64);
    if let Some(id) = r.owner {
        usage::sub(&usage::of(id).reserved_ranges, 1);
    }
    Ok(())
}

/// Reserves `size` bytes of address space (rounded up to 2 MiB, or to
/// 1 GiB above 512 MiB), with or without a current context. alignment must
/// be 0 (107000); expectPtr must be NULL; flags 0 or 1; over 128 GiB or
/// beyond the address window: 207001.
///
/// # Safety
/// `virPtr` must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtReserveMemAddress(
    virPtr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expectPtr: *mut c_void,
    flags: u64,
) -> crate::aclError {
    acl_entry!(Api::ReserveMemAddress, {
        // SAFETY: forwarded caller contract.
        unsafe { reserve(virPtr, size, alignment, expectPtr, flags) }
    })
}

/// Releases a reservation by its start address, with or without a current
/// context; refused (107000) while anything in it is mapped.
///
/// # Safety
/// Nothing may use the range afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtReleaseMemAddress(virPtr: *mut c_void) -> crate::aclError {
    acl_entry!(Api::ReleaseMemAddress, { release(virPtr) })
}

/// Test control: the next `count` reservations above 512 MiB start one
/// 2 MiB granule past a 1 GiB boundary instead of at one (0 turns it off).
/// Smaller reservations are 2 MiB-aligned as always and do not count.
/// Always 0.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_misalign_reservations(count: u32) -> i32 {
    emu_entry!({
        MISALIGN.store(count, Ordering::Relaxed);
        Ok(())
    })
}
