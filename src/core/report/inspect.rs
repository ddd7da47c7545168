//! The device's inspection, statistics and invariant-check calls. None is on the hot path; each locks the
//! shards it reads one at a time (the lock order of `device`).

use super::stats::Stats;
use crate::core::alloc::device::Device;
use crate::core::alloc::policy::PoolKind;
use crate::core::alloc::shard::Shard;
use crate::core::backing::Memory;
use crate::core::BlockInfo;
use crate::error::Result;

impl<B: Memory> Device<B> {
    /// The live block containing `addr` (interior pointers allowed).
    pub fn query(&self, addr: usize) -> Result<BlockInfo> {
        self.check_usable()?;
        let pool = self.owner(addr, "query")?.lock()?;
        let Some(id) = pool.cache.allocated_block_at(addr) else {
            return Err(pool.unknown_pointer(addr, "query"));
        };
        let b = pool.cache.block(id);
        Ok(BlockInfo { addr: b.addr, size: b.size, requested: b.requested, stream: pool.stream() })
    }

    /// Start and size of the live block containing `addr`, if any.
    #[inline]
    pub fn block_range(&self, addr: usize) -> Result<Option<(usize, usize)>> {
        self.check_usable()?;
        let Some(shard) = self.sh.directory.owner(addr).and_then(|id| self.streams.by_id(id)) else {
            return Ok(None);
        };
        let pool = shard.lock()?;
        Ok(pool.cache.allocated_block_at(addr).map(|id| {
            let b = pool.cache.block(id);
            (b.addr, b.size)
        }))
    }

    /// Start and size of the segment holding the live block at `addr`.
    pub fn segment_of(&self, addr: usize) -> Result<(usize, usize)> {
        self.check_usable()?;
        let pool = self.owner(addr, "segment look-up")?.lock()?;
        let Some(id) = pool.cache.allocated_block_at(addr) else {
            return Err(pool.unknown_pointer(addr, "segment look-up"));
        };
        Ok(pool.cache.segment_range(id))
    }

    /// Caps the device memory this allocator holds at `limit` bytes.
    pub fn set_limit(&self, limit: usize) -> Result<()> {
        self.check_usable()?;
        self.sh.limit.set(limit);
        Ok(())
    }

    pub fn stats(&self) -> Result<Stats> {
        self.check_usable()?;
        let mut s = self.shard_figures(self.streams.shards())?;
        self.pools.tallies().iter().for_each(|tally| tally.add_kept_counts(&mut s));
        self.sh.counters.add_to(&mut s);
        self.peaks.add_to(&mut s);
        s.cached_handle_bytes = self.sh.backing.cached_bytes() as u64;
        Ok(s)
    }

    /// The statistics of one pool kind over every pool (PyTorch's "small_pool" and "large_pool"). Its reserved
    /// memory is its segments' (cached handles belong to no kind); device-only figures read 0.
    pub fn kind_stats(&self, kind: PoolKind) -> Result<Stats> {
        self.check_usable()?;
        let mut s = self.shard_figures(self.streams.iter().map(|e| &e.shards[kind as usize]))?;
        self.pools.tallies().iter().for_each(|tally| tally.add_kept_counts_of(kind as usize, &mut s));
        s.reserved_bytes = s.segment_bytes;
        s.segments_peak = s.segments;
        s.reserved_bytes_peak = s.reserved_bytes;
        self.peaks.add_kind_to(kind as usize, &mut s);
        Ok(s)
    }

    /// The summed block and segment figures of `shards`, their largest free run and the split limit.
    pub(in crate::core) fn shard_figures<'a>(&'a self, shards: impl Iterator<Item = &'a Shard<B>>) -> Result<Stats> {
        let mut s = Stats::default();
        let mut largest = 0;
        for shard in shards {
            let pool = shard.lock()?;
            pool.add_figures(&mut s);
            largest = largest.max(pool.largest_free());
            s.segments += pool.cache.segments.ids().count() as u64;
        }
        s.largest_free_block = largest as u64;
        s.max_split_size = self.sh.policy.max_split_size as u64;
        s.memory_limit = self.sh.limit.get().map_or(u64::MAX, |l| l as u64);
        Ok(s)
    }

    pub fn reset_peak_stats(&self) -> Result<()> {
        self.check_usable()?;
        self.sh.counters.reset_peak();
        self.peaks.reset(self.streams.iter().map(|e| (&e.high, [&e.shards[0].lane, &e.shards[1].lane])));
        for (id, tally) in self.pools.tallies().iter().enumerate() {
            let shards = self.streams.iter().filter(|e| e.pool() == id as u64).flat_map(|e| &e.shards);
            let (a, r, held) = shards.fold((0, 0, 0), |(a, r, held), shard| {
                (a + shard.lane.allocated(), r + shard.lane.requested(), held + shard.lock_anyway().held_bytes() as u64)
            });
            tally.reset(a, r, held);
        }
        Ok(())
    }

    /// Runs every shard's invariant checks and the device-wide ones (the reserved-bytes recount only holds
    /// while no other call runs).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut held = 0usize;
        for shard in self.streams.shards() {
            let pool = shard.lock_anyway();
            pool.check_invariants()?;
            held += pool.held_bytes();
        }
        held += self.sh.backing.cached_bytes();
        let reserved = self.sh.counters.reserved();
        if reserved != held {
            return Err(format!("stats say {reserved} bytes reserved, segments and cached handles hold {held}"));
        }
        Ok(())
    }
}
