//! Private pools (`npualloc_pool_create`, PyTorch's `MemPool`): a routing layer over the shards, each pool
//! in its own stream entries; a free always goes to the block's own pool (docs/design.md, Note [pools]).

pub mod checkpoint;
pub mod config;
pub(crate) mod routing;
pub(crate) mod state;
pub(crate) mod tally;

use super::backing::{Memory, Scope};
use crate::core::alloc::device::{check_live_stream, Device};
use crate::core::alloc::pool::Pool;
use crate::core::alloc::shard::Shard;
use crate::core::alloc::streams::StreamEntry;
use crate::core::report::stats::Stats;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use config::{PoolConfig, SleepMode};
use routing::Target;
use state::Record;
use std::sync::Arc;
use tally::PoolTally;

/// One pool's shards, for the paths that visit pools (sleep).
pub(crate) struct PoolShards<'a, B: Memory> {
    pub id: u64,
    pub sleep: SleepMode,
    pub shards: Vec<&'a Shard<B>>,
}

fn no_such_pool(pool: u64, created: usize) -> Error {
    if (pool as usize) < created {
        Error::InvalidArgument(format!("pool {pool} was destroyed; a destroyed pool takes no routes"))
    } else {
        Error::InvalidArgument(format!("pool {pool} does not exist (no npualloc_pool_create returned it)"))
    }
}

/// The record of `pool` if it exists and is not destroyed; INVALID_ARGUMENT otherwise.
fn live_record(records: &mut [Record], pool: u64) -> Result<&mut Record> {
    let created = records.len();
    records.get_mut(pool as usize).filter(|r| !r.destroyed).ok_or_else(|| no_such_pool(pool, created))
}

impl<B: Memory> Device<B> {
    /// Creates a pool; returns its id (never 0, never reused).
    pub fn pool_create(&self, config: PoolConfig) -> Result<u64> {
        self.check_usable()?;
        // Created asleep, an offload or discard pool refuses allocations until wake too (`npualloc_sleep`). Sleep
        // and wake are held off meanwhile; lock order: the sleep lock before the pools lock, as in sleep/wake.
        let state = self.sleep.lock();
        let id = self.pools.push(Record { config, ..Default::default() });
        if state.is_some() && config.sleep.releases() {
            self.sleep.add_sleeping_pool(id, config.sleep);
        }
        Ok(id)
    }

    /// OK when `pool` exists and is not destroyed (pool 0 always exists); INVALID_ARGUMENT otherwise.
    pub fn check_pool(&self, pool: u64) -> Result<()> {
        live_record(&mut self.pools.lock(), pool).map(|_| ())
    }

    /// Ends the routes of threads that exited inside them (`routing`).
    #[cold]
    pub(crate) fn reap_routes(&self) {
        let pools = self.routes.reap();
        if pools.is_empty() {
            return;
        }
        let mut records = self.pools.lock();
        for p in pools {
            if let Some(r) = records.get_mut(p as usize) {
                r.routes = r.routes.saturating_sub(1);
            }
        }
    }

    /// Routes allocations on `stream` (None: of the calling thread) to `pool`.
    pub fn pool_begin(&self, pool: u64, stream: Option<Stream>) -> Result<()> {
        self.check_usable()?;
        self.reap_routes();
        let capturing = stream.map(|s| check_live_stream(&self.sh.rt, self.sh.device, s)).transpose()?.unwrap_or(false);
        let mut records = self.pools.lock();
        let r = live_record(&mut records, pool)?;
        if !self.routes.begin(pool, stream.map_or(Target::Thread, Target::Stream)) {
            return Err(Error::InvalidArgument(format!(
                "pool_begin for pool {pool} on the calling thread while the thread is exiting (called from a \
                 thread-local destructor): a thread route cannot begin now; route a stream instead"
            )));
        }
        r.routes += 1;
        r.captured |= capturing;
        Ok(())
    }

    /// Ends the innermost route of `stream` (None: the calling thread's), which must go to `pool`; else no change.
    pub fn pool_end(&self, pool: u64, stream: Option<Stream>) -> Result<()> {
        self.check_usable()?;
        self.reap_routes();
        let target = stream.map_or(Target::Thread, Target::Stream);
        let mut records = self.pools.lock();
        if pool as usize >= records.len() {
            return Err(no_such_pool(pool, records.len()));
        }
        match self.routes.end(pool, target) {
            routing::Ended::Popped => {}
            // The thread's routes ended with its locals and were reaped above.
            routing::Ended::ThreadGone => return Ok(()),
            routing::Ended::NotInnermost => return Err(self.not_innermost(pool, target)),
        }
        records[pool as usize].routes -= 1;
        Ok(())
    }

    fn not_innermost(&self, pool: u64, target: Target) -> Error {
        let found = match self.routes.innermost(target) {
            Some(p) => format!("its innermost route goes to pool {p}"),
            None => "it has no active route".into(),
        };
        let whom = match target {
            Target::Stream(s) => format!("stream {:#x}", s.0),
            Target::Thread => "the calling thread".into(),
        };
        Error::InvalidArgument(format!(
            "pool_end names pool {pool} for {whom}, but {found}; routes end innermost first"
        ))
    }

    /// Sets whether other requests that run out of memory may take `pool`'s cached memory (`use_on_oom`).
    pub fn pool_set_use_on_oom(&self, pool: u64, on: bool) -> Result<()> {
        self.check_usable()?;
        let mut records = self.pools.lock();
        if pool == 0 {
            return Err(Error::InvalidArgument(
                "pool 0 is the default pool: its cached memory always goes to requests that run out".into(),
            ));
        }
        live_record(&mut records, pool)?.config.use_on_oom = on;
        // Under the records lock, which every revival of a retired entry holds: no entry misses the change.
        for e in self.streams.iter().filter(|e| e.pool() == pool) {
            e.set_use_on_oom(on);
        }
        Ok(())
    }

    /// Destroys `pool` (see Note [pools]).
    pub fn pool_destroy(&self, pool: u64) -> Result<()> {
        self.check_usable()?;
        self.reap_routes();
        {
            let mut records = self.pools.lock();
            if pool == 0 {
                return Err(Error::InvalidArgument("pool 0 is the default pool; it cannot be destroyed".into()));
            }
            let r = live_record(&mut records, pool)?;
            if r.routes > 0 {
                return Err(Error::InvalidArgument(format!(
                    "pool {pool} still has {} active route(s); end them with npualloc_pool_end first",
                    r.routes
                )));
            }
            r.destroyed = true;
            // Under the records lock, which every revival of a retired entry holds: no entry changes pools.
            for e in self.streams.iter().filter(|e| e.pool() == pool) {
                e.mark_destroyed();
            }
        }
        if self.streams.iter().all(|e| e.pool() != pool) {
            return Ok(());
        }
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // What cannot go back now goes with a later free, empty_cache or the ladder. Pass 2 releases the
        // ranges pass 1 emptied.
        for _pass in 0..2 {
            let _ = self.release_free_where(Scope::All, |e| e.pool() == pool);
        }
        let _ = B::free_cached(&self.sh);
        self.retire_destroyed();
        Ok(())
    }

    /// Gives back `pool`'s cached memory after synchronizing the streams that used it; returns the bytes. A live
    /// pool that served a graph capture keeps it (Note [capture]): 0. INVALID_ARGUMENT for a pool never created.
    pub fn pool_empty_cache(&self, pool: u64) -> Result<usize> {
        self.check_usable()?;
        let live = {
            let records = self.pools.lock();
            match records.get(pool as usize) {
                Some(r) => !r.destroyed,
                None => return Err(no_such_pool(pool, records.len())),
            }
        };
        if pool != 0 && live && self.pool_captured(pool) {
            return Ok(0);
        }
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // A default-pool entry of a graph stream keeps its memory; a private pool's entries may give theirs.
        let pick = |e: &crate::core::alloc::streams::StreamEntry<B>| e.pool() == pool && (pool != 0 || e.reclaimable());
        // Pass 2 releases the ranges pass 1 emptied.
        let released = self.release_free_where(Scope::All, pick)? + self.release_free_where(Scope::All, pick)?;
        let cached = B::free_cached(&self.sh)?;
        self.retire_destroyed();
        Ok(released + cached)
    }

    /// One pool's statistics: its blocks, segments, device calls and peaks as a whole (`tally`).
    pub fn pool_stats(&self, pool: u64) -> Result<Stats> {
        self.check_usable()?;
        let Some(tally) = self.pools.tally(pool) else {
            return Err(no_such_pool(pool, self.pools.lock().len()));
        };
        let mut s = self.shard_figures(self.streams.iter().filter(|e| e.pool() == pool).flat_map(|e| &e.shards))?;
        s.reserved_bytes = s.segment_bytes;
        tally.add_to(&mut s);
        Ok(s)
    }

    /// True if a capture was routed to `pool`, or one of its live entries' streams captures now (Note [sleep]).
    pub(crate) fn pool_captured(&self, pool: u64) -> bool {
        self.pools.captured(pool)
            || self.streams.iter().filter(|e| e.pool() == pool && !e.is_retired()).any(|e| {
                let stream = e.shards[0].lock_anyway().stream();
                super::capture::capturing_now(&self.sh.rt, self.sh.device, stream)
            })
    }

    /// Every pool ever created (0 first) with its sleep mode and shards.
    pub(crate) fn pool_shards(&self) -> Vec<PoolShards<'_, B>> {
        let records: Vec<Record> = self.pools.lock().clone();
        records
            .iter()
            .enumerate()
            .map(|(i, r)| PoolShards {
                id: i as u64,
                sleep: r.config.sleep,
                shards: self.streams.iter().filter(|e| e.pool() == i as u64).flat_map(|e| e.shards.iter()).collect(),
            })
            .collect()
    }
}

/// Where the pool figures are kept up to date (slow paths only).
impl<B: Memory> Device<B> {
    /// A request routed to `pool` on `stream` whose entry predates it: if the stream captures now, the pool
    /// becomes a graph pool for good (Note [capture]). Asked per routed request, as torch_npu's route filter does.
    #[cold]
    pub(in crate::core) fn note_routed_capture(&self, entry: &StreamEntry<B>, pool: u64, stream: Stream) {
        if !entry.saw_capture() && crate::core::capture::capturing_now(&self.sh.rt, self.sh.device, stream) {
            entry.note_capture();
            self.pools.mark_captured(pool);
        }
    }

    /// After a growth of `pool`: publishes its held bytes and raises its pool's reserved peak (`tally`).
    #[cold]
    #[inline(never)]
    pub(in crate::core) fn pool_grew(&self, pool: &Pool<B>, tally: &PoolTally) {
        let entry = self.streams.entry_of(pool.cache.id);
        entry.publish_held(pool.cache.kind as usize, pool.held_bytes());
        let id = entry.pool();
        let held: u64 = self.streams.iter().filter(|e| e.pool() == id).map(|e| e.held()).sum();
        tally.raise_reserved(held);
    }

    /// The figures of the pool `pool` (a shard's state) serves.
    #[cold]
    pub(in crate::core) fn tally_of(&self, pool: &Pool<B>) -> Arc<PoolTally> {
        self.pools.tally(self.streams.entry_of(pool.cache.id).pool()).unwrap_or_default()
    }

    /// A stream of `entry`'s pool passed its high-water mark: the pool's peaks rise to the sums over its shards.
    pub(in crate::core) fn raise_pool_peaks(&self, entry: &StreamEntry<B>) {
        let id = entry.pool();
        let lanes = self.streams.iter().filter(|e| e.pool() == id).flat_map(|e| &e.shards).map(|s| &s.lane);
        let (a, r) = lanes.fold((0, 0), |(a, r), lane| (a + lane.allocated(), r + lane.requested()));
        self.pools.with_tally(id, |t| t.peaks.raise((a, r)));
    }
}
