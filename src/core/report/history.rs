//! Memory history: an optional ring of the last N events, in the vocabulary of PyTorch's `device_traces`.
//! Off, recording costs a malloc or free one relaxed load. On, each event takes one mutex shared by every
//! shard of the device: one lock gives one order, so a block's alloc is always listed before its free (both
//! are recorded under the block's shard lock). Entries carry no stack frames.

use crate::runtime::Stream;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// What happened, with PyTorch's action names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A block was handed out; `size` is the size asked for.
    Alloc,
    /// A block was freed by its user; `size` is the size asked for.
    FreeRequested,
    /// A freed block became reusable (at once, or once the other streams that used it finished).
    FreeCompleted,
    /// A fixed segment was obtained with `aclrtMalloc`.
    SegmentAlloc,
    /// A fixed segment was returned with `aclrtFree`.
    SegmentFree,
    /// Physical memory was mapped into an expandable segment.
    SegmentMap,
    /// Physical memory was unmapped from an expandable segment.
    SegmentUnmap,
    /// A request failed for lack of memory; `size` is the size asked for.
    Oom,
    /// A snapshot was taken; `size` is the bytes allocated then.
    Snapshot,
}

impl Action {
    /// The name PyTorch's snapshot gives the action.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub action: Action,
    /// Start address (0 for `Oom`).
    pub addr: usize,
    pub size: usize,
    /// The raw stream handle (0 is the default stream).
    pub stream: usize,
    /// The pool of the block or segment (0: the default pool; Note [pools]).
    pub pool: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// For `Oom`: the device's free bytes as the runtime reported them.
    pub device_free: u64,
}

#[derive(Debug, Default)]
pub(crate) struct History {
    on: AtomicBool,
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    /// At most this many entries are kept; 0 while off.
    capacity: usize,
    entries: VecDeque<Event>,
}

impl History {
    /// Keeps the last `max_entries` events (the newest that fit); 0 turns recording off and drops them.
    pub fn set_capacity(&self, max_entries: usize) {
        let mut ring = self.lock();
        ring.capacity = max_entries;
        if max_entries == 0 {
            ring.entries = VecDeque::new();
        } else {
            let excess = ring.entries.len().saturating_sub(max_entries);
            ring.entries.drain(..excess);
        }
        self.on.store(max_entries > 0, Relaxed);
    }

    #[inline(always)]
    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Records `action` when on.
    #[inline(always)]
    pub fn record(&self, action: Action, addr: usize, size: usize, stream: Stream, pool: u64) {
        if self.is_on() {
            self.push_all(&[(action, addr, size, stream.0, pool, 0)]);
        }
    }

    /// A free: `FreeRequested`, then `FreeCompleted` too when the block is reusable at once.
    #[inline(always)]
    pub fn freed(&self, addr: usize, requested: usize, stream: Stream, pool: u64, completed: bool) {
        if self.is_on() {
            let entry = |action| (action, addr, requested, stream.0, pool, 0);
            // One lock and one clock read for both.
            let both = [entry(Action::FreeRequested), entry(Action::FreeCompleted)];
            self.push_all(&both[..1 + usize::from(completed)]);
        }
    }

    /// An out-of-memory failure; `device_free` is asked only when on.
    pub fn oom(&self, size: usize, stream: Stream, pool: u64, device_free: impl FnOnce() -> u64) {
        if self.is_on() {
            self.push_all(&[(Action::Oom, 0, size, stream.0, pool, device_free())]);
        }
    }

    /// Appends (action, addr, size, stream, pool, device_free) entries with one time stamp.
    #[cold]
    #[inline(never)]
    fn push_all(&self, entries: &[(Action, usize, usize, usize, u64, u64)]) {
        let mut ring = self.lock();
        if ring.capacity == 0 {
            return;
        }
        // Taken under the lock, so times never go backwards along the ring.
        let time_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        for &(action, addr, size, stream, pool, device_free) in entries {
            // Full, or out of host memory (a bound like sys.maxsize means "as many as fit"): the oldest goes.
            let full = ring.entries.len() == ring.capacity || ring.entries.try_reserve(1).is_err();
            if full && ring.entries.pop_front().is_none() {
                return;
            }
            ring.entries.push_back(Event { action, addr, size, stream, pool, time_us, device_free });
        }
    }

    /// The kept events, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.lock().entries.iter().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        // The ring stays consistent whatever panicked while it was held.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(h: &History) -> Vec<usize> {
        h.events().iter().map(|e| e.addr).collect()
    }

    #[test]
    fn off_by_default_and_records_nothing() {
        let h = History::default();
        assert!(!h.is_on());
        h.record(Action::Alloc, 0x1000, 512, Stream(0), 0);
        h.freed(0x1000, 512, Stream(0), 0, true);
        h.oom(1 << 30, Stream(0), 0, || panic!("device_free asked while off"));
        assert!(h.events().is_empty());
    }

    #[test]
    fn keeps_the_last_n_in_order_when_it_wraps() {
        let h = History::default();
        h.set_capacity(3);
        for i in 1..=5 {
            h.record(Action::Alloc, i * 0x1000, i, Stream(7), 3);
        }
        assert_eq!(addrs(&h), [0x3000, 0x4000, 0x5000]);
        let ev = h.events();
        assert!(ev.iter().all(|e| e.action == Action::Alloc && e.stream == 7 && e.pool == 3));
        assert!(ev.windows(2).all(|w| w[0].time_us <= w[1].time_us));
        assert_eq!(ev[2].size, 5);
    }

    #[test]
    fn a_free_completes_at_once_or_later() {
        let h = History::default();
        h.set_capacity(10);
        h.freed(0x1000, 100, Stream(0), 0, true);
        h.freed(0x2000, 200, Stream(0), 0, false);
        h.record(Action::FreeCompleted, 0x2000, 200, Stream(0), 0);
        let got: Vec<_> = h.events().iter().map(|e| (e.action.name(), e.addr)).collect();
        assert_eq!(
            got,
            [
                ("free_requested", 0x1000),
                ("free_completed", 0x1000),
                ("free_requested", 0x2000),
                ("free_completed", 0x2000)
            ]
        );
    }

    #[test]
    fn zero_turns_off_and_clears_and_shrinking_keeps_the_newest() {
        let h = History::default();
        h.set_capacity(4);
        for i in 1..=4 {
            h.record(Action::SegmentAlloc, i, 1, Stream(0), 0);
        }
        h.set_capacity(2);
        assert_eq!(addrs(&h), [3, 4]);
        h.oom(99, Stream(0), 0, || 1234);
        let last = *h.events().last().unwrap();
        assert_eq!((last.action, last.size, last.device_free), (Action::Oom, 99, 1234));
        h.set_capacity(0);
        assert!(!h.is_on());
        assert!(h.events().is_empty());
        h.record(Action::Alloc, 5, 1, Stream(0), 0);
        assert!(h.events().is_empty());
    }

    #[test]
    fn threads_on_many_streams_lose_nothing_below_the_bound() {
        let h = History::default();
        h.set_capacity(4 * 1000);
        std::thread::scope(|s| {
            for t in 0..4usize {
                let h = &h;
                s.spawn(move || {
                    for i in 0..1000 {
                        h.record(Action::Alloc, t << 32 | i, 1, Stream(t), 0);
                    }
                });
            }
        });
        let ev = h.events();
        assert_eq!(ev.len(), 4000);
        // Each thread's events keep their order.
        for t in 0..4usize {
            let mine: Vec<usize> = ev.iter().filter(|e| e.stream == t).map(|e| e.addr & 0xffff_ffff).collect();
            assert_eq!(mine, (0..1000).collect::<Vec<_>>());
        }
    }
}
