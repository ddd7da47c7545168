//! Statistics, kept where they change so that no counter is a cache line
//! every stream's hits write:
//! - block counters (allocated, requested, active, allocs, frees) live in
//!   each shard and change under its lock (`ShardCounters`);
//! - device counters (reserved memory, device calls, retries, OOMs) change
//!   only around device calls, so they are shared atomics (`DeviceCounters`);
//! - peaks of the block counters summed over shards are kept by `Peaks`
//!   (see Note [peaks without a shared counter]).
//!
//! `Stats` is the sum, read by `DeviceAllocator::stats`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters in PyTorch's `memory_stats()` vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub allocated_bytes: u64,
    pub allocated_bytes_peak: u64,
    pub requested_bytes: u64,
    pub requested_bytes_peak: u64,
    pub reserved_bytes: u64,
    pub reserved_bytes_peak: u64,
    pub active_blocks: u64,
    pub segments: u64,
    pub num_allocs: u64,
    pub num_frees: u64,
    pub num_device_mallocs: u64,
    pub num_device_frees: u64,
    pub num_maps: u64,
    pub num_unmaps: u64,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_syncs: u64,
    pub num_physical_mallocs: u64,
    pub num_physical_frees: u64,
    /// Filled on read (not a counter).
    pub largest_free_block: u64,
}

/// Block counters of one shard (changed under its lock).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardCounters {
    pub allocated: u64,
    pub requested: u64,
    pub active: u64,
    pub allocs: u64,
    pub frees: u64,
}

impl ShardCounters {
    #[inline]
    pub fn block_allocated(&mut self, size: usize, requested: usize) {
        self.allocated += size as u64;
        self.requested += requested as u64;
        self.active += 1;
        self.allocs += 1;
    }

    #[inline]
    pub fn block_freed(&mut self, size: usize, requested: usize) {
        self.allocated -= size as u64;
        self.requested -= requested as u64;
        self.active -= 1;
        self.frees += 1;
    }

    pub fn add_to(&self, s: &mut Stats) {
        s.allocated_bytes += self.allocated;
        s.requested_bytes += self.requested;
        s.active_blocks += self.active;
        s.num_allocs += self.allocs;
        s.num_frees += self.frees;
    }
}

/// Device-wide counters: they change around device calls only.
#[derive(Debug, Default)]
pub(crate) struct DeviceCounters {
    reserved: AtomicU64,
    reserved_peak: AtomicU64,
    segments: AtomicU64,
    device_mallocs: AtomicU64,
    device_frees: AtomicU64,
    maps: AtomicU64,
    unmaps: AtomicU64,
    retries: AtomicU64,
    ooms: AtomicU64,
    syncs: AtomicU64,
    physical_mallocs: AtomicU64,
    physical_frees: AtomicU64,
}

impl DeviceCounters {
    fn reserve(&self, size: usize) {
        let now = self.reserved.fetch_add(size as u64, Relaxed) + size as u64;
        self.reserved_peak.fetch_max(now, Relaxed);
    }

    /// A fixed segment obtained with `aclrtMalloc`.
    pub fn segment_added(&self, size: usize) {
        self.reserve(size);
        self.segments.fetch_add(1, Relaxed);
        self.device_mallocs.fetch_add(1, Relaxed);
    }

    /// A fixed segment returned with `aclrtFree`.
    pub fn segment_removed(&self, size: usize) {
        self.reserved.fetch_sub(size as u64, Relaxed);
        self.segments.fetch_sub(1, Relaxed);
        self.device_frees.fetch_add(1, Relaxed);
    }

    /// An expandable segment (address range) was created; it holds no memory yet.
    pub fn range_added(&self) {
        self.segments.fetch_add(1, Relaxed);
    }

    pub fn range_removed(&self) {
        self.segments.fetch_sub(1, Relaxed);
    }

    /// A physical handle was obtained: it is reserved until freed.
    pub fn physical_allocated(&self, size: usize) {
        self.reserve(size);
        self.physical_mallocs.fetch_add(1, Relaxed);
    }

    pub fn physical_freed(&self, size: usize) {
        self.reserved.fetch_sub(size as u64, Relaxed);
        self.physical_frees.fetch_add(1, Relaxed);
    }

    pub fn page_mapped(&self) {
        self.maps.fetch_add(1, Relaxed);
    }

    pub fn page_unmapped(&self) {
        self.unmaps.fetch_add(1, Relaxed);
    }

    pub fn synced(&self) {
        self.syncs.fetch_add(1, Relaxed);
    }

    pub fn retried(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    pub fn oom(&self) {
        self.ooms.fetch_add(1, Relaxed);
    }

    pub fn reserved(&self) -> usize {
        self.reserved.load(Relaxed) as usize
    }

    pub fn reset_peak(&self) {
        self.reserved_peak.store(self.reserved.load(Relaxed), Relaxed);
    }

    pub fn add_to(&self, s: &mut Stats) {
        s.reserved_bytes = self.reserved.load(Relaxed);
        s.reserved_bytes_peak = self.reserved_peak.load(Relaxed);
        s.segments = self.segments.load(Relaxed);
        s.num_device_mallocs = self.device_mallocs.load(Relaxed);
        s.num_device_frees = self.device_frees.load(Relaxed);
        s.num_maps = self.maps.load(Relaxed);
        s.num_unmaps = self.unmaps.load(Relaxed);
        s.num_alloc_retries = self.retries.load(Relaxed);
        s.num_ooms = self.ooms.load(Relaxed);
        s.num_syncs = self.syncs.load(Relaxed);
        s.num_physical_mallocs = self.physical_mallocs.load(Relaxed);
        s.num_physical_frees = self.physical_frees.load(Relaxed);
    }
}

// Note [peaks without a shared counter]
//
// The peak of allocated bytes is a peak of a sum over shards. Adding every
// change to one shared counter would make every hit on every stream write
// the same cache line. Instead each shard publishes its own totals (a plain
// store to its own line) and holds a *budget*: the budgets sum to at most
// the peak, so while every shard stays within its budget the sum cannot
// pass the peak and nothing shared is written. A shard that would pass its
// budget takes the slow path: under `Peaks`' mutex it sums the others'
// published totals, raises the peak if the sum passed it, and takes what
// budget the others do not use. With one thread the peak is exact; with
// several it can miss at most the block each other shard is handing out
// at that instant (its budget was cut while it checked the old one).

/// What one shard publishes for the peaks, and its budget.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    allocated: AtomicU64,
    requested: AtomicU64,
    budget_allocated: AtomicU64,
    budget_requested: AtomicU64,
}

impl Lane {
    /// Publishes a shard's totals; true when they pass its budget (the
    /// caller then calls `Peaks::raise`).
    #[inline]
    pub fn publish(&self, c: &ShardCounters) -> bool {
        self.allocated.store(c.allocated, Relaxed);
        self.requested.store(c.requested, Relaxed);
        c.allocated > self.budget_allocated.load(Relaxed) || c.requested > self.budget_requested.load(Relaxed)
    }

    pub fn allocated(&self) -> u64 {
        self.allocated.load(Relaxed)
    }
}

/// The peaks of allocated and requested bytes over all shards.
#[derive(Debug, Default)]
pub(crate) struct Peaks {
    /// (allocated, requested) peaks; the mutex also serializes budget moves.
    peaks: Mutex<(u64, u64)>,
    allocated: AtomicU64,
    requested: AtomicU64,
}

impl Peaks {
    /// Shard `me` passed its budget: raise the peaks if the sum passed them
    /// and give `me` a budget covering its totals.
    #[cold]
    #[inline(never)]
    pub fn raise<'a>(&self, me: &Lane, lanes: impl Iterator<Item = &'a Lane>) {
        let mut peaks = self.peaks.lock().unwrap_or_else(|e| e.into_inner());
        let others: Vec<&Lane> = lanes.filter(|l| !std::ptr::eq(*l, me)).collect();
        peaks.0 = settle(
            (&me.allocated, &me.budget_allocated),
            peaks.0,
            others.iter().map(|l| (&l.allocated, &l.budget_allocated)),
        );
        peaks.1 = settle(
            (&me.requested, &me.budget_requested),
            peaks.1,
            others.iter().map(|l| (&l.requested, &l.budget_requested)),
        );
        self.allocated.store(peaks.0, Relaxed);
        self.requested.store(peaks.1, Relaxed);
    }

    /// Peaks become the current sums; budgets their shards' totals.
    pub fn reset<'a>(&self, lanes: impl Iterator<Item = &'a Lane>) {
        let mut peaks = self.peaks.lock().unwrap_or_else(|e| e.into_inner());
        let (mut a, mut r) = (0, 0);
        for l in lanes {
            let (la, lr) = (l.allocated.load(Relaxed), l.requested.load(Relaxed));
            l.budget_allocated.store(la, Relaxed);
            l.budget_requested.store(lr, Relaxed);
            a += la;
            r += lr;
        }
        *peaks = (a, r);
        self.allocated.store(a, Relaxed);
        self.requested.store(r, Relaxed);
    }

    pub fn add_to(&self, s: &mut Stats) {
        s.allocated_bytes_peak = self.allocated.load(Relaxed).max(s.allocated_bytes);
        s.requested_bytes_peak = self.requested.load(Relaxed).max(s.requested_bytes);
    }

    pub fn allocated(&self) -> u64 {
        self.allocated.load(Relaxed)
    }
}

/// One quantity of `Peaks::raise`: `me` is (total, budget) of the shard
/// that passed its budget, `others` those of every other shard. Returns the
/// new peak; budgets still sum to at most it.
fn settle<'a>(
    me: (&AtomicU64, &AtomicU64),
    peak: u64,
    others: impl Iterator<Item = (&'a AtomicU64, &'a AtomicU64)> + Clone,
) -> u64 {
    let want = me.0.load(Relaxed);
    let given: u64 = others.clone().map(|(_, b)| b.load(Relaxed)).sum();
    if want + given <= peak {
        me.1.store(peak - given, Relaxed);
        return peak;
    }
    // Take back what the others hold beyond their totals.
    let mut used = 0;
    for (total, budget) in others {
        let t = total.load(Relaxed);
        budget.store(t, Relaxed);
        used += t;
    }
    let peak = peak.max(want + used);
    me.1.store(peak - used, Relaxed);
    peak
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bump(l: &Lane, c: &mut ShardCounters, size: i64, peaks: &Peaks, all: &[&Lane]) {
        if size > 0 {
            c.block_allocated(size as usize, size as usize);
        } else {
            c.block_freed((-size) as usize, (-size) as usize);
        }
        if l.publish(c) {
            peaks.raise(l, all.iter().copied());
        }
    }

    /// Two shards from one thread: the peak is the highest sum, not the sum
    /// of each shard's highest.
    #[test]
    fn peak_is_the_highest_sum_over_shards() {
        let (a, b) = (Lane::default(), Lane::default());
        let (mut ca, mut cb) = (ShardCounters::default(), ShardCounters::default());
        let p = Peaks::default();
        let all = [&a, &b];
        bump(&a, &mut ca, 100, &p, &all);
        bump(&a, &mut ca, -100, &p, &all);
        bump(&b, &mut cb, 60, &p, &all);
        assert_eq!(p.allocated(), 100, "60 after 100 was freed does not raise the peak");
        bump(&a, &mut ca, 50, &p, &all);
        assert_eq!(p.allocated(), 110, "50 + 60 live together");
        bump(&b, &mut cb, -60, &p, &all);
        bump(&a, &mut ca, 40, &p, &all);
        assert_eq!(p.allocated(), 110);
        bump(&b, &mut cb, 30, &p, &all);
        assert_eq!(p.allocated(), 120, "90 + 30");
        p.reset(all.iter().copied());
        assert_eq!(p.allocated(), 120);
        bump(&b, &mut cb, -30, &p, &all);
        p.reset(all.iter().copied());
        assert_eq!(p.allocated(), 90);
        bump(&b, &mut cb, 5, &p, &all);
        assert_eq!(p.allocated(), 95);
    }
}
