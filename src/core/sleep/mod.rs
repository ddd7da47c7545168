//! Sleep and wake: an allocator's device memory goes back, per pool mode, while
//! every address stays valid; wake is all or nothing. A malloc gets one branch
//! (`refusing`), a free none (docs/design.md, Note [sleep]).

pub(super) mod state;
pub(super) mod wake;

use super::backing::{Memory, Scope};
pub use super::pools::config::SleepMode;
use crate::core::alloc::device::Device;
use crate::core::alloc::streams::StreamEntry;
use crate::core::sleep::state::Asleep;
use crate::error::{Error, Result};
use std::collections::HashMap;

impl SleepMode {
    /// Whether sleep takes the pool's live blocks off the device.
    pub fn releases(self) -> bool {
        self != SleepMode::Keep
    }
}

impl<B: Memory> Device<B> {
    /// Sleeps (Note [sleep]); `mode_of(pool id, its configured mode)` is the mode each pool sleeps in. Returns
    /// the device bytes given back; asleep already: 0, but after a partial wake INVALID_ARGUMENT, nothing changed.
    pub fn sleep(&self, mode_of: &dyn Fn(u64, SleepMode) -> SleepMode) -> Result<usize> {
        self.check_usable()?;
        // Before any lock: the host's queue may still allocate as it drains.
        self.sh.hooks.before_release(self.sh.device);
        let mut state = self.sleep.lock();
        match state.as_ref() {
            Some(Asleep { partly_woken: true }) => {
                return Err(Error::InvalidArgument(
                    "some pools are still asleep after a partial wake (npualloc_wake_with): wake them first \
                     (npualloc_wake), then sleep; nothing was changed"
                        .into(),
                ))
            }
            Some(_) => return Ok(0),
            None => {}
        }
        let mut modes = HashMap::new();
        for p in self.pool_shards() {
            let mode = mode_of(p.id, p.sleep);
            if !mode.releases() {
                continue;
            }
            // Memory another process maps must stay where it is.
            if let Some(addr) = p.shards.iter().find_map(|s| s.lock_anyway().cache.imported_block()) {
                return Err(Error::InvalidArgument(format!(
                    "pool {} would sleep with sleep={} while another process holds its block {addr:#x} \
                     imported (npualloc_ipc_import): that process must close it first; nothing was changed",
                    p.id,
                    mode.name()
                )));
            }
            if !B::SLEEPS_LIVE && p.shards.iter().any(|s| s.lock_anyway().cache.live().0 > 0) {
                return Err(Error::Unsupported(format!(
                    "sleep with sleep={} needs expandable segments while pool {} has live blocks (fixed segments \
                     cannot be unmapped under a live block); nothing was changed",
                    mode.name(),
                    p.id
                )));
            }
            modes.insert(p.id, mode);
        }
        // The other exports of those pools end: their memory goes off the device.
        for s in self.pool_shards().iter().filter(|p| modes.contains_key(&p.id)).flat_map(|p| p.shards.iter()) {
            s.lock_anyway().cache.end_all_exports(false);
        }
        *state = Some(Asleep { partly_woken: false });
        self.sleep.publish(Some(&modes));
        let result = self.take_off(&modes);
        if let Err(e) = &result {
            // Undo: bring back what was taken (if handles are short, the memory stays asleep).
            if let Err(w) = self.bring_back(&|_| true, &HashMap::new(), false) {
                return Err(Error::Internal(format!("sleep failed ({e}), and waking again failed too: {}", w.error)));
            }
            *state = None;
            self.sleep.publish(None);
        }
        result
    }

    /// Steps 2 to 4 of sleep.
    fn take_off(&self, modes: &HashMap<u64, SleepMode>) -> Result<usize> {
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // What empty_cache gives back, and the cache of each sleeping pool no capture was routed to (pass 2
        // releases the ranges pass 1 emptied). Graph memory stays for replays (Note [capture], Note [pools]).
        let captured: Vec<u64> = modes.keys().copied().filter(|&p| self.pool_captured(p)).collect();
        let pick =
            |e: &StreamEntry<B>| e.reclaimable() || (modes.contains_key(&e.pool()) && !captured.contains(&e.pool()));
        let mut freed = self.release_free_where(Scope::All, pick)? + self.release_free_where(Scope::All, pick)?;
        for e in self.streams.iter().filter(|e| !e.is_graph()) {
            let Some(&mode) = modes.get(&e.pool()) else { continue };
            for (kind, shard) in e.shards.iter().enumerate() {
                let mut pool = shard.lock_anyway();
                let got = B::sleep_pool(pool.parts(), mode == SleepMode::Offload);
                self.published(e, kind, &pool);
                freed += got?;
            }
        }
        Ok(freed + B::free_cached(&self.sh)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sleep::state::SleepState;

    /// While a sleep holds its mutex (taking memory off the device), a
    /// request's check answers at once: refused for the sleeping pool,
    /// allowed for the others.
    #[test]
    fn check_answers_while_a_sleep_is_under_way() {
        let s = SleepState::default();
        let held = s.lock();
        s.publish(Some(&HashMap::from([(3, SleepMode::Offload)])));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ =
                    tx.send((s.refusal(3, false).is_err(), s.refusal(0, false).is_ok(), s.refusal(3, true).is_ok()));
            });
            // Received while `held` still holds the sleep mutex.
            assert_eq!(rx.recv().unwrap(), (true, true, true));
        });
        drop(held);
        s.publish(None);
        assert!(!s.refusing() && s.refusal(3, false).is_ok());
    }
}
