//! The npualloc allocators of this process, so that one about to refuse a
//! request first asks the others of its device to give back their free
//! cache: two allocators of one device (a GE host's and torch_npu's, a host's
//! own beside torch_npu's) never starve each other.
//!
//! Each asked allocator runs its own ladder's safe steps: its host hook
//! first, then, under its `ladder` lock, the cached memory of its default
//! pool's streams (after synchronizing the streams that used it) and its
//! cached physical handles. Private pools and graph memory keep theirs, as
//! in its own ladder.
//!
//! Asking waits, it never skips: an allocator whose ladder is busy is
//! waited for, and so is another thread asking at the same time, so a
//! request is refused only once every other allocator of the device has
//! given back its cache (what it gives back may have gone to another
//! request meanwhile; the asker retries either way). Waiting cannot
//! deadlock because:
//! - the asker holds no npualloc lock while it asks: not its own `ladder`
//!   (the ladder drops it first), no shard lock, and not `PEERS`, which is
//!   held only to look up, pin and unpin entries, never across a call into
//!   an allocator;
//! - an asked allocator takes only its own `ladder` lock and then its own
//!   shard locks, the order of its own ladder; no holder of a `ladder` lock
//!   waits for an ask, a pin or `PEERS`;
//! - a thread asks at most once at a time: a host hook run from inside an
//!   ask that allocates again and reaches this step on the same thread
//!   skips it (`ASKING`), as the ask under way is giving memory back
//!   already; without that, hook and ask would recurse without end;
//! - an asker pins one allocator at a time, so a host hook that destroys
//!   another allocator waits only for other threads' asks of it.
//!
//! Invariants: an entry points to a `DeviceAllocator` at a stable address
//! (boxed or `'static`), added by `join` and removed by `leave` before the
//! allocator is torn down or dropped. An entry is dereferenced only under
//! `PEERS` or while pinned (`uses > 0`); `leave` marks it `leaving` (no new
//! pin), waits until `uses` is 0 and only then removes it, so once `leave`
//! returns no thread will dereference the allocator. Entries stay in the
//! order they joined (`serial` ascending), which is the order they are
//! asked in.

use super::backing::Memory;
use super::device::Device;
use super::DeviceAllocator;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

struct Entry {
    allocator: *const DeviceAllocator,
    /// When it joined: an asker walks the entries by serial, pinning one at
    /// a time, so entries joining or leaving meanwhile neither repeat nor
    /// hide the others.
    serial: u64,
    /// Askers using the allocator now.
    uses: usize,
    /// `leave` waits for `uses` to drop to 0: no new use begins.
    leaving: bool,
}

// SAFETY: a DeviceAllocator is Sync; the pointer is only dereferenced under
// PEERS or while pinned, while the allocator is alive (module invariants).
unsafe impl Send for Entry {}

struct Peers {
    entries: Vec<Entry>,
    next_serial: u64,
}

static PEERS: Mutex<Peers> = Mutex::new(Peers { entries: Vec::new(), next_serial: 0 });

/// Signalled when the last use of a leaving entry ends.
static USE_ENDED: Condvar = Condvar::new();

thread_local! {
    /// This thread is asking the others now (a host hook run from inside
    /// the ask called npualloc again). A plain flag: no destructor.
    static ASKING: Cell<bool> = const { Cell::new(false) };
}

fn peers() -> MutexGuard<'static, Peers> {
    PEERS.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: Memory> Device<B> {
    /// Identifies this allocator among its peers: its shared state's
    /// address, the same for as long as the allocator lives.
    pub(super) fn peer_key(&self) -> usize {
        Arc::as_ptr(&self.sh) as *const () as usize
    }
}

/// Adds `allocator` to the allocators that are asked.
///
/// # Safety
/// `allocator` stays at its address until it is torn down or dropped (both
/// call [`leave`]).
pub(crate) unsafe fn join(allocator: &DeviceAllocator) {
    let mut peers = peers();
    let serial = peers.next_serial;
    peers.next_serial += 1;
    peers.entries.push(Entry { allocator, serial, uses: 0, leaving: false });
    allocator.joined.store(true, Ordering::Release);
}

/// Removes `allocator` (nothing if it never joined), after every ask of it
/// in progress has ended. Must not be called from inside an ask of
/// `allocator` on the same thread (its host hook destroying it), which
/// would wait for itself.
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
        super::testpoint::hit("peers: leave waits");
        peers = USE_ENDED.wait(peers).unwrap_or_else(|e| e.into_inner());
    }
}

/// One asker's use of an entry; ends (unpins) when dropped, unwinding too.
struct Pinned {
    allocator: *const DeviceAllocator,
    serial: u64,
}

impl Pinned {
    /// Pins the first entry after `after` (by serial) that is another
    /// allocator (`own` is the asker's `peer_key`) of `device` over the
    /// runtime library `source`, and not leaving.
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

    fn allocator(&self) -> &DeviceAllocator {
        // SAFETY: pinned, so `leave` has not returned and the allocator is
        // alive (module invariants).
        unsafe { &*self.allocator }
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

/// Asks every other allocator of `device` over the runtime library `source`
/// to give back its free cache (`own` is the asker's `Device::peer_key`),
/// one after the other, waiting for each. The caller holds no npualloc
/// lock. Returns how many were asked: 0 when there are none, or when this
/// thread is already asking (a host hook of an asked allocator called
/// npualloc again).
pub(super) fn ask_others(own: usize, device: i32, source: &str) -> usize {
    if ASKING.with(|a| a.replace(true)) {
        return 0;
    }
    let _asking = Asking;
    let mut asked = 0;
    let mut after = None;
    while let Some(peer) = Pinned::next(after, own, device, source) {
        after = Some(peer.serial);
        peer.allocator().give_back_to_peer();
        asked += 1;
    }
    asked
}
