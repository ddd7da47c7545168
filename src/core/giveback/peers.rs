//! The npualloc allocators of this process: one about to refuse a request first asks the others of its
//! device to give back their free cache (their ladder's safe steps), so they never starve each other.
//! Asking waits, it never skips, so a request is refused only once every other allocator has given back its
//! cache. Waiting cannot deadlock because:
//! - the asker holds no npualloc lock while it asks: not its `ladder`, no shard lock, and not `PEERS`, which
//!   is held only to look up, pin and unpin entries, never across a call into an allocator;
//! - an asked allocator takes only its own `ladder` lock, then its own shard locks; no holder of a `ladder`
//!   lock waits for an ask, a pin or `PEERS`;
//! - a thread asks at most once at a time: a host hook that reaches this step again from inside an ask
//!   skips it (`ASKING`), else hook and ask would recurse without end;
//! - an asker pins one allocator at a time, so a host hook that destroys another allocator waits only for
//!   other threads' asks of it.
//!
//! Invariants: an entry points to a `DeviceAllocator` at a stable address until `leave`, which runs before
//! the allocator is torn down or dropped. It is dereferenced only under `PEERS` or while pinned (`uses > 0`);
//! `leave` marks it `leaving` (no new pin) and removes it once `uses` is 0. Entries are asked in join order.

use crate::core::alloc::device::Device;
use crate::core::backing::Memory;
use crate::core::DeviceAllocator;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

struct Entry {
    allocator: *const DeviceAllocator,
    /// Join order: an asker walks by serial, pinning one at a time, so entries joining or leaving meanwhile
    /// neither repeat nor hide the others.
    serial: u64,
    uses: usize,
    /// `leave` waits for `uses` to drop to 0: no new use begins.
    leaving: bool,
}

// SAFETY: a DeviceAllocator is Sync; the pointer is only dereferenced under PEERS or while pinned, while the
// allocator is alive (module invariants).
unsafe impl Send for Entry {}

struct Peers {
    entries: Vec<Entry>,
    next_serial: u64,
}

static PEERS: Mutex<Peers> = Mutex::new(Peers { entries: Vec::new(), next_serial: 0 });

/// Signalled when the last use of a leaving entry ends.
static USE_ENDED: Condvar = Condvar::new();

thread_local! {
    /// This thread is asking the others now. A plain flag: no destructor.
    static ASKING: Cell<bool> = const { Cell::new(false) };
}

fn peers() -> MutexGuard<'static, Peers> {
    PEERS.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: Memory> Device<B> {
    /// Identifies this allocator among its peers: its shared state's address, stable while it lives.
    pub(in crate::core) fn peer_key(&self) -> usize {
        Arc::as_ptr(&self.sh) as *const () as usize
    }
}

/// Adds `allocator` to the allocators that are asked.
///
/// # Safety
/// `allocator` stays at its address until it is torn down or dropped (both call [`leave`]).
pub(crate) unsafe fn join(allocator: &DeviceAllocator) {
    let mut peers = peers();
    let serial = peers.next_serial;
    peers.next_serial += 1;
    peers.entries.push(Entry { allocator, serial, uses: 0, leaving: false });
    allocator.joined.store(true, Ordering::Release);
}

/// Removes `allocator` (nothing if it never joined) once every ask of it in progress has ended. Must not be
/// called from inside an ask of `allocator` on the same thread, which would wait for itself.
pub(crate) fn leave(allocator: &DeviceAllocator) {
    if !allocator.joined.swap(false, Ordering::AcqRel) {
        return;
    }
    let mut peers = peers();
    loop {
        let Some(i) = peers.entries.iter().position(|e| std::ptr::eq(e.allocator, allocator)) else {
            return;
        };
        if peers.entries[i].uses == 0 {
            peers.entries.remove(i);
            return;
        }
        peers.entries[i].leaving = true;
        #[cfg(test)]
        crate::core::testpoint::hit("peers: leave waits");
        peers = USE_ENDED.wait(peers).unwrap_or_else(|e| e.into_inner());
    }
}

/// One asker's use of an entry; ends (unpins) when dropped, unwinding too.
struct Pinned {
    allocator: *const DeviceAllocator,
    serial: u64,
}

impl Pinned {
    /// Pins the first entry after `after` (by serial) that is another allocator (`own` is the asker's
    /// `peer_key`) of `device` over the runtime library `source`, and not leaving.
    fn next(after: Option<u64>, own: usize, device: i32, source: &str) -> Option<Pinned> {
        let mut peers = peers();
        let entry = peers.entries.iter_mut().filter(|e| after.is_none_or(|s| e.serial > s)).find(|e| {
            // SAFETY: listed under PEERS, so alive (module invariants).
            let peer = unsafe { &*e.allocator };
            !e.leaving && peer.key() != own && peer.device() == device && peer.runtime().source() == source
        })?;
        entry.uses += 1;
        Some(Pinned { allocator: entry.allocator, serial: entry.serial })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let mut peers = peers();
        // Present: `leave` removes an entry only once its uses have ended.
        if let Some(e) = peers.entries.iter_mut().find(|e| e.serial == self.serial) {
            e.uses -= 1;
            if e.uses == 0 && e.leaving {
                USE_ENDED.notify_all();
            }
        }
    }
}

/// Clears `ASKING` when the ask ends, unwinding too.
struct Asking;

impl Drop for Asking {
    fn drop(&mut self) {
        ASKING.with(|a| a.set(false));
    }
}

/// Asks every other allocator of `device` over `source` in turn to give back its free cache, waiting for
/// each. The caller holds no npualloc lock. Returns how many were asked (0 if this thread is asking already).
pub(in crate::core) fn ask_others(own: usize, device: i32, source: &str) -> usize {
    if ASKING.with(|a| a.replace(true)) {
        return 0;
    }
    let _asking = Asking;
    let mut asked = 0;
    let mut after = None;
    while let Some(peer) = Pinned::next(after, own, device, source) {
        after = Some(peer.serial);
        // SAFETY: pinned, so `leave` has not returned and the allocator is alive (module invariants).
        unsafe { &*peer.allocator }.give_back_to_peer();
        asked += 1;
    }
    asked
}
