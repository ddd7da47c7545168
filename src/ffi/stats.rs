//! Statistics and snapshots.

use super::handle::{npualloc_allocator, Allocator};
use super::status::npualloc_status;
use crate::error::Error;
use std::ffi::{c_char, CString};

/// Version of the `npualloc_stats` layout this library fills.
pub const NPUALLOC_STATS_VERSION: u32 = 1;

/// Allocator statistics (PyTorch `memory_stats()` vocabulary). The caller
/// sets `struct_size` to `sizeof(npualloc_stats)`; fields past it are not
/// written, so older callers keep working when fields are added.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct npualloc_stats {
    pub struct_size: u32,
    /// Filled by the library.
    pub version: u32,
    /// Live blocks, as rounded.
    pub allocated_bytes: u64,
    /// The most live at once: exact while one stream allocates; with
    /// several, the highest total seen when some stream reached a new high
    /// of its own (kept without a counter every stream writes; a peak that
    /// streams each below their own high make together can be missed).
    /// Likewise `requested_bytes_peak`.
    pub allocated_bytes_peak: u64,
    /// Live blocks, as asked.
    pub requested_bytes: u64,
    pub requested_bytes_peak: u64,
    /// Device memory held (mapped or malloc'ed).
    pub reserved_bytes: u64,
    pub reserved_bytes_peak: u64,
    pub active_blocks: u64,
    pub segments: u64,
    pub num_allocs: u64,
    pub num_frees: u64,
    pub num_device_mallocs: u64,
    pub num_device_frees: u64,
    pub num_maps: u64,
    pub num_unmaps: u64,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_syncs: u64,
    /// Largest block a request could get without growing.
    pub largest_free_block: u64,
}

/// Fills `*out` up to `out->struct_size` bytes.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle or `out`, or a
/// `struct_size` smaller than the two header fields.
///
/// # Safety
/// `a` is NULL or a handle from `npualloc_create` not yet destroyed; `out` is
/// NULL or points to an `npualloc_stats` whose `struct_size` bytes are writable
/// (at least its two header fields).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_get_stats(
    a: *const npualloc_allocator,
    out: *mut npualloc_stats,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_get_stats", {
        // SAFETY: handle validity is the caller's contract; NULL and dead handles are refused.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        let out = try_out!(out.cast::<u32>(), "out");
        // SAFETY: out is non-NULL and aligned; struct_size is its first field.
        let size = unsafe { out.read() } as usize;
        if size < 8 {
            return Err(Error::InvalidArgument(format!(
                "out->struct_size is {size}; set it to sizeof(npualloc_stats)"
            )));
        }
        let s = allocator.core.stats()?;
        let full = npualloc_stats {
            struct_size: size.min(std::mem::size_of::<npualloc_stats>()) as u32,
            version: NPUALLOC_STATS_VERSION,
            allocated_bytes: s.allocated_bytes,
            allocated_bytes_peak: s.allocated_bytes_peak,
            requested_bytes: s.requested_bytes,
            requested_bytes_peak: s.requested_bytes_peak,
            reserved_bytes: s.reserved_bytes,
            reserved_bytes_peak: s.reserved_bytes_peak,
            active_blocks: s.active_blocks,
            segments: s.segments,
            num_allocs: s.num_allocs,
            num_frees: s.num_frees,
            num_device_mallocs: s.num_device_mallocs,
            num_device_frees: s.num_device_frees,
            num_maps: s.num_maps,
            num_unmaps: s.num_unmaps,
            num_alloc_retries: s.num_alloc_retries,
            num_ooms: s.num_ooms,
            num_syncs: s.num_syncs,
            largest_free_block: s.largest_free_block,
        };
        let n = size.min(std::mem::size_of::<npualloc_stats>());
        // SAFETY: the caller promises `size` writable bytes at out; we write at most that.
        unsafe { std::ptr::copy_nonoverlapping((&full as *const npualloc_stats).cast::<u8>(), out.cast::<u8>(), n) };
        Ok(())
    })
}

/// Resets the peak counters to the current values.
///
/// # Safety
/// `a` is NULL or a handle from `npualloc_create` not yet destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_reset_peak_stats(a: *mut npualloc_allocator) -> npualloc_status {
    ffi_boundary!(status "npualloc_reset_peak_stats", {
        // SAFETY: as in npualloc_get_stats.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        allocator.core.reset_peak_stats()
    })
}

/// Writes a JSON snapshot (segments, their blocks with address, size, state
/// — active / cached / pending-free — and stream, and the stats) to
/// `*out_json`. Free it with `npualloc_string_free`. Costs O(blocks).
///
/// # Safety
/// `a` is NULL or a handle from `npualloc_create` not yet destroyed; `out_json`
/// is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_snapshot_json(
    a: *const npualloc_allocator,
    out_json: *mut *mut c_char,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_snapshot_json", {
        // SAFETY: as in npualloc_get_stats.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        let out = try_out!(out_json, "out_json");
        let json = allocator.core.snapshot_json()?;
        let c = CString::new(json).map_err(|_| Error::Internal("snapshot contains a NUL byte".into()))?;
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(c.into_raw()) };
        Ok(())
    })
}

/// Frees a string returned by npualloc. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a string returned by npualloc and not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_string_free(s: *mut c_char) {
    ffi_boundary!("npualloc_string_free", (), {
        if !s.is_null() {
            // SAFETY: s came from CString::into_raw in this library (the caller's contract).
            drop(unsafe { CString::from_raw(s) });
        }
    })
}
