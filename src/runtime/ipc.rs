//! The ACL calls that share device memory with other processes of the host: `aclrtMalloc` allocations by key,
//! physical handles by shareable handle (docs/runtime-behaviour.md, "Sharing memory between processes").
//! Exports skip PID validation, as torch_npu does: any process of the host holding the key or handle may import.

use super::{check, AclCallError, PhysicalHandle, Runtime};
use crate::sys;
use std::os::raw::{c_char, c_void};

/// An export key: 64 characters and the NUL, the buffer length the runtime wants.
pub const KEY_LEN: usize = 65;

/// `ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION` and
/// `ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION` (acl_rt.h).
const NO_PID_VALIDATION: u64 = 1;
/// `ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS` (acl_rt.h): an import on another device of the host works too.
const PEER_ACCESS: u64 = 1;

const fn unsupported(function: &'static str) -> AclCallError {
    AclCallError { function, code: sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT }
}

impl Runtime {
    /// The key of the `aclrtMalloc` allocation starting at `addr`, of `size` bytes.
    pub fn export_key(&self, addr: usize, size: usize) -> Result<[u8; KEY_LEN], AclCallError> {
        let f = self.api.aclrtIpcMemGetExportKey.ok_or(unsupported("aclrtIpcMemGetExportKey"))?;
        let mut key = [0u8; KEY_LEN];
        // SAFETY: `key` holds KEY_LEN writable bytes; addr is a live allocation's start.
        check("aclrtIpcMemGetExportKey", unsafe {
            f(addr as *mut c_void, size, key.as_mut_ptr().cast::<c_char>(), KEY_LEN, NO_PID_VALIDATION)
        })?;
        key[KEY_LEN - 1] = 0;
        Ok(key)
    }

    /// Maps the allocation another process exported under `key`; returns its address here.
    pub fn import_key(&self, key: &[u8; KEY_LEN]) -> Result<usize, AclCallError> {
        let f = self.api.aclrtIpcMemImportByKey.ok_or(unsupported("aclrtIpcMemImportByKey"))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `key` is NUL-terminated (its last byte is 0); p is a valid out-pointer.
        check("aclrtIpcMemImportByKey", unsafe { f(&mut p, key.as_ptr().cast::<c_char>(), PEER_ACCESS) })?;
        Ok(p as usize)
    }

    /// Ends an import of `key` (in an importer) or the export (in the exporter).
    pub fn close_key(&self, key: &[u8; KEY_LEN]) -> Result<(), AclCallError> {
        let f = self.api.aclrtIpcMemClose.ok_or(unsupported("aclrtIpcMemClose"))?;
        // SAFETY: `key` is NUL-terminated.
        check("aclrtIpcMemClose", unsafe { f(key.as_ptr().cast::<c_char>()) })
    }

    /// The shareable handle of physical handle `h` (once per handle).
    pub fn export_handle(&self, h: PhysicalHandle) -> Result<u64, AclCallError> {
        let f = self.api.aclrtMemExportToShareableHandle.ok_or(unsupported("aclrtMemExportToShareableHandle"))?;
        let mut shareable = 0u64;
        // SAFETY: h is a live handle of this process; shareable is a valid out-pointer.
        check("aclrtMemExportToShareableHandle", unsafe {
            f(h.0 as sys::aclrtDrvMemHandle, sys::ACL_MEM_HANDLE_TYPE_NONE, NO_PID_VALIDATION, &mut shareable)
        })?;
        Ok(shareable)
    }

    /// A physical handle of `device` for another process's shareable handle.
    pub fn import_handle(&self, shareable: u64, device: i32) -> Result<PhysicalHandle, AclCallError> {
        let f = self.api.aclrtMemImportFromShareableHandle.ok_or(unsupported("aclrtMemImportFromShareableHandle"))?;
        let mut h: sys::aclrtDrvMemHandle = std::ptr::null_mut();
        // SAFETY: h is a valid out-pointer.
        check("aclrtMemImportFromShareableHandle", unsafe { f(shareable, device, &mut h) })?;
        Ok(PhysicalHandle(h as usize))
    }
}
