//! Statistics, kept where they change so that no counter is a cache line every stream's hits write:
//! - block counters live in each shard and change under its lock (`ShardCounters`);
//! - device counters change only around device calls, so they are shared atomics (`DeviceCounters`);
//! - peaks of the block counters summed over shards are kept by `Peaks` (Note [peaks without a shared counter]).
//!
//! `Stats` is the sum.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The statistics fields (all `u64`) in the C struct's order (`npualloc_stats`; new fields only ever go at the end),
/// named as the Rust and C fields, JSON keys and Python fields. `$then!` gets `name "doc"` for each.
macro_rules! stats_table {
    ($then:ident) => {
        $then! {
            allocated_bytes "Bytes of live blocks, as rounded.",
            allocated_bytes_peak "The most `allocated_bytes` at once: exact while one stream allocates; with several, the highest total seen when some stream reached a new high of its own (kept without a counter every stream writes; a peak that streams each below their own high make together can be missed). Likewise `requested_bytes_peak`.",
            requested_bytes "Bytes of live blocks, as asked.",
            requested_bytes_peak "The most `requested_bytes` at once.",
            reserved_bytes "Device memory held: `segment_bytes` plus `cached_handle_bytes`.",
            reserved_bytes_peak "The most `reserved_bytes` at once.",
            active_blocks "Live blocks.",
            segments "Fixed segments plus expandable ranges.",
            num_allocs "Allocations served.",
            num_frees "Frees (pending ones included).",
            num_device_mallocs "aclrtMalloc calls that succeeded.",
            num_device_frees "aclrtFree calls that succeeded.",
            num_maps "aclrtMapMem calls that succeeded.",
            num_unmaps "aclrtUnmapMem calls that succeeded.",
            num_alloc_retries "Requests that went through the out-of-memory ladder.",
            num_ooms "Requests refused for lack of memory.",
            num_syncs "Stream synchronizations made to give memory back.",
            largest_free_block "Largest block a request could get without a device call.",
            num_physical_mallocs "aclrtMallocPhysical calls that succeeded. (Version 2 from here on.)",
            num_physical_frees "aclrtFreePhysical calls that succeeded.",
            pending_free_bytes "Bytes freed by the caller and waiting for work on other streams (record_stream) to complete.",
            segment_bytes "Device memory held by segments: whole fixed segments, and the mapped pages of expandable ranges. The snapshot's segment sizes add up to it.",
            cached_handle_bytes "Physical handles unmapped and kept for reuse (expandable segments); 0 with fixed segments.",
            address_space_bytes "Address space of all segments: with expandable segments their reserved virtual ranges; with fixed segments the part of each that blocks tile (`segment_bytes` less any alignment slack).",
            segments_peak "The most `segments` at once. (Version 3 from here on.)",
            num_segments_created "Segments made: fixed segments obtained with aclrtMalloc plus expandable ranges reserved.",
            num_segments_released "Segments given back; `num_segments_created - num_segments_released` is `segments`.",
            num_handle_moves "Wholly free physical handles mapped a second time where an expandable range grew, in place of a fresh handle (each also counts in `num_maps`; its old address is unmapped later). (Version 4 from here on.)",
            allocated_bytes_total "Bytes of the blocks handed out since the allocator was made, as rounded: `allocated_bytes_total - allocated_bytes` bytes were freed. (Version 5 from here on.)",
            reserved_bytes_total "Device memory obtained since the allocator was made (fixed segments and physical handles): `reserved_bytes_total - reserved_bytes` bytes were given back.",
            pending_free_blocks "Blocks freed by the caller and waiting for work on other streams (their bytes are `pending_free_bytes`).",
            inactive_split_blocks "Free blocks of fixed segments that hold other blocks too: cached pieces of a split segment (none with expandable segments).",
            inactive_split_bytes "Bytes of those blocks.",
            max_split_size "Blocks of at least this many bytes are never split (`max_split_size_mb`); `UINT64_MAX` when no limit is set (PyTorch's -1, read as a signed number).",
            exported_blocks "Live blocks exported to other processes (`npualloc_ipc_export`). (Version 6 from here on.)",
            held_for_importers_bytes "Bytes of freed blocks that other processes still hold imported: neither handed out nor given back until the last of them lets go (counted in `pending_free_bytes` too).",
            memory_limit "The most device memory this allocator may reserve (`per_process_memory_fraction`, `npualloc_set_memory_fraction`) in bytes; `UINT64_MAX` when there is no limit. (Version 7 from here on.)"
        }
    };
}

macro_rules! define_stats {
    ($($name:ident $doc:literal),* $(,)?) => {
        /// Counters in PyTorch's `memory_stats()` vocabulary, plus where the reserved memory is.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct Stats {
            $(#[doc = $doc] pub $name: u64,)*
        }

        impl Stats {
            /// The field names, in table order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Their descriptions (the C header's field comments).
            pub const DOCS: &'static [&'static str] = &[$($doc),*];

            /// (name, value) of every field, in table order.
            pub fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name)),*].into_iter()
            }
        }
    };
}

pub(crate) use stats_table;

stats_table!(define_stats);

/// Block counters of one shard (changed under its lock).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardCounters {
    pub allocated: u64,
    pub requested: u64,
    pub allocs: u64,
    pub frees: u64,
    /// Bytes of the blocks handed out, as rounded (cumulative).
    pub allocated_total: u64,
}

/// The cumulative figures of an empty shard that changes pools: they stay with its old pool (`PoolTally`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Cumulative {
    pub allocs: u64,
    pub frees: u64,
    pub allocated_total: u64,
}

impl ShardCounters {
    #[inline]
    pub fn block_allocated(&mut self, size: usize, requested: usize) {
        self.allocated += size as u64;
        self.requested += requested as u64;
        self.allocated_total += size as u64;
        self.allocs += 1;
    }

    #[inline]
    pub fn block_freed(&mut self, size: usize, requested: usize) {
        self.allocated -= size as u64;
        self.requested -= requested as u64;
        self.frees += 1;
    }

    #[inline]
    pub fn live(&self) -> u64 {
        self.allocs - self.frees
    }

    /// Takes the cumulative figures out, leaving zero (the shard holds no live block).
    pub fn take_cumulative(&mut self) -> Cumulative {
        debug_assert_eq!(self.live(), 0, "a shard with live blocks changes pools");
        Cumulative {
            allocs: std::mem::take(&mut self.allocs),
            frees: std::mem::take(&mut self.frees),
            allocated_total: std::mem::take(&mut self.allocated_total),
        }
    }

    pub fn add_to(&self, s: &mut Stats) {
        s.allocated_bytes += self.allocated;
        s.requested_bytes += self.requested;
        s.active_blocks += self.live();
        s.num_allocs += self.allocs;
        s.num_frees += self.frees;
        s.allocated_bytes_total += self.allocated_total;
    }
}

#[derive(Debug, Default)]
pub(crate) struct DeviceCounters {
    reserved: AtomicU64,
    reserved_peak: AtomicU64,
    reserved_total: AtomicU64,
    segments: AtomicU64,
    segments_peak: AtomicU64,
    segments_created: AtomicU64,
    segments_released: AtomicU64,
    device_mallocs: AtomicU64,
    device_frees: AtomicU64,
    maps: AtomicU64,
    unmaps: AtomicU64,
    retries: AtomicU64,
    ooms: AtomicU64,
    syncs: AtomicU64,
    physical_mallocs: AtomicU64,
    physical_frees: AtomicU64,
    handle_moves: AtomicU64,
}

thread_local! {
    /// The counters this thread's device calls count for besides the device's (`count_for`).
    static ALSO: std::cell::RefCell<Option<std::sync::Arc<DeviceCounters>>> = const { std::cell::RefCell::new(None) };
}

/// While alive, this thread's device calls count for a pool's counters too; dropping it restores what was before.
/// `None` when the thread's locals are gone (at thread exit): then calls count for the device only, never twice.
pub(crate) struct CountingFor(Option<Option<std::sync::Arc<DeviceCounters>>>);

/// This thread's device calls count for `counters` too until the guard drops (slow paths only).
pub(crate) fn count_for(counters: &std::sync::Arc<DeviceCounters>) -> CountingFor {
    CountingFor(ALSO.try_with(|also| also.borrow_mut().replace(counters.clone())).ok())
}

impl Drop for CountingFor {
    fn drop(&mut self) {
        if let Some(before) = self.0.take() {
            let _ = ALSO.try_with(|also| *also.borrow_mut() = before);
        }
    }
}

impl DeviceCounters {
    /// Applies `f` to these counters and to those `count_for` names (a pool's, Note [pools]). Device calls are
    /// on slow paths only, so the thread-local read costs no hit.
    #[inline]
    fn both<R>(&self, f: impl Fn(&DeviceCounters) -> R) {
        f(self);
        // Gone at thread exit: the device's counters have the call already.
        let _ = ALSO.try_with(|also| {
            if let Some(c) = &*also.borrow() {
                f(c);
            }
        });
    }

    fn reserve(&self, size: usize) {
        self.both(|c| {
            let now = c.reserved.fetch_add(size as u64, Relaxed) + size as u64;
            c.reserved_peak.fetch_max(now, Relaxed);
            c.reserved_total.fetch_add(size as u64, Relaxed);
        });
    }

    /// One more segment, fixed or expandable (a device call's cold path).
    fn one_more_segment(&self) {
        let now = self.segments.fetch_add(1, Relaxed) + 1;
        self.segments_peak.fetch_max(now, Relaxed);
        self.segments_created.fetch_add(1, Relaxed);
    }

    fn one_segment_less(&self) {
        self.segments.fetch_sub(1, Relaxed);
        self.segments_released.fetch_add(1, Relaxed);
    }

    /// A fixed segment obtained with `aclrtMalloc`.
    pub fn segment_added(&self, size: usize) {
        self.reserve(size);
        self.both(|c| {
            c.one_more_segment();
            c.device_mallocs.fetch_add(1, Relaxed);
        });
    }

    /// A fixed segment returned with `aclrtFree`.
    pub fn segment_removed(&self, size: usize) {
        self.both(|c| {
            c.reserved.fetch_sub(size as u64, Relaxed);
            c.one_segment_less();
            c.device_frees.fetch_add(1, Relaxed);
        });
    }

    /// An expandable segment (address range) was created; it holds no memory yet.
    pub fn range_added(&self) {
        self.both(|c| c.one_more_segment());
    }

    /// An expandable segment's address range was given back.
    pub fn range_removed(&self) {
        self.both(|c| c.one_segment_less());
    }

    /// A physical handle was obtained: it is reserved until freed.
    pub fn physical_allocated(&self, size: usize) {
        self.reserve(size);
        self.both(|c| c.physical_mallocs.fetch_add(1, Relaxed));
    }

    pub fn physical_freed(&self, size: usize) {
        self.both(|c| {
            c.reserved.fetch_sub(size as u64, Relaxed);
            c.physical_frees.fetch_add(1, Relaxed);
        });
    }

    pub fn page_mapped(&self) {
        self.both(|c| c.maps.fetch_add(1, Relaxed));
    }

    /// A wholly free handle mapped a second time (its map counts too).
    pub fn handle_moved(&self) {
        self.both(|c| {
            c.maps.fetch_add(1, Relaxed);
            c.handle_moves.fetch_add(1, Relaxed);
        });
    }

    pub fn page_unmapped(&self) {
        self.both(|c| c.unmaps.fetch_add(1, Relaxed));
    }

    pub fn synced(&self) {
        self.both(|c| c.syncs.fetch_add(1, Relaxed));
    }

    /// A synchronization counted here alone (a pool's share of one made for several pools).
    pub fn synced_here(&self) {
        self.syncs.fetch_add(1, Relaxed);
    }

    pub fn retried(&self) {
        self.both(|c| c.retries.fetch_add(1, Relaxed));
    }

    pub fn oom(&self) {
        self.both(|c| c.ooms.fetch_add(1, Relaxed));
    }

    pub fn reserved(&self) -> usize {
        self.reserved.load(Relaxed) as usize
    }

    pub fn reset_peak(&self) {
        self.reserved_peak.store(self.reserved.load(Relaxed), Relaxed);
        self.segments_peak.store(self.segments.load(Relaxed), Relaxed);
    }

    pub fn add_to(&self, s: &mut Stats) {
        s.reserved_bytes = self.reserved.load(Relaxed);
        s.reserved_bytes_peak = self.reserved_peak.load(Relaxed);
        s.reserved_bytes_total = self.reserved_total.load(Relaxed);
        s.segments = self.segments.load(Relaxed);
        s.segments_peak = self.segments_peak.load(Relaxed).max(s.segments);
        s.num_segments_created = self.segments_created.load(Relaxed);
        s.num_segments_released = self.segments_released.load(Relaxed);
        s.num_device_mallocs = self.device_mallocs.load(Relaxed);
        s.num_device_frees = self.device_frees.load(Relaxed);
        s.num_maps = self.maps.load(Relaxed);
        s.num_unmaps = self.unmaps.load(Relaxed);
        s.num_alloc_retries = self.retries.load(Relaxed);
        s.num_ooms = self.ooms.load(Relaxed);
        s.num_syncs = self.syncs.load(Relaxed);
        s.num_physical_mallocs = self.physical_mallocs.load(Relaxed);
        s.num_physical_frees = self.physical_frees.load(Relaxed);
        s.num_handle_moves = self.handle_moves.load(Relaxed);
    }
}

// Peaks: a shard publishes its totals to its own `Lane`; only a stream passing its `HighWater` mark sums the lanes
// and raises `Peaks`; a free compares nothing (docs/design.md, Note [peaks without a shared counter]).

/// What one shard publishes: its block totals.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    allocated: AtomicU64,
    requested: AtomicU64,
}

impl Lane {
    #[inline]
    pub fn publish(&self, c: &ShardCounters) {
        self.allocated.store(c.allocated, Relaxed);
        self.requested.store(c.requested, Relaxed);
    }

    #[inline(always)]
    pub fn allocated(&self) -> u64 {
        self.allocated.load(Relaxed)
    }

    #[inline(always)]
    pub fn requested(&self) -> u64 {
        self.requested.load(Relaxed)
    }
}

/// A pair of marks or peaks: (allocated, requested) bytes, as a lane holds.
pub(crate) type Mark = Lane;

impl Mark {
    #[inline(always)]
    fn passed(&self, (allocated, requested): (u64, u64)) -> bool {
        allocated > self.allocated.load(Relaxed) || requested > self.requested.load(Relaxed)
    }

    pub fn raise(&self, (allocated, requested): (u64, u64)) {
        self.allocated.fetch_max(allocated, Relaxed);
        self.requested.fetch_max(requested, Relaxed);
    }

    pub fn set(&self, (allocated, requested): (u64, u64)) {
        self.allocated.store(allocated, Relaxed);
        self.requested.store(requested, Relaxed);
    }

    /// The peaks into `s`, none below its current figures.
    pub fn add_to(&self, s: &mut Stats) {
        s.allocated_bytes_peak = self.allocated.load(Relaxed).max(s.allocated_bytes);
        s.requested_bytes_peak = self.requested.load(Relaxed).max(s.requested_bytes);
    }
}

fn figures(lane: &Lane) -> (u64, u64) {
    (lane.allocated(), lane.requested())
}

fn plus(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0 + b.0, a.1 + b.1)
}

/// A stream's high-water marks of its shards' summed totals.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct HighWater(Mark);

impl HighWater {
    #[inline(always)]
    pub fn passed(&self, totals: (u64, u64)) -> bool {
        self.0.passed(totals)
    }

    /// Back to no marks (a retired stream's entry taken over).
    pub fn clear(&self) {
        self.0.set((0, 0));
    }
}

/// The peaks of allocated and requested bytes over all shards, and per pool kind.
#[derive(Debug, Default)]
pub(crate) struct Peaks {
    all: Mark,
    kind: [Mark; 2],
}

impl Peaks {
    /// A stream passed its high-water mark: raises its marks, and the device's and each kind's peaks to the sums over
    /// every stream's lanes. A kind's peak rises only here, so it can miss a high of one kind made while the other
    /// held less: a mark per kind would cost every allocation two more compares.
    #[cold]
    #[inline(never)]
    pub fn raise<'a>(&self, high: &HighWater, totals: (u64, u64), entries: impl Iterator<Item = [&'a Lane; 2]>) {
        high.0.raise(totals);
        let sums = entries.fold([(0, 0); 2], |s, lanes| [plus(s[0], figures(lanes[0])), plus(s[1], figures(lanes[1]))]);
        self.all.raise(plus(sums[0], sums[1]));
        self.kind[0].raise(sums[0]);
        self.kind[1].raise(sums[1]);
    }

    /// Peaks become the current sums; each stream's marks its totals.
    pub fn reset<'a>(&self, streams: impl Iterator<Item = (&'a HighWater, [&'a Lane; 2])>) {
        let mut sums = [(0, 0); 2];
        for (high, lanes) in streams {
            let own = [figures(lanes[0]), figures(lanes[1])];
            high.0.set(plus(own[0], own[1]));
            sums = [plus(sums[0], own[0]), plus(sums[1], own[1])];
        }
        self.all.set(plus(sums[0], sums[1]));
        self.kind[0].set(sums[0]);
        self.kind[1].set(sums[1]);
    }

    pub fn add_to(&self, s: &mut Stats) {
        self.all.add_to(s);
    }

    /// The peaks of pool kind `kind` into `s` (its figures).
    pub fn add_kind_to(&self, kind: usize, s: &mut Stats) {
        self.kind[kind & 1].add_to(s);
    }

    pub fn allocated(&self) -> u64 {
        self.all.allocated.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One stream (two shards) from one thread: the peak is exact, also
    /// when the peak is made by both shards below their own highs; each
    /// kind's is its sum at the total's peaks.
    #[test]
    fn one_streams_peak_is_exact() {
        let (small, large) = (Lane::default(), Lane::default());
        let (mut cs, mut cl) = (ShardCounters::default(), ShardCounters::default());
        let (high, p) = (HighWater::default(), Peaks::default());
        let step = |lane: &Lane, c: &mut ShardCounters, size: i64, other: &Lane| {
            if size > 0 {
                c.block_allocated(size as usize, size as usize);
            } else {
                c.block_freed((-size) as usize, (-size) as usize);
            }
            lane.publish(c);
            let total = (c.allocated + other.allocated(), c.requested + other.requested());
            if high.passed(total) {
                p.raise(&high, total, std::iter::once([&small, &large]));
            }
        };
        step(&small, &mut cs, 100, &large);
        step(&small, &mut cs, -100, &large);
        step(&large, &mut cl, 60, &small);
        assert_eq!(p.allocated(), 100, "60 after 100 was freed does not raise the peak");
        step(&small, &mut cs, 50, &large);
        assert_eq!(p.allocated(), 110, "50 + 60 live together");
        step(&large, &mut cl, -60, &small);
        step(&small, &mut cs, 40, &large);
        assert_eq!(p.allocated(), 110);
        step(&large, &mut cl, 30, &small);
        assert_eq!(p.allocated(), 120, "90 + 30");
        p.reset([(&high, [&small, &large])].into_iter());
        assert_eq!(p.allocated(), 120);
        step(&large, &mut cl, -30, &small);
        p.reset([(&high, [&small, &large])].into_iter());
        assert_eq!(p.allocated(), 90);
        step(&large, &mut cl, 5, &small);
        assert_eq!(p.allocated(), 95);
        let kinds = |p: &Peaks| {
            [0, 1].map(|k| {
                let mut s = Stats::default();
                p.add_kind_to(k, &mut s);
                s.allocated_bytes_peak
            })
        };
        assert_eq!(kinds(&p), [90, 5], "each kind's sum when the total peaked");
        // A kind's own high while the total stays below its peak is missed
        // (the cost of a mark per kind on every allocation).
        step(&large, &mut cl, -5, &small);
        step(&small, &mut cs, -50, &large);
        step(&large, &mut cl, 20, &small);
        assert_eq!((p.allocated(), kinds(&p)), (95, [90, 5]));
    }
}
