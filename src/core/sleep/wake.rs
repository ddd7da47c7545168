//! Wake (Note [sleep] in `sleep`): bringing sleeping blocks back, all of an allocator's or some pools' only.
//!
//! A wake is all or nothing. Every handle the chosen runs need is allocated first; then each run is mapped and its
//! offloaded contents copied back, still counted asleep (pages owned, host buffer kept). Only when every run is
//! mapped and copied do they become mapped pages again. On any failure every run mapped so far is unmapped, every
//! handle freed, and every block stays asleep with its host copy: nothing changed, a later wake may succeed. A
//! handle the runtime refuses to free stays cached, counted reserved (`Sleeps::free_wake_handles`). If an unmap of
//! that undo fails too, the page stays mapped under its sleeping block, its handle kept by the range; the error says
//! so, and the next wake of that run, or teardown, unmaps and frees it first.
//!
//! When the handles do not fit, the wake first gives back the awake pools' cached memory as the OOM ladder does
//! (never a graph stream's or another private pool's), then tries once more before OUT_OF_MEMORY.
//!
//! A partial wake (`npualloc_wake_with`, e.g. vllm-ascend waking `weights` before `kv_cache`) brings back the chosen
//! pools only; the allocator counts as asleep until every pool is awake.

use crate::core::alloc::device::Device;
use crate::core::alloc::shard::Shard;
use crate::core::alloc::streams::StreamEntry;
use crate::core::backing::{Memory, Scope, WakeHandles};
use crate::core::pools::config::SleepMode;
use crate::core::sleep::state::Asleep;
use crate::error::{Error, Result};
use crate::sys::aclrtMemAttr;
use std::collections::HashMap;

/// Why a wake failed: `short` when its handles could not all be allocated (worth a retry after giving back cache).
pub(in crate::core) struct Failed {
    pub(in crate::core) error: Error,
    short: bool,
}

type Needs = Vec<(usize, aclrtMemAttr)>;

impl<B: Memory> Device<B> {
    /// Wakes the pools in `pools` (None: every pool); those not asleep: OK. INVALID_ARGUMENT, changing nothing, for a
    /// pool never created.
    pub fn wake(&self, pools: Option<&[u64]>) -> Result<()> {
        self.check_usable()?;
        if let Some(list) = pools {
            let created = self.pool_shards().len() as u64;
            if let Some(p) = list.iter().find(|&&p| p >= created) {
                return Err(Error::InvalidArgument(format!(
                    "pool {p} does not exist (no npualloc_pool_create returned it); nothing was woken"
                )));
            }
        }
        for retry in [false, true] {
            if retry {
                // Giving back synchronizes: the host drains its queue first, with no lock held.
                self.sh.hooks.before_release(self.sh.device);
            }
            let mut state = self.sleep.lock();
            if state.is_none() {
                return Ok(());
            }
            let asleep = self.sleep.asleep_pools();
            let chosen = |pool: u64| pools.is_none_or(|l| l.contains(&pool));
            match self.bring_back(&|e: &StreamEntry<B>| chosen(e.pool()), &asleep, retry) {
                Ok(()) => {
                    let before = asleep.len();
                    let left: HashMap<u64, SleepMode> = asleep.into_iter().filter(|&(p, _)| !chosen(p)).collect();
                    if left.is_empty() {
                        *state = None;
                        self.sleep.publish(None);
                    } else {
                        if left.len() < before {
                            *state = Some(Asleep { partly_woken: true });
                        }
                        self.sleep.publish(Some(&left));
                    }
                    return Ok(());
                }
                Err(Failed { short: true, .. }) if !retry => continue,
                Err(Failed { error, .. }) => return Err(error),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Maps every sleeping run of the entries `pick` chooses, or changes nothing; with `reclaim`, first gives back
    /// the cached memory of pools not in `asleep`.
    pub(in crate::core) fn bring_back(
        &self,
        pick: &dyn Fn(&StreamEntry<B>) -> bool,
        asleep: &HashMap<u64, SleepMode>,
        reclaim: bool,
    ) -> Result<(), Failed> {
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        if reclaim {
            self.reclaim_for_wake(asleep);
        }
        let shards: Vec<(&StreamEntry<B>, usize, &Shard<B>)> = self
            .streams
            .iter()
            .filter(|e| pick(e))
            .flat_map(|e| e.shards.iter().enumerate().map(move |(k, s)| (e, k, s)))
            .collect();
        // Each shard's needs, in the order the map loop visits shards.
        let per_shard: Vec<Needs> = shards
            .iter()
            .map(|&(_, _, shard)| {
                let mut n = Vec::new();
                B::wake_needs(shard.lock_anyway().parts(), &mut n);
                n
            })
            .collect();
        let needs: Needs = per_shard.iter().flatten().copied().collect();
        let mut handles = self.handles_for(&needs)?;
        #[cfg(test)]
        crate::core::testpoint::hit("wake: handles taken");
        for (&(_, _, shard), own) in shards.iter().zip(&per_shard) {
            if own.is_empty() {
                continue;
            }
            let mut mine: WakeHandles = handles.drain(..own.len().min(handles.len())).collect();
            let result = B::wake_map(shard.lock_anyway().parts(), &mut mine);
            // Handles left over belong to the runs not mapped.
            B::free_wake_handles(&self.sh, mine);
            if let Err(error) = result {
                return Err(self.undo_wake(&shards, handles, error));
            }
        }
        B::free_wake_handles(&self.sh, handles);
        let mut first_error = None;
        for &(e, kind, shard) in &shards {
            let mut pool = shard.lock_anyway();
            if let Err(err) = B::wake_commit(pool.parts()) {
                first_error.get_or_insert(err);
            }
            self.published(e, kind, &pool);
        }
        first_error.map_or(Ok(()), |error| Err(Failed { error, short: false }))
    }

    /// Allocates one handle per need; on a refusal frees those allocated and says how much could not be had.
    fn handles_for(&self, needs: &Needs) -> Result<WakeHandles, Failed> {
        let mut handles = WakeHandles::with_capacity(needs.len());
        for (i, &(bytes, attr)) in needs.iter().enumerate() {
            match B::wake_handle(&self.sh, bytes, attr) {
                Ok(h) => handles.push_back((h, bytes)),
                Err(e) => {
                    B::free_wake_handles(&self.sh, handles);
                    let oom = matches!(&e, Error::OutOfMemory(_))
                        || matches!(&e, Error::Runtime { call, .. } if call.is_out_of_memory());
                    if !oom {
                        return Err(Failed { error: e, short: false });
                    }
                    let short: usize = needs[i..].iter().map(|n| n.0).sum();
                    let total: usize = needs.iter().map(|n| n.0).sum();
                    return Err(Failed {
                        error: Error::OutOfMemory(format!(
                            "wake needs {total} bytes of device memory for the sleeping blocks on device {} and \
                             {short} of them could not be had, even after giving back the cached memory of the \
                             pools awake; still asleep, nothing changed (free memory, then wake again)",
                            self.sh.device
                        )),
                        short: true,
                    });
                }
            }
        }
        Ok(handles)
    }

    /// A wake failed after mapping some runs: unmaps them and frees every handle, so nothing changed. Returns the
    /// error to report (which names any piece left mapped).
    fn undo_wake(&self, shards: &[(&StreamEntry<B>, usize, &Shard<B>)], handles: WakeHandles, error: Error) -> Failed {
        let mut back = Vec::new();
        let mut undo_error = None;
        for &(_, _, shard) in shards {
            if let Err(e) = B::wake_undo(shard.lock_anyway().parts(), &mut back) {
                undo_error.get_or_insert(e);
            }
        }
        B::free_wake_handles(&self.sh, back);
        B::free_wake_handles(&self.sh, handles);
        let error = match (error, undo_error) {
            (e, Some(u)) => Error::Internal(format!("wake on device {}: {e}; {u}", self.sh.device)),
            (Error::OutOfMemory(m), None) => Error::OutOfMemory(format!(
                "wake on device {}: {m}; every run mapped was unmapped again: still asleep, nothing changed (call \
                 wake again later)",
                self.sh.device
            )),
            (Error::Runtime { call, context }, None) => Error::Runtime {
                call,
                context: format!(
                    "{context} (wake on device {}; every run mapped was unmapped again: still asleep, nothing \
                     changed)",
                    self.sh.device
                ),
            },
            (e, None) => e,
        };
        Failed { error, short: false }
    }

    /// Gives back the cached memory of the pools awake, as the OOM ladder does (Note [sleep]).
    fn reclaim_for_wake(&self, asleep: &HashMap<u64, SleepMode>) {
        let pick = |e: &StreamEntry<B>| (e.reclaimable() || e.use_on_oom()) && !asleep.contains_key(&e.pool());
        // Failures only mean less came back. The second pass releases the ranges the first emptied.
        let _ = self.release_free_where(Scope::All, pick);
        let _ = self.release_free_where(Scope::All, pick);
        let _ = B::free_cached(&self.sh);
        self.wait_pending(pick);
    }
}
