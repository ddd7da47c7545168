//! Getting memory back: the out-of-memory ladder, empty_cache and garbage
//! collection.
//!
//! The ladder runs cheapest step first and searches the pools again after
//! every step, so a block freed by a completed event is never missed
//! (the PyTorch bug where an OOM was raised while a fitting block sat in
//! the pool came from skipping that re-search):
//! 1. reap frees whose events completed;
//! 2. grow: a new segment from the device (after garbage collection when a
//!    threshold is set);
//! 3. release cached segments that are entirely free, after synchronizing
//!    only the streams that used them, then grow again;
//! 4. wait for the events of pending frees, reap them, release again, grow;
//! 5. fail with a message that says what was tried and where memory is.

use super::block::{BlockId, BlockState, NIL};
use super::policy::PoolKind;
use super::state::{GrowError, State};
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
            Step::FreeCachedPages => "freeing cached physical pages",
            Step::WaitPending => "waiting for pending cross-stream frees",
        }
    }
}

impl State {
    pub(super) fn alloc_slow(&mut self, size: usize, rounded: usize, kind: PoolKind, slot: u16) -> Result<BlockId> {
        if self.reap_pending() > 0 {
            if let Some(id) = self.attempt(size, rounded, kind, slot)?.ok() {
                return Ok(id);
            }
        }
        self.collect_garbage(rounded);
        let mut last = match self.attempt(size, rounded, kind, slot)? {
            Ok(id) => return Ok(id),
            Err(e) => e,
        };
        self.stats.retried();
        let mut tried = Step::ReleaseCached;
        for step in Step::LADDER {
            if !self.reclaim(step) {
                continue;
            }
            tried = step;
            match self.attempt(size, rounded, kind, slot)? {
                Ok(id) => return Ok(id),
                Err(e) => last = e,
            }
        }
        self.stats.oom();
        Err(Error::OutOfMemory(self.oom_message(size, rounded, &last, tried.name())))
    }

    /// Runs one recovery step; false when it had nothing to do.
    fn reclaim(&mut self, step: Step) -> bool {
        // Held blocks of every stream go back first: they may complete free
        // segments or pages.
        self.drain_reuse(None);
        match step {
            Step::ReleaseCached => {}
            Step::FreeCachedPages => {
                if !self.expandable {
                    return false;
                }
                let _ = self.free_cached_handles();
                return true;
            }
            Step::WaitPending => {
                if !self.order.has_pending() {
                    return false;
                }
                self.wait_pending();
            }
        }
        // Failures here only mean less memory came back; the next attempt says.
        let all: Vec<u32> = self.segments.ids().collect();
        let _ = self.release_segments(&all);
        if self.expandable {
            let _ = self.unmap_free_pages();
            if matches!(step, Step::WaitPending) {
                let _ = self.free_cached_handles();
            }
        }
        true
    }

    /// `try_alloc`, with a runtime failure other than out-of-memory turned
    /// into the caller's error (outer `Err`); an out-of-memory growth failure
    /// is the inner `Err`, for the ladder to act on.
    fn attempt(
        &mut self,
        size: usize,
        rounded: usize,
        kind: PoolKind,
        slot: u16,
    ) -> Result<Result<BlockId, GrowError>> {
        match self.try_alloc(rounded, kind, slot) {
            Err(GrowError::Runtime(call)) if !call.is_out_of_memory() => {
                Err(Error::runtime(call, format!("obtaining device memory for {size} bytes")))
            }
            other => Ok(other),
        }
    }

    /// One attempt: a free block that fits (mapping its pages in an
    /// expandable segment), else growth.
    fn try_alloc(&mut self, rounded: usize, kind: PoolKind, slot: u16) -> Result<BlockId, GrowError> {
        if let Some(id) = self.find_free(slot, kind, rounded) {
            return self.place(id, rounded);
        }
        self.grow(rounded, kind, slot)
    }

    fn oom_message(&self, size: usize, rounded: usize, last: &GrowError, step: &str) -> String {
        let rt = self.rt.clone();
        let info = rt.on_device(self.device, || rt.mem_info());
        let device = match info {
            Ok((free, total)) => format!("device {} has {} free of {}", self.device, mib(free), mib(total)),
            Err(e) => format!("device {} memory info unavailable ({e})", self.device),
        };
        let s = self.stats.get();
        let cause = match last {
            GrowError::OverLimit { size, limit } => {
                format!("a new {} segment would exceed the memory fraction limit of {}", mib(*size), mib(*limit))
            }
            GrowError::AddressSpace => "the stream's reserved address range has no free range that large".into(),
            GrowError::Runtime(e) => format!("{e}"),
        };
        format!(
            "cannot allocate {size} bytes (rounded to {rounded}) on device {}: {device}; this allocator has {} allocated, \
             {} reserved, largest free block {}, {} waiting on cross-stream events; last step tried: {step}; {cause}",
            self.device,
            mib(s.allocated_bytes as usize),
            mib(s.reserved_bytes as usize),
            mib(self.largest_free()),
            mib(self.order.pending_bytes),
        )
    }

    /// Synchronizes every pending free's events, then reaps them all.
    fn wait_pending(&mut self) {
        let rt = self.rt.clone();
        let events: Vec<_> = self.order.pending().iter().flat_map(|p| p.events.iter().copied()).collect();
        for ev in events {
            let _ = rt.on_device(self.device, || rt.synchronize_event(ev));
            self.stats.synced();
        }
        self.reap_pending();
    }

    /// With `garbage_collection_threshold` and a memory limit: before
    /// growing past threshold × limit, release the oldest entirely free
    /// segments until the growth fits under the threshold.
    fn collect_garbage(&mut self, rounded: usize) {
        let (Some(t), Some(limit)) = (self.gc_threshold, self.limit) else {
            return;
        };
        let target = (t * limit as f64) as usize;
        let needed = self.policy.segment_size(rounded);
        let reserved = self.stats.get().reserved_bytes as usize;
        if reserved + needed <= target {
            return;
        }
        self.drain_reuse(None);
        let mut candidates: Vec<u32> = self.segments.ids().filter(|&s| self.segment_is_free(s)).collect();
        candidates.sort_by_key(|&s| self.segments.get(s).serial);
        let mut to_free = reserved + needed - target;
        let mut chosen = Vec::new();
        for s in candidates {
            if to_free == 0 {
                break;
            }
            to_free = to_free.saturating_sub(self.segments.get(s).size);
            chosen.push(s);
        }
        let _ = self.release_segments(&chosen);
    }

    /// Whether a fixed segment holds no live block (expandable segments are
    /// never released whole; their pages are).
    pub fn segment_is_free(&self, seg: u32) -> bool {
        if self.segments.get(seg).vmm.is_some() {
            return false;
        }
        let first = self.segments.get(seg).first;
        let b = self.blocks.get(first);
        b.state == BlockState::Free && b.next == NIL
    }

    /// Releases those of `candidates` that are entirely free: synchronizes
    /// each stream that used them once, then returns them to the runtime.
    /// Returns the bytes released; the first runtime error, if any, after
    /// trying all of them.
    pub fn release_segments(&mut self, candidates: &[u32]) -> Result<usize> {
        let free: Vec<u32> = candidates.iter().copied().filter(|&s| self.segment_is_free(s)).collect();
        if free.is_empty() {
            return Ok(0);
        }
        // Not known to be idle: keep the memory rather than free it under work.
        self.sync_streams_of(&free)?;
        let rt = self.rt.clone();
        let mut first_error = None;
        let mut released = 0;
        for s in free {
            let (base, size, kind, slot, first) = {
                let seg = self.segments.get(s);
                (seg.base, seg.size, seg.kind, seg.stream_slot, seg.first)
            };
            if let Err(e) = rt.on_device(self.device, || rt.free(base)) {
                first_error.get_or_insert(Error::runtime(e, "returning a cached segment to the device"));
                continue;
            }
            self.pools[slot as usize][kind as usize].remove(&mut self.blocks, first);
            self.blocks.remove(first);
            self.segments.remove(s);
            self.stats.segment_removed(size);
            released += size;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }

    /// Synchronizes, once each, every stream that used any of `segs`. A
    /// stream the host has already destroyed counts as idle: ACL requires a
    /// synchronize before destroying a stream, so none of its work is queued.
    pub(super) fn sync_streams_of(&mut self, segs: &[u32]) -> Result<()> {
        let mut streams: Vec<Stream> = Vec::new();
        for &s in segs {
            let seg = self.segments.get(s);
            for st in std::iter::once(self.streams.stream(seg.stream_slot)).chain(seg.other_streams.iter().copied()) {
                if !streams.contains(&st) {
                    streams.push(st);
                }
            }
        }
        let rt = self.rt.clone();
        for st in streams {
            self.stats.synced();
            match rt.on_device(self.device, || rt.synchronize_stream(st)) {
                Ok(()) => {}
                Err(e) if e.is_invalid_handle() => {}
                Err(e) => return Err(Error::runtime(e, "synchronizing a stream before releasing memory")),
            }
        }
        Ok(())
    }

    /// Returns every cached, unused segment to the device.
    pub fn empty_cache(&mut self) -> Result<usize> {
        self.drain_reuse(None);
        self.reap_pending();
        let all: Vec<u32> = self.segments.ids().collect();
        let mut released = self.release_segments(&all)?;
        if self.expandable {
            self.unmap_free_pages()?;
            released += self.free_cached_handles()?;
        }
        self.after_transition();
        Ok(released)
    }
}

fn mib(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}
