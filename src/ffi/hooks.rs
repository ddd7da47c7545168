//! Host hooks: functions of the host npualloc calls at fixed moments
//! (`core::hooks` says when and under which locks).

use super::handle::{npualloc_allocator, Allocator};
use super::status::npualloc_status;
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
/// last block of a destroyed pool, the release threshold). A host with its
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
