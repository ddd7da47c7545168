//! An allocator's sleep state (Note [sleep] in `sleep`): a leaf module, so
//! `device` holds it without importing the sleep paths, which import `device`.

use super::backing::Backing;
use super::pools::config::SleepMode;
use super::streams::StreamEntry;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// An allocator's sleep state.
#[derive(Debug, Default)]
pub(crate) struct SleepState {
    /// Set while asleep with some pool not kept: a malloc checks `asleep`.
    pub(super) refusing: AtomicBool,
    pub(super) asleep: Mutex<Option<Asleep>>,
}

#[derive(Debug, Clone)]
pub(super) struct Asleep {
    /// The mode of each pool not kept, by pool id.
    pub(super) modes: HashMap<u64, SleepMode>,
}

impl SleepState {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Option<Asleep>> {
        self.asleep.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True while some malloc may be refused (the one hot-path branch).
    #[inline(always)]
    pub fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// The refusal of a malloc routed to `entry`, if its pool sleeps.
    #[cold]
    #[inline(never)]
    pub fn check<B: Backing>(&self, entry: &StreamEntry<B>) -> Result<()> {
        let state = self.lock();
        let Some(asleep) = state.as_ref() else { return Ok(()) };
        match asleep.modes.get(&entry.pool) {
            Some(mode) if mode.releases() && !entry.is_graph() => Err(Error::InvalidArgument(format!(
                "the allocator is asleep: pool {} (sleep={}) takes no allocation until npualloc_wake",
                entry.pool,
                mode.name()
            ))),
            _ => Ok(()),
        }
    }

    pub fn is_asleep(&self) -> bool {
        self.lock().is_some()
    }
}
