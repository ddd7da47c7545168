//! Lifecycle and direct use: create, destroy, malloc, free, record_stream, empty_cache, set_memory_fraction, query.

use super::handle::{npualloc_allocator, Allocator};
use super::last_error::set_last_error;
use super::status::npualloc_status;
use crate::config::Config;
use crate::core::DeviceAllocator;
use crate::runtime::Stream;
use crate::sys::aclrtStream;
use std::ffi::{c_char, c_void};

/// What `npualloc_query` reports about a live block.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct npualloc_block_info {
    /// Start address of the block.
    pub addr: u64,
    /// Size of the block as rounded by the allocator.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Stream the block belongs to (NULL: the default stream).
    pub stream: aclrtStream,
}

/// Creates an allocator for ACL device `device`. `config` is `"key:value,key:value"` (see the README for the
/// keys); NULL reads `NPUALLOC_CONF` from the environment, else torch_npu's `PYTORCH_NPU_ALLOC_CONF` (and, once
/// `npualloc_read_pytorch_alloc_conf` turned it on, `PYTORCH_ALLOC_CONF`), else uses the defaults. The ACL
/// runtime is loaded on first use from config key `acl_library`, else `NPUALLOC_ACL_LIBRARY`, else
/// `$ASCEND_HOME_PATH/lib64/libascendcl.so`, else the loader's search.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT (negative device, or a device `aclrtSetDevice` refuses as unknown that
/// is past `aclrtGetDeviceCount`, when the runtime has that call), NPUALLOC_ERR_BAD_CONFIG (unknown key, bad
/// value, conflicting keys), NPUALLOC_ERR_UNSUPPORTED, NPUALLOC_ERR_RUNTIME (setting the device failed
/// otherwise), NPUALLOC_ERR_RUNTIME_UNAVAILABLE (libascendcl missing).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_create(
    config: *const c_char,
    device: i32,
    out: *mut *mut npualloc_allocator,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_create", {
        let out = try_out!(out, "out");
        let text = if config.is_null() { None } else { Some(try_str!(config, "config")) };
        let handle = Allocator::into_raw(DeviceAllocator::new(Config::from_c(text)?, device)?)?;
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Whether configs read from the environment (`npualloc_create` with a NULL config, and the pluggable entry
/// points' allocators) also read `PYTORCH_ALLOC_CONF` when `NPUALLOC_CONF` and `PYTORCH_NPU_ALLOC_CONF` are
/// both unset, as torch_npu 2.12 and later do: nonzero `on` turns it on. Off by default, so a value written for
/// another device's allocator changes nothing for a host that does not read it (npualloc's torch_npu bridge
/// does). Process-wide; existing allocators keep their config. Writes the replaced setting (1 or 0) to
/// `*previous` unless NULL. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a misaligned `previous`, changing nothing.
///
/// # Safety
/// `previous` is NULL or valid for writing one `int32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_read_pytorch_alloc_conf(on: i32, previous: *mut i32) -> npualloc_status {
    ffi_boundary!(status "npualloc_read_pytorch_alloc_conf", {
        // Checked before the switch moves: a refused call changes nothing.
        let out = if previous.is_null() { None } else { Some(try_out!(previous, "previous")) };
        let was = i32::from(crate::config::set_read_pytorch_alloc_conf(on != 0));
        if let Some(out) = out {
            // SAFETY: out was checked non-NULL and aligned.
            unsafe { out.write(was) };
        }
        Ok(())
    })
}

/// Destroys an allocator: unregisters it from every stream it was registered on, synchronizes the streams it
/// used, and returns all device memory, live blocks included (their count and bytes, and any runtime call that
/// failed while giving memory back, are reported on stderr and in `npualloc_last_error()`; it still returns
/// NPUALLOC_OK: past unregistration, destroy always completes). If a stream cannot be unregistered, it returns
/// NPUALLOC_ERR_RUNTIME first and the allocator stays usable (that stream's runtime would otherwise call into
/// freed memory); call it again later. No other thread may use the allocator during this call; another
/// allocator of the device asking it for its free cache (`npualloc_set_before_release`) is not a use: destroy
/// waits for that ask to end. Afterwards every call given the handle, and every callback of a binding made
/// from it, refuses it with INVALID_ARGUMENT: no later allocator gets the same handle value.
///
/// # Safety
/// `a` is NULL or a live handle, which no other thread uses during or after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_destroy(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_destroy", {
        if a.is_null() {
            return Ok(());
        }
        // SAFETY: no other thread uses the handle (the caller's contract); anything but a live handle is refused.
        let live = unsafe { Allocator::from_handle(a) }?;
        if live.process_wide {
            return Err(crate::error::Error::InvalidArgument(format!(
                "{a:p} is the process-wide allocator of the pluggable entry points (device {}); \
                 it lives until the process exits and cannot be destroyed",
                live.core.device()
            )));
        }
        super::desc::unregister_all(live)?;
        // Out of the peers first: another allocator's ladder may be asking it.
        live.core.leave_peers();
        // SAFETY: no other thread uses the handle, `live` is not used past here, and no stream refers to it now.
        let allocator = unsafe { Allocator::take(a) }?;
        let report = allocator.core.teardown();
        drop(allocator);
        let msg = match report {
            Ok(r) if r.live_blocks == 0 && r.held_blocks == 0 => return Ok(()),
            Ok(r) if r.held_blocks == 0 => {
                format!("npualloc: destroy released {} live block(s) holding {} bytes", r.live_blocks, r.live_bytes)
            }
            Ok(r) => format!(
                "npualloc: destroy released {} live block(s) holding {} bytes, and left {} block(s) of {} bytes \
                 that other processes hold imported on the device until they close them",
                r.live_blocks, r.live_bytes, r.held_blocks, r.held_bytes
            ),
            Err(e) => format!("npualloc: destroy gave back what it could; a runtime call failed: {e}"),
        };
        eprintln!("{msg}");
        set_last_error(&msg);
        Ok(())
    })
}

/// Allocates `size` bytes for work on `stream` (NULL: the default stream) and writes the device address, at
/// least 512-byte aligned, to `*out_ptr`. Returns NPUALLOC_ERR_INVALID_ARGUMENT for size 0, a size of 2^60
/// bytes or more, or a stream the runtime does not know or of another device (checked when this allocator
/// first meets it; the message names the call that refused it, or both devices); NPUALLOC_ERR_OUT_OF_MEMORY
/// after every recovery step failed, the last asking the device's other allocators in this process for their
/// free cache (the message says where memory is); NPUALLOC_ERR_RUNTIME if an ACL call failed otherwise.
///
/// # Safety
/// `a` is NULL or a live handle; `out_ptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_malloc(
    a: *mut npualloc_allocator,
    size: usize,
    stream: aclrtStream,
    out_ptr: *mut *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_malloc", {
        #[cfg(test)]
        tests::panic_if_armed();
        let allocator = try_live!(a);
        let out = try_out!(out_ptr, "out_ptr");
        let addr = allocator.core.malloc(size, Stream::from_raw(stream))?;
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(addr as *mut c_void) };
        Ok(())
    })
}

/// Frees a block by its start address. The memory is reusable at once by later work on the block's stream; if
/// other streams used it (`npualloc_record_stream`), only after their work recorded so far completes. Returns
/// NPUALLOC_ERR_UNKNOWN_POINTER (state unchanged) for a pointer this allocator did not return, an interior
/// pointer, or a block already freed. An address is all the allocator knows a block by: once a later malloc
/// hands it out again, a stale free of it frees the new block, so a host that may free twice keeps its own
/// record (the Python package's `MemBlock` refuses a second free).
///
/// # Safety
/// `a` is NULL or a live handle. `ptr` is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_free(a: *mut npualloc_allocator, ptr: *mut c_void) -> npualloc_status {
    ffi_boundary!(status "npualloc_free", {
        let allocator = try_live!(a);
        if ptr.is_null() {
            return Ok(());
        }
        allocator.core.free(ptr as usize)
    })
}

/// Notes that work queued on `stream` uses the block at `ptr`, so freeing it waits for that work; recording the
/// block's own stream is a no-op. Returns NPUALLOC_ERR_UNKNOWN_POINTER if `ptr` is not the start of a live
/// block; NPUALLOC_ERR_INVALID_ARGUMENT for a stream of another device (checked as in npualloc_malloc).
///
/// # Safety
/// `a` is NULL or a live handle. `ptr` is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_record_stream(
    a: *mut npualloc_allocator,
    ptr: *mut c_void,
    stream: aclrtStream,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_record_stream", {
        try_live!(a).core.record_stream(ptr as usize, Stream::from_raw(stream))
    })
}

/// Undoes `npualloc_record_stream(a, ptr, stream)`: the caller has ordered `stream`'s work on the block some
/// other way (torch_npu's `eraseStream`, used by its `MULTI_STREAM_MEMORY_REUSE` modes), so a later free waits
/// only for the block's other streams. A stream the block was never recorded on (its own and unknown streams
/// included) is NPUALLOC_OK and changes nothing. Returns NPUALLOC_ERR_UNKNOWN_POINTER (nothing changes) if
/// `ptr` is not the start of a live block.
///
/// # Safety
/// `a` is NULL or a live handle. `ptr` and `stream` are only compared, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_erase_stream(
    a: *mut npualloc_allocator,
    ptr: *mut c_void,
    stream: aclrtStream,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_erase_stream", {
        try_live!(a).core.erase_stream(ptr as usize, Stream::from_raw(stream))
    })
}

/// Returns every cached, unused segment to the runtime, after synchronizing only the streams that used them.
/// Blocks in use are untouched.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_empty_cache(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_empty_cache", {
        try_live!(a).core.empty_cache().map(|_| ())
    })
}

/// `npualloc_empty_cache_with` flag: the physical handles unmapped stay cached (counted in `cached_handle_bytes`
/// and `reserved_bytes`) for later growth to map again; `npualloc_empty_cache` frees them.
pub const NPUALLOC_EMPTY_KEEP_HANDLES: u32 = 1;

/// `npualloc_empty_cache` with `flags`: 0 is `npualloc_empty_cache`; `NPUALLOC_EMPTY_KEEP_HANDLES` unmaps the
/// cached memory of expandable segments but keeps its physical handles (torch_npu's `emptyVirtAddrCache`).
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for an unknown flag bit, NPUALLOC_ERR_UNSUPPORTED for
/// `NPUALLOC_EMPTY_KEEP_HANDLES` with fixed segments (no handles to keep); nothing changes then.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_empty_cache_with(a: *mut npualloc_allocator, flags: u32) -> npualloc_status {
    ffi_boundary!(status "npualloc_empty_cache_with", {
        let allocator = try_live!(a);
        match flags {
            0 => allocator.core.empty_cache().map(|_| ()),
            NPUALLOC_EMPTY_KEEP_HANDLES => allocator.core.empty_cache_keeping_handles().map(|_| ()),
            _ => Err(crate::error::Error::InvalidArgument(format!(
                "flags {flags:#x} has bits npualloc_empty_cache_with does not know (it knows \
                 NPUALLOC_EMPTY_KEEP_HANDLES = {NPUALLOC_EMPTY_KEEP_HANDLES:#x})"
            ))),
        }
    })
}

/// Caps the device memory this allocator reserves at `fraction` of the device's total (0 lets it reserve
/// nothing more); 1 removes the cap (torch_npu's `setMemoryFraction`: the whole device is no limit, so
/// `garbage_collection_threshold` has none to act on). Memory already reserved is not released. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT for a fraction outside [0, 1] or NaN.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_memory_fraction(a: *mut npualloc_allocator, fraction: f64) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_memory_fraction", {
        try_live!(a).core.set_memory_fraction(fraction)
    })
}

/// Describes the live block containing `ptr` (any address inside it). Returns NPUALLOC_ERR_UNKNOWN_POINTER if
/// no live block contains `ptr`.
///
/// # Safety
/// `a` is NULL or a live handle; `out` is NULL or writable. `ptr` is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_query(
    a: *const npualloc_allocator,
    ptr: *const c_void,
    out: *mut npualloc_block_info,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_query", {
        let allocator = try_live!(a);
        let out = try_out!(out, "out");
        let info = allocator.core.query(ptr as usize)?;
        let value = npualloc_block_info {
            addr: info.addr as u64,
            size: info.size as u64,
            requested: info.requested as u64,
            stream: info.stream.raw(),
        };
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(value) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::last_error::last_error_message;
    use std::cell::Cell;

    thread_local! {
        /// Test-only: makes this thread's next `npualloc_malloc` panic inside its body.
        static PANIC_IN_MALLOC: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn panic_if_armed() {
        if PANIC_IN_MALLOC.try_with(|armed| armed.replace(false)).unwrap_or(false) {
            panic!("forced by a test");
        }
    }

    #[test]
    fn a_panic_inside_an_export_becomes_internal_error() {
        let sentinel = 0x1234usize as *mut c_void;
        let mut out = sentinel;
        PANIC_IN_MALLOC.with(|armed| armed.set(true));
        // SAFETY: a NULL handle is refused (were the body to get that far); out is valid.
        let st = unsafe { npualloc_malloc(std::ptr::null_mut(), 4096, std::ptr::null_mut(), &mut out) };
        assert_eq!(st, npualloc_status::NPUALLOC_ERR_INTERNAL);
        assert_eq!(last_error_message(), "internal error: panic in npualloc_malloc: forced by a test");
        assert_eq!(out, sentinel, "no out-parameter is written after a panic");

        // The process and the export keep working: the next call takes the ordinary path.
        // SAFETY: as above.
        let st = unsafe { npualloc_malloc(std::ptr::null_mut(), 4096, std::ptr::null_mut(), &mut out) };
        assert_eq!(st, npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().contains("handle must not be NULL"), "{}", last_error_message());
    }
}
