//! The caching allocator core: safe Rust, no exported symbols.
//!
//! Two layers meet at one seam:
//! - the caching layer (`cache`): blocks tiling segments, split and coalesce, the free index, exact-size reuse, the
//!   registry of live blocks, stream-ordered reuse. It makes no device call and knows nothing of a segment's device
//!   side;
//! - the device memory (`backing`): where a segment comes from and how its memory goes back: `aclrtMalloc`
//!   segments, or reserved ranges with physical handles mapped under the blocks handed out; how much to grow, the
//!   handle cache, the address-space budget.
//!
//! The seam is the `Backing` trait: whether a free block is ready, whether it splits, obtain, what is unused (by
//! address: the cache takes it out), give back, settle, teardown. The same backing also answers for memory held
//! outside any segment (`HeldOutside`), for sleep (`Sleeps`) and for reports (`Reports`). A backing never sees a
//! `Pool`: under the shard's lock it is handed `Parts` (the shard's cache, its own per-shard state, and what the
//! device's shards share), or, for the hot path's and the reports' questions, the cache and its own state. Its
//! state is a per-shard part keeping each segment's device side by segment id (`PerSegment`), and a device-wide
//! part.
//!
//! Above the seam, one folder per role:
//! - `alloc`, the hot path: `device` (one device's allocator), `streams` (its streams' shards), `shard` (one
//!   stream's pool of one kind, small or large: its cache and backing part behind one lock), `pool`, and
//!   `directory`, through which a free finds its shard with no lock. A cache hit takes its shard's lock and no
//!   other.
//! - `giveback`: `reclaim` (detach, give back, settle), `ladder` (the out-of-memory recovery, serialized by one
//!   lock no cache hit takes), `peers` (other allocators of the device), `forget` (a stream's shards), `teardown`.
//! - features: `pools` (private pools and their routes), `capture`, `sleep` (with `wake`), `sharing` (memory
//!   other processes map), `hooks`.
//! - `report`: `stats`, `snapshot`, `history`, `inspect`, the out-of-memory message, the consistency checks.
//!
//! Glossary:
//! - *segment*: one contiguous range the backing obtained for a shard; its blocks tile it.
//! - *block*: a piece of a segment, allocated, free (cached), pending, held for a same-size request (see
//!   Note [exact-size reuse] in `reuse`), or being given back (`Reclaiming`).
//! - *stream use*: a stream other than the owner that touched a block (record_stream); see
//!   Note [stream-ordered reuse] in `stream_order`.
//!
//! `device` says which lock guards what; no shard lock is held across a device call made for another stream.

mod alloc;
mod backing;
mod cache;
mod capture;
mod config_effect;
mod giveback;
mod hooks;
pub mod pools;
pub mod report;
pub(crate) mod sharing;
mod sleep;
#[cfg(test)]
mod testpoint;

#[cfg(test)]
mod tests;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::{Runtime, Stream};
use crate::sys;
use crate::trace::TraceRecorder;
use alloc::device::Device;
use alloc::policy::Policy;
pub use alloc::policy::PoolKind;
use alloc::shared::Shared;
use backing::{ExpandableRanges, FixedSegments, MemoryLimit};
pub use hooks::{OomHook, ReleaseHook, SegmentEvent, SegmentHook, SegmentPiece};
pub use pools::config::SleepMode;
pub use report::snapshot::{BlockSnapshot, BlockSnapshotState, SegmentSnapshot, Snapshot};
pub(crate) use report::stats::stats_table;
pub use report::stats::Stats;
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
    /// Blocks (freed, or live at teardown) other processes still hold imported, and their bytes: left in place.
    pub held_blocks: usize,
    pub held_bytes: usize,
}

/// The device allocator over the backing it was created with.
enum Engine {
    Fixed(Device<FixedSegments>),
    Expandable(Device<ExpandableRanges>),
}

/// Runs `$body` with `$d` bound to the engine's device, whichever backing.
macro_rules! with_device {
    ($engine:expr, $d:ident => $body:expr) => {
        match $engine {
            Engine::Fixed($d) => $body,
            Engine::Expandable($d) => $body,
        }
    };
}

/// Methods that hand their arguments to the engine's device's method of the same name.
macro_rules! forward {
    ($($(#[$attr:meta])* $vis:vis fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
        $($(#[$attr])* $vis fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
            with_device!(&self.engine, d => d.$name($($arg),*))
        })*
    };
}

/// A caching allocator for one device.
pub struct DeviceAllocator {
    engine: Engine,
    device: i32,
    rt: Arc<Runtime>,
    /// Among the allocators other allocators of the device ask (`peers`).
    joined: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for DeviceAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAllocator").field("device", &self.device).finish()
    }
}

impl DeviceAllocator {
    /// Loads the runtime named by the config (or the default one) and creates an allocator for `device`.
    pub fn new(config: Config, device: i32) -> Result<Self> {
        let rt = Runtime::load(config.acl_library.as_deref())?;
        Self::with_runtime(config, device, rt)
    }

    pub fn with_runtime(config: Config, device: i32, rt: Arc<Runtime>) -> Result<Self> {
        Self::build(config, device, rt, alloc::streams::MAX_STREAMS)
    }

    fn build(config: Config, device: i32, rt: Arc<Runtime>, max_streams: usize) -> Result<Self> {
        if device < 0 {
            return Err(Error::InvalidArgument(format!("device {device} is negative")));
        }
        let hold = rt.hold_device(device).map_err(|e| setting_device(&rt, device, e))?;
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
                    eprintln!("npualloc: {} lacks the ACL virtual-memory API; using fixed segments", rt.source());
                }
                rt.has_vmm()
            }
        };
        config_effect::check(&config, expandable, rt.source())?;
        let large_page =
            if rt.has_vmm() { Some(backing::expandable::large_page_spec(&rt, device, &config)?) } else { None };
        let limit = config.per_process_memory_fraction.and_then(|f| fraction_limit(f, total));
        let trace = config.trace.as_ref().map(|path| TraceRecorder::create(path, device, &config)).transpose()?;
        let trace = trace.map(std::sync::Mutex::new);
        // The allocator over `$backing`, with the state its shards share.
        macro_rules! device_over {
            ($backing:expr) => {
                Device::new(
                    Shared {
                        rt: rt.clone(),
                        device,
                        policy: Policy::new(&config),
                        counters: Default::default(),
                        limit: MemoryLimit::new(limit),
                        directory: Default::default(),
                        backing: $backing,
                        release_threshold: config.release_threshold,
                        after_free: trace.is_some() || config.release_threshold.is_some(),
                        gc_threshold: config.garbage_collection_threshold,
                        reuse_bytes: config.reuse_cache_bytes(),
                        trace,
                        history: Default::default(),
                        next_serial: Default::default(),
                        hooks: Default::default(),
                        oom_snapshot: config.oom_snapshot.clone(),
                        _hold: hold,
                    },
                    max_streams,
                )
            };
        }
        let engine = match (expandable, large_page) {
            (true, Some(page)) => Engine::Expandable(device_over!(ExpandableRanges::new(&config, page, total))),
            _ => Engine::Fixed(device_over!(FixedSegments::default())),
        };
        Ok(DeviceAllocator { engine, device, rt, joined: Default::default() })
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// Allocates `size` bytes for work on `stream`; returns the address.
    #[inline(always)]
    pub fn malloc(&self, size: usize, stream: Stream) -> Result<usize> {
        with_device!(&self.engine, d => d.malloc(size, stream))
    }

    /// Frees a block by its start address (stream-ordered on its stream).
    #[inline]
    pub fn free(&self, addr: usize) -> Result<()> {
        with_device!(&self.engine, d => d.free(addr))
    }

    /// Checks that the runtime knows `stream` on this device, as a first malloc on it does. Changes nothing.
    pub fn check_stream(&self, stream: Stream) -> Result<()> {
        alloc::device::check_live_stream(&self.rt, self.device, stream).map(|_| ())
    }

    /// Notes that work on `stream` uses the block at `addr`.
    pub fn record_stream(&self, addr: usize, stream: Stream) -> Result<()> {
        with_device!(&self.engine, d => d.record_stream(addr, stream))
    }

    /// Installs or removes (None) the hook run before each synchronization that precedes giving memory back.
    pub fn set_before_release(&self, hook: Option<(hooks::ReleaseHook, *mut std::ffi::c_void)>) {
        with_device!(&self.engine, d => d.sh.hooks.before_release.set(hook))
    }

    /// Installs or removes (None) the segment observer; returns once no other thread is inside the old one, or at
    /// once from inside a hook call.
    pub fn set_segment_observer(&self, hook: Option<(hooks::SegmentHook, *mut std::ffi::c_void)>) {
        with_device!(&self.engine, d => d.sh.hooks.segment.set(hook))
    }

    /// Installs or removes (None) the observer run once per request refused for lack of memory.
    pub fn set_out_of_memory_observer(&self, hook: Option<(hooks::OomHook, *mut std::ffi::c_void)>) {
        with_device!(&self.engine, d => d.sh.hooks.oom.set(hook))
    }

    /// Returns cached, unused segments to the device (may synchronize the streams that used them).
    pub fn empty_cache(&self) -> Result<usize> {
        with_device!(&self.engine, d => d.empty_cache_with(true))
    }

    /// `empty_cache`, keeping the handles it unmaps cached; UNSUPPORTED, nothing changed, with fixed segments.
    pub fn empty_cache_keeping_handles(&self) -> Result<usize> {
        match &self.engine {
            Engine::Expandable(d) => d.empty_cache_with(false),
            Engine::Fixed(_) => Err(Error::Unsupported(
                "keeping physical handles needs expandable segments; this allocator uses fixed segments \
                 (expandable_segments:false, or a runtime without the virtual-memory API)"
                    .into(),
            )),
        }
    }

    /// Sleeps with every pool, the default one included, in `mode` (Note [sleep]); returns the device bytes given
    /// back. Asleep already: OK, 0; after a partial wake left some pools asleep, INVALID_ARGUMENT, nothing changed.
    pub fn sleep(&self, mode: SleepMode) -> Result<usize> {
        with_device!(&self.engine, d => d.sleep(&|_, _| mode))
    }

    /// Sleeps with each pool in its own `sleep` mode (the default pool keeps its blocks).
    pub fn sleep_pools(&self) -> Result<usize> {
        with_device!(&self.engine, d => d.sleep(&|_, configured| configured))
    }

    /// Sleeps with the pools in `offload` offloading, those in `discard` discarding, every other in its own mode.
    /// INVALID_ARGUMENT, nothing changed, for a pool that does not exist or is destroyed, or one in both lists.
    pub fn sleep_with(&self, offload: &[u64], discard: &[u64]) -> Result<usize> {
        with_device!(&self.engine, d => {
            for &p in offload.iter().chain(discard) {
                d.check_pool(p)?;
            }
            if let Some(p) = offload.iter().find(|p| discard.contains(p)) {
                return Err(Error::InvalidArgument(format!(
                    "pool {p} is in both the offload and the discard list; a pool sleeps in one mode"
                )));
            }
            d.sleep(&|id, configured| {
                if offload.contains(&id) {
                    SleepMode::Offload
                } else if discard.contains(&id) {
                    SleepMode::Discard
                } else {
                    configured
                }
            })
        })
    }

    /// Wakes every sleeping block at its address, contents restored; OUT_OF_MEMORY, nothing changed, if they don't fit.
    pub fn wake(&self) -> Result<()> {
        with_device!(&self.engine, d => d.wake(None))
    }

    /// Wakes only the blocks of `pools`; the allocator stays asleep until every pool is awake. INVALID_ARGUMENT,
    /// nothing changed, for a pool never created.
    pub fn wake_with(&self, pools: &[u64]) -> Result<()> {
        with_device!(&self.engine, d => d.wake(Some(pools)))
    }

    /// Caps this allocator's reserved memory at `fraction` of the device.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        check_memory_fraction(fraction)?;
        let rt = &self.rt;
        let (_, total) =
            rt.on_device(self.device, || rt.mem_info()).map_err(|e| Error::runtime(e, "querying device memory"))?;
        with_device!(&self.engine, d => d.set_limit(fraction_limit(fraction, total).unwrap_or(usize::MAX)))
    }

    /// Keeps the last `max_entries` allocator events; 0 turns recording off and drops them.
    pub fn record_history(&self, max_entries: usize) {
        with_device!(&self.engine, d => d.sh.history.set_capacity(max_entries))
    }

    /// The recorded history, oldest first (empty while off).
    pub fn history(&self) -> Vec<report::history::Event> {
        with_device!(&self.engine, d => d.sh.history.events())
    }

    forward! {
        /// Writes the buffered trace events to the `trace` file (no-op without one).
        pub fn flush_trace(&self) -> Result<()>;
        /// Undoes `record_stream(addr, stream)`; a stream never recorded on the block is Ok.
        pub fn erase_stream(&self, addr: usize, stream: Stream) -> Result<()>;
        /// Exports the live block at `addr` to other processes of the host; returns the handle's bytes.
        pub fn ipc_export(&self, addr: usize) -> Result<[u8; sharing::table::HANDLE_SIZE]>;
        /// What the device holds now, as the segment observer would have been told it.
        pub fn held_segments(&self) -> Vec<(hooks::SegmentEvent, hooks::SegmentPiece)>;
        /// The host is about to destroy `stream`: its cached memory and ranges go back (returns the bytes); its live
        /// blocks stay valid. An unknown stream is no error.
        pub fn forget_stream(&self, stream: Stream) -> Result<usize>;
        /// The live block containing `addr` (interior pointers allowed).
        pub fn query(&self, addr: usize) -> Result<BlockInfo>;
        /// Start and size of the live block containing `addr` (interior pointers allowed), if any.
        #[inline]
        pub fn block_range(&self, addr: usize) -> Result<Option<(usize, usize)>>;
        /// Start and size of the segment holding the live block at `addr`.
        pub fn segment_of(&self, addr: usize) -> Result<(usize, usize)>;
        pub fn stats(&self) -> Result<Stats>;
        /// The statistics of one pool kind's blocks (PyTorch's small and large pools), over every pool.
        pub fn kind_stats(&self, kind: PoolKind) -> Result<Stats>;
        pub fn reset_peak_stats(&self) -> Result<()>;
        /// Segments and blocks (see `snapshot`); locks each shard in turn.
        pub fn snapshot(&self) -> Result<Snapshot>;
        pub fn snapshot_json(&self) -> Result<String>;
        /// Segments, blocks and the memory history in PyTorch's snapshot format. Locks each shard in turn.
        pub fn pytorch_snapshot(&self) -> Result<report::pytorch_snapshot::Value>;
        /// Creates a private pool (Note [pools]); returns its id.
        pub fn pool_create(&self, config: pools::config::PoolConfig) -> Result<u64>;
        /// Routes allocations on `stream` (None: of the calling thread) to `pool`.
        pub fn pool_begin(&self, pool: u64, stream: Option<Stream>) -> Result<()>;
        /// Ends the innermost route of `stream` (None: of the calling thread).
        pub fn pool_end(&self, pool: u64, stream: Option<Stream>) -> Result<()>;
        /// Sets a pool's `use_on_oom` from now on.
        pub fn pool_set_use_on_oom(&self, pool: u64, on: bool) -> Result<()>;
        /// Destroys a pool: no more routes, its cached memory goes back.
        pub fn pool_destroy(&self, pool: u64) -> Result<()>;
        /// Gives back one pool's cached memory; returns the bytes given back.
        pub fn pool_empty_cache(&self, pool: u64) -> Result<usize>;
        /// The live blocks of a pool, in address order.
        pub fn pool_live_blocks(&self, pool: u64) -> Result<Vec<pools::checkpoint::LiveBlock>>;
        /// Sets a pool's live blocks back to a list `pool_live_blocks` gave.
        pub fn pool_restore(&self, pool: u64, blocks: &[pools::checkpoint::LiveBlock])
            -> Result<pools::checkpoint::Restored>;
        pub fn pool_stats(&self, pool: u64) -> Result<Stats>;
        pub fn check_invariants(&self) -> Result<(), String>;
        /// A peer is about to refuse a request: gives back free cache by this one's safe ladder steps.
        fn give_back_to_peer(&self);
    }

    /// Synchronizes every stream used, returns all segments (live blocks included) and events; refuses further work.
    pub fn teardown(&self) -> Result<TeardownReport> {
        giveback::peers::leave(self);
        with_device!(&self.engine, d => d.teardown())
    }

    /// Joins the device's allocators that ask each other for free cache before refusing a request.
    ///
    /// # Safety
    /// `self` stays at its address (boxed, or `'static`) until it is torn down or dropped.
    pub unsafe fn join_peers(&self) {
        // SAFETY: forwarded to the caller.
        unsafe { giveback::peers::join(self) }
    }

    /// Leaves the peers; waits for every ask of it in progress, so must not be called from this allocator's own hook.
    pub fn leave_peers(&self) {
        giveback::peers::leave(self);
    }

    /// Identifies this allocator among its peers (`Device::peer_key`).
    fn key(&self) -> usize {
        with_device!(&self.engine, d => d.peer_key())
    }
}

impl Drop for DeviceAllocator {
    fn drop(&mut self) {
        giveback::peers::leave(self);
    }
}

/// What tests look at inside an allocator.
#[cfg(test)]
impl DeviceAllocator {
    pub(crate) fn is_asleep(&self) -> bool {
        with_device!(&self.engine, d => d.sleep.is_asleep())
    }

    pub(crate) fn is_expandable(&self) -> bool {
        matches!(self.engine, Engine::Expandable(_))
    }

    /// Streams the allocator has given shards to.
    pub(crate) fn streams_served(&self) -> usize {
        with_device!(&self.engine, d => d.streams.len())
    }

    /// (id, sleep mode, shards) of every pool, as the sleep paths see them.
    pub(crate) fn pool_listing(&self) -> Vec<(u64, pools::config::SleepMode, usize)> {
        with_device!(&self.engine, d => d.pool_shards().iter().map(|p| (p.id, p.sleep, p.shards.len())).collect())
    }

    /// Pins the expandable backing's handle-size rule.
    pub(crate) fn set_piece_rule(&self, rule: backing::expandable::PieceRule) {
        match &self.engine {
            Engine::Expandable(d) => d.sh.backing.set_pieces(rule),
            Engine::Fixed(_) => panic!("fixed segments have no physical handles"),
        }
    }

    /// (bytes mapped or held in segments, bytes of cached handles).
    pub(crate) fn own_accounting(&self) -> (usize, usize) {
        use backing::HeldOutside;
        with_device!(&self.engine, d => {
            let held = d.streams.shards().map(|s| s.lock_anyway().held_bytes()).sum();
            (held, d.sh.backing.cached_bytes())
        })
    }

    /// Bytes of moved handles' old addresses still mapped (Note [moves of
    /// wholly free handles]): mapped in the runtime, counted nowhere.
    pub(crate) fn retired_bytes(&self) -> usize {
        let Engine::Expandable(d) = &self.engine else { return 0 };
        let of = |pool: &alloc::pool::Pool<backing::ExpandableRanges>| -> usize {
            pool.cache.segments.ids().map(|id| pool.backing.retired_bytes(id)).sum()
        };
        d.streams.shards().map(|s| of(&s.lock_anyway())).sum()
    }

    /// (leaves made, granules `remove` looked at) of the directory.
    pub(crate) fn directory_cost(&self) -> (usize, usize) {
        with_device!(&self.engine, d => (d.sh.directory.leaves(), d.sh.directory.visited()))
    }

    /// Moves the free index's byte count of the first shard with a free
    /// block by `by`, as a bookkeeping slip would (the invariant check must
    /// see it; nothing else may run meanwhile).
    pub(crate) fn skew_free_bytes(&self, by: isize) {
        with_device!(&self.engine, d => {
            let shard = d.streams.shards().find(|s| s.lock_anyway().cache.index.count > 0).expect("a free block");
            let mut pool = shard.lock_anyway();
            pool.cache.index.bytes = pool.cache.index.bytes.wrapping_add_signed(by);
        })
    }

    /// (blocks, bytes) held in every shard's reuse lists.
    pub(crate) fn held_blocks(&self) -> (usize, usize) {
        with_device!(&self.engine, d => d.streams.shards().fold((0, 0), |(n, b), s| {
            let pool = s.lock_anyway();
            (n + pool.cache.reuse.count, b + pool.cache.reuse.bytes)
        }))
    }
}

/// The byte limit of `fraction` of `total`: none for the whole device, as in torch_npu's `setMemoryFraction` (so
/// it starts no garbage collection).
fn fraction_limit(fraction: f64, total: usize) -> Option<usize> {
    (fraction < 1.0).then_some((fraction * total as f64) as usize)
}

/// A memory fraction `set_memory_fraction` accepts: in [0, 1], as torch_npu's setMemoryFraction (NaN is not).
pub fn check_memory_fraction(fraction: f64) -> Result<()> {
    if (0.0..=1.0).contains(&fraction) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("memory fraction must be in [0, 1], got {fraction}")))
    }
}

/// Why setting `device` failed: an id past the runtime's device count is a bad argument naming the ids it has;
/// anything else is the runtime's error.
fn setting_device(rt: &Runtime, device: i32, e: crate::runtime::AclCallError) -> Error {
    let unknown = e.code == sys::ACL_ERROR_RT_INVALID_DEVICEID;
    let has = match rt.device_count() {
        Some(n) if unknown && device as u32 >= n && n > 0 => format!("it has {n} device(s), 0 to {}", n - 1),
        Some(0) if unknown => "it reports no device".to_string(),
        _ => return Error::runtime(e, format!("setting device {device}")),
    };
    Error::InvalidArgument(format!(
        "device {device} is not a device of this runtime: {has} (aclrtSetDevice: error {})",
        e.code
    ))
}
