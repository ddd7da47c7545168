//! aclrtMapMem / aclrtUnmapMem: place a physical handle's memfd range over
//! part of a reservation, and put inaccessible memory back.
//!
//! Offset or flags other than 0 fail the driver library's check (107000);
//! everything the kernel checks fails with 507899 (RB: `svm_master_mem_map.c`,
//! `halMemUnmap`). Unmapping memory that queued work uses is a violation.

use super::{vmm, Mapping, GRANULARITY};
use crate::error::{
    require, AclResult, ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_INVALID_HANDLE,
    ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, handle_id, Kind};
use crate::usage;
use crate::violation;
use std::ffi::c_void;

/// `Err(507899)` unless `cond` holds: a check inside the kernel module,
/// whose -EINVAL the runtime's error map lacks.
fn require_kernel(cond: bool) -> AclResult<()> {
    if cond {
        Ok(())
    } else {
        Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR)
    }
}

fn map(ptr: *mut c_void, size: usize, offset: usize, h: *mut c_void, flags: u64) -> AclResult<()> {
    require(!ptr.is_null() && !h.is_null() && size != 0)?;
    if flags != 0 || offset != 0 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let mut v = vmm();
    let id = handle_id(Kind::Physical, h).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
    // A handle freed while mapped may be mapped again (reference counted).
    let phys = v.handles.get(&id).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
    let (device, granularity, imported) = (phys.device, phys.granularity, phys.imported.is_some());
    let (fd, file_offset) = phys.file(&v.pools);
    require_kernel(size as u64 == phys.size)?;
    let addr = ptr as usize;
    // Sizes and addresses follow the attr's granularity: a 1 GiB page maps
    // at a 1 GiB boundary (RB VMM: `devmm_mem_map_info_check`, "Va is not
    // giant page align").
    require_kernel(addr.is_multiple_of(granularity.max(GRANULARITY) as usize))?;
    let start = v.reservation_of(addr, size).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
    let r = &v.reservations[&start];
    let overlaps_prev = r.mappings.range(..=addr).next_back().is_some_and(|(&m, mp)| m + mp.len > addr);
    let overlaps_next = r.mappings.range(addr..).next().is_some_and(|(&m, _)| m < addr + size);
    require_kernel(!overlaps_prev && !overlaps_next)?;
    // The first map fixes the reservation's device, and unmapping does not
    // clear it (RB: "Don't clear the first bitmap status").
    require_kernel(r.mapped_device.is_none_or(|d| d == device))?;
    require_kernel(r.mapped_imported.is_none_or(|i| i == imported))?;
    // SAFETY: [addr, addr + size) lies inside our own reservation and no
    // mapping covers it; the memfd range belongs to this handle.
    let p = unsafe {
        libc::mmap(
            ptr,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            file_offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(ACL_ERROR_RT_INTERNAL_ERROR);
    }
    let r = v.reservations.get_mut(&start).expect("looked up above");
    r.mapped_device = Some(device);
    r.mapped_imported = Some(imported);
    r.mappings.insert(addr, Mapping { len: size, handle: id });
    v.handles.get_mut(&id).expect("looked up above").mappings += 1;
    if !imported {
        usage::add(&usage::of(device).mapped_bytes, size as u64);
    }
    Ok(())
}

fn unmap(ptr: *mut c_void) -> AclResult<()> {
    require(!ptr.is_null())?;
    let addr = ptr as usize;
    let mut v = vmm();
    let start = v.reservation_of(addr, 1).ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
    let mapping = v
        .reservations
        .get_mut(&start)
        .expect("looked up above")
        .mappings
        .remove(&addr)
        .ok_or(ACL_ERROR_RT_DRV_INTERNAL_ERROR)?;
    // SAFETY: the range is one of our mappings inside our reservation;
    // replacing it keeps the address space reserved.
    let p = unsafe {
        libc::mmap(
            ptr,
            mapping.len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    debug_assert_ne!(p, libc::MAP_FAILED, "re-reserving an unmapped range failed");
    let phys = v.handles.get_mut(&mapping.handle).expect("mapped handles stay registered");
    phys.mappings -= 1;
    let (device, release) = (phys.device, phys.freed && phys.mappings == 0);
    if phys.imported.is_none() {
        usage::sub(&usage::of(device).mapped_bytes, mapping.len as u64);
    }
    if release {
        v.release_handle(mapping.handle);
    }
    // The engine lock comes before the VMM lock: check after dropping it.
    drop(v);
    violation::check_release((addr, addr + mapping.len), "aclrtUnmapMem");
    Ok(())
}

/// Maps a whole physical handle at `virPtr` inside a reservation. offset
/// and flags must be 0 and size the handle's size.
///
/// # Safety
/// Plain address/handle arguments; the emulator validates them.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtMapMem(
    virPtr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> crate::aclError {
    acl_entry!(Api::MapMem, { map(virPtr, size, offset, handle, flags) })
}

/// Unmaps the mapping that starts at `virPtr`; the reservation stays.
///
/// # Safety
/// Nothing may use the mapped range afterwards.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtUnmapMem(virPtr: *mut c_void) -> crate::aclError {
    acl_entry!(Api::UnmapMem, { unmap(virPtr) })
}
