//! An allocator's sleep state (Note [sleep] in `sleep`): a leaf module, so
//! `device` holds it without importing the sleep paths, which import `device`.

use crate::core::alloc::streams::StreamEntry;
use crate::core::backing::Memory;
use crate::core::pools::config::SleepMode;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

#[derive(Debug, Default)]
pub(crate) struct SleepState {
    /// Set while asleep with some pool not kept: a malloc checks `asleep`.
    pub(in crate::core) refusing: AtomicBool,
    /// Held by sleep and wake for their whole run.
    pub(in crate::core) asleep: Mutex<Option<Asleep>>,
    /// The modes of the pools asleep, apart from `asleep` so `check` never waits for a sleep or wake under
    /// way: written before sleep takes anything off, cleared once wake brought it back.
    pub(in crate::core) modes: RwLock<Option<HashMap<u64, SleepMode>>>,
}

#[derive(Debug, Clone)]
/// Present while asleep (the modes are `SleepState::modes`).
pub(in crate::core) struct Asleep {
    /// A partial wake brought some pools back (a sleep then is refused).
    pub partly_woken: bool,
}

impl SleepState {
    pub(in crate::core) fn lock(&self) -> std::sync::MutexGuard<'_, Option<Asleep>> {
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
    pub fn check<B: Memory>(&self, entry: &StreamEntry<B>) -> Result<()> {
        self.refusal(entry.pool(), entry.is_graph())
    }

    /// `check` for a request routed to `pool` (on a graph stream or not).
    pub(in crate::core) fn refusal(&self, pool: u64, graph: bool) -> Result<()> {
        let modes = self.modes.read().unwrap_or_else(|e| e.into_inner());
        let Some(modes) = modes.as_ref() else { return Ok(()) };
        match modes.get(&pool) {
            Some(mode) if mode.releases() && !graph => Err(Error::InvalidArgument(format!(
                "the allocator is asleep: pool {pool} (sleep={}) takes no allocation until npualloc_wake",
                mode.name()
            ))),
            _ => Ok(()),
        }
    }

    /// The pools asleep whose mode gives their blocks back (none when awake).
    pub(in crate::core) fn asleep_pools(&self) -> HashMap<u64, SleepMode> {
        self.modes.read().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
    }

    #[cfg(test)]
    pub fn is_asleep(&self) -> bool {
        self.lock().is_some()
    }

    /// Publishes the modes of the pools asleep (None: awake), then `refusing`.
    pub(in crate::core) fn publish(&self, modes: Option<&HashMap<u64, SleepMode>>) {
        let refusing = modes.is_some_and(|m| !m.is_empty());
        if refusing {
            *self.modes.write().unwrap_or_else(|e| e.into_inner()) = modes.cloned();
            self.refusing.store(true, Ordering::SeqCst);
        } else {
            self.refusing.store(false, Ordering::SeqCst);
            *self.modes.write().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// A pool created while asleep whose mode gives its blocks back is refused allocations until wake too.
    pub(in crate::core) fn add_sleeping_pool(&self, pool: u64, mode: SleepMode) {
        let mut modes = self.modes.write().unwrap_or_else(|e| e.into_inner());
        modes.get_or_insert_with(HashMap::new).insert(pool, mode);
        self.refusing.store(true, Ordering::SeqCst);
    }
}
