//! Memory history and the snapshot in PyTorch's format.

use super::handle::npualloc_allocator;
use super::stats::write_json;
use super::status::npualloc_status;
use std::ffi::{c_char, c_int};

/// Starts, resizes or stops the memory history: the allocator keeps its last `max_entries` events (alloc, free
/// requested, free completed, segment alloc/free or map/unmap, out of memory) for
/// `npualloc_snapshot_pytorch_json`. 0 turns recording off and drops the entries; a smaller bound keeps the
/// newest. Off when an allocator is created. While off, a malloc or free pays one relaxed atomic load for it;
/// while on, each event takes a lock shared by the allocator's streams, and entries take about 50 bytes each.
/// Statuses: OK; INVALID_ARGUMENT for a destroyed `a`.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_record_history(a: *mut npualloc_allocator, max_entries: usize) -> npualloc_status {
    ffi_boundary!(status "npualloc_record_history", {
        try_live!(a).core.record_history(max_entries);
        Ok(())
    })
}

/// Writes to `*out_json` a snapshot as JSON in the format of PyTorch's `torch.cuda.memory._snapshot()`:
/// `segments` with their `blocks`, and `device_traces`, one list per device index up to this allocator's device,
/// this device's holding the memory history, oldest first (`addr` is `device_free` for "oom"; `pool_id` is
/// `[0, pool]`, as `segment_pool_id`). Frames are always empty lists. A segment is a fixed segment or a run of
/// mapped pages of an expandable range (`is_expandable` true). Taking a snapshot adds a "snapshot" entry to the
/// history. Free the string with `npualloc_string_free`. Costs O(blocks + entries) and locks each of the
/// allocator's pools in turn. Statuses: OK; INVALID_ARGUMENT for a destroyed `a` or a NULL `out_json`.
///
/// # Safety
/// `a` is NULL or a live handle; `out_json` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_snapshot_pytorch_json(
    a: *const npualloc_allocator,
    out_json: *mut *mut c_char,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_snapshot_pytorch_json", {
        let allocator = try_live!(a);
        // SAFETY: the caller's contract on `out_json`, passed on.
        unsafe { write_json(out_json, || Ok(allocator.core.pytorch_snapshot()?.to_json())) }
    })
}

/// `npualloc_record_history` for the pluggable entry points' process-wide allocator of `device`, created now
/// from `NPUALLOC_CONF` if it does not exist yet, as their first allocation would. Statuses: OK;
/// INVALID_ARGUMENT for a device outside the range `npualloc_pluggable_init` set (0..64 before it); the
/// creation failure's status when the device's allocator cannot be created.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_pluggable_record_history(device: c_int, max_entries: usize) -> npualloc_status {
    ffi_boundary!(status "npualloc_pluggable_record_history", {
        super::pluggable::allocator(device).map(|a| a.record_history(max_entries))
    })
}

/// `npualloc_snapshot_pytorch_json` for the pluggable entry points' process-wide allocator of `device` (created
/// now if it does not exist yet). Free the string with `npualloc_string_free`. Statuses: as
/// `npualloc_pluggable_record_history`; INVALID_ARGUMENT for a NULL `out_json` (nothing created).
///
/// # Safety
/// `out_json` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pluggable_snapshot_pytorch_json(
    device: c_int,
    out_json: *mut *mut c_char,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pluggable_snapshot_pytorch_json", {
        // SAFETY: the caller's contract on `out_json`, passed on.
        unsafe { write_json(out_json, || Ok(super::pluggable::allocator(device)?.pytorch_snapshot()?.to_json())) }
    })
}
