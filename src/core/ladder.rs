//! The out-of-memory ladder: what a request that could not grow tries
//! before it fails. It runs cheapest step first and retries the request
//! after every step, so a block freed by a completed event is never missed
//! (the PyTorch bug where an OOM was raised while a fitting block sat in the
//! pool came from skipping that retry):
//! 1. garbage collection, when `garbage_collection_threshold` asks for it;
//! 2. release cached memory of every shard (held blocks and completed
//!    cross-stream frees first), after synchronizing only the streams that
//!    used it, then retry;
//! 3. free cached physical handles, retry;
//! 4. wait for the events of pending frees, release again, retry;
//! 5. fail with a message that says what was tried and where memory is,
//!    having given back the handles the failed request obtained.
//!
//! The ladder holds the device's `ladder` lock (one at a time) but no shard
//! lock across its device calls (see `reclaim`).

use super::backing::{Backing, GrowError, Scope};
use super::device::Device;
use super::shard::Shard;
use crate::error::{Error, Result};

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
        if let GrowError::NeedsRoom { bytes } = last {
            // Not a shortage: `reserved_headroom` asks for other streams'
            // free pieces, unmapped into the handle cache, before growing.
            let _ = self.release_free_except(shard, Scope::Pieces(bytes));
            match self.attempt(shard, size, rounded)? {
                Ok(addr) => return Ok(addr),
                Err(e) => last = e,
            }
        }
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
        self.sh.history.oom(size, shard.lock_anyway().stream(), || {
            let rt = &self.sh.rt;
            rt.on_device(self.sh.device, || rt.mem_info()).map_or(0, |(free, _)| free as u64)
        });
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
                self.published(self.streams.entry_of(pool.id), pool.kind as usize, &pool);
                let stream = pool.stream();
                self.sh.trace(|t| t.alloc(addr, size, stream));
                self.sh.history.record(super::history::Action::Alloc, addr, size, stream);
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
            GrowError::NeedsRoom { .. } => "moving other streams' free pages within reserved_headroom did not suffice".into(),
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
}

pub(super) fn mib(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}
