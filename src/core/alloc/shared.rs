//! What every shard of one device allocator shares. Nothing here is written by a cache hit.

use super::directory::Directory;
use super::policy::Policy;
use crate::core::backing::limit::MemoryLimit;
use crate::core::cache::stream_order::DeviceCalls;
use crate::core::report::stats::DeviceCounters;
use crate::runtime::Runtime;
use crate::trace::TraceRecorder;
use std::sync::{Arc, Mutex};

pub(crate) struct Shared<B> {
    pub rt: Arc<Runtime>,
    pub device: i32,
    pub policy: Policy,
    pub counters: DeviceCounters,
    pub limit: MemoryLimit,
    pub directory: Directory,
    pub backing: B,
    /// Config key `release_threshold`.
    pub release_threshold: Option<usize>,
    /// Tracing or `release_threshold`: a free has more to do after the block is back (`Device::after_free`).
    pub after_free: bool,
    /// Config key `garbage_collection_threshold`.
    pub gc_threshold: Option<f64>,
    /// Held bytes of each shard's reuse lists at most (`reuse_cache_mb`).
    pub reuse_bytes: usize,
    /// Config key `trace`. Events are recorded under the lock of the shard that handles them, so a block's
    /// alloc is always listed before its free.
    pub trace: Option<Mutex<TraceRecorder>>,
    pub history: crate::core::report::history::History,
    /// The next segment's serial (creation order over all shards).
    pub next_serial: std::sync::atomic::AtomicU64,
    /// Host hooks (`hooks`): read on the release paths only.
    pub hooks: crate::core::hooks::Hooks,
    /// Config key `oom_snapshot`: read when a request is refused.
    pub oom_snapshot: Option<std::path::PathBuf>,
    /// The allocator's reference to its device; last, so it is released after everything above freed its memory.
    pub _hold: crate::runtime::DeviceHold,
}

impl<B> Shared<B> {
    /// Tells the segment observer, if any, of `event` on [addr, addr + size) of pool `pool`.
    #[inline]
    pub fn segment_event(
        &self,
        event: crate::core::hooks::SegmentEvent,
        addr: usize,
        size: usize,
        handle: Option<crate::runtime::PhysicalHandle>,
        pool: u64,
    ) {
        if self.hooks.observes_segments() {
            let handle = handle.map_or(std::ptr::null_mut(), |h| h.0 as *mut std::ffi::c_void);
            self.hooks.segment(self.device, event, crate::core::hooks::SegmentPiece { addr, size, handle, pool });
        }
    }

    /// With `garbage_collection_threshold` and a memory limit: threshold x limit, the reserved bytes a growth
    /// should not pass before garbage collection has given old cached memory back.
    pub fn gc_target(&self) -> Option<usize> {
        Some((self.gc_threshold? * self.limit.get()? as f64) as usize)
    }

    /// Whether growing by `needed` bytes would pass `gc_target`.
    pub fn gc_due(&self, needed: usize) -> bool {
        self.gc_target().is_some_and(|target| self.counters.reserved() + needed > target)
    }

    #[inline]
    pub fn calls(&self) -> DeviceCalls<'_> {
        DeviceCalls { rt: &self.rt, device: self.device, counters: &self.counters }
    }

    /// Runs `f` with the trace recorder, if tracing; untraced, one load and one branch inside the caller.
    #[inline(always)]
    pub fn trace(&self, f: impl FnOnce(&mut TraceRecorder)) {
        if let Some(t) = &self.trace {
            traced(t, f);
        }
    }

    /// `trace` of an allocation, with no closure built on the hot path.
    #[inline(always)]
    pub fn trace_alloc(&self, addr: usize, size: usize, stream: crate::runtime::Stream) {
        if let Some(t) = &self.trace {
            traced_alloc(t, addr, size, stream);
        }
    }
}

#[cold]
#[inline(never)]
fn traced_alloc(t: &Mutex<TraceRecorder>, addr: usize, size: usize, stream: crate::runtime::Stream) {
    t.lock().unwrap_or_else(|e| e.into_inner()).alloc(addr, size, stream);
}

#[cold]
#[inline(never)]
fn traced(t: &Mutex<TraceRecorder>, f: impl FnOnce(&mut TraceRecorder)) {
    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut t);
}
