//! `forget_stream`: the host is done with a stream. Its shards' cached memory goes back to the device (free
//! pieces are unmapped after synchronizing the streams that used them); its live blocks stay valid and are
//! freed as usual. This holds for each of its entries, the default pool's and private pools' (Note [pools]),
//! except a live pool's that served a graph capture (its memory is the graph's until `pool_destroy`).
//! An entry whose shards then hold nothing retires and the next new (pool, stream) pair takes it over
//! (`streams`); otherwise it stays for a reused stream handle to find. A destroyed pool's entries retire the
//! same way, at `pool_destroy` or at the free that empties them.

use super::reclaim::sum_all;
use crate::core::alloc::device::Device;
use crate::core::alloc::streams::{StreamEntry, DESTROYED};
use crate::core::backing::{Memory, Scope};
use crate::error::Result;
use crate::runtime::Stream;

impl<B: Memory> Device<B> {
    /// Gives back what `stream`'s shards cache (see the module comment; Note [capture]); an unknown stream is no
    /// error. Returns the bytes the device got back.
    pub fn forget_stream(&self, stream: Stream) -> Result<usize> {
        self.check_usable()?;
        if self.streams.all_of(stream).next().is_none() {
            return Ok(0);
        }
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up again under the ladder lock: a concurrent forget_stream may have retired them meanwhile.
        let entries: Vec<_> = self.streams.all_of(stream).filter(|e| self.forgettable(e)).collect();
        let forgotten = entries.into_iter().map(|entry| self.forget_entry(entry, stream));
        sum_all(forgotten.chain(std::iter::once_with(|| B::free_cached(&self.sh))))
    }

    /// Gives back what `entry` (of `stream`) caches and retires it if that leaves it empty. The caller holds
    /// the ladder lock.
    pub(in crate::core) fn forget_entry(&self, entry: &StreamEntry<B>, stream: Stream) -> Result<usize> {
        if !self.forgettable(entry) {
            return Ok(0);
        }
        // Pass 2 releases the ranges pass 1 emptied; pass 3 those a moved handle emptied (its new pages are
        // detached only once its old address is unmapped).
        let result = sum_all((0..3).map(|_| self.release_shards(entry.shards.iter(), Scope::All)));
        for (kind, shard) in entry.shards.iter().enumerate() {
            let pool = shard.lock_anyway();
            self.published(entry, kind, &pool);
        }
        self.retire_if_empty(entry, stream);
        result
    }

    /// True unless `entry` is a live private pool's that served a graph capture: its memory is the graph's.
    fn forgettable(&self, entry: &StreamEntry<B>) -> bool {
        entry.pool() == 0 || entry.reclaimable() || !self.pools.captured(entry.pool())
    }

    /// Retires `entry` (of `stream`) if its shards hold nothing; true if it did. The caller holds the ladder
    /// lock and no shard lock (`adding` is taken before them; `retire` checks again, as a malloc may come in).
    pub(in crate::core) fn retire_if_empty(&self, entry: &StreamEntry<B>, stream: Stream) -> bool {
        let empty = entry.shards.iter().all(|s| s.lock_anyway().holds_nothing());
        empty && self.streams.retire(entry, stream)
    }

    /// Retires every entry of destroyed pools that holds nothing. The caller holds the ladder lock.
    pub(in crate::core) fn retire_destroyed(&self) {
        let done: Vec<_> = self.streams.iter().filter(|e| e.flags() & DESTROYED != 0).collect();
        for entry in done {
            self.retire_if_empty(entry, entry.stream_now());
        }
    }
}
