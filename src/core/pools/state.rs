//! The pools' records (Note [pools]): a leaf module, so `device` holds them without importing the pool
//! calls, which import `device`.

use super::config::PoolConfig;
use super::tally::PoolTally;
use std::sync::{Arc, Mutex, RwLock};

#[derive(Debug, Clone, Default)]
pub(super) struct Record {
    pub config: PoolConfig,
    pub destroyed: bool,
    /// Routes to it active now (stream and thread).
    pub routes: usize,
    /// A capture was routed to it: its cached memory serves the graph's replays and stays until
    /// `pool_destroy`, sleep included (Note [sleep]).
    pub captured: bool,
}

/// Every pool ever created; pool `i` is `records[i]` (0: the default pool).
pub(crate) struct Pools {
    records: Mutex<Vec<Record>>,
    /// Each pool's own figures, by id: a leaf lock, read on slow paths under a shard lock.
    tallies: RwLock<Vec<Arc<PoolTally>>>,
    /// The default pool's figures, also `tallies[0]`: raised without the lock.
    default_tally: Arc<PoolTally>,
}

impl Default for Pools {
    fn default() -> Self {
        let default_tally = Arc::<PoolTally>::default();
        Pools {
            records: Mutex::new(vec![Record::default()]),
            tallies: RwLock::new(vec![default_tally.clone()]),
            default_tally,
        }
    }
}

impl Pools {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Record>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `f` of the pool's config under the pools lock, if the pool is live: `pool_destroy` cannot mark the pool
    /// destroyed while `f` runs, so an entry `f` makes is one it marks.
    pub fn with_live<T>(&self, pool: u64, f: impl FnOnce(PoolConfig) -> T) -> Option<T> {
        let records = self.lock();
        records.get(pool as usize).filter(|r| !r.destroyed).map(|r| f(r.config))
    }

    pub(super) fn push(&self, record: Record) -> u64 {
        let mut records = self.lock();
        records.push(record);
        let mut tallies = self.tallies.write().unwrap_or_else(|e| e.into_inner());
        tallies.push(Arc::default());
        records.len() as u64 - 1
    }

    /// The figures of `pool` (created, destroyed or not).
    pub fn tally(&self, pool: u64) -> Option<Arc<PoolTally>> {
        self.tallies.read().unwrap_or_else(|e| e.into_inner()).get(pool as usize).cloned()
    }

    /// `f` of the figures of `pool`, if it was ever created; the default pool's take no lock.
    #[inline]
    pub fn with_tally(&self, pool: u64, f: impl FnOnce(&PoolTally)) {
        if pool == 0 {
            return f(&self.default_tally);
        }
        if let Some(t) = self.tallies.read().unwrap_or_else(|e| e.into_inner()).get(pool as usize) {
            f(t);
        }
    }

    pub fn tallies(&self) -> Vec<Arc<PoolTally>> {
        self.tallies.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Notes that a capture was routed to `pool` (Note [capture]).
    pub fn mark_captured(&self, pool: u64) {
        if let Some(r) = self.lock().get_mut(pool as usize) {
            r.captured = true;
        }
    }

    pub fn captured(&self, pool: u64) -> bool {
        self.lock().get(pool as usize).is_some_and(|r| r.captured)
    }
}
