//! The caching allocator core: safe Rust, no exported symbols.
//!
//! Glossary:
//! - *segment*: one contiguous range obtained from the runtime in one call
//!   (`aclrtMalloc`); it belongs to one stream and one pool kind.
//! - *block*: a piece of a segment, allocated, free (cached), pending, or
//!   held for a same-size request (see Note [exact-size reuse] in `reuse`).
//! - *pool*: the free blocks of one (stream, kind); small blocks (≤ 1 MiB)
//!   live in 2 MiB segments, large ones in their own (see `policy`).
//! - *stream use*: a stream other than the owner that touched a block
//!   (record_stream); see Note [stream-ordered reuse] in `stream_order`.
//!
//! One lock per device allocator (`lock`) guards all state; nothing inside
//! takes another lock. Calls that may wait on the device (stream synchronization
//! before releasing memory, the OOM ladder, teardown) run under that lock,
//! as their docs say.

pub mod block;
mod expandable;
pub mod free_index;
mod invariants;
mod lock;
pub mod policy;
mod reclaim;
pub mod registry;
mod reuse;
pub mod segment;
mod snapshot;
pub mod size_class;
pub mod state;
pub mod stats;
pub mod stream_order;
pub mod streams;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_expandable;
#[cfg(test)]
mod tests_pieces;
#[cfg(test)]
mod tests_random;
#[cfg(test)]
mod tests_reuse;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::{Runtime, Stream};
use crate::trace::TraceRecorder;
use policy::Policy;
use state::State;
pub use stats::Stats;
use std::sync::Arc;

/// What `query` reports about a live block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    pub addr: usize,
    pub size: usize,
    pub requested: usize,
    pub stream: Stream,
}

/// What was still live when an allocator was torn down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TeardownReport {
    pub live_blocks: usize,
    pub live_bytes: usize,
}

/// A caching allocator for one device.
pub struct DeviceAllocator {
    state: lock::StateLock<State>,
    device: i32,
    rt: Arc<Runtime>,
    config: Config,
}

impl std::fmt::Debug for DeviceAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAllocator").field("device", &self.device).finish()
    }
}

impl DeviceAllocator {
    /// Loads the runtime named by the config (or the default one) and
    /// creates an allocator for `device`.
    pub fn new(config: Config, device: i32) -> Result<Self> {
        let rt = Runtime::load(config.acl_library.as_deref())?;
        Self::with_runtime(config, device, rt)
    }

    pub fn with_runtime(config: Config, device: i32, rt: Arc<Runtime>) -> Result<Self> {
        if device < 0 {
            return Err(Error::InvalidArgument(format!("device {device} is negative")));
        }
        let (_, total) = rt
            .on_device(device, || rt.mem_info())
            .map_err(|e| Error::runtime(e, format!("querying device {device}")))?;
        let expandable = match config.expandable_segments {
            Some(true) if !rt.has_vmm() => {
                return Err(Error::Unsupported(format!(
                    "expandable_segments:true needs the ACL virtual-memory API, which {} lacks",
                    rt.source()
                )))
            }
            Some(on) => on,
            None => {
                if !rt.has_vmm() {
                    eprintln!(
                        "npualloc: {} lacks the ACL virtual-memory API; using fixed segments",
                        rt.source()
                    );
                }
                rt.has_vmm() && config.max_split_size.is_none()
            }
        };
        let large_page = expandable::large_page_spec(&rt, device, &config)?;
        let limit = config.per_process_memory_fraction.map(|f| (f * total as f64) as usize);
        let trace = match &config.trace {
            Some(path) => Some(TraceRecorder::create(path, device, &config)?),
            None => None,
        };
        let state = State {
            rt: rt.clone(),
            device,
            policy: Policy::new(&config),
            limit,
            gc_threshold: config.garbage_collection_threshold,
            release_threshold: config.release_threshold,
            blocks: Default::default(),
            segments: Default::default(),
            streams: Default::default(),
            pools: Vec::new(),
            registry: Default::default(),
            reuse: reuse::ReuseLists::new(config.reuse_cache_bytes()),
            reserved_headroom: config.reserved_headroom,
            pieces: expandable::PieceRule::for_config(&config),
            order: Default::default(),
            stats: Default::default(),
            expandable,
            ranges: Vec::new(),
            large_page,
            handle_cache: Default::default(),
            device_total: total,
            broken: None,
            trace,
            #[cfg(debug_assertions)]
            transitions: 0,
        };
        Ok(DeviceAllocator { state: lock::StateLock::new(state), device, rt, config })
    }

    fn lock(&self) -> Result<lock::StateGuard<'_, State>> {
        let state = self
            .state
            .lock()
            .map_err(|_| Error::Internal("the allocator is unusable after an earlier internal error".into()))?;
        if let Some(why) = &state.broken {
            return Err(Error::Internal(format!("the allocator is unusable: {why}")));
        }
        Ok(state)
    }

    /// Whether this allocator uses expandable segments.
    pub fn is_expandable(&self) -> bool {
        self.state.lock().map(|s| s.expandable).unwrap_or(false)
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Allocates `size` bytes for work on `stream`; returns the address.
    #[inline(always)]
    pub fn malloc(&self, size: usize, stream: Stream) -> Result<usize> {
        let mut st = self.lock()?;
        let addr = st.malloc(size, stream)?;
        if let Some(t) = &mut st.trace {
            t.alloc(addr, size, stream);
        }
        Ok(addr)
    }

    /// Frees a block by its start address (stream-ordered on its stream).
    #[inline]
    pub fn free(&self, addr: usize) -> Result<()> {
        let mut st = self.lock()?;
        st.free(addr)?;
        if let Some(t) = &mut st.trace {
            t.free(addr);
        }
        Ok(())
    }

    /// Notes that work on `stream` uses the block at `addr`.
    pub fn record_stream(&self, addr: usize, stream: Stream) -> Result<()> {
        let mut st = self.lock()?;
        st.record_stream(addr, stream)?;
        if let Some(t) = &mut st.trace {
            t.record_stream(addr, stream);
        }
        Ok(())
    }

    /// Writes the buffered trace events to the `trace` file (no-op without one).
    pub fn flush_trace(&self) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut st.trace {
            Some(t) => t.flush(),
            None => Ok(()),
        }
    }

    /// Returns cached, unused segments to the device (may synchronize the
    /// streams that used them).
    pub fn empty_cache(&self) -> Result<usize> {
        self.lock()?.empty_cache()
    }

    /// Caps this allocator's reserved memory at `fraction` of the device.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        check_memory_fraction(fraction)?;
        let mut st = self.lock()?;
        let rt = self.rt.clone();
        let (_, total) = rt
            .on_device(self.device, || rt.mem_info())
            .map_err(|e| Error::runtime(e, "querying device memory"))?;
        st.limit = Some((fraction * total as f64) as usize);
        Ok(())
    }

    /// The live block containing `addr` (interior pointers allowed).
    pub fn query(&self, addr: usize) -> Result<BlockInfo> {
        let st = self.lock()?;
        let Some(id) = st.allocated_block_at(addr) else {
            return Err(st.unknown_pointer(addr, "query"));
        };
        let b = st.blocks.get(id);
        Ok(BlockInfo { addr: b.addr, size: b.size, requested: b.requested, stream: st.streams.stream(b.stream_slot) })
    }

    /// Start and size of the live block containing `addr` (interior
    /// pointers allowed), or None if no live block contains it.
    #[inline]
    pub fn block_range(&self, addr: usize) -> Result<Option<(usize, usize)>> {
        let st = self.lock()?;
        Ok(st.allocated_block_at(addr).map(|id| {
            let b = st.blocks.get(id);
            (b.addr, b.size)
        }))
    }

    /// Start and size of the segment holding the live block at `addr`.
    pub fn segment_of(&self, addr: usize) -> Result<(usize, usize)> {
        let st = self.lock()?;
        let Some(id) = st.allocated_block_at(addr) else {
            return Err(st.unknown_pointer(addr, "segment look-up"));
        };
        let seg = st.segments.get(st.blocks.get(id).segment);
        Ok((seg.base, seg.size))
    }

    pub fn stats(&self) -> Result<Stats> {
        let st = self.lock()?;
        let mut s = *st.stats.get();
        s.largest_free_block = st.largest_free() as u64;
        Ok(s)
    }

    pub fn reset_peak_stats(&self) -> Result<()> {
        self.lock()?.stats.reset_peaks();
        Ok(())
    }

    pub fn snapshot_json(&self) -> Result<String> {
        Ok(self.lock()?.snapshot_json())
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let st = self.state.lock().map_err(|_| "lock poisoned".to_string())?;
        st.check_invariants()
    }

    /// Releases everything: synchronizes every stream the allocator used,
    /// returns all segments (live blocks included) and events. The allocator
    /// refuses further work afterwards.
    pub fn teardown(&self) -> Result<TeardownReport> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        let rt = self.rt.clone();
        let report = TeardownReport {
            live_blocks: st.stats.get().active_blocks as usize,
            live_bytes: st.stats.get().allocated_bytes as usize,
        };
        let mut streams: Vec<Stream> = st.streams.all().to_vec();
        for seg in st.segments.ids() {
            for &s in &st.segments.get(seg).other_streams {
                if !streams.contains(&s) {
                    streams.push(s);
                }
            }
        }
        let mut first_error = None;
        let result = rt.on_device(self.device, || {
            // Streams that may still have work queued: memory they used is
            // left to the runtime rather than freed under that work.
            let mut busy: Vec<Stream> = Vec::new();
            for &s in &streams {
                match rt.synchronize_stream(s) {
                    Ok(()) => {}
                    // A stream the host already destroyed has no queued work
                    // left (ACL requires a synchronize before destroying one).
                    Err(e) if e.is_invalid_handle() => {}
                    Err(e) => {
                        first_error.get_or_insert(Error::runtime(
                            e,
                            "synchronizing a stream at teardown (the memory it used is left allocated)",
                        ));
                        busy.push(s);
                    }
                }
            }
            for ev in st.order.take_all_events() {
                let _ = rt.destroy_event(ev);
            }
            let segs: Vec<u32> = st.segments.ids().collect();
            for s in segs {
                let (in_use, expandable) = {
                    let seg = st.segments.get(s);
                    let owner = st.streams.stream(seg.stream_slot);
                    (busy.contains(&owner) || seg.other_streams.iter().any(|o| busy.contains(o)), seg.vmm.is_some())
                };
                if in_use {
                    continue;
                }
                if expandable {
                    if let Err(e) = st.destroy_range(s) {
                        first_error.get_or_insert(e);
                    }
                    st.segments.remove(s);
                    continue;
                }
                let seg = st.segments.remove(s);
                if let Err(e) = rt.free(seg.base) {
                    first_error.get_or_insert(Error::runtime(e, "returning a segment at teardown"));
                }
            }
            if let Err(e) = st.free_cached_handles() {
                first_error.get_or_insert(e);
            }
            Ok(())
        });
        if let Err(e) = result {
            first_error.get_or_insert(Error::runtime(e, "selecting the device at teardown"));
        }
        if let Some(Err(e)) = st.trace.as_mut().map(|t| t.flush()) {
            first_error.get_or_insert(e);
        }
        st.broken = Some("it was destroyed".into());
        st.registry.clear();
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

/// A memory fraction `set_memory_fraction` accepts: in (0, 1] (NaN is not).
pub fn check_memory_fraction(fraction: f64) -> Result<()> {
    if fraction > 0.0 && fraction <= 1.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("memory fraction must be in (0, 1], got {fraction}")))
    }
}
