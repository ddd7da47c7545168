//! Host hooks: code of the host that npualloc runs at fixed moments.
//!
//! `before_release` runs, with no npualloc lock held, before every synchronization that precedes giving device
//! memory back (empty_cache, the OOM ladder with its garbage collection and headroom moves, the release threshold,
//! a destroyed pool's last free, pool_destroy, pool_empty_cache, sleep, teardown): a host drains its own queue of
//! work not yet handed to the runtime (torch_npu's task queue) so the synchronization covers it; that work may
//! allocate and free on other streams meanwhile. Some of those are inside a free, on whichever thread frees: a host
//! whose drain would wait for that thread itself returns at once there.
//! It also runs when a peer allocator of the device is about to refuse a request (`peers`): on that allocator's
//! thread, inside its malloc, with no lock of either held. There the hook may use any allocator but the one it is
//! installed on (destroy waits for the ask it is inside) and the asking one; an allocation that runs out of memory
//! there is refused without asking the peers again.
//!
//! `out_of_memory` runs once per request refused for lack of memory, after everything the request took was given
//! back, with no npualloc lock held and the error's report.
//!
//! `segment` runs for every piece of device memory the allocator comes to hold or stops holding, on the thread that
//! caused it: on a growth with that stream's shard lock held; on a give-back with the `ladder` lock too (which a
//! request on another stream waits for only in the ladder, garbage collection or a `reserved_headroom` move; a free
//! only tries it); never the handle cache's lock, the peers' registry lock or one a cache hit takes. RESERVE after
//! a range is reserved, before anything is mapped in it; MAP after memory is mapped (or obtained), before any is
//! handed out; UNMAP before the call that unmaps or frees it; RELEASE after the range's last UNMAP, before the call
//! that releases it. A call failing after its UNMAP or RELEASE is followed by MAP or RESERVE again: the memory is
//! still held. A communication library registers npualloc's memory there (docs/sharing.md, "Registration").
//!
//! No cache hit and no free that keeps its memory reads the hooks (a growth reads one flag for `segment`).
//! Replacing or removing a hook waits for other threads' calls of the old one (`Slot`).

use std::cell::Cell;
use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, Condvar, Mutex, RwLock};

/// As the C API's `npualloc_release_hook`.
pub type ReleaseHook = unsafe extern "C" fn(user: *mut c_void, device: i32);

/// As the C API's `npualloc_oom_hook`: `report` is a NUL-terminated string valid during the call.
pub type OomHook = unsafe extern "C" fn(user: *mut c_void, device: i32, requested: usize, report: *const c_char);

/// What happened to a piece of device memory; its value is the C API's `npualloc_segment_event`.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentEvent {
    /// A virtual range reserved (expandable segments): addr, size; no handle.
    Reserve = 1,
    /// That range is about to be released.
    Release = 2,
    /// Physical memory mapped at addr..addr+size: its handle, or an `aclrtMalloc` segment (no handle).
    Map = 3,
    /// That memory is about to be unmapped, or freed.
    Unmap = 4,
}

/// As the C API's `npualloc_segment_hook`: `event` is a `SegmentEvent`'s value, `pool` the pool id (0: default).
pub type SegmentHook = unsafe extern "C" fn(
    user: *mut c_void,
    device: i32,
    event: i32,
    addr: *mut c_void,
    size: usize,
    handle: *mut c_void,
    pool: u64,
);

/// One piece of device memory an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPiece {
    pub addr: usize,
    pub size: usize,
    /// The physical handle (`aclrtDrvMemHandle`), null for a range or a fixed segment.
    pub handle: *mut c_void,
    pub pool: u64,
}

/// One registration and the calls of it under way.
struct Installed<F> {
    f: F,
    user: *mut c_void,
    calls: Mutex<usize>,
    done: Condvar,
}

// SAFETY: `user` is opaque, only handed back to the host's function, which the host promised (C API contract) may be
// called from any thread with it.
unsafe impl<F: Send> Send for Installed<F> {}
// SAFETY: as above; npualloc never dereferences `user`.
unsafe impl<F: Sync> Sync for Installed<F> {}

thread_local! {
    /// How many hook calls this thread is inside. A plain counter has no destructor, so it stays readable from
    /// other thread-locals' destructors at exit.
    static CALLING: Cell<usize> = const { Cell::new(0) };
}

/// A hook slot. Replacing or removing the hook waits until other threads' calls of the old one have returned, so the
/// host may then free what `user` points to. A setter inside any hook call does not wait (two hooks removing each
/// other would wait forever); the old hook may then still run elsewhere. Neither side holds a lock a malloc or free
/// needs: callers copy the registration out and count themselves in under the slot's short lock.
pub(super) struct Slot<F> {
    current: RwLock<Option<Arc<Installed<F>>>>,
    /// Whether `current` holds a hook, written under its write lock: one load tells there is nothing to call.
    occupied: std::sync::atomic::AtomicBool,
    /// Setters waiting for calls of an old registration (tests watch it).
    #[cfg(test)]
    waiting: std::sync::atomic::AtomicUsize,
}

impl<F> Default for Slot<F> {
    fn default() -> Self {
        Slot {
            current: RwLock::new(None),
            occupied: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            waiting: Default::default(),
        }
    }
}

impl<F: Copy> Slot<F> {
    pub(super) fn set(&self, hook: Option<(F, *mut c_void)>) {
        let fresh = hook.map(|(f, user)| Arc::new(Installed { f, user, calls: Mutex::new(0), done: Condvar::new() }));
        let old = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            self.occupied.store(fresh.is_some(), std::sync::atomic::Ordering::Release);
            std::mem::replace(&mut *current, fresh)
        };
        let Some(old) = old else { return };
        // Inside a hook call, waiting could wait for a thread that waits for this one.
        if CALLING.with(|c| c.get() > 0) {
            return;
        }
        let mut calls = old.calls.lock().unwrap_or_else(|e| e.into_inner());
        while *calls > 0 {
            #[cfg(test)]
            self.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            calls = old.done.wait(calls).unwrap_or_else(|e| e.into_inner());
        }
    }

    #[cfg(test)]
    fn is_set(&self) -> bool {
        self.current.read().map(|r| r.is_some()).unwrap_or(false)
    }

    /// Runs `call(f, user)` with the hook, if any.
    fn call(&self, call: impl FnOnce(F, *mut c_void)) {
        let installed = {
            let slot = self.current.read().unwrap_or_else(|e| e.into_inner());
            let Some(i) = slot.as_ref() else { return };
            // Counted in under the read lock: a setter that took the registration out waits for this call.
            *i.calls.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            i.clone()
        };
        CALLING.with(|c| c.set(c.get() + 1));
        /// Counts the call out even if the host's function unwinds.
        struct Out<'a, F>(&'a Installed<F>);
        impl<F> Drop for Out<'_, F> {
            fn drop(&mut self) {
                CALLING.with(|c| c.set(c.get() - 1));
                *self.0.calls.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                self.0.done.notify_all();
            }
        }
        let _out = Out(&installed);
        call(installed.f, installed.user);
    }
}

/// The hook slots; a setter installs or removes (None) a hook, waiting as `Slot` says.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(super) before_release: Slot<ReleaseHook>,
    pub(super) oom: Slot<OomHook>,
    pub(super) segment: Slot<SegmentHook>,
}

impl Hooks {
    /// Runs the before-release hook, if any. The caller holds no npualloc lock.
    #[cold]
    pub fn before_release(&self, device: i32) {
        self.before_release.call(|f, user| {
            // SAFETY: `f` and `user` come from the host together for this call; the registration stays until it
            // returns.
            unsafe { f(user, device) }
        });
    }

    /// Whether a segment observer is set (a caller may skip building events): one load, no lock.
    #[inline]
    pub fn observes_segments(&self) -> bool {
        self.segment.occupied.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs the segment observer, if any, for `event` on `piece` of `device`.
    #[cold]
    pub fn segment(&self, device: i32, event: SegmentEvent, piece: SegmentPiece) {
        if !self.observes_segments() {
            return;
        }
        self.segment.call(|f, user| {
            // SAFETY: `f` and `user` come from the host together; the arguments are plain values.
            unsafe { f(user, device, event as i32, piece.addr as *mut c_void, piece.size, piece.handle, piece.pool) }
        });
    }

    /// Runs the out-of-memory observer, if any, for a refused request. The caller holds no npualloc lock.
    #[cold]
    pub fn out_of_memory(&self, device: i32, requested: usize, report: &str) {
        self.oom.call(|f, user| {
            // Made only when an observer is installed.
            let text = CString::new(report.replace('\0', " ")).unwrap_or_default();
            // SAFETY: `f` and `user` come from the host together; `text` outlives the call.
            unsafe { f(user, device, requested, text.as_ptr()) }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// What the test hook uses: it says it entered, then waits to be let go.
    struct Gate {
        entered: mpsc::SyncSender<()>,
        go: Mutex<mpsc::Receiver<()>>,
        calls: AtomicUsize,
    }

    unsafe extern "C" fn gate(user: *mut c_void, _device: i32) {
        // SAFETY: the test passes a `Gate` that outlives every call.
        let g = unsafe { &*(user as *const Gate) };
        g.calls.fetch_add(1, Ordering::SeqCst);
        g.entered.send(()).unwrap();
        g.go.lock().unwrap().recv().unwrap();
    }

    /// Removing the hook while another thread is inside it returns only
    /// after that call has: the setter is seen waiting (not returned) while
    /// the call is held, and the hook is not called after removal. No
    /// timing: the test waits for one of two states and checks which.
    #[test]
    fn removal_waits_for_calls_under_way_on_other_threads() {
        let hooks = Hooks::default();
        let (entered_tx, entered) = mpsc::sync_channel(1);
        let (go, go_rx) = mpsc::channel();
        let g = Gate { entered: entered_tx, go: Mutex::new(go_rx), calls: AtomicUsize::new(0) };
        hooks.before_release.set(Some((gate, &g as *const Gate as *mut c_void)));
        let removed = AtomicBool::new(false);
        std::thread::scope(|s| {
            let caller = s.spawn(|| hooks.before_release(3));
            entered.recv().unwrap();
            let remover = s.spawn(|| {
                hooks.before_release.set(None);
                removed.store(true, Ordering::SeqCst);
            });
            while !removed.load(Ordering::SeqCst) && hooks.before_release.waiting.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            let returned_early = removed.load(Ordering::SeqCst);
            go.send(()).unwrap();
            caller.join().unwrap();
            remover.join().unwrap();
            assert!(!returned_early, "set_before_release(NULL) returned while the hook was still running");
        });
        assert!(removed.load(Ordering::SeqCst));
        hooks.before_release(3);
        assert_eq!(g.calls.load(Ordering::SeqCst), 1, "a removed hook was called");
    }

    unsafe extern "C" fn remove_self(user: *mut c_void, _device: i32) {
        // SAFETY: the test passes its `Hooks` as `user`.
        let hooks = unsafe { &*(user as *const Hooks) };
        hooks.before_release.set(None);
    }

    /// A hook that removes itself does not wait for its own call.
    #[test]
    fn a_hook_may_remove_itself() {
        let hooks = Hooks::default();
        hooks.before_release.set(Some((remove_self, &hooks as *const Hooks as *mut c_void)));
        hooks.before_release(0);
        assert!(!hooks.before_release.is_set());
    }

    static IN_RELEASE: AtomicUsize = AtomicUsize::new(0);
    static IN_OOM: AtomicUsize = AtomicUsize::new(0);

    /// Removes the out-of-memory observer once that observer is running.
    unsafe extern "C" fn remove_oom(user: *mut c_void, _device: i32) {
        // SAFETY: the test passes a leaked `Hooks` as `user`.
        let hooks = unsafe { &*(user as *const Hooks) };
        IN_RELEASE.store(1, Ordering::SeqCst);
        while IN_OOM.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        hooks.oom.set(None);
        IN_RELEASE.store(2, Ordering::SeqCst);
    }

    /// Removes the before-release hook once that hook is running.
    unsafe extern "C" fn remove_release(user: *mut c_void, _device: i32, _requested: usize, _report: *const c_char) {
        // SAFETY: as above.
        let hooks = unsafe { &*(user as *const Hooks) };
        IN_OOM.store(1, Ordering::SeqCst);
        while IN_RELEASE.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        hooks.before_release.set(None);
        IN_OOM.store(2, Ordering::SeqCst);
    }

    /// Two hooks, running at once on two threads, each remove the other: a
    /// setter called from inside a hook does not wait, so both return
    /// (waiting, each would wait for the other forever). The test watches
    /// for either state and checks which came; the hooks are leaked, as a
    /// failing run leaves its threads stuck.
    #[test]
    fn hooks_removing_each_other_from_inside_their_calls_do_not_deadlock() {
        let hooks: &'static Hooks = Box::leak(Box::default());
        let user = hooks as *const Hooks as *mut c_void;
        hooks.before_release.set(Some((remove_oom, user)));
        hooks.oom.set(Some((remove_release, user)));
        std::thread::spawn(move || hooks.before_release(0));
        std::thread::spawn(move || hooks.out_of_memory(0, 1, "test"));
        loop {
            let returned = IN_RELEASE.load(Ordering::SeqCst) == 2 && IN_OOM.load(Ordering::SeqCst) == 2;
            let both_wait =
                hooks.before_release.waiting.load(Ordering::SeqCst) > 0 && hooks.oom.waiting.load(Ordering::SeqCst) > 0;
            assert!(!both_wait, "each hook waits in its setter for the other's call to return");
            if returned {
                break;
            }
            std::thread::yield_now();
        }
        assert!(!hooks.before_release.is_set() && !hooks.oom.is_set());
    }
}
