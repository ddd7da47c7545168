//! The ACL virtual-memory calls behind expandable segments; only called when [`Runtime::has_vmm`] is true.
//! Documented order (docs/acl-api.md §5 "Virtual memory"): reserve, malloc physical, map, use, unmap, free
//! physical, release. A handle is mapped whole (map size == handle size, offset 0, flags 0); sizes are
//! multiples of the allocation granularity (2 MiB for HUGE, 1 GiB for HUGE1G).

use super::{check, AclCallError, Runtime};
use crate::sys;
use std::os::raw::c_void;

/// An `aclrtDrvMemHandle` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysicalHandle(pub usize);

const UNSUPPORTED: AclCallError =
    AclCallError { function: "virtual memory API", code: sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT };

fn prop(device: i32, attr: sys::aclrtMemAttr) -> sys::aclrtPhysicalMemProp {
    sys::aclrtPhysicalMemProp {
        handleType: sys::ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: sys::ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: attr,
        location: sys::aclrtMemLocation { id: device as u32, type_: sys::ACL_MEM_LOCATION_TYPE_DEVICE },
        reserve: 0,
    }
}

impl Runtime {
    /// The minimum mapping granularity for physical memory of `attr`.
    pub fn granularity(&self, device: i32, attr: sys::aclrtMemAttr) -> Result<usize, AclCallError> {
        let f = self.api.aclrtMemGetAllocationGranularity.ok_or(UNSUPPORTED)?;
        let mut p = prop(device, attr);
        let mut g = 0usize;
        // SAFETY: p and g are valid for the call.
        check("aclrtMemGetAllocationGranularity", unsafe {
            f(&mut p, sys::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &mut g)
        })?;
        Ok(g)
    }

    /// Reserves `size` bytes of device address space.
    pub fn reserve(&self, size: usize) -> Result<usize, AclCallError> {
        let f = self.api.aclrtReserveMemAddress.ok_or(UNSUPPORTED)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: p is a valid out-pointer; alignment 0, no fixed address, flags 0 (documented values).
        check("aclrtReserveMemAddress", unsafe { f(&mut p, size, 0, std::ptr::null_mut(), 0) })?;
        Ok(p as usize)
    }

    pub fn release(&self, base: usize) -> Result<(), AclCallError> {
        let f = self.api.aclrtReleaseMemAddress.ok_or(UNSUPPORTED)?;
        // SAFETY: base came from `reserve` and nothing in it is mapped.
        check("aclrtReleaseMemAddress", unsafe { f(base as *mut c_void) })
    }

    pub fn malloc_physical(
        &self,
        device: i32,
        attr: sys::aclrtMemAttr,
        size: usize,
    ) -> Result<PhysicalHandle, AclCallError> {
        let f = self.api.aclrtMallocPhysical.ok_or(UNSUPPORTED)?;
        let p = prop(device, attr);
        let mut h: sys::aclrtDrvMemHandle = std::ptr::null_mut();
        // SAFETY: h and p are valid; flags must be 0.
        check("aclrtMallocPhysical", unsafe { f(&mut h, size, &p, 0) })?;
        Ok(PhysicalHandle(h as usize))
    }

    pub fn free_physical(&self, handle: PhysicalHandle) -> Result<(), AclCallError> {
        let f = self.api.aclrtFreePhysical.ok_or(UNSUPPORTED)?;
        // SAFETY: handle came from malloc_physical and is freed once.
        check("aclrtFreePhysical", unsafe { f(handle.0 as sys::aclrtDrvMemHandle) })
    }

    /// Maps the whole handle (of `size` bytes) at `addr`.
    pub fn map(&self, addr: usize, size: usize, handle: PhysicalHandle) -> Result<(), AclCallError> {
        let f = self.api.aclrtMapMem.ok_or(UNSUPPORTED)?;
        // SAFETY: addr lies in a live reservation with `size` unmapped bytes; offset and flags are 0.
        check("aclrtMapMem", unsafe { f(addr as *mut c_void, size, 0, handle.0 as sys::aclrtDrvMemHandle, 0) })
    }

    pub fn unmap(&self, addr: usize) -> Result<(), AclCallError> {
        let f = self.api.aclrtUnmapMem.ok_or(UNSUPPORTED)?;
        // SAFETY: addr is the start of a live mapping whose streams are synchronized.
        check("aclrtUnmapMem", unsafe { f(addr as *mut c_void) })
    }
}
