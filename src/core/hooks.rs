//! Host hooks: code of the host that npualloc runs at fixed moments.
//!
//! `before_release` runs before every synchronization that precedes giving
//! device memory back (empty_cache, the out-of-memory ladder with its
//! garbage collection and headroom moves, the release threshold, teardown).
//! A host that keeps its own queue of work not yet handed to the runtime
//! (torch_npu's task queue) drains it there, so the synchronization that
//! follows covers that work too. It is called with no npualloc lock held:
//! the queued work may allocate and free on other streams meanwhile.
//!
//! `out_of_memory` runs once per request refused for lack of memory, after
//! everything the request took was given back and with no npualloc lock
//! held, with the report the error carries.
//!
//! The hooks are read on those cold paths only; no malloc or free that
//! succeeds looks at them.

use std::ffi::{c_char, c_void, CString};
use std::sync::RwLock;

/// `fn(user, device)`, as the C API's `npualloc_release_hook`.
pub type ReleaseHook = unsafe extern "C" fn(user: *mut c_void, device: i32);

/// `fn(user, device, requested, report)`, as the C API's `npualloc_oom_hook`:
/// `report` is a NUL-terminated string valid during the call.
pub type OomHook = unsafe extern "C" fn(user: *mut c_void, device: i32, requested: usize, report: *const c_char);

#[derive(Clone, Copy)]
struct Registered<F> {
    f: F,
    user: *mut c_void,
}

// SAFETY: `user` is an opaque value handed back to the host's function; the
// host that registered it promised (C API contract) that the function may be
// called from any thread with it.
unsafe impl<F: Send> Send for Registered<F> {}
// SAFETY: as above; npualloc never dereferences `user`.
unsafe impl<F: Sync> Sync for Registered<F> {}

#[derive(Default)]
pub(crate) struct Hooks {
    before_release: RwLock<Option<Registered<ReleaseHook>>>,
    oom: RwLock<Option<Registered<OomHook>>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.before_release.read().map(|r| r.is_some()).unwrap_or(false);
        f.debug_struct("Hooks").field("before_release", &set).finish()
    }
}

impl Hooks {
    /// Installs (Some) or removes (None) the before-release hook.
    pub fn set_before_release(&self, hook: Option<(ReleaseHook, *mut c_void)>) {
        let mut slot = self.before_release.write().unwrap_or_else(|e| e.into_inner());
        *slot = hook.map(|(f, user)| Registered { f, user });
    }

    /// Runs the before-release hook, if any, for `device`. The caller holds
    /// no npualloc lock. The hook is copied out first, so it may replace
    /// itself.
    #[cold]
    pub fn before_release(&self, device: i32) {
        let hook = *self.before_release.read().unwrap_or_else(|e| e.into_inner());
        if let Some(Registered { f, user }) = hook {
            // SAFETY: `f` and `user` come from the host together; calling
            // `f(user, device)` is exactly what it registered them for.
            unsafe { f(user, device) };
        }
    }

    /// Installs (Some) or removes (None) the out-of-memory observer.
    pub fn set_out_of_memory(&self, hook: Option<(OomHook, *mut c_void)>) {
        let mut slot = self.oom.write().unwrap_or_else(|e| e.into_inner());
        *slot = hook.map(|(f, user)| Registered { f, user });
    }

    /// Runs the out-of-memory observer, if any, for a refused request of
    /// `requested` bytes on `device`. The caller holds no npualloc lock.
    #[cold]
    pub fn out_of_memory(&self, device: i32, requested: usize, report: &str) {
        let hook = *self.oom.read().unwrap_or_else(|e| e.into_inner());
        if let Some(Registered { f, user }) = hook {
            let text = CString::new(report.replace('\0', " ")).unwrap_or_default();
            // SAFETY: `f` and `user` come from the host together; `text`
            // outlives the call, as the contract promises.
            unsafe { f(user, device, requested, text.as_ptr()) };
        }
    }
}
