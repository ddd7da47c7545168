//! Sharing blocks with other processes of the host (`core::sharing`): export in the owner, import and close in
//! another process.

use super::handle::npualloc_allocator;
use super::status::npualloc_status;
use crate::core::sharing::{import, table};
use crate::error::Error;
use std::ffi::c_void;

/// Bytes of an `npualloc_ipc_handle`.
pub const NPUALLOC_IPC_HANDLE_SIZE: usize = 128;
const _: () = assert!(NPUALLOC_IPC_HANDLE_SIZE == table::HANDLE_SIZE);

/// What `npualloc_ipc_export` writes: plain bytes, to be copied by any means to another process of the host.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct npualloc_ipc_handle {
    pub bytes: [u8; NPUALLOC_IPC_HANDLE_SIZE],
}

/// Exports the live block that starts at `ptr` (any pool, mode or size) so that another process of the host can
/// map the same memory with `npualloc_ipc_import`; writes the handle to `out`. Exporting a block again gives the
/// same handle. While any process holds the block imported, its memory is neither handed to another request
/// nor given back, even after this process frees it (the free succeeds at once); it returns to the cache when
/// the last importer closes it or exits, as a later free, empty_cache or the out-of-memory ladder sees. A block
/// freed before any import is no longer exported. The runtime exports a physical handle once per process: with
/// expandable segments, a handle a communication library registered (and so exported) makes the export fail
/// with NPUALLOC_ERR_RUNTIME, and the message says so.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for a destroyed handle or NULL `ptr`, NPUALLOC_ERR_UNKNOWN_POINTER
/// when `ptr` is not the start of a live block of `a`, NPUALLOC_ERR_UNSUPPORTED when the runtime lacks the
/// sharing calls, NPUALLOC_ERR_RUNTIME when it refuses. Nothing changes on an error.
///
/// # Safety
/// `a` is NULL or a live handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_ipc_export(
    a: *mut npualloc_allocator,
    ptr: *mut c_void,
    out: *mut npualloc_ipc_handle,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_ipc_export", {
        let allocator = try_live!(a);
        super::boundary::check_ptr(ptr.cast_const(), "ptr")?;
        let out = try_out!(out, "out");
        let bytes = allocator.core.ipc_export(ptr as usize)?;
        // SAFETY: checked non-NULL and aligned; the caller promises it is writable.
        unsafe { out.write(npualloc_ipc_handle { bytes }) };
        Ok(())
    })
}

/// In a process other than the exporter's (it needs no allocator), maps the memory of the block `h` names on
/// `device` (the exporter's, or another device of the host where the runtime allows it), and writes its address
/// to `out_ptr` and its usable size (at least what was requested) to `out_size`. Each process sees the other's
/// writes. Importing one handle twice gives two imports (the same address for a fixed-segment block), each
/// ended by one `npualloc_ipc_close`. An import stays valid after the exporter exits. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT for NULL arguments, bytes that are not an export's, a handle this process
/// exported ("use the pointer itself"), a block no longer exported or an exporter that has exited;
/// NPUALLOC_ERR_RUNTIME when the runtime refuses. Nothing changes on an error.
///
/// # Safety
/// `h` is NULL or readable; `out_ptr` and `out_size` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_ipc_import(
    h: *const npualloc_ipc_handle,
    device: i32,
    out_ptr: *mut *mut c_void,
    out_size: *mut usize,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_ipc_import", {
        let h = try_ref!(h, "h");
        let out_ptr = try_out!(out_ptr, "out_ptr");
        let out_size = try_out!(out_size, "out_size");
        if device < 0 {
            return Err(Error::InvalidArgument(format!("device {device} is negative")));
        }
        let (ptr, size) = import::import(&h.bytes, device)?;
        // SAFETY: both checked non-NULL and aligned; the caller promises they are writable.
        unsafe {
            out_ptr.write(ptr as *mut c_void);
            out_size.write(size);
        }
        Ok(())
    })
}

/// Ends one import of the block at `ptr` (from `npualloc_ipc_import`); the last one unmaps it, and the exporter
/// may reuse the memory once no process holds it. Work queued on the memory must be finished first. Returns
/// NPUALLOC_ERR_UNKNOWN_POINTER when `ptr` is no live import, NPUALLOC_ERR_RUNTIME when the runtime refuses
/// to unmap (the import has ended all the same).
///
/// # Safety
/// Nothing may use the imported memory after its last close.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_ipc_close(ptr: *mut c_void) -> npualloc_status {
    ffi_boundary!(status "npualloc_ipc_close", {
        if ptr.is_null() {
            return Err(Error::UnknownPointer("ptr is NULL, not an import".into()));
        }
        import::close(ptr as usize)
    })
}
