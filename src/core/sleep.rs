//! Note [sleep]
//!
//! `sleep` gives back the device memory of an allocator while every address
//! it handed out stays valid; `wake` brings it back at the same addresses.
//! What happens to a pool's live blocks is its *mode* (the pool's `sleep`
//! config): `Keep` leaves them, `Offload` copies them to pinned host memory
//! first, `Discard` drops their contents.
//!
//! Sleep, in order:
//! 0. The before-release hook runs, before any lock is taken: a host
//!    drains its queue of work there, which may still allocate.
//! 1. The allocator becomes asleep: from now on a malloc routed to an
//!    offload or discard pool is INVALID_ARGUMENT ("asleep"); frees of any
//!    block go on (a sleeping block is just dropped; its pages are gone).
//! 2. The default pool's cached memory goes back as `empty_cache` gives it
//!    back (after synchronizing the streams that used it), and so does that
//!    of each offload/discard pool no capture was routed to. A pool a
//!    capture was routed to keeps its cached memory (its graphs' replays
//!    use the blocks freed during the capture; Note [pools]), as do kept
//!    pools and graph streams.
//! 3. Under the ladder lock, each offload/discard pool's ranges are taken
//!    off the device run by run (`backing::expandable::sleep`): the streams
//!    that used a range are synchronized, then one host buffer and one copy
//!    per run of mapped pages, then the run's pieces are unmapped and their
//!    handles freed. Ranges stay reserved and the directory keeps mapping
//!    their addresses to their shards.
//! 4. Handles that could not be freed are retried with the handle cache.
//!
//! Fixed segments cannot be unmapped under a live block: with live blocks
//! in an offload or discard pool, sleep is UNSUPPORTED and changes nothing.
//! If a step fails, what was taken is woken again and the error returned.
//!
//! Wake allocates every handle the sleeping runs need first; if one is
//! refused, those allocated are freed and wake is OUT_OF_MEMORY, still
//! asleep, having changed nothing. Then each run is mapped at its pages,
//! its contents copied back and its host buffer freed. A run whose blocks
//! were all freed while asleep is mapped again all the same (its pages are
//! then cached memory, which `empty_cache` gives back).
//!
//! Shards of streams seen capturing (Note [capture]) are never taken off
//! the device: their blocks belong to captured graphs.
//!
//! The hot path gets one predictable branch: a malloc reads `refusing`
//! (false unless asleep with an offload or discard pool). A free gets none.

use super::backing::{Backing, Scope};
use super::device::Device;
pub use super::pools::config::SleepMode;
use super::sleep_state::Asleep;
use super::streams::StreamEntry;
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

impl SleepMode {
    /// Whether sleep takes the pool's live blocks off the device.
    pub fn releases(self) -> bool {
        self != SleepMode::Keep
    }
}

impl<B: Backing> Device<B> {
    /// Sleeps (Note [sleep]); `mode_of(pool id, its configured mode)` is
    /// the mode each pool sleeps in. Asleep already: OK, 0. Returns the
    /// device bytes given back.
    pub fn sleep(&self, mode_of: &dyn Fn(u64, SleepMode) -> SleepMode) -> Result<usize> {
        self.check_alive()?;
        // Before any lock: the host's queue may still allocate as it drains.
        self.sh.hooks.before_release(self.sh.device);
        let mut state = self.sleep.lock();
        if state.is_some() {
            return Ok(0);
        }
        let mut modes = HashMap::new();
        for p in self.pool_shards() {
            let mode = mode_of(p.id, p.sleep);
            if !mode.releases() {
                continue;
            }
            if !B::SLEEPS_LIVE && p.shards.iter().any(|s| s.lock_anyway().live().0 > 0) {
                return Err(Error::Unsupported(format!(
                    "sleep with sleep={} needs expandable segments while pool {} has live blocks (fixed segments \
                     cannot be unmapped under a live block); nothing was changed",
                    mode.name(),
                    p.id
                )));
            }
            modes.insert(p.id, mode);
        }
        *state = Some(Asleep);
        self.sleep.publish(Some(&modes));
        let result = self.take_off(&modes);
        if let Err(e) = result {
            // Undo: bring back what was taken (handles are there, as they
            // were just freed; if not, the memory stays asleep).
            match self.bring_back() {
                Ok(()) => {
                    *state = None;
                    self.sleep.publish(None);
                }
                Err(w) => {
                    return Err(Error::Internal(format!("sleep failed ({e}), and waking again failed too: {w}")));
                }
            }
            return Err(e);
        }
        result
    }

    /// Steps 2 to 4 of sleep.
    fn take_off(&self, modes: &HashMap<u64, SleepMode>) -> Result<usize> {
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // The cached memory empty_cache gives back, and that of each pool
        // put to sleep that no capture was routed to (the second pass
        // releases the ranges the first one emptied). Graph streams and
        // pools a capture used keep theirs: the graphs' replays use it
        // (Note [capture], Note [pools]).
        let captured: Vec<u64> = modes.keys().copied().filter(|&p| self.pool_captured(p)).collect();
        let pick =
            |e: &StreamEntry<B>| e.reclaimable() || (modes.contains_key(&e.pool()) && !captured.contains(&e.pool()));
        let mut freed = self.release_free_where(Scope::All, pick)? + self.release_free_where(Scope::All, pick)?;
        for e in self.streams.iter().filter(|e| !e.is_graph()) {
            let Some(&mode) = modes.get(&e.pool()) else { continue };
            for (kind, shard) in e.shards.iter().enumerate() {
                let mut pool = shard.lock_anyway();
                let got = B::sleep_pool(&mut pool, mode == SleepMode::Offload);
                self.published(e, kind, &pool);
                freed += got?;
            }
        }
        Ok(freed + B::free_cached(&self.sh)?)
    }

    /// Wakes (Note [sleep]). Awake already: OK.
    pub fn wake(&self) -> Result<()> {
        self.check_alive()?;
        let mut state = self.sleep.lock();
        if state.is_none() {
            return Ok(());
        }
        self.bring_back()?;
        *state = None;
        self.sleep.publish(None);
        Ok(())
    }

    /// Maps every sleeping run again, or changes nothing (OUT_OF_MEMORY).
    fn bring_back(&self) -> Result<()> {
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Each shard's needs, in the order the second loop visits shards:
        // each gets its own handles, so a mapping that fails in one shard
        // leaves the next shard's handles its own (of the sizes it needs).
        let shards = || self.streams.iter().flat_map(|e| e.shards.iter().enumerate().map(move |s| (e, s)));
        let per_shard: Vec<Vec<(usize, crate::sys::aclrtMemAttr)>> = shards()
            .map(|(_, (_, shard))| {
                let mut n = Vec::new();
                B::wake_needs(&shard.lock_anyway(), &mut n);
                n
            })
            .collect();
        let needs: Vec<(usize, crate::sys::aclrtMemAttr)> = per_shard.iter().flatten().copied().collect();
        let mut handles = VecDeque::with_capacity(needs.len());
        for (i, &(bytes, attr)) in needs.iter().enumerate() {
            match self.fresh_handle(bytes, attr) {
                Ok(h) => handles.push_back(h),
                Err(e) => {
                    let short: usize = needs[i..].iter().map(|n| n.0).sum();
                    let total: usize = needs.iter().map(|n| n.0).sum();
                    self.free_handles(&mut handles, &needs);
                    let oom = match &e {
                        Error::OutOfMemory(_) => true,
                        Error::Runtime { call, .. } => call.is_out_of_memory(),
                        _ => false,
                    };
                    if !oom {
                        return Err(e);
                    }
                    return Err(Error::OutOfMemory(format!(
                        "wake needs {total} bytes of device memory for the sleeping blocks on device {} and {short} \
                         of them could not be had; still asleep, nothing changed (free memory, then wake again)",
                        self.sh.device
                    )));
                }
            }
        }
        let mut first_error = None;
        for ((e, (kind, shard)), own) in shards().zip(&per_shard) {
            let mut mine: VecDeque<PhysicalHandle> = handles.drain(..own.len().min(handles.len())).collect();
            let mut pool = shard.lock_anyway();
            if let Err(err) = B::wake_pool(&mut pool, &mut mine) {
                first_error.get_or_insert(err);
            }
            self.published(e, kind, &pool);
            drop(pool);
            // Handles left over belong to this shard's runs whose mapping
            // failed (the tail of its needs).
            let left = &own[own.len() - mine.len()..];
            self.free_handles(&mut mine, left);
        }
        // A shard added since the needs were counted needs none.
        let rest = needs[needs.len() - handles.len()..].to_vec();
        self.free_handles(&mut handles, &rest);
        first_error.map_or(Ok(()), Err)
    }

    /// One physical handle of `bytes`, within the memory limit.
    fn fresh_handle(&self, bytes: usize, attr: crate::sys::aclrtMemAttr) -> Result<PhysicalHandle> {
        let sh = &self.sh;
        if sh.limit.charge(bytes).is_err() {
            return Err(Error::OutOfMemory("over the memory limit".into()));
        }
        match sh.rt.on_device(sh.device, || sh.rt.malloc_physical(sh.device, attr, bytes)) {
            Ok(h) => {
                sh.counters.physical_allocated(bytes);
                Ok(h)
            }
            Err(e) => {
                sh.limit.refund(bytes);
                Err(Error::runtime(e, "allocating device memory to wake into"))
            }
        }
    }

    /// Frees `handles`, the first of those `needs` describes.
    fn free_handles(&self, handles: &mut VecDeque<PhysicalHandle>, needs: &[(usize, crate::sys::aclrtMemAttr)]) {
        let sh = &self.sh;
        for (h, &(bytes, _)) in handles.drain(..).zip(needs) {
            if sh.rt.on_device(sh.device, || sh.rt.free_physical(h)).is_ok() {
                sh.limit.refund(bytes);
                sh.counters.physical_freed(bytes);
            }
        }
    }

    fn check_alive(&self) -> Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Internal("the allocator is unusable: it was destroyed".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sleep_state::SleepState;

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
