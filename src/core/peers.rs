//! The npualloc allocators of this process, so that one about to refuse a
//! request first asks the others of its device to give back their free
//! cache: two allocators of one device (a GE host's and torch_npu's, a host's
//! own beside torch_npu's) never starve each other.
//!
//! Each asked allocator runs its own ladder's safe steps: its host hook
//! first, then, under its `ladder` lock, the cached memory of its default
//! pool's streams (after synchronizing the streams that used it) and its
//! cached physical handles. Private pools and graph memory keep theirs, as
//! in its own ladder. An allocator busy in its own ladder, or in teardown,
//! is skipped: it is giving memory back already, and waiting for it could
//! deadlock two allocators asking each other.
//!
//! Invariants: an entry points to a `DeviceAllocator` at a stable address
//! (boxed or `'static`), added by `join` and removed by `leave` before the
//! allocator is torn down or dropped. Every use of an entry holds `PEERS`,
//! so `leave` waits until a use in progress has ended. Asking takes `PEERS`
//! with `try_lock`: a second asker (or a host hook that allocates again
//! from inside an asked allocator) skips the step rather than waiting.

use super::DeviceAllocator;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, TryLockError};

struct Entry(*const DeviceAllocator);

// SAFETY: a DeviceAllocator is Sync; the pointer is only dereferenced under
// PEERS while the allocator is alive (the module's invariants).
unsafe impl Send for Entry {}

static PEERS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Adds `allocator` to the allocators that are asked.
///
/// # Safety
/// `allocator` stays at its address until it is torn down or dropped (both
/// call [`leave`]).
pub(crate) unsafe fn join(allocator: &DeviceAllocator) {
    let mut peers = PEERS.lock().unwrap_or_else(|e| e.into_inner());
    peers.push(Entry(allocator));
    allocator.joined.store(true, Ordering::Release);
}

/// Removes `allocator` (nothing if it never joined), after any use of it in
/// progress has ended.
pub(crate) fn leave(allocator: &DeviceAllocator) {
    if !allocator.joined.swap(false, Ordering::AcqRel) {
        return;
    }
    let mut peers = PEERS.lock().unwrap_or_else(|e| e.into_inner());
    peers.retain(|e| !std::ptr::eq(e.0, allocator));
}

/// Asks every other allocator of `device` over the runtime library `source`
/// to give back its free cache (`own` is the asker's `DeviceAllocator::key`).
/// Returns the bytes given back; 0 when another thread is asking.
pub(super) fn ask_others(own: usize, device: i32, source: &str) -> usize {
    let peers = match PEERS.try_lock() {
        Ok(p) => p,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return 0,
    };
    let mut given = 0;
    for entry in peers.iter() {
        // SAFETY: entries are alive while PEERS is held (module invariants).
        let peer = unsafe { &*entry.0 };
        if peer.key() != own && peer.device() == device && peer.runtime().source() == source {
            given += peer.give_back_to_peer();
        }
    }
    given
}
