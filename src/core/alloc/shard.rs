//! A shard: one stream's pool of one kind behind its own lock, and what it publishes for the device-wide
//! peaks (Note [peaks without a shared counter] in `stats`). A cache hit takes this lock and no other.

use super::pool::Pool;
use crate::core::backing::{Memory, Parts, Sibling};
use crate::core::report::stats::Lane;
use crate::error::{Error, Result};
use std::sync::{Mutex, MutexGuard};

/// Aligned to two cache lines (x86 prefetches line pairs) so two shards' hot words never share one.
/// `repr(C)` keeps the lock first, at the shard's own address, for the hit path (the compiler's order varies).
#[repr(C, align(128))]
pub(crate) struct Shard<B: Memory> {
    pool: Mutex<Pool<B>>,
    pub lane: Lane,
}

impl<B: Memory> Shard<B> {
    pub fn new(pool: Pool<B>) -> Self {
        Shard { pool: Mutex::new(pool), lane: Lane::default() }
    }

    #[inline(always)]
    pub fn lock(&self) -> Result<MutexGuard<'_, Pool<B>>> {
        self.pool.lock().map_err(|_| poisoned_error())
    }

    /// Locks the pool even after a panic under its lock (teardown, checks).
    pub fn lock_anyway(&self) -> MutexGuard<'_, Pool<B>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The error of every call on a shard whose lock a panic poisoned.
#[cold]
#[inline(never)]
fn poisoned_error() -> Error {
    Error::Internal("the allocator is unusable after an earlier internal error".into())
}

impl<B: Memory> Sibling<B> for Shard<B> {
    fn try_with(&self, f: &mut dyn FnMut(Parts<'_, B>)) -> bool {
        // Never waits: false if held, or poisoned by a panic under its lock.
        let Ok(mut pool) = self.pool.try_lock() else { return false };
        f(pool.parts());
        pool.after_transition();
        true
    }
}
