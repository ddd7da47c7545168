//! One pool's own figures for `pool_get_stats` (Note [pools]), kept off the hit path: device calls count
//! while the thread is inside `stats::count_for` of the pool's counters. Its allocated and requested peaks
//! rise when one of its streams passes its high-water mark (Note [peaks without a shared counter]), its
//! reserved peak when a shard grows, each to the sum over the pool's shards. The `Device` methods that keep
//! them up to date are in `pools`.

use crate::core::report::stats::{Cumulative, DeviceCounters, Mark, Stats};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

#[derive(Debug, Default)]
pub(crate) struct PoolTally {
    /// Device calls made for the pool's memory.
    pub calls: Arc<DeviceCounters>,
    /// The pool's peaks of its summed (allocated, requested) bytes.
    pub peaks: Mark,
    reserved_peak: AtomicU64,
    /// Per pool kind, the cumulative figures of the pool's shards that went to another pool since.
    left: [Left; 2],
}

/// `Cumulative` figures kept by a pool.
#[derive(Debug, Default)]
struct Left {
    allocs: AtomicU64,
    frees: AtomicU64,
    allocated_total: AtomicU64,
}

impl Left {
    fn add_to(&self, s: &mut Stats) {
        s.num_allocs += self.allocs.load(Relaxed);
        s.num_frees += self.frees.load(Relaxed);
        s.allocated_bytes_total += self.allocated_total.load(Relaxed);
    }
}

impl PoolTally {
    /// The pool's held bytes after a growth.
    pub fn raise_reserved(&self, held: u64) {
        self.reserved_peak.fetch_max(held, Relaxed);
    }

    /// Peaks become the given current figures (`reset_peak_stats`).
    pub fn reset(&self, allocated: u64, requested: u64, held: u64) {
        self.peaks.set((allocated, requested));
        self.reserved_peak.store(held, Relaxed);
        self.calls.reset_peak();
    }

    /// Keeps the cumulative figures of a shard of kind `kind` that goes to another pool (`Device::add_entry`).
    pub fn keep(&self, kind: usize, left: Cumulative) {
        let l = &self.left[kind & 1];
        l.allocs.fetch_add(left.allocs, Relaxed);
        l.frees.fetch_add(left.frees, Relaxed);
        l.allocated_total.fetch_add(left.allocated_total, Relaxed);
    }

    /// Adds the figures kept by `keep` to `s` (the device's totals and the pool's own).
    pub fn add_kept_counts(&self, s: &mut Stats) {
        self.left.iter().for_each(|l| l.add_to(s));
    }

    /// Adds those of pool kind `kind` to `s`.
    pub fn add_kept_counts_of(&self, kind: usize, s: &mut Stats) {
        self.left[kind & 1].add_to(s);
    }

    /// Fills the device-call counters, kept counts and peaks of `s`, which holds the pool's shards' figures.
    pub fn add_to(&self, s: &mut Stats) {
        self.add_kept_counts(s);
        let (reserved, segments) = (s.reserved_bytes, s.segments);
        self.calls.add_to(s);
        // The pool's reserved memory is its segments' (cached handles belong to no pool).
        s.reserved_bytes = reserved;
        s.segments = segments;
        s.segments_peak = s.segments_peak.max(segments);
        s.reserved_bytes_peak = self.reserved_peak.load(Relaxed).max(reserved);
        self.peaks.add_to(s);
    }
}
