//! Host hooks: functions of the host npualloc calls at fixed moments (`core::hooks` says when and under which locks).

use super::handle::npualloc_allocator;
use super::status::npualloc_status;
use crate::error::Error;
use std::ffi::{c_char, c_void};

/// `fn(user, device)`: run before npualloc synchronizes streams to give memory back (`npualloc_set_before_release`).
#[allow(non_camel_case_types)]
pub type npualloc_release_hook = Option<unsafe extern "C" fn(user: *mut c_void, device: i32)>;

/// Installs `fn`, run with `user` and the allocator's device before every synchronization that precedes giving device
/// memory back (empty_cache, the out-of-memory ladder, the release threshold, destroy), on the thread that triggered
/// it (maybe inside `npualloc_free`) and with no npualloc lock held that another stream's malloc or free needs. It
/// also runs inside the malloc of another npualloc allocator of the same device that asks this one for its free cache
/// before refusing a request, with no lock of either held: `fn` may allocate, free, and create or destroy other
/// allocators, but not destroy this one (destroy would wait for the ask `fn` is part of) or the asking one; a request
/// `fn` makes that runs out of memory is refused without asking again. A host with its own queue of work not yet
/// handed to the runtime (torch_npu's task queue) drains it there, or returns at once on a thread where its drain
/// cannot run. NULL `fn` removes the hook. Replaces any earlier hook, returning once no other thread is inside the old
/// one (so its `user` may be freed), except when called from inside a hook call: then at once, since two hooks each
/// removing the other would wait forever. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
///
/// # Safety
/// `a` is NULL or a live handle; `fn` may be called with `user` from any thread until it is replaced or the allocator
/// destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_before_release(
    a: *mut npualloc_allocator,
    r#fn: npualloc_release_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_before_release", {
        try_live!(a).core.set_before_release(r#fn.map(|f| (f, user)));
        Ok(())
    })
}

/// `fn(user, device, requested, report)`: a request of `requested` bytes on `device` was refused for lack of memory;
/// `report` (valid during the call) is the text the last error gets (see `npualloc_set_oom_observer`).
#[allow(non_camel_case_types)]
pub type npualloc_oom_hook =
    Option<unsafe extern "C" fn(user: *mut c_void, device: i32, requested: usize, report: *const c_char)>;

/// Installs `fn`, run with `user` once per request refused with NPUALLOC_ERR_OUT_OF_MEMORY, on the requesting thread,
/// after everything the request took was given back and with no npualloc lock held. NULL `fn` removes it; replacing
/// works as for `npualloc_set_before_release`. With the config key `oom_snapshot:PATH`, a PyTorch-format snapshot (a
/// pickle, with the memory history while recording) is written to PATH just before, and the report and the error's
/// message end with a sentence naming PATH, or saying why the file could not be written. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
///
/// # Safety
/// As for `npualloc_set_before_release`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_oom_observer(
    a: *mut npualloc_allocator,
    r#fn: npualloc_oom_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_oom_observer", {
        try_live!(a).core.set_out_of_memory_observer(r#fn.map(|f| (f, user)));
        Ok(())
    })
}

/// What happened to a piece of device memory (see `npualloc_set_segment_observer`): the values of the core's
/// `SegmentEvent` (a test checks they agree).
#[repr(i32)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum npualloc_segment_event {
    /// A virtual range reserved (expandable segments): addr, size; no handle.
    NPUALLOC_SEGMENT_RESERVE = 1,
    /// That range is about to be released.
    NPUALLOC_SEGMENT_RELEASE = 2,
    /// Physical memory mapped at addr..addr+size: its handle, or an `aclrtMalloc` segment (fixed segments; no handle).
    NPUALLOC_SEGMENT_MAP = 3,
    /// That memory is about to be unmapped, or freed: deregister it here.
    NPUALLOC_SEGMENT_UNMAP = 4,
}

/// The event a hook receives: an `npualloc_segment_event` in the header (cbindgen.toml renames it), a plain integer
/// here so that the core's hook and the C function have one type.
#[allow(non_camel_case_types)]
pub type npualloc_segment_event_raw = i32;

/// `fn(user, device, event, addr, size, drv_handle, pool)`: npualloc came to hold, or is about to stop holding, the
/// device memory at [addr, addr + size) of pool `pool` (0: the default pool); `drv_handle` is the physical handle
/// (`aclrtDrvMemHandle`) mapped there, NULL for a range (RESERVE, RELEASE) and for an `aclrtMalloc` segment.
#[allow(non_camel_case_types)]
pub type npualloc_segment_hook = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        device: i32,
        event: npualloc_segment_event_raw,
        addr: *mut c_void,
        size: usize,
        drv_handle: *mut c_void,
        pool: u64,
    ),
>;

/// Installs `fn`, run with `user` for every piece of device memory the allocator comes to hold or stops holding, so
/// that a communication library (HCCL) can register it: RESERVE after an expandable range is reserved, before anything
/// is mapped in it; MAP after a physical handle is mapped or an `aclrtMalloc` segment obtained, before any of it is
/// handed out; UNMAP before the call that unmaps or frees it; RELEASE after the range's last UNMAP, before it is
/// released. A runtime call that fails after its UNMAP (or RELEASE) is followed by MAP (or RESERVE) again. A handle
/// moved to a second address is a MAP at the new address and later an UNMAP of the old; sleep is UNMAP, wake MAP;
/// destroy unmaps and releases everything, with events.
///
/// `fn` runs on the thread that caused the event: during a growth with that stream's pool locked; while memory is given
/// back (empty_cache, out-of-memory retries, the release threshold, sleep, wake, forget_stream, pool destroy, destroy)
/// with the allocator's give-back lock held too, which a malloc on another stream waits for only when it needs that
/// memory, and a free never. `fn` must not call this allocator's functions, and should return quickly. NULL `fn`
/// removes the observer; replacing works as for `npualloc_set_before_release`. What the allocator already holds is not
/// replayed: call `npualloc_for_each_segment` after setting the observer. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a
/// NULL or dead handle.
///
/// # Safety
/// As for `npualloc_set_before_release`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_segment_observer(
    a: *mut npualloc_allocator,
    r#fn: npualloc_segment_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_segment_observer", {
        try_live!(a).core.set_segment_observer(r#fn.map(|f| (f, user)));
        Ok(())
    })
}

/// Calls `fn` with `user`, on the calling thread before returning, once with NPUALLOC_SEGMENT_RESERVE for every
/// expandable range the allocator holds and once with NPUALLOC_SEGMENT_MAP for every piece of memory mapped (each range
/// before the pieces in it), so that a library attaching late registers what exists. `fn` runs with no npualloc lock
/// held: memory gained or given back meanwhile may be missing, or also be told to an observer. Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle or a NULL `fn`.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_for_each_segment(
    a: *const npualloc_allocator,
    r#fn: npualloc_segment_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_for_each_segment", {
        let allocator = try_live!(a);
        let Some(f) = r#fn else {
            return Err(Error::InvalidArgument("fn is NULL: npualloc_for_each_segment needs a function to call".into()));
        };
        let device = allocator.core.device();
        for (event, p) in allocator.core.held_segments() {
            // SAFETY: `f` and `user` come from the caller together for this call; the arguments are plain values.
            unsafe { f(user, device, event as i32, p.addr as *mut c_void, p.size, p.handle, p.pool) };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::SegmentEvent;

    #[test]
    fn segment_events_have_the_core_values() {
        for (c, core) in [
            (npualloc_segment_event::NPUALLOC_SEGMENT_RESERVE, SegmentEvent::Reserve),
            (npualloc_segment_event::NPUALLOC_SEGMENT_RELEASE, SegmentEvent::Release),
            (npualloc_segment_event::NPUALLOC_SEGMENT_MAP, SegmentEvent::Map),
            (npualloc_segment_event::NPUALLOC_SEGMENT_UNMAP, SegmentEvent::Unmap),
        ] {
            assert_eq!(c as i32, core as i32, "{c:?}");
        }
    }
}
