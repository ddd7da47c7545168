//! A shard: one stream's pool of one kind behind its own lock, and what it
//! publishes for the device-wide peaks (see Note [peaks without a shared
//! counter] in `stats`). A cache hit takes this lock and no other.

use super::backing::Backing;
use super::lock::{StateGuard, StateLock};
use super::pool::Pool;
use super::stats::Lane;
use crate::error::{Error, Result};

/// Aligned to two cache lines (adjacent-line prefetch pairs lines on x86)
/// so that two shards' hot words never share one.
#[repr(align(128))]
pub(crate) struct Shard<B: Backing> {
    pool: StateLock<Pool<B>>,
    pub lane: Lane,
}

impl<B: Backing> Shard<B> {
    pub fn new(pool: Pool<B>) -> Self {
        Shard { pool: StateLock::new(pool), lane: Lane::default() }
    }

    /// Locks the shard's pool.
    #[inline(always)]
    pub fn lock(&self) -> Result<StateGuard<'_, Pool<B>>> {
        let (guard, poisoned) = self.pool.lock_flagged();
        if poisoned {
            drop(guard);
            return Err(poisoned_error());
        }
        Ok(guard)
    }

    /// The pool if no one holds it now (never waits).
    pub fn try_lock(&self) -> Option<StateGuard<'_, Pool<B>>> {
        self.pool.try_lock()
    }

    /// Locks the pool even after a panic under its lock (teardown, checks).
    pub fn lock_anyway(&self) -> StateGuard<'_, Pool<B>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The error of every call on a shard whose lock a panic poisoned.
#[cold]
#[inline(never)]
fn poisoned_error() -> Error {
    Error::Internal("the allocator is unusable after an earlier internal error".into())
}
