//! aclrtMemExportToShareableHandle / aclrtMemImportFromShareableHandle /
//! aclrtMemSetPidToShareableHandle / aclrtDeviceGetBareTgid: physical
//! handles shared by a 64-bit shareable handle (docs/runtime-behaviour.md,
//! "Sharing memory between processes").
//!
//! A shareable handle is the exporter's pid (high 32 bits), a generation
//! (16 bits) and a table index (16 bits). In one process a handle and a
//! shareable handle are one to one: a handle is exported once, a shareable
//! handle imported once while its import lives, and a process never
//! imports what it exported.

use super::table::{Kind, CAPACITY};
use super::{Import, Name};
use crate::error::{
    require, AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_DRV_INTERNAL_ERROR, ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, lock, write_out};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

const _: () = assert!(CAPACITY <= 1 << 16);

/// Shareable handles this process imported and still holds.
static IMPORTED: Mutex<Option<HashSet<Name>>> = Mutex::new(None);

fn encode(name: Name) -> u64 {
    ((name.pid as u32 as u64) << 32) | (u64::from(name.generation) << 16) | name.index as u64
}

fn decode(h: u64) -> Name {
    Name { pid: (h >> 32) as u32 as i32, index: (h & 0xFFFF) as usize, generation: ((h >> 16) & 0xFFFF) as u32 }
}

/// A physical handle imported from another process: its memory, held
/// while the handle lives.
pub struct Imported {
    import: Import,
    name: Name,
}

impl Imported {
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.import.fd()
    }

    /// (offset in the exporter's memory file, bytes, page size).
    pub fn range(&self) -> (u64, u64, u64) {
        (self.import.entry.offset, self.import.entry.size, self.import.entry.granularity)
    }
}

impl Drop for Imported {
    fn drop(&mut self) {
        if let Some(set) = lock(&IMPORTED).as_mut() {
            set.remove(&self.name);
        }
    }
}

unsafe fn export(handle: *mut c_void, handle_type: u32, flags: u64, out: *mut u64) -> AclResult<()> {
    require(!handle.is_null())?;
    // ACL_MEM_HANDLE_TYPE_NONE only.
    require(handle_type == 0)?;
    require(!out.is_null())?;
    if flags > 1 {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    let name = crate::vmm::export_handle(handle, |device, fd, offset, size, granularity| {
        super::export(Kind::Shareable, device, fd, offset, size, granularity, flags == 0)
    })?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, encode(name)) }
}

unsafe fn import(shareable: u64, device: i32, out: *mut *mut c_void) -> AclResult<()> {
    require(!out.is_null())?;
    crate::device::get(device).map_err(|_| crate::error::ACL_ERROR_RT_INVALID_DEVICEID)?;
    let name = decode(shareable);
    {
        let mut set = lock(&IMPORTED);
        let set = set.get_or_insert_with(HashSet::new);
        // One import of a shareable handle per process at a time.
        if !set.insert(name) {
            return Err(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
        }
    }
    let imported = match Import::take(name, Kind::Shareable) {
        Ok(import) => Imported { import, name },
        Err(e) => {
            if let Some(set) = lock(&IMPORTED).as_mut() {
                set.remove(&name);
            }
            return Err(e);
        }
    };
    let h = crate::vmm::import_handle(device, imported);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, h) }
}

unsafe fn set_pids(shareable: u64, pid: *const i32, num: usize) -> AclResult<()> {
    if pid.is_null() || num == 0 || num > i32::MAX as usize {
        return Err(ACL_ERROR_INVALID_PARAM);
    }
    // SAFETY: the caller promises `num` readable pids.
    let pids = unsafe { std::slice::from_raw_parts(pid, num) };
    super::admit(decode(shareable), Kind::Shareable, pids)
}

/// Exports physical handle `handle` (from aclrtMallocPhysical) as a
/// shareable handle. `handleType` must be ACL_MEM_HANDLE_TYPE_NONE; flags 0
/// (only pids admitted with aclrtMemSetPidToShareableHandle may import) or
/// 1 (no pid check).
///
/// # Safety
/// `shareableHandle` must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtMemExportToShareableHandle(
    handle: *mut c_void,
    handleType: u32,
    flags: u64,
    shareableHandle: *mut u64,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::MemExportToShareableHandle, { unsafe { export(handle, handleType, flags, shareableHandle) } })
}

/// Imports another process's shareable handle as a physical handle of
/// `deviceId`, to be mapped into a reservation and freed with
/// aclrtFreePhysical like any other.
///
/// # Safety
/// `handle` must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtMemImportFromShareableHandle(
    shareableHandle: u64,
    deviceId: i32,
    handle: *mut *mut c_void,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::MemImportFromShareableHandle, { unsafe { import(shareableHandle, deviceId, handle) } })
}

/// Admits `pidNum` pids (from aclrtDeviceGetBareTgid) to import
/// `shareableHandle`, an export made with flags 0.
///
/// # Safety
/// `pid` must be NULL or `pidNum` readable pids.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn aclrtMemSetPidToShareableHandle(
    shareableHandle: u64,
    pid: *mut i32,
    pidNum: usize,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::MemSetPidToShareableHandle, { unsafe { set_pids(shareableHandle, pid, pidNum) } })
}

/// The process's pid as the device knows it (the host's, also inside a
/// container on a real machine; the emulator's processes share its pid
/// namespace with their peers).
///
/// # Safety
/// `pid` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetBareTgid(pid: *mut i32) -> crate::aclError {
    // SAFETY: checked by write_out; the caller promises it is writable.
    acl_entry!(Api::DeviceGetBareTgid, { unsafe { write_out(pid, std::process::id() as i32) } })
}

#[cfg(test)]
mod tests {
    use super::{decode, encode, Name};

    #[test]
    fn shareable_handles_round_trip() {
        for name in [Name { pid: 1, index: 0, generation: 1 }, Name { pid: i32::MAX, index: 65535, generation: 65535 }]
        {
            assert_eq!(decode(encode(name)), name);
        }
    }
}
