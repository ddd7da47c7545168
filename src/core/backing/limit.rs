//! The memory fraction limit (`set_memory_fraction`), shared by every shard of a device.

use super::GrowError;
use crate::runtime::AclCallError;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The limit and the device bytes charged against it. Bytes are charged before the device call that
/// obtains them, so two shards growing at once cannot both pass the limit.
#[derive(Debug)]
pub(crate) struct MemoryLimit {
    limit: AtomicUsize,
    charged: AtomicUsize,
}

impl MemoryLimit {
    pub fn new(limit: Option<usize>) -> Self {
        MemoryLimit { limit: AtomicUsize::new(limit.unwrap_or(usize::MAX)), charged: AtomicUsize::new(0) }
    }

    pub fn get(&self) -> Option<usize> {
        Some(self.limit.load(Ordering::Relaxed)).filter(|&l| l != usize::MAX)
    }

    pub fn set(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Charges `size` bytes, or says the limit would be passed (`GrowError::OverLimit`).
    pub fn charge(&self, size: usize) -> Result<(), GrowError> {
        let limit = self.limit.load(Ordering::Relaxed);
        let next = |cur: usize| cur.checked_add(size).filter(|&n| n <= limit);
        match self.charged.fetch_update(Ordering::Relaxed, Ordering::Relaxed, next) {
            Ok(_) => Ok(()),
            Err(charged) => Err(GrowError::OverLimit { size, limit, charged }),
        }
    }

    /// What `call` obtains, `size` bytes charged for it first and refunded if it fails.
    pub fn charged<T>(&self, size: usize, call: impl FnOnce() -> Result<T, AclCallError>) -> Result<T, GrowError> {
        self.charge(size)?;
        call().map_err(|e| {
            self.refund(size);
            GrowError::Runtime(e)
        })
    }

    /// Gives back a charge (the call failed, or the memory was freed).
    pub fn refund(&self, size: usize) {
        self.charged.fetch_sub(size, Ordering::Relaxed);
    }
}
