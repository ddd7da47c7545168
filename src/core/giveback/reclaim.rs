//! Getting memory back across shards: release of cached memory (ladder, `empty_cache`), garbage collection and the
//! release threshold. Those run by the ladder or `empty_cache` are serialized by the `ladder` lock. No shard lock is
//! held across a device call: detach under each shard's lock, synchronize and give back with none held, settle under
//! it again; meanwhile other streams' hits go on.

use crate::core::alloc::device::Device;
use crate::core::alloc::pool::Pool;
use crate::core::alloc::shard::Shard;
use crate::core::alloc::streams::StreamEntry;
use crate::core::backing::{Detached, Memory, Scope, What};
use crate::core::report::stats::count_for;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::MutexGuard;

impl<B: Memory> Device<B> {
    /// Returns held blocks and completed cross-stream frees to their pools, then gives back what `scope` covers.
    /// Returns the bytes given back, or the first error after trying everything.
    pub(in crate::core) fn release_free(&self, scope: Scope) -> Result<usize> {
        self.release_free_where(scope, |e| e.reclaimable())
    }

    /// `release_free` over the entries `pick` chooses.
    pub(in crate::core) fn release_free_where(
        &self,
        scope: Scope,
        pick: impl Fn(&StreamEntry<B>) -> bool,
    ) -> Result<usize> {
        self.release_shards(self.streams.iter().filter(|e| pick(e)).flat_map(|e| e.shards.iter()), scope)
    }

    /// `release_free` over `shards`.
    pub(in crate::core) fn release_shards<'a>(
        &self,
        shards: impl Iterator<Item = &'a Shard<B>>,
        scope: Scope,
    ) -> Result<usize> {
        let mut taken: Vec<(&Shard<B>, Vec<Detached>)> = Vec::new();
        for shard in shards {
            let mut pool = shard.lock_anyway();
            pool.drain_reuse();
            pool.reap_pending();
            let detached = pool.detach(scope);
            pool.after_transition();
            if !detached.is_empty() {
                taken.push((shard, detached));
            }
        }
        self.give_back_all(taken)
    }

    /// For a `reserved_headroom` move to `to`: unmaps `bytes` of free pieces of the other shards of its pool kind
    /// into the handle cache.
    pub(in crate::core) fn release_free_except(&self, to: &Shard<B>, mut bytes: usize) -> Result<usize> {
        let kind = to.lock_anyway().cache.kind;
        let mut taken: Vec<(&Shard<B>, Vec<Detached>)> = Vec::new();
        for shard in self.reclaimable_shards().filter(|s| !std::ptr::eq(*s, to)) {
            if bytes == 0 {
                break;
            }
            let mut pool = shard.lock_anyway();
            if pool.cache.kind != kind {
                continue;
            }
            let detached = pool.detach(Scope::Pieces(bytes));
            pool.after_transition();
            bytes = bytes.saturating_sub(detached.iter().map(|d| d.size).sum());
            if !detached.is_empty() {
                taken.push((shard, detached));
            }
        }
        self.give_back_all(taken)
    }

    /// Synchronizes the streams that used `taken`, gives back what no busy stream may use, settles each shard.
    pub(in crate::core) fn give_back_all(&self, taken: Vec<(&Shard<B>, Vec<Detached>)>) -> Result<usize> {
        // Each pool counts the synchronizations for its memory once per stream (Note [pools]).
        let tallies: Vec<_> = taken.iter().map(|(shard, _)| self.tally_of(&shard.lock_anyway())).collect();
        let (mut streams, mut counted) = (Vec::new(), Vec::new());
        for ((_, ds), tally) in taken.iter().zip(&tallies) {
            for &s in ds.iter().flat_map(|d| &d.streams) {
                if !streams.contains(&s) {
                    streams.push(s);
                }
                if !counted.contains(&(Arc::as_ptr(tally), s)) {
                    counted.push((Arc::as_ptr(tally), s));
                    tally.calls.synced_here();
                }
            }
        }
        let (busy, mut first_error) = self.synchronize(&streams, "synchronizing a stream before releasing memory");
        let mut released = 0;
        for ((shard, detached), tally) in taken.into_iter().zip(tallies) {
            // The device calls giving it back are its pool's.
            let _pool_calls = count_for(&tally.calls);
            let mut outcomes = Vec::with_capacity(detached.len());
            for d in &detached {
                let ok = if d.streams.iter().any(|s| busy.contains(s)) {
                    false
                } else {
                    match B::give_back(&self.sh, d) {
                        Ok(bytes) => {
                            released += bytes;
                            true
                        }
                        Err(e) => {
                            first_error.get_or_insert(e);
                            false
                        }
                    }
                };
                outcomes.push(ok);
            }
            let mut pool = shard.lock_anyway();
            for (d, ok) in detached.into_iter().zip(outcomes) {
                pool.settle(d, ok);
            }
            pool.after_transition();
            self.streams.entry_of(pool.cache.id).publish_held(pool.cache.kind as usize, pool.held_bytes());
        }
        first_error.map_or(Ok(released), Err)
    }

    /// The shards whose free memory may be given back: not graph streams' (Note [capture]) nor live private pools'
    /// (Note [pools]).
    fn reclaimable_shards(&self) -> impl Iterator<Item = &Shard<B>> + Clone + '_ {
        self.streams.iter().filter(|e| e.reclaimable()).flat_map(|e| e.shards.iter())
    }

    /// Synchronizes each of `streams` once; returns those that could not be waited for, and the first error. A
    /// destroyed stream counts as idle (ACL requires a synchronize before destroying one). A capturing stream
    /// (Note [capture]) counts as busy, becomes a graph stream, and is no error.
    pub(in crate::core) fn synchronize(&self, streams: &[Stream], what: &str) -> (Vec<Stream>, Option<Error>) {
        let (rt, device) = (&self.sh.rt, self.sh.device);
        let mut busy = Vec::new();
        let mut first_error = None;
        for &s in streams {
            self.sh.counters.synced();
            match rt.on_device(device, || rt.synchronize_stream(s)) {
                Ok(()) => {}
                Err(e) if e.is_invalid_handle() => {}
                Err(e) if e.code == crate::sys::ACL_ERROR_RT_STREAM_CAPTURED => {
                    if let Some(entry) = self.streams.find(s) {
                        entry.mark_graph();
                    }
                    busy.push(s);
                }
                Err(e) => {
                    first_error.get_or_insert(Error::runtime(e, what.to_string()));
                    busy.push(s);
                }
            }
        }
        (busy, first_error)
    }

    /// If a free is pending: synchronizes every pending free's events (no shard lock held: the shards keep owning
    /// them), reaps them, then releases the free memory of the entries `pick` chooses and the cached handles.
    /// False when no free was pending.
    pub(in crate::core) fn wait_pending(&self, pick: impl Fn(&StreamEntry<B>) -> bool) -> bool {
        if !self.streams.shards().any(|s| s.lock_anyway().cache.pending_bytes() > 0) {
            return false;
        }
        let (rt, device) = (&self.sh.rt, self.sh.device);
        let events: Vec<_> = self.streams.shards().flat_map(|s| s.lock_anyway().cache.pending_events()).collect();
        for ev in events {
            let _ = rt.on_device(device, || rt.synchronize_event(ev));
            self.sh.counters.synced();
        }
        for shard in self.streams.shards() {
            shard.lock_anyway().reap_pending();
        }
        // Failures only mean less came back.
        let _ = self.release_free_where(Scope::All, pick);
        let _ = B::free_cached(&self.sh);
        true
    }

    /// Before growing by `needed` past `garbage_collection_threshold` x limit, gives back the oldest unused cached
    /// memory until the growth fits: cached handles first (no synchronization), then whole free segments or wholly
    /// free pieces. A moved handle's old address pinning a free handle is unmapped; a second round frees the handle.
    pub(in crate::core) fn collect_garbage(&self, needed: usize) {
        let Some(target) = self.sh.gc_target() else { return };
        for _round in 0..2 {
            let Some(mut to_free) = (self.sh.counters.reserved() + needed).checked_sub(target).filter(|&n| n > 0)
            else {
                return;
            };
            // Cached handles first (no synchronization); `to_free` is above 0 here, so 0 only if they covered it.
            to_free = to_free.saturating_sub(self.free_handles_upto(|| to_free));
            if to_free == 0 {
                return;
            }
            let mut all: Vec<(&Shard<B>, Detached)> = Vec::new();
            for shard in self.reclaimable_shards() {
                let mut pool = shard.lock_anyway();
                pool.drain_reuse();
                all.extend(pool.detach(Scope::Unused(to_free)).into_iter().map(|d| (shard, d)));
                pool.after_transition();
            }
            all.sort_by_key(|(_, d)| d.serial);
            let mut keep: Vec<(&Shard<B>, Detached)> = Vec::new();
            let mut chosen: Vec<(&Shard<B>, Vec<Detached>)> = Vec::new();
            let mut unpinned = false;
            for (shard, d) in all {
                // A range with nothing mapped stays: it frees nothing, and may be the one this growth just reserved.
                if to_free == 0 || d.memory == 0 {
                    keep.push((shard, d));
                    continue;
                }
                to_free = to_free.saturating_sub(d.memory);
                unpinned |= d.what == What::Retired;
                chosen.push((shard, vec![d]));
            }
            for (shard, d) in keep {
                let mut pool = shard.lock_anyway();
                pool.settle(d, false);
                pool.after_transition();
            }
            if chosen.is_empty() {
                return;
            }
            // A refused call ends it: a second round would only ask the runtime again at once.
            let gave_back = self.give_back_all(chosen).is_ok();
            // Expandable pieces went to the handle cache: free them.
            self.free_handles_upto(|| (self.sh.counters.reserved() + needed).saturating_sub(target));
            if !unpinned || !gave_back {
                return;
            }
        }
    }

    /// If handles are cached, frees them up to `bytes()` (read only then); returns the bytes freed. A failure only
    /// means less came back.
    fn free_handles_upto(&self, bytes: impl FnOnce() -> usize) -> usize {
        if self.sh.backing.cached_bytes() == 0 {
            return 0;
        }
        B::free_cached_upto(&self.sh, bytes()).unwrap_or(0)
    }

    /// A peer allocator is about to refuse a request (`peers`): the ladder's safe steps, then the cached handles.
    /// Waits for its own ladder if busy (the caller holds no npualloc lock).
    pub(in crate::core) fn give_back_to_peer(&self) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Failures only mean less came back. The second pass releases the ranges the first emptied.
        for _ in 0..2 {
            let _ = self.release_free(Scope::All);
        }
        let _ = B::free_cached(&self.sh);
    }

    /// Returns every cached, unused segment, handle and empty range to the device (may synchronize the streams that
    /// used them). Everything is tried; the first error is the answer. With `free_handles` false the unmapped
    /// handles stay cached (torch_npu's `emptyCacheImpl(check_error, free_physical=false)`).
    pub fn empty_cache_with(&self, free_handles: bool) -> Result<usize> {
        self.check_usable()?;
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // The second pass releases the ranges the first emptied; the third those a moved handle emptied (its new
        // pages detach only once its old address is unmapped).
        let passes = (0..3).map(|_| self.release_free(Scope::All));
        let handles = free_handles.then(|| std::iter::once_with(|| B::free_cached(&self.sh)));
        let result = sum_all(passes.chain(handles.into_iter().flatten()));
        self.retire_destroyed();
        result
    }

    /// After a free at `addr`, when cached memory passes `release_threshold`: gives back about the excess of what
    /// the free left unused (`Scope::Freed`), with the shard's lock dropped for the device calls. A free that leaves
    /// nothing unused makes no device call. A moved handle's old address pinning a freed handle is unmapped first;
    /// a second round, over the whole shard, frees the handle.
    #[cold]
    #[inline(never)]
    pub(in crate::core) fn release_over_threshold<'s>(
        &self,
        shard: &'s Shard<B>,
        mut pool: MutexGuard<'s, Pool<B>>,
        addr: usize,
    ) {
        let Some(threshold) = self.sh.release_threshold else { return };
        if !self.streams.entry_of(pool.cache.id).reclaimable() {
            return;
        }
        let over = || {
            let allocated: u64 = self.streams.shards().map(|s| s.lane.allocated()).sum();
            let cached = (self.sh.counters.reserved() as u64).saturating_sub(allocated);
            usize::try_from(cached.saturating_sub(threshold as u64)).unwrap_or(usize::MAX)
        };
        let stream = pool.stream();
        for round in 0..2 {
            let excess = over();
            if excess == 0 {
                return;
            }
            // Cached handles cover part of it with no synchronization.
            let handles = self.sh.backing.cached_bytes();
            let mut unpinned = false;
            if let Some(bytes) = excess.checked_sub(handles).filter(|&n| n > 0) {
                // The first round may have unmapped what lay under the freed block: the second looks at the shard.
                let detach = |pool: &mut Pool<B>| {
                    if round == 0 {
                        pool.detach(Scope::Freed { addr, bytes })
                    } else {
                        pool.detach(Scope::Unused(bytes))
                    }
                };
                // A look under the shard lock alone first: most frees find nothing to give back.
                let probe = detach(&mut pool);
                let found = !probe.is_empty();
                for d in probe {
                    pool.settle(d, false);
                }
                pool.after_transition();
                drop(pool);
                if found {
                    // The host's hook with no lock held, then the ladder lock, so sleep, wake, empty_cache,
                    // forget_stream and the ladder never meet these pieces half-way. A free never waits for it (its
                    // holder may be inside the segment observer, as `npualloc_set_segment_observer`
                    // promises, with no npualloc lock held that a malloc or free on another stream needs): this memory stays cached until the next
                    // such free (`release_owed`), or empty_cache.
                    self.sh.hooks.before_release(self.sh.device);
                    let _ladder = match self.ladder.try_lock() {
                        Ok(held) => held,
                        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => {
                            self.release_owed.store(true, Ordering::Release);
                            self.free_handles_upto(over);
                            return;
                        }
                    };
                    let mut again = shard.lock_anyway();
                    // forget_stream may have retired the entry meanwhile, or a capture made it a graph stream.
                    if again.stream() != stream || !self.streams.entry_of(again.cache.id).reclaimable() {
                        return;
                    }
                    let detached = detach(&mut again);
                    again.after_transition();
                    drop(again);
                    // A second round only after an old address went, never after a refusal.
                    let retired = detached.iter().any(|d| d.what == What::Retired);
                    let gave_back = detached.is_empty() || self.give_back_all(vec![(shard, detached)]).is_ok();
                    unpinned = retired && gave_back;
                    // What frees that found the ladder busy left over the threshold, wherever it lies.
                    if self.release_owed.swap(false, Ordering::AcqRel) && over() > 0 {
                        let _ = self.release_free(Scope::Unused(over()));
                    }
                    self.free_handles_upto(over);
                }
            } else {
                drop(pool);
            }
            if !unpinned || round == 1 {
                if self.sh.backing.cached_bytes() > 0 && over() > 0 {
                    let _ = B::free_cached_upto(&self.sh, over());
                }
                return;
            }
            pool = shard.lock_anyway();
        }
    }
}

/// The sum of `results`, each one evaluated in turn, or the first error.
pub(in crate::core) fn sum_all(results: impl IntoIterator<Item = Result<usize>>) -> Result<usize> {
    let (released, first_error) = results.into_iter().fold((0, None), |(sum, first), result| match result {
        Ok(n) => (sum + n, first),
        Err(e) => (sum, first.or(Some(e))),
    });
    first_error.map_or(Ok(released), Err)
}
