//! Getting memory back across shards: the out-of-memory ladder, garbage
//! collection, `empty_cache`, the release threshold and teardown.
//!
//! Each of these visits every shard, so they are serialized by the device's
//! `ladder` lock; none holds a shard lock across a device call. Memory goes
//! back in three steps (see `backing`): detach under each shard's lock,
//! synchronize and give back with no shard lock held, settle under the lock
//! again. Meanwhile the other streams' hits go on.
//!
//! The ladder runs cheapest step first and retries the request after every
//! step, so a block freed by a completed event is never missed (the PyTorch
//! bug where an OOM was raised while a fitting block sat in the pool came
//! from skipping that retry):
//! 1. garbage collection, when `garbage_collection_threshold` asks for it;
//! 2. release cached memory of every shard (held blocks and completed
//!    cross-stream frees first), after synchronizing only the streams that
//!    used it, then retry;
//! 3. free cached physical handles, retry;
//! 4. wait for the events of pending frees, release again, retry;
//! 5. fail with a message that says what was tried and where memory is,
//!    having given back the handles the failed request obtained.

use super::backing::{Backing, Detached, GrowError, Scope};
use super::device::Device;
use super::lock::StateGuard;
use super::pool::Pool;
use super::shard::Shard;
use super::TeardownReport;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::atomic::Ordering;

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
            Step::FreeCachedPages => "freeing cached physical pages",
            Step::WaitPending => "waiting for pending cross-stream frees",
        }
    }
}

impl GrowError {
    /// The caller's error for a failure that is not a memory shortage.
    fn into_error(self, size: usize) -> Error {
        match self {
            GrowError::Runtime(call) => Error::runtime(call, format!("obtaining device memory for {size} bytes")),
            GrowError::Other(e) => e,
            other => Error::OutOfMemory(format!("cannot allocate {size} bytes: {other:?}")),
        }
    }
}

impl<B: Backing> Device<B> {
    /// The request of `size` bytes on `shard` could not grow: run the
    /// ladder (see the module comment).
    #[cold]
    #[inline(never)]
    pub(super) fn ladder(&self, shard: &Shard<B>, size: usize, rounded: usize, first: GrowError) -> Result<usize> {
        if !first.is_out_of_memory() {
            let _ = B::free_cached(&self.sh);
            return Err(first.into_error(size));
        }
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = first;
        if matches!(last, GrowError::Collect) {
            self.collect_garbage(rounded);
            match self.attempt(shard, size, rounded)? {
                Ok(addr) => return Ok(addr),
                Err(e) => last = e,
            }
        }
        self.sh.counters.retried();
        let mut tried = Step::ReleaseCached;
        for step in Step::LADDER {
            if !self.reclaim(step) {
                continue;
            }
            tried = step;
            match self.attempt(shard, size, rounded)? {
                Ok(addr) => return Ok(addr),
                Err(e) => last = e,
            }
        }
        self.sh.counters.oom();
        // Nothing kept on failure: handles this request obtained and could
        // not use go back to the device.
        let _ = B::free_cached(&self.sh);
        let message = self.oom_message(size, rounded, &last, tried.name());
        Err(Error::OutOfMemory(message))
    }

    /// One retry of a request: an out-of-memory failure is the inner
    /// `Err`, for the ladder to act on; any other fails the call.
    fn attempt(&self, shard: &Shard<B>, size: usize, rounded: usize) -> Result<Result<usize, GrowError>> {
        let mut pool = shard.lock()?;
        match self.grow(shard, &mut pool, size, rounded, false) {
            Ok(addr) => {
                self.published(shard, &pool);
                let stream = pool.stream();
                self.sh.trace(|t| t.alloc(addr, size, stream));
                Ok(Ok(addr))
            }
            Err(e) if e.is_out_of_memory() => Ok(Err(e)),
            Err(e) => {
                drop(pool);
                let _ = B::free_cached(&self.sh);
                Err(e.into_error(size))
            }
        }
    }

    /// Runs one recovery step; false when it had nothing to do.
    fn reclaim(&self, step: Step) -> bool {
        match step {
            Step::ReleaseCached => {
                // Failures only mean less came back; the retry says.
                let _ = self.release_free(Scope::All);
                true
            }
            Step::FreeCachedPages => B::free_cached(&self.sh).is_ok_and(|freed| freed > 0),
            Step::WaitPending => {
                if !self.streams.shards().any(|s| s.lock_anyway().pending_bytes() > 0) {
                    return false;
                }
                self.wait_pending();
                let _ = self.release_free(Scope::All);
                let _ = B::free_cached(&self.sh);
                true
            }
        }
    }

    /// Returns every shard's held blocks and completed cross-stream frees
    /// to its pool, then gives back what `scope` covers. Returns the bytes
    /// given back to the device; the first error after trying everything.
    fn release_free(&self, scope: Scope) -> Result<usize> {
        let mut taken: Vec<(&Shard<B>, Vec<Detached>)> = Vec::new();
        for shard in self.streams.shards() {
            let mut pool = shard.lock_anyway();
            pool.drain_reuse();
            pool.reap_pending();
            let detached = B::detach(&mut pool, scope);
            pool.after_transition();
            if !detached.is_empty() {
                taken.push((shard, detached));
            }
        }
        self.give_back_all(taken)
    }

    /// Synchronizes the streams that used `taken`, gives back what no busy
    /// stream may use, and settles each shard.
    fn give_back_all(&self, taken: Vec<(&Shard<B>, Vec<Detached>)>) -> Result<usize> {
        let mut streams: Vec<Stream> = Vec::new();
        for d in taken.iter().flat_map(|(_, ds)| ds) {
            for &s in &d.streams {
                if !streams.contains(&s) {
                    streams.push(s);
                }
            }
        }
        let (busy, mut first_error) = self.synchronize(&streams, "synchronizing a stream before releasing memory");
        let mut released = 0;
        for (shard, detached) in taken {
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
                B::settle(&mut pool, d, ok);
            }
            pool.after_transition();
        }
        first_error.map_or(Ok(released), Err)
    }

    /// Synchronizes each of `streams` once; returns those that could not be
    /// waited for, and the first error. A stream the host already destroyed
    /// counts as idle: ACL requires a synchronize before destroying one.
    fn synchronize(&self, streams: &[Stream], what: &str) -> (Vec<Stream>, Option<Error>) {
        let (rt, device) = (&self.sh.rt, self.sh.device);
        let mut busy = Vec::new();
        let mut first_error = None;
        for &s in streams {
            self.sh.counters.synced();
            match rt.on_device(device, || rt.synchronize_stream(s)) {
                Ok(()) => {}
                Err(e) if e.is_invalid_handle() => {}
                Err(e) => {
                    first_error.get_or_insert(Error::runtime(e, what.to_string()));
                    busy.push(s);
                }
            }
        }
        (busy, first_error)
    }

    /// Synchronizes every pending free's events (no shard lock held: the
    /// events stay owned by their shards), then reaps them all.
    fn wait_pending(&self) {
        let (rt, device) = (&self.sh.rt, self.sh.device);
        let events: Vec<_> = self.streams.shards().flat_map(|s| s.lock_anyway().pending_events()).collect();
        for ev in events {
            let _ = rt.on_device(device, || rt.synchronize_event(ev));
            self.sh.counters.synced();
        }
        for shard in self.streams.shards() {
            shard.lock_anyway().reap_pending();
        }
    }

    /// With `garbage_collection_threshold` and a memory limit: before
    /// growing past threshold × limit, give back the oldest entirely free
    /// segments until the growth fits under the threshold.
    fn collect_garbage(&self, rounded: usize) {
        let (Some(t), Some(limit)) = (self.sh.gc_threshold, self.sh.limit.get()) else {
            return;
        };
        let target = (t * limit as f64) as usize;
        let needed = self.sh.policy.segment_size(rounded);
        let reserved = self.sh.counters.reserved();
        if reserved + needed <= target {
            return;
        }
        let mut all: Vec<(&Shard<B>, Detached)> = Vec::new();
        for shard in self.streams.shards() {
            let mut pool = shard.lock_anyway();
            pool.drain_reuse();
            all.extend(B::detach(&mut pool, Scope::WholeSegments).into_iter().map(|d| (shard, d)));
        }
        all.sort_by_key(|(_, d)| d.serial);
        let mut to_free = reserved + needed - target;
        let mut keep: Vec<(&Shard<B>, Detached)> = Vec::new();
        let mut chosen: Vec<(&Shard<B>, Vec<Detached>)> = Vec::new();
        for (shard, d) in all {
            if to_free == 0 {
                keep.push((shard, d));
                continue;
            }
            to_free = to_free.saturating_sub(d.size);
            chosen.push((shard, vec![d]));
        }
        for (shard, d) in keep {
            B::settle(&mut shard.lock_anyway(), d, false);
        }
        let _ = self.give_back_all(chosen);
    }

    /// Returns every cached, unused segment and handle to the device (may
    /// synchronize the streams that used them).
    pub fn empty_cache(&self) -> Result<usize> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Internal("the allocator is unusable: it was destroyed".into()));
        }
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        let released = self.release_free(Scope::All)?;
        Ok(released + B::free_cached(&self.sh)?)
    }

    /// After a free, with `release_threshold`: when cached memory passes
    /// it, give back the shard's entirely free segments (after dropping its
    /// lock for the device calls).
    #[cold]
    #[inline(never)]
    pub(super) fn release_over_threshold(&self, shard: &Shard<B>, mut pool: StateGuard<'_, Pool<B>>) {
        let Some(threshold) = self.sh.release_threshold else { return };
        let allocated: u64 = self.streams.shards().map(|s| s.lane.allocated()).sum();
        let cached = (self.sh.counters.reserved() as u64).saturating_sub(allocated);
        if cached <= threshold as u64 {
            return;
        }
        let detached = pool.detach_for_threshold();
        drop(pool);
        if !detached.is_empty() {
            let _ = self.give_back_all(vec![(shard, detached)]);
        }
    }

    fn oom_message(&self, size: usize, rounded: usize, last: &GrowError, step: &str) -> String {
        let (rt, device) = (&self.sh.rt, self.sh.device);
        let info = rt.on_device(device, || rt.mem_info());
        let free = match info {
            Ok((free, total)) => format!("device {device} has {} free of {}", mib(free), mib(total)),
            Err(e) => format!("device {device} memory info unavailable ({e})"),
        };
        let (mut allocated, mut largest, mut pending) = (0u64, 0usize, 0usize);
        for shard in self.streams.shards() {
            let pool = shard.lock_anyway();
            allocated += pool.counters().allocated;
            largest = largest.max(B::largest_free(&pool));
            pending += pool.pending_bytes();
        }
        let cause = match last {
            GrowError::OverLimit { size, limit } => {
                format!("a new {} segment would exceed the memory fraction limit of {}", mib(*size), mib(*limit))
            }
            GrowError::AddressSpace => "the stream's reserved address range has no free range that large".into(),
            GrowError::Collect => "garbage collection could not make room under its threshold".into(),
            GrowError::Runtime(e) => format!("{e}"),
            GrowError::Other(e) => format!("{e}"),
        };
        format!(
            "cannot allocate {size} bytes (rounded to {rounded}) on device {device}: {free}; this allocator has {} allocated, \
             {} reserved, largest free block {}, {} waiting on cross-stream events; last step tried: {step}; {cause}",
            mib(allocated as usize),
            mib(self.sh.counters.reserved()),
            mib(largest),
            mib(pending),
        )
    }

    /// Releases everything: synchronizes every stream the allocator used,
    /// returns all segments (live blocks included) and events. The allocator
    /// refuses further work afterwards.
    pub fn teardown(&self) -> Result<TeardownReport> {
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        // Every shard at once: nothing else may run during teardown.
        let mut pools: Vec<StateGuard<'_, Pool<B>>> = self.streams.shards().map(|s| s.lock_anyway()).collect();
        let mut report = TeardownReport::default();
        let mut streams: Vec<Stream> = Vec::new();
        for pool in &pools {
            let (blocks, bytes) = pool.live();
            report.live_blocks += blocks as usize;
            report.live_bytes += bytes as usize;
            for s in pool.all_streams() {
                if !streams.contains(&s) {
                    streams.push(s);
                }
            }
        }
        // Streams that may still have work queued: memory they used is left
        // to the runtime rather than freed under that work.
        let (busy, mut first_error) = self.synchronize(
            &streams,
            "synchronizing a stream at teardown (the memory it used is left allocated)",
        );
        let (rt, device) = (&self.sh.rt, self.sh.device);
        for pool in &mut pools {
            for ev in pool.take_all_events() {
                let _ = rt.on_device(device, || rt.destroy_event(ev));
            }
        }
        for pool in &mut pools {
            if let Err(e) = B::teardown(pool, &busy) {
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = B::free_cached(&self.sh) {
            first_error.get_or_insert(e);
        }
        if let Some(t) = &self.sh.trace {
            if let Err(e) = t.lock().unwrap_or_else(|e| e.into_inner()).flush() {
                first_error.get_or_insert(e);
            }
        }
        self.broken.store(true, Ordering::Relaxed);
        first_error.map_or(Ok(report), Err)
    }
}

fn mib(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}
