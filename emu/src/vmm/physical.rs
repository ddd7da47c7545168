//! aclrtMallocPhysical, aclrtFreePhysical and
//! aclrtMemGetAllocationGranularity, with the runtime's checks of the
//! physical memory properties (docs/acl-api.md §5) and the driver's
//! (RB "Virtual memory"):
//! - `prop.reserve` other than 0: 107000, in the granularity query too;
//! - the P2P HBM attrs (8, 9, 11) have no handler in the runtime: 100000;
//!   `ACL_MEM_P2P_HUGE1G` (17) is documented as unsupported on A2: 207000;
//! - a size off the granularity: 507899 for 2 MiB pages (the kernel refuses
//!   it), rounded up for 1 GiB pages;
//! - with `ACLEMU_HUGE1G=0` the device lacks 1 GiB pages: allocating them
//!   gives 207000 while the granularity query still reports 1 GiB;
//! - `ACL_HBM_MEM_NORMAL` handles are made of huge pages (docs), so they
//!   count in the huge pool.

use super::{vmm, Phys, GRANULARITY, GRANULARITY_1G};
use crate::device::{self, PagePool};
use crate::error::{
    require, AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, handle, handle_id, write_out, Kind};
use crate::usage;
use std::ffi::c_void;
use std::sync::LazyLock;

/// `aclrtMemLocation` (size 8: id@0, type@4).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct aclrtMemLocation {
    pub id: u32,
    pub type_: u32,
}

/// `aclrtPhysicalMemProp` (size 32: handleType@0, allocationType@4,
/// memAttr@8, location@12, reserve@24). Enum fields are plain `u32` because
/// C may pass any value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types, non_snake_case)]
pub struct aclrtPhysicalMemProp {
    pub handleType: u32,
    pub allocationType: u32,
    pub memAttr: u32,
    pub location: aclrtMemLocation,
    pub reserve: u64,
}

const LOCATION_DEVICE: u32 = 1;

/// Validates `prop` like the runtime and returns the granularity of its
/// memAttr: HBM (and generic) huge/normal attrs map to 2 MiB, HUGE1G attrs to
/// 1 GiB; DDR attrs and ACL_HBM_MEM itself are not physical-memory attrs.
fn granularity_of(prop: &aclrtPhysicalMemProp) -> AclResult<u64> {
    require(prop.handleType == 0 && prop.allocationType == 0)?;
    require(prop.location.type_ == LOCATION_DEVICE)?;
    require((prop.location.id as usize) < device::count())?;
    if prop.reserve != 0 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    match prop.memAttr {
        // ACL_HBM_MEM_HUGE1G, ACL_MEM_HUGE1G
        10 | 14 => Ok(GRANULARITY_1G),
        // ACL_MEM_P2P_HUGE1G
        17 => Err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT),
        // ACL_HBM_MEM_{HUGE,NORMAL}, ACL_MEM_{NORMAL,HUGE} and their P2P forms
        4 | 5 | 12 | 13 | 15 | 16 => Ok(GRANULARITY),
        // ACL_HBM_MEM_P2P_{HUGE,NORMAL,HUGE1G}, DDR attrs, ACL_HBM_MEM itself
        _ => Err(ACL_ERROR_INVALID_PARAM),
    }
}

/// False when `ACLEMU_HUGE1G=0`: the chip or driver lacks 1 GiB pages.
static HUGE1G: LazyLock<bool> = LazyLock::new(|| std::env::var("ACLEMU_HUGE1G").map_or(true, |v| v.trim() != "0"));

unsafe fn malloc_physical(
    out: *mut *mut c_void,
    size: usize,
    prop: *const aclrtPhysicalMemProp,
    flags: u64,
) -> AclResult<()> {
    require(!out.is_null() && !prop.is_null() && size != 0)?;
    require(flags == 0)?;
    crate::ipc::reap();
    // SAFETY: checked non-NULL; the caller promises a readable prop.
    let prop = unsafe { prop.read() };
    let granularity = granularity_of(&prop)?;
    let (size, pool) = if granularity == GRANULARITY_1G {
        // `CheckIfSupport1GHugePage` runs in the allocation only.
        if !*HUGE1G {
            return Err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
        }
        let rounded = (size as u64).checked_next_multiple_of(granularity);
        (rounded.ok_or(ACL_ERROR_RT_MEMORY_ALLOCATION)?, PagePool::Giant)
    } else {
        if !(size as u64).is_multiple_of(granularity) {
            return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
        }
        (size as u64, PagePool::Huge)
    };
    // Stricter than what is traced: neither the runtime nor the host driver
    // looks up a context; the device side, not in the sources, may need the
    // device opened (docs/runtime-behaviour.md,
    // "what a physical allocation needs"). A host that allocates with no
    // device set fails here.
    device::current()?;
    let dev_id = prop.location.id as i32;
    let dev = device::get(dev_id)?;
    dev.charge(size, pool)?;
    let Some((_, offset)) = super::take_file_range(dev_id, size) else {
        dev.uncharge(size, pool);
        return Err(ACL_ERROR_RT_MEMORY_ALLOCATION);
    };
    let mut v = vmm();
    let id = v.next_handle;
    v.next_handle += 1;
    v.handles.insert(
        id,
        Phys { device: dev_id, pool, offset, size, granularity, mappings: 0, freed: false, imported: None },
    );
    drop(v);
    let counters = usage::of(dev_id);
    usage::add(&counters.physical_bytes, size);
    usage::add(&counters.physical_count, 1);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, handle(Kind::Physical, id)) }
}

fn free_physical(h: *mut c_void) -> AclResult<()> {
    require(!h.is_null())?;
    let mut v = vmm();
    let id = handle_id(Kind::Physical, h).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
    let phys = v.handles.get_mut(&id).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
    // Freed while mapped and freed again: "too many times" (RB).
    if phys.freed {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    if phys.mappings > 0 {
        // [doc] The real release waits until the memory is unmapped.
        phys.freed = true;
    } else {
        v.release_handle(id);
    }
    Ok(())
}

unsafe fn granularity(prop: *mut aclrtPhysicalMemProp, option: u32, out: *mut usize) -> AclResult<()> {
    require(!prop.is_null() && !out.is_null())?;
    // MINIMUM or RECOMMENDED; both are the page size here.
    require(option <= 1)?;
    // SAFETY: checked non-NULL; the caller promises a readable prop.
    let g = granularity_of(&unsafe { prop.read() })?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, g as usize) }
}

/// Allocates a physical handle of `size` bytes (a multiple of the
/// granularity) on `prop->location.id`; charged against its capacity.
///
/// # Safety
/// `handle` must be NULL or writable, `prop` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocPhysical(
    handle: *mut *mut c_void,
    size: usize,
    prop: *const aclrtPhysicalMemProp,
    flags: u64,
) -> crate::aclError {
    acl_entry!(Api::MallocPhysical, {
        // SAFETY: forwarded caller contract.
        unsafe { malloc_physical(handle, size, prop, flags) }
    })
}

/// Frees a physical handle; postponed while it is mapped.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreePhysical(handle: *mut c_void) -> crate::aclError {
    acl_entry!(Api::FreePhysical, { free_physical(handle) })
}

/// Reports 2 MiB for huge/normal HBM attrs and 1 GiB for HUGE1G attrs.
///
/// # Safety
/// `prop` must be NULL or readable, `granularity` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemGetAllocationGranularity(
    prop: *mut aclrtPhysicalMemProp,
    option: u32,
    granularity: *mut usize,
) -> crate::aclError {
    acl_entry!(Api::MemGetAllocationGranularity, {
        // SAFETY: forwarded caller contract.
        unsafe { self::granularity(prop, option, granularity) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_c() {
        assert_eq!(std::mem::size_of::<aclrtPhysicalMemProp>(), 32);
        assert_eq!(std::mem::offset_of!(aclrtPhysicalMemProp, location), 12);
        assert_eq!(std::mem::offset_of!(aclrtPhysicalMemProp, reserve), 24);
        assert_eq!(std::mem::size_of::<aclrtMemLocation>(), 8);
    }
}
