//! The out-of-memory ladder: what a request that could not grow tries before it fails, cheapest step first,
//! retrying the request after every step so a block freed by a completed event is never missed:
//! 1. garbage collection, when `garbage_collection_threshold` asks for it; then, for a default-pool request, a free
//!    block of a `use_on_oom` pool on its stream, served as that pool's block (torch_npu's `try_mempool_fallback`);
//! 2. release every shard's cached memory, synchronizing only the streams that used it;
//! 3. free cached physical handles;
//! 4. wait for the events of pending frees, release again;
//! 5. ask the device's other npualloc allocators in this process for their free cache (`peers`);
//! 6. fail, having given back the handles the request obtained, with a message saying what was tried and where
//!    memory is (`oom_report`), or, when address space ran out, how much is reserved and by whom.
//!
//! Releasing cached memory also releases empty expandable ranges, so an address-space shortage takes the same steps.
//! The ladder holds the `ladder` lock but no shard lock across its device calls.

use crate::core::alloc::device::Device;
use crate::core::alloc::shard::Shard;
use crate::core::alloc::streams::StreamEntry;
use crate::core::backing::{GrowError, Memory, Scope};
use crate::core::report::oom::{AddressSpaceReport, Elsewhere, Mib, OomReport};
use crate::core::report::stats::DeviceCounters;
use crate::error::{Error, Result};
use crate::runtime::Stream;

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
            // The charge includes what this request had obtained (given back since: it may exceed what is held).
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
    /// The request of `size` bytes on `shard` could not grow: runs the ladder.
    #[cold]
    #[inline(never)]
    pub(in crate::core) fn ladder(
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
                // Larger than any address reservation: no step helps, but it is still a refusal for lack of memory.
                let rt = &self.sh.rt;
                let free = rt.on_device(self.sh.device, || rt.mem_info()).map_or(0, |(free, _)| free as u64);
                self.count_refusal(shard, size, free);
            }
            return Err(first.into_error(size));
        }
        // The steps may synchronize: the host's queued work goes to the runtime first, with no lock held.
        self.sh.hooks.before_release(self.sh.device);
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // A forget_stream may have retired the entry before the ladder lock; retiring needs the lock, so once
        // checked here it stays this stream's.
        if shard.lock_anyway().stream() != stream {
            drop(_ladder);
            return self.malloc_again(size, stream);
        }
        // The last failure. The report states the largest free block at the last attempt: a later figure could
        // contradict the failure.
        let mut failed = (first, shard.lock_anyway().largest_free());
        let mut tried: Vec<&'static str> = Vec::new();
        // After the step `$what`: notes it tried and retries; done if the request fits.
        macro_rules! retry_after {
            ($what:expr) => {
                tried.push($what);
                if let Some(addr) = self.attempt(shard, size, rounded, &mut failed)? {
                    return Ok(addr);
                }
            };
        }
        if let GrowError::NeedsRoom { bytes } = failed.0 {
            // Not a shortage: `reserved_headroom` asks for other streams' free pieces before growing.
            let _ = self.release_free_except(shard, bytes);
            retry_after!("moving other streams' free pages here (reserved_headroom)");
        }
        if let GrowError::Collect { needed } = failed.0 {
            self.collect_garbage(needed);
            retry_after!("garbage collection");
        }
        self.count_with_pool(shard, DeviceCounters::retried);
        // Pools with use_on_oom give their cache to requests of other pools.
        let own = self.streams.entry_of(shard.lock_anyway().cache.id).pool();
        if own == 0 {
            if let Some(addr) = self.serve_from_use_on_oom_pools(stream, size, rounded)? {
                return Ok(addr);
            }
        }
        // The steps, cheapest first; failures only mean less came back.
        let pick = |e: &StreamEntry<B>| e.reclaimable() || (e.use_on_oom() && e.pool() != own);
        // The second pass releases ranges the first emptied.
        let _ = self.release_free_where(Scope::All, pick);
        let _ = self.release_free_where(Scope::All, pick);
        retry_after!("releasing cached memory");
        // Worth a retry if there were cached handles or kept reservations; a refusal among them does not undo what
        // the rest gave back.
        let had = self.sh.backing.cached_bytes() > 0 || self.sh.backing.keeps_reservations();
        let _ = B::free_cached(&self.sh);
        if had {
            retry_after!("freeing cached physical handles");
        }
        if self.wait_pending(pick) {
            retry_after!("waiting for other streams' pending frees");
        }
        // Ask the peers with no lock held: asking waits for their ladders, and their hooks may allocate from this
        // allocator. Not for our own memory fraction: others' memory does not count against it.
        let _ladder = if matches!(failed.0, GrowError::OverLimit { .. }) {
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
            // Retry whatever they gave back: another thread's ask may have got their cache first, or another thread
            // freed meanwhile.
            if asked > 0 {
                retry_after!("asking the device's other npualloc allocators for their free cache");
            }
            relocked
        };
        let (last, seen) = failed;
        // Handles this request obtained go back before the message counts what is held.
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

    /// The largest free block of `shard` now, and the largest elsewhere with where it lies (one shard locked at a
    /// time).
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

    /// Counts with `count` for the device and for `shard`'s pool too: the request's retry and refusal count for
    /// its pool (Note [pools]).
    fn count_with_pool(&self, shard: &Shard<B>, count: fn(&DeviceCounters)) {
        let own_calls = self.tally_of(&shard.lock_anyway()).calls.clone();
        let _pool_calls = crate::core::report::stats::count_for(&own_calls);
        count(&self.sh.counters);
    }

    /// Counts a refusal for the device and the request's pool (Note [pools]) and records it in the history with
    /// the device's free memory.
    fn count_refusal(&self, shard: &Shard<B>, size: usize, device_free: u64) {
        self.count_with_pool(shard, DeviceCounters::oom);
        // Its own statement: the guard must not live across the device call.
        let (stream, pool) = {
            let p = shard.lock_anyway();
            (p.stream(), p.pool_id())
        };
        self.sh.history.oom(size, stream, pool, || device_free);
    }

    /// One retry: the address if the request fits; an out-of-memory failure becomes `failed`, with the shard's
    /// largest free block as seen; any other fails the call.
    fn attempt(
        &self,
        shard: &Shard<B>,
        size: usize,
        rounded: usize,
        failed: &mut (GrowError, usize),
    ) -> Result<Option<usize>> {
        let mut pool = shard.lock()?;
        // A pool put to sleep since the request's check takes nothing now (Note [sleep]).
        if self.sleep.refusing() {
            self.sleep.check(self.streams.entry_of(pool.cache.id))?;
        }
        match self.grow(shard, &mut pool, size, rounded, false) {
            Ok(addr) => {
                self.published(self.streams.entry_of(pool.cache.id), pool.cache.kind as usize, &pool);
                let stream = pool.stream();
                self.sh.trace(|t| t.alloc(addr, size, stream));
                self.sh.history.record(crate::core::report::history::Action::Alloc, addr, size, stream, pool.pool_id());
                Ok(Some(addr))
            }
            Err(e) if e.is_out_of_memory() => {
                *failed = (e, pool.largest_free());
                Ok(None)
            }
            Err(e) => {
                drop(pool);
                let _ = B::free_cached(&self.sh);
                Err(e.into_error(size))
            }
        }
    }

    /// A block from the cache of a use_on_oom pool on `stream`, in that pool's shape, with no device call; it stays
    /// that pool's block. Sleeping pools are skipped.
    fn serve_from_use_on_oom_pools(&self, stream: Stream, size: usize, rounded: usize) -> Result<Option<usize>> {
        for entry in self.streams.iter() {
            if !entry.use_on_oom() || entry.pool() == 0 || entry.stream_now() != stream {
                continue;
            }
            if self.sleep.refusing() && self.sleep.check(entry).is_err() {
                continue;
            }
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
                self.sh.history.record(crate::core::report::history::Action::Alloc, addr, size, stream, pool.pool_id());
                return Ok(Some(addr));
            }
        }
        Ok(None)
    }
}
