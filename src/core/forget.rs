//! `forget_stream`: the host is done with a stream. Its shards' cached memory goes back to the device (free
//! pieces are unmapped after synchronizing the streams that used them); its live blocks stay valid and are
//! freed as usual. This holds for each of its entries, the default pool's and private pools' (Note [pools]),
//! except a live pool's that served a graph capture (its memory is the graph's until `pool_destroy`).
//! An entry whose shards then hold nothing retires and the next new (pool, stream) pair takes it over
//! (`streams`); otherwise it stays for a reused stream handle to find. A destroyed pool's entries retire the
//! same way, at `pool_destroy` or at the free that empties them.

use super::backing::{Memory, Scope};
use super::device::Device;
use super::shard::Shard;
use super::streams::{StreamEntry, DESTROYED};
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::atomic::Ordering;

impl<B: Memory> Device<B> {
    /// Gives back what `stream`'s shards cache (see the module comment; Note [capture]); an unknown stream is no
    /// error. Returns the bytes the device got back.
    pub fn forget_stream(&self, stream: Stream) -> Result<usize> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Internal("the allocator is unusable: it was destroyed".into()));
        }
        if self.streams.all_of(stream).next().is_none() {
            return Ok(0);
        }
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up again under the ladder lock: a concurrent forget_stream may have retired them meanwhile.
        let entries: Vec<_> =
            self.streams.all_of(stream).filter(|e| Self::forgettable(e, |pool| self.pools.captured(pool))).collect();
        let mut released = 0;
        let mut first_error = None;
        for entry in entries {
            match self.forget_entry(entry, stream) {
                Ok(n) => released += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match B::free_cached(&self.sh) {
            Ok(n) => released += n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(released), Err)
    }

    /// Gives back what `entry` (of `stream`) caches and retires it if that leaves it empty. The caller holds
    /// the ladder lock.
    pub(super) fn forget_entry(&self, entry: &StreamEntry<B>, stream: Stream) -> Result<usize> {
        if !Self::forgettable(entry, |pool| self.pools.captured(pool)) {
            return Ok(0);
        }
        let mut released = 0;
        let mut first_error = None;
        // Pass 2 releases the ranges pass 1 emptied; pass 3 those a moved handle emptied (its new pages are
        // detached only once its old address is unmapped).
        for _pass in 0..3 {
            let mut taken: Vec<(&Shard<B>, _)> = Vec::new();
            for shard in &entry.shards {
                let mut pool = shard.lock_anyway();
                pool.drain_reuse();
                pool.reap_pending();
                let detached = pool.detach(Scope::All);
                pool.after_transition();
                if !detached.is_empty() {
                    taken.push((shard, detached));
                }
            }
            match self.give_back_all(taken) {
                Ok(n) => released += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        for (kind, shard) in entry.shards.iter().enumerate() {
            let pool = shard.lock_anyway();
            self.published(entry, kind, &pool);
        }
        self.retire_if_empty(entry, stream);
        first_error.map_or(Ok(released), Err)
    }

    /// True unless `entry` is a live private pool's that served a graph capture: its memory is the graph's.
    fn forgettable(entry: &StreamEntry<B>, captured: impl FnOnce(u64) -> bool) -> bool {
        entry.pool() == 0 || entry.reclaimable() || !captured(entry.pool())
    }

    /// Retires `entry` (of `stream`) if its shards hold nothing; true if it did. The caller holds the ladder
    /// lock and no shard lock (`adding` is taken before them; `retire` checks again, as a malloc may come in).
    pub(super) fn retire_if_empty(&self, entry: &StreamEntry<B>, stream: Stream) -> bool {
        let empty = entry.shards.iter().all(|s| s.lock_anyway().cache.holds_nothing());
        empty && self.streams.retire(entry, stream)
    }

    /// Retires every entry of destroyed pools that holds nothing. The caller holds the ladder lock.
    pub(super) fn retire_destroyed(&self) {
        let done: Vec<_> = self.streams.iter().filter(|e| e.flags() & DESTROYED != 0).collect();
        for entry in done {
            self.retire_if_empty(entry, entry.stream_now());
        }
    }
}
