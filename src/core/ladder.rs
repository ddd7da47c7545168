//! The out-of-memory ladder: what a request that could not grow tries
//! before it fails. It runs cheapest step first and retries the request
//! after every step, so a block freed by a completed event is never missed
//! (the PyTorch bug where an OOM was raised while a fitting block sat in the
//! pool came from skipping that retry):
//! 1. garbage collection, when `garbage_collection_threshold` asks for it;
//!    then, for a request of the default pool, a free block of a pool with
//!    `use_on_oom` on the request's stream, served as that pool's block
//!    (no device call: torch_npu's `try_mempool_fallback`);
//! 2. release cached memory of every shard (held blocks and completed
//!    cross-stream frees first), after synchronizing only the streams that
//!    used it, then retry;
//! 3. free cached physical handles, retry;
//! 4. wait for the events of pending frees, release again, retry;
//! 5. ask the device's other npualloc allocators in this process to give
//!    back their free cache (`peers`), retry;
//! 6. fail, having given back the handles the failed request obtained,
//!    with a message that says what was tried and where memory is
//!    (`oom_report`), or, when address space ran out rather than memory,
//!    how much of it is reserved and by whom.
//!
//! Releasing cached memory also releases expandable ranges that hold
//! nothing, so a shortage of address space goes through the same steps.
//!
//! The ladder holds the device's `ladder` lock (one at a time) but no shard
//! lock across its device calls (see `reclaim`).

use super::backing::{GrowError, Memory, Scope};
use super::device::Device;
use super::oom_report::{AddressSpaceReport, Elsewhere, Mib, OomReport};
use super::shard::Shard;
use crate::error::{Error, Result};
use crate::runtime::Stream;

/// The recovery steps after a failed growth, cheapest first.
#[derive(Debug, Clone, Copy)]
enum Step {
    ReleaseCached,
    FreeCachedPages,
    WaitPending,
}

impl Step {
    const LADDER: [Step; 3] = [Step::ReleaseCached, Step::FreeCachedPages, Step::WaitPending];

    fn name(self) -> &'static str {
        match self {
            Step::ReleaseCached => "releasing cached memory",
            Step::FreeCachedPages => "freeing cached physical handles",
            Step::WaitPending => "waiting for other streams' pending frees",
        }
    }
}

impl GrowError {
    /// The caller's error for a failure that is not a memory shortage.
    fn into_error(self, size: usize) -> Error {
        match self {
            GrowError::Runtime(call) => Error::runtime(call, format!("obtaining device memory for {size} bytes")),
            GrowError::Other(e) => e,
            other => Error::OutOfMemory(format!("cannot allocate {size} bytes: {}", other.cause())),
        }
    }

    /// Why a growth failed, in a message's words.
    fn cause(&self) -> String {
        match self {
            // What was charged then includes what this request had obtained
            // before (given back since, so the figure may exceed what the
            // report says is held).
            GrowError::OverLimit { size, limit, charged } => format!(
                "the memory fraction limit is {}: {} was counted against it, this request's new memory included, \
                 when {} more were asked for",
                Mib(*limit as u64),
                Mib(*charged as u64),
                Mib(*size as u64)
            ),
            GrowError::AddressSpace { range, refused: None } => format!(
                "another address range of {} would pass the process-wide address-space budget",
                Mib(*range as u64)
            ),
            GrowError::AddressSpace { range, refused: Some(e) } => {
                format!("reserving another address range of {} failed: {e}", Mib(*range as u64))
            }
            GrowError::Collect { .. } => "garbage collection could not make room under its threshold".into(),
            GrowError::NeedsRoom { .. } => {
                "moving other streams' free pages within reserved_headroom did not suffice".into()
            }
            GrowError::Runtime(e) => e.to_string(),
            GrowError::Other(e) => e.to_string(),
        }
    }
}

impl<B: Memory> Device<B> {
    /// The request of `size` bytes on `shard` could not grow: run the
    /// ladder (see the module comment).
    #[cold]
    #[inline(never)]
    pub(super) fn ladder(
        &self,
        shard: &Shard<B>,
        stream: Stream,
        size: usize,
        rounded: usize,
        first: GrowError,
    ) -> Result<usize> {
        if !first.is_out_of_memory() {
            let _ = B::free_cached(&self.sh);
            if let GrowError::Other(Error::OutOfMemory(_)) = &first {
                // A request no step could serve (larger than any address
                // reservation): refused for lack of memory all the same.
                let rt = &self.sh.rt;
                let free = rt.on_device(self.sh.device, || rt.mem_info()).map_or(0, |(free, _)| free as u64);
                self.count_refusal(shard, size, free);
            }
            return Err(first.into_error(size));
        }
        // Every step below may synchronize before giving memory back; the
        // host's queued work is handed to the runtime first, with no lock held.
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Between the failed growth and the ladder lock a forget_stream may
        // have retired the entry (it holds nothing); retiring needs the
        // ladder lock, so once checked here it stays this stream's.
        if shard.lock_anyway().stream() != stream {
            drop(_ladder);
            return self.malloc_again(size, stream);
        }
        let mut last = first;
        // The largest free block the request could use at its last attempt:
        // the report states it, not a figure gathered later, which other
        // threads' frees could make contradict the failure.
        let mut seen = shard.lock_anyway().largest_free();
        let mut tried: Vec<&'static str> = Vec::new();
        if let GrowError::NeedsRoom { bytes } = last {
            // Not a shortage: `reserved_headroom` asks for other streams'
            // free pieces, unmapped into the handle cache, before growing.
            let _ = self.release_free_except(shard, Scope::Pieces(bytes));
            tried.push("moving other streams' free pages here (reserved_headroom)");
            match self.attempt(shard, size, rounded)? {
                Ok(addr) => return Ok(addr),
                Err((e, largest)) => (last, seen) = (e, largest),
            }
        }
        if let GrowError::Collect { needed } = last {
            self.collect_garbage(needed);
            tried.push("garbage collection");
            match self.attempt(shard, size, rounded)? {
                Ok(addr) => return Ok(addr),
                Err((e, largest)) => (last, seen) = (e, largest),
            }
        }
        // The request's retry and refusal count for its pool too (Note [pools]).
        let own_calls = self.tally_of(&shard.lock_anyway()).calls.clone();
        {
            let _pool_calls = super::stats::count_for(&own_calls);
            self.sh.counters.retried();
        }
        // Pools with use_on_oom give their cache to requests of other pools.
        let own = self.streams.entry_of(shard.lock_anyway().cache.id).pool();
        // First, with no device call, a free block of such a pool on this
        // stream serves a request of the default pool, as torch_npu's
        // `try_mempool_fallback` does; the block stays the pool's.
        if own == 0 {
            if let Some(addr) = self.serve_from_use_on_oom_pools(stream, size, rounded)? {
                return Ok(addr);
            }
        }
        for step in Step::LADDER {
            if !self.reclaim(step, own) {
                continue;
            }
            tried.push(step.name());
            match self.attempt(shard, size, rounded)? {
                Ok(addr) => return Ok(addr),
                Err((e, largest)) => (last, seen) = (e, largest),
            }
        }
        // Last, the device's other npualloc allocators in this process give
        // back their free cache (`peers`). Without the ladder lock, or any
        // other: asking waits for their ladders, and their host hooks may
        // allocate from this allocator again.
        // Not for this allocator's own memory fraction: others' memory does not count against it.
        let _ladder = if matches!(last, GrowError::OverLimit { .. }) {
            _ladder
        } else {
            drop(_ladder);
            let asked = super::peers::ask_others(self.peer_key(), self.sh.device, self.sh.rt.source());
            let relocked = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
            if shard.lock_anyway().stream() != stream {
                // Retired by forget_stream meanwhile (see above).
                drop(relocked);
                return self.malloc_again(size, stream);
            }
            // Once any was asked, retried whatever they gave back: another
            // thread's ask may have given their cache back first (this one
            // then finds none left), or another thread freed meanwhile. A
            // retry is cheap beside a refusal.
            if asked > 0 {
                tried.push("asking the device's other npualloc allocators for their free cache");
                match self.attempt(shard, size, rounded)? {
                    Ok(addr) => return Ok(addr),
                    Err((e, largest)) => (last, seen) = (e, largest),
                }
            }
            relocked
        };
        // Nothing kept on failure: handles this request obtained and could
        // not use go back to the device, before the message counts what is held.
        let _ = B::free_cached(&self.sh);
        let (rt, device) = (&self.sh.rt, self.sh.device);
        // One reading for the history and the message, which must agree.
        let device_memory = rt.on_device(device, || rt.mem_info());
        self.count_refusal(shard, size, device_memory.as_ref().map_or(0, |&(free, _)| free as u64));
        // Not inside the report's expression: the guard would live across `stats`.
        let stream = shard.lock_anyway().stream();
        if let GrowError::AddressSpace { range, .. } = last {
            let report = AddressSpaceReport {
                device,
                stream,
                size,
                range,
                device_memory,
                stats: self.stats().unwrap_or_default(),
                tried: &tried,
                cause: last.cause(),
            };
            return Err(Error::OutOfMemory(report.to_string()));
        }
        let (largest_own_now, largest_elsewhere) = self.largest_free_now(shard);
        let report = OomReport {
            device,
            stream,
            size,
            rounded,
            device_memory,
            stats: self.stats().unwrap_or_default(),
            largest_seen: seen as u64,
            largest_own_now,
            largest_elsewhere,
            tried: &tried,
            cause: last.cause(),
        };
        Err(Error::OutOfMemory(report.to_string()))
    }

    /// The largest free block of `shard` now, and the largest of every
    /// other shard of the device with where it lies (for the report: one
    /// shard locked at a time).
    fn largest_free_now(&self, shard: &Shard<B>) -> (u64, Option<Elsewhere>) {
        let (own_stream, own_pool) = {
            let pool = shard.lock_anyway();
            (pool.stream(), self.streams.entry_of(pool.cache.id).pool())
        };
        let (mut own, mut elsewhere) = (0, None::<Elsewhere>);
        for entry in self.streams.iter() {
            for s in entry.shards.iter() {
                let pool = s.lock_anyway();
                let bytes = pool.largest_free() as u64;
                if std::ptr::eq(s, shard) {
                    own = bytes;
                } else if elsewhere.is_none_or(|e| bytes > e.bytes) {
                    let (stream, pool_id) = (pool.stream(), entry.pool());
                    let same = stream == own_stream && pool_id == own_pool;
                    elsewhere = Some(Elsewhere {
                        bytes,
                        stream,
                        other_kind_of_own: same.then_some(pool.cache.kind),
                        other_pool: (pool_id != own_pool).then_some(pool_id),
                    });
                }
            }
        }
        (own, elsewhere)
    }

    /// A request of `size` bytes on `shard` is refused for lack of memory:
    /// counted for the device and the request's pool (Note [pools]), and
    /// recorded in the history with `device_free`, the free memory the
    /// device reports.
    fn count_refusal(&self, shard: &Shard<B>, size: usize, device_free: u64) {
        let own_calls = self.tally_of(&shard.lock_anyway()).calls.clone();
        {
            let _pool_calls = super::stats::count_for(&own_calls);
            self.sh.counters.oom();
        }
        // Its own statement: the guard must not live across the device call.
        let (stream, pool) = {
            let p = shard.lock_anyway();
            (p.stream(), p.pool_id())
        };
        self.sh.history.oom(size, stream, pool, || device_free);
    }

    /// One retry of a request: an out-of-memory failure is the inner
    /// `Err`, with the largest free block of the shard as the attempt saw
    /// it, for the ladder to act on; any other fails the call.
    fn attempt(&self, shard: &Shard<B>, size: usize, rounded: usize) -> Result<Result<usize, (GrowError, usize)>> {
        let mut pool = shard.lock()?;
        // Sleep takes the ladder lock too: a pool put to sleep since the
        // request's check takes nothing now (Note [sleep]).
        if self.sleep.refusing() {
            self.sleep.check(self.streams.entry_of(pool.cache.id))?;
        }
        match self.grow(shard, &mut pool, size, rounded, false) {
            Ok(addr) => {
                self.published(self.streams.entry_of(pool.cache.id), pool.cache.kind as usize, &pool);
                let stream = pool.stream();
                self.sh.trace(|t| t.alloc(addr, size, stream));
                self.sh.history.record(super::history::Action::Alloc, addr, size, stream, pool.pool_id());
                Ok(Ok(addr))
            }
            Err(e) if e.is_out_of_memory() => Ok(Err((e, pool.largest_free()))),
            Err(e) => {
                drop(pool);
                let _ = B::free_cached(&self.sh);
                Err(e.into_error(size))
            }
        }
    }

    /// A block of `rounded` bytes from the cache of a pool with use_on_oom,
    /// of `stream`, in that pool's shape, with no device call: served
    /// as that pool's block (its figures count it, its free returns it
    /// there). None when no such pool has one. A pool asleep is skipped.
    fn serve_from_use_on_oom_pools(&self, stream: Stream, size: usize, rounded: usize) -> Result<Option<usize>> {
        for entry in self.streams.iter() {
            if !entry.use_on_oom() || entry.pool() == 0 || entry.stream_now() != stream {
                continue;
            }
            if self.sleep.refusing() && self.sleep.check(entry).is_err() {
                continue;
            }
            // A block of that pool in its shape (alignment, no_split), as
            // the pool's own requests get.
            let rounded = entry.shape().round(rounded);
            let kind = self.sh.policy.pool_for(rounded) as usize;
            let mut pool = entry.shards[kind].lock()?;
            // Retired and taken over since the look-up: not this stream's.
            if pool.stream() != stream {
                continue;
            }
            if let Ok(addr) = pool.malloc_cached(size, rounded) {
                self.published(entry, kind, &pool);
                self.sh.trace(|t| t.alloc(addr, size, stream));
                self.sh.history.record(super::history::Action::Alloc, addr, size, stream, pool.pool_id());
                return Ok(Some(addr));
            }
        }
        Ok(None)
    }

    /// Runs one recovery step; false when it had nothing to do.
    fn reclaim(&self, step: Step, own: u64) -> bool {
        let pick = |e: &super::streams::StreamEntry<B>| e.reclaimable() || (e.use_on_oom() && e.pool() != own);
        match step {
            Step::ReleaseCached => {
                // Failures only mean less came back; the retry says. The
                // second pass releases ranges the first one emptied.
                let _ = self.release_free_where(Scope::All, pick);
                let _ = self.release_free_where(Scope::All, pick);
                true
            }
            Step::FreeCachedPages => {
                // Worth a retry when there was anything to give back: cached
                // handles, or kept reservations (address space, no bytes of
                // memory). A refusal among them does not undo what the rest
                // gave back, so the error is not the answer here.
                let had = self.sh.backing.cached_bytes() > 0 || self.sh.backing.keeps_reservations();
                let _ = B::free_cached(&self.sh);
                had
            }
            Step::WaitPending => {
                if !self.streams.shards().any(|s| s.lock_anyway().cache.pending_bytes() > 0) {
                    return false;
                }
                self.wait_pending();
                let _ = self.release_free_where(Scope::All, pick);
                let _ = B::free_cached(&self.sh);
                true
            }
        }
    }
}
