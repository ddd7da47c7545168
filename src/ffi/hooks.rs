//! Host hooks: functions of the host npualloc calls at fixed moments
//! (`core::hooks` says when and under which locks).

use super::handle::{npualloc_allocator, Allocator};
use super::status::npualloc_status;
use crate::error::Error;
use std::ffi::{c_char, c_void};

/// `fn(user, device)`: run before npualloc synchronizes streams to give
/// device memory back (see `npualloc_set_before_release`).
#[allow(non_camel_case_types)]
pub type npualloc_release_hook = Option<unsafe extern "C" fn(user: *mut c_void, device: i32)>;

/// Installs `fn`, run with `user` and the allocator's device before every
/// synchronization that precedes giving device memory back: empty_cache,
/// the out-of-memory ladder (with its garbage collection and headroom
/// moves), the release threshold, and destroy. It runs with no npualloc
/// lock held that a malloc or free on another stream needs, on the thread
/// that triggered the release, which may be inside `npualloc_free` (the
/// last block of a destroyed pool, the release threshold). It also runs
/// when another npualloc allocator of the same device in the process is
/// about to refuse a request and asks this one for its free cache: then on
/// that allocator's thread, inside its malloc, with no lock of either
/// allocator held; `fn` may allocate and free there, and create and
/// destroy other allocators, but not destroy this one (destroy would wait
/// for the ask `fn` is part of) or the one asking (inside its malloc); a
/// request `fn` makes that runs out of memory is refused without asking
/// the other allocators again. A host with its
/// own queue of work not yet handed to the runtime (torch_npu's task queue)
/// drains it there; a host whose drain cannot run on some thread of its own
/// (its queue's own threads) must return at once there. NULL `fn` removes
/// the hook. Replaces any earlier hook; returns only once no other thread
/// is inside the old one, so its `user` may be freed then. Called from
/// inside a hook call (this hook replacing itself, or the out-of-memory
/// observer), it returns at once without waiting: the old hook may then
/// still run on other threads (two hooks each removing the other would
/// otherwise wait for each other forever).
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
/// Thread-safe.
///
/// # Safety
/// `a` is NULL or a live handle; `fn` may be called with `user` from any
/// thread until it is replaced or the allocator destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_before_release(
    a: *mut npualloc_allocator,
    r#fn: npualloc_release_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_before_release", {
        // SAFETY: not destroyed during the call (the caller's contract); anything but a live handle is refused.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        allocator.core.set_before_release(r#fn.map(|f| (f, user)));
        Ok(())
    })
}

/// `fn(user, device, requested, report)`: a request of `requested` bytes on
/// `device` was refused for lack of memory; `report` (valid during the call)
/// is the text the last error gets (see `npualloc_set_oom_observer`).
#[allow(non_camel_case_types)]
pub type npualloc_oom_hook =
    Option<unsafe extern "C" fn(user: *mut c_void, device: i32, requested: usize, report: *const c_char)>;

/// Installs `fn`, run with `user` once per request refused with
/// NPUALLOC_ERR_OUT_OF_MEMORY, after everything the request took was given
/// back and with no npualloc lock held, on the thread that made the
/// request, with the same report text the last error gets. NULL `fn`
/// removes it; replaces any earlier observer, returning once no other
/// thread is inside the old one. Called from inside a hook call (this
/// observer replacing itself, or the before-release hook), it returns at
/// once without waiting: the old observer may then still run on other
/// threads. With the config key
/// `oom_snapshot:PATH`, a PyTorch-format snapshot (a pickle, the memory
/// history included while recording) is written to PATH just before, and
/// the report (the error's message as well) ends with a sentence naming
/// PATH, or saying why the file could not be written.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
/// Thread-safe.
///
/// # Safety
/// `a` is NULL or a live handle; `fn` may be called with `user` from any
/// thread until it is replaced or the allocator destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_oom_observer(
    a: *mut npualloc_allocator,
    r#fn: npualloc_oom_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_oom_observer", {
        // SAFETY: as in npualloc_set_before_release.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        allocator.core.set_out_of_memory_observer(r#fn.map(|f| (f, user)));
        Ok(())
    })
}

/// What happened to a piece of device memory (see
/// `npualloc_set_segment_observer`): the values of the core's
/// `SegmentEvent` (a test checks they agree).
#[repr(i32)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum npualloc_segment_event {
    /// A virtual range reserved (expandable segments): addr, size; no handle.
    NPUALLOC_SEGMENT_RESERVE = 1,
    /// That range is about to be released.
    NPUALLOC_SEGMENT_RELEASE = 2,
    /// Physical memory mapped at addr..addr+size: its handle (expandable
    /// segments), or an `aclrtMalloc` segment (fixed segments; no handle).
    NPUALLOC_SEGMENT_MAP = 3,
    /// That memory is about to be unmapped, or freed: deregister it here.
    NPUALLOC_SEGMENT_UNMAP = 4,
}

/// The event a hook receives, as a plain integer in Rust (an
/// `npualloc_segment_event` in the header: cbindgen.toml renames it), so
/// that the core's hook and the C function have one type.
#[allow(non_camel_case_types)]
pub type npualloc_segment_event_raw = i32;

/// `fn(user, device, event, addr, size, drv_handle, pool)`: npualloc came to
/// hold, or is about to stop holding, the device memory at
/// [addr, addr + size) of pool `pool` (0: the default pool); `drv_handle` is
/// the physical handle (`aclrtDrvMemHandle`) mapped there, NULL for a range
/// (RESERVE, RELEASE) and for an `aclrtMalloc` segment (fixed segments). See
/// `npualloc_set_segment_observer`.
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

/// Installs `fn`, run with `user` for every piece of device memory the
/// allocator comes to hold or stops holding, so that a communication
/// library (HCCL) can register it: NPUALLOC_SEGMENT_RESERVE after an
/// expandable range is reserved and before anything is mapped in it;
/// NPUALLOC_SEGMENT_MAP after a physical handle is mapped (with the handle)
/// or an `aclrtMalloc` segment is obtained (fixed segments, no handle), and
/// before any of it is handed out; NPUALLOC_SEGMENT_UNMAP before the call
/// that unmaps or frees it, so the library can deregister first;
/// NPUALLOC_SEGMENT_RELEASE after the range's last UNMAP, before it is
/// released. A runtime call that fails after its UNMAP (or RELEASE) is
/// followed by MAP (or RESERVE) again: the memory is still held. A physical
/// handle moved to a second address (`handle_moves`) is a MAP at the new
/// address and, later, an UNMAP of the old one; sleep is UNMAP, wake MAP;
/// destroy unmaps and releases everything, with events.
///
/// `fn` runs on the thread that caused the event. On a growth (a malloc
/// that maps or obtains memory) that stream's pool is locked: its other
/// requests and frees wait, another stream's do not. When memory is given
/// back (empty_cache, the out-of-memory retries, the release threshold,
/// sleep, wake, forget_stream, pool destroy, destroy) the allocator's
/// give-back lock is held as well. A malloc on another stream waits for it
/// only when it runs out of memory, its growth passes
/// `garbage_collection_threshold`, or `reserved_headroom` asks other
/// streams for pages: it needs the memory being given back. A free never
/// waits for it: memory a free would give back over the release threshold
/// while another give-back runs goes back with that one, or with the next
/// free that gives memory back. A free that gives memory back calls `fn`
/// itself. `fn` must not call this allocator's functions, and should
/// return quickly. NULL `fn` removes the observer. One observer per
/// allocator: setting one replaces the last, returning once no other thread
/// is inside the old one (at once when called from inside a hook call).
/// What the allocator already holds is not replayed: call
/// `npualloc_for_each_segment` after setting the observer.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
/// Thread-safe.
///
/// # Safety
/// `a` is NULL or a live handle; `fn` may be called with `user` from any
/// thread until it is replaced or the allocator destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_set_segment_observer(
    a: *mut npualloc_allocator,
    r#fn: npualloc_segment_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_set_segment_observer", {
        // SAFETY: as in npualloc_set_before_release.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        allocator.core.set_segment_observer(r#fn.map(|f| (f, user)));
        Ok(())
    })
}

/// Calls `fn` with `user` once with NPUALLOC_SEGMENT_RESERVE for every
/// expandable range the allocator holds now and once with
/// NPUALLOC_SEGMENT_MAP for every piece of memory mapped now (each physical
/// handle where it is mapped; each fixed segment), each range before the
/// pieces in it, so that a library attaching late registers what exists.
/// Each pool of each stream is read under its lock and `fn` is called after
/// the reading, with no npualloc lock held. Memory gained or given back by
/// another thread while it runs may be missing, or be told to an observer
/// set before as well.
///
/// Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle or a NULL
/// `fn`. Thread-safe.
///
/// # Safety
/// `a` is NULL or a live handle; `fn` is called with `user` on the calling
/// thread only, before this returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_for_each_segment(
    a: *const npualloc_allocator,
    r#fn: npualloc_segment_hook,
    user: *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_for_each_segment", {
        // SAFETY: as in npualloc_set_before_release.
        let allocator = unsafe { Allocator::from_handle(a) }?;
        let Some(f) = r#fn else {
            return Err(Error::InvalidArgument("fn is NULL: npualloc_for_each_segment needs a function to call".into()));
        };
        let device = allocator.core.device();
        for (event, p) in allocator.core.held_segments() {
            // SAFETY: `f` and `user` come from the caller together for this
            // call; the arguments are plain values.
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
