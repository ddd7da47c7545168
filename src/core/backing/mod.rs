//! The device backing: where a shard's memory comes from and how it goes back (RMM's "upstream" seam), as
//! `FixedSegments` (`fixed`: one `aclrtMalloc` per segment) or `ExpandableRanges` (`expandable`: reserved ranges,
//! physical handles mapped under the blocks handed out). It sees a shard as `Parts`, never as a `Pool`, and
//! nothing outside this module asks which backing it has.
//! Giving memory back runs in three steps so that no shard lock is held across a device call: detach (under the
//! shard's lock: the backing lists what is `unused`, the cache takes it out as `Reclaiming` blocks or whole
//! segments), `give_back` (no lock: the device calls, after synchronizing the streams that used it), and `settle`
//! (under the lock again: forget what went back, return to the pool what could not).

pub(crate) mod expandable;
pub(crate) mod fixed;
pub(super) mod limit;

use super::cache::block::BlockId;
use super::cache::segment::SegmentId;
use super::cache::Cache;
use super::hooks::SegmentEvent;
pub(crate) use super::sharing::table::Memory as SharedMemory;
use crate::core::alloc::policy::{PoolKind, Shape};
use crate::core::alloc::shared::Shared;
use crate::error::Result;
use crate::runtime::{PhysicalHandle, Stream};
use std::sync::atomic::Ordering;

pub(crate) use expandable::ExpandableRanges;
pub(crate) use fixed::FixedSegments;
pub(crate) use limit::MemoryLimit;

/// What a growth needs to know about the whole device.
pub(crate) struct GrowContext<'a, B: Backing> {
    /// Bytes allocated over all shards, and their peak.
    pub allocated: u64,
    pub allocated_peak: u64,
    /// The growing stream's shard of the other pool kind: a `reserved_headroom` move may take its free pieces when
    /// no one holds it (same stream, so its lock may be held across the calls; never waited for).
    pub sibling: Option<&'a dyn Sibling<B>>,
    /// Whether a placement over `reserved_headroom` may ask for other shards' free pieces (`GrowError::NeedsRoom`).
    pub may_borrow: bool,
    /// Whether a wholly free handle may move without a synchronization (Note [moves of wholly free handles]): only
    /// the default pool's shards of streams not seen capturing, whose old addresses no graph replays on.
    pub may_move: bool,
    /// Whether a growth past `garbage_collection_threshold` x the memory limit asks for garbage collection first
    /// (`GrowError::Collect`): a request's first try, not the ladder's retry.
    pub may_collect: bool,
}

/// What a backing sees of one shard; made by `Pool::parts` under the shard's lock.
pub(crate) struct Parts<'a, B: Backing> {
    pub sh: &'a std::sync::Arc<Shared<B>>,
    pub cache: &'a mut Cache,
    pub backing: &'a mut B::ShardState,
    /// What the shard's pool asks of its blocks.
    pub shape: Shape,
}

impl<B: Backing> Parts<'_, B> {
    /// Adds a segment [base, base + size) with one free block over it, and `claim` (the whole range the runtime
    /// gave, at least 2 MiB, see `directory`) to the directory. The backing records its side under the returned id.
    pub fn add_segment(&mut self, base: usize, size: usize, claim: Option<(usize, usize)>) -> (SegmentId, BlockId) {
        let serial = self.sh.next_serial.fetch_add(1, Ordering::Relaxed);
        let made = self.cache.add_segment(base, size, serial);
        if let Some((at, len)) = claim {
            debug_assert!(at <= base && base + size <= at + len);
            self.sh.directory.insert(at, len, self.cache.id);
        }
        made
    }

    /// Tells the segment observer, if any, of `event` on [addr, addr + size) of this shard's pool.
    #[inline]
    pub fn segment_event(&self, event: SegmentEvent, addr: usize, size: usize, handle: Option<PhysicalHandle>) {
        self.sh.segment_event(event, addr, size, handle, self.cache.pool);
    }
}

impl<B: Backing> std::ops::Deref for Parts<'_, B> {
    type Target = Cache;

    fn deref(&self) -> &Cache {
        self.cache
    }
}

impl<B: Backing> std::ops::DerefMut for Parts<'_, B> {
    fn deref_mut(&mut self) -> &mut Cache {
        self.cache
    }
}

/// Locks `m`, poisoned or not.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `map[key]`, else what `make` returns (made with no lock held), kept there: an export is made once.
pub(crate) fn kept_or_made<K: Eq + std::hash::Hash, V: Copy>(
    map: &std::sync::Mutex<std::collections::HashMap<K, V>>,
    key: K,
    make: impl FnOnce() -> Result<V>,
) -> Result<V> {
    let known = lock(map).get(&key).copied();
    if let Some(v) = known {
        return Ok(v);
    }
    let v = make()?;
    lock(map).insert(key, v);
    Ok(v)
}

/// Keeps `r`'s error in `first` unless it holds one already: calls that all run report the first error.
pub(crate) fn keep_first<T>(first: &mut Option<crate::error::Error>, r: Result<T>) {
    if let Err(e) = r {
        first.get_or_insert(e);
    }
}

/// What a backing keeps for each segment of a shard, by the cache's segment id. An id is reused only after its
/// record was taken out (segment removed, or given whole in `unused`).
#[derive(Debug)]
pub(crate) struct PerSegment<T>(Vec<Option<T>>);

impl<T> Default for PerSegment<T> {
    fn default() -> Self {
        PerSegment(Vec::new())
    }
}

impl<T> PerSegment<T> {
    pub fn set(&mut self, seg: SegmentId, value: T) {
        let i = seg.0 as usize;
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        debug_assert!(self.0[i].is_none(), "segment {i} already has its backing's record");
        self.0[i] = Some(value);
    }

    pub fn take(&mut self, seg: SegmentId) -> T {
        self.0[seg.0 as usize].take().expect("the backing's record of a live segment")
    }

    #[inline]
    pub fn get(&self, seg: SegmentId) -> &T {
        self.0[seg.0 as usize].as_ref().expect("the backing's record of a live segment")
    }

    #[inline]
    pub fn get_mut(&mut self, seg: SegmentId) -> &mut T {
        self.0[seg.0 as usize].as_mut().expect("the backing's record of a live segment")
    }
}

/// The growing stream's other shard, reached only if no one holds it.
pub(crate) trait Sibling<B: Backing> {
    /// Runs `f` on the shard's parts if its lock is free now (never waits); returns whether it ran.
    fn try_with(&self, f: &mut dyn FnMut(Parts<'_, B>)) -> bool;
}

/// What a backing gives back of a shard, by address. The cache takes it out in the order listed, since the free
/// index's order depends on it.
#[derive(Debug)]
pub(crate) struct Give {
    pub what: What,
    /// Its segment (stale once a whole segment left the shard).
    pub segment: SegmentId,
    pub addr: usize,
    pub size: usize,
    /// Device bytes giving it back returns: `size`, but 0 for an expandable range (address space only). An
    /// expandable piece counts once its handle is freed; a moved handle's old address counts its handle.
    pub memory: usize,
    /// What goes back to the device: (address, bytes); a whole fixed segment's allocation may start below `addr`.
    pub device: (usize, usize),
    /// Whether the streams that used it are synchronized first (not for a range with nothing mapped).
    pub sync: bool,
    /// Whether the directory holds the segment by its `device` range (fixed segments), to claim again if kept.
    pub claim: bool,
    /// An empty range made for a request the ladder tries again (expandable ranges): kept with that mark.
    pub for_request: bool,
    /// The physical handle mapped there (expandable pieces and retired spans), for the segment observer.
    pub handle: Option<PhysicalHandle>,
}

impl Give {
    /// Pages of segment `seg` at [addr, addr + size) that device memory backs, given back after its streams.
    pub fn pages(what: What, segment: SegmentId, addr: usize, size: usize) -> Give {
        Give {
            what,
            segment,
            addr,
            size,
            memory: size,
            device: (addr, size),
            sync: true,
            claim: false,
            for_request: false,
            handle: None,
        }
    }

    /// The same, naming the handle mapped there (if any).
    pub fn with_handle(self, handle: Option<PhysicalHandle>) -> Give {
        Give { handle, ..self }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    /// A whole segment, which leaves the shard (the backing forgot its side of it already).
    Segment,
    /// Free pages of a segment, carved out as a `Reclaiming` block.
    Piece,
    /// A moved handle's old address (expandable ranges), already a `Reclaiming` block: unmapped, while its handle
    /// stays mapped at its new address.
    Retired,
}

/// A `Give` taken out of the shard's cache, to be given back with no lock held and settled after.
#[derive(Debug)]
pub(crate) struct Detached {
    pub give: Give,
    /// The `Reclaiming` block covering it (NIL when the whole segment left).
    pub block: BlockId,
    /// The segment's age (oldest first for garbage collection).
    pub serial: u64,
    /// Streams whose work may still use it: synchronized first.
    pub streams: Vec<Stream>,
    /// The pool of the shard it came from (segment events name it).
    pub pool: u64,
}

impl std::ops::Deref for Detached {
    type Target = Give;

    fn deref(&self) -> &Give {
        &self.give
    }
}

/// Which free memory `unused` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Everything free that can go back.
    All,
    /// Only whole free fixed segments (a destroyed pool's free).
    WholeSegments,
    /// What garbage collection gives back, about this many device bytes: whole free fixed segments; of ranges, empty
    /// ones, wholly free pieces (oldest range, largest piece first), and old addresses pinning wholly free handles.
    Unused(usize),
    /// Free pieces of at least this many bytes in all, largest first (a `reserved_headroom` move).
    Pieces(usize),
    /// After a free at `addr` leaving `bytes` cached over `release_threshold`: as `Unused`, looking only where the
    /// free could have changed anything (a free that frees nothing costs nothing); fixed: every whole free segment.
    Freed { addr: usize, bytes: usize },
}

/// The seam: how a shard's memory is obtained and given back (the rest is in the traits `Memory` gathers).
pub(crate) trait Backing: Sized + Send + Sync + 'static {
    /// What a shard of this backing keeps, its segments' device side included (`PerSegment`).
    type ShardState: Default + Send + std::fmt::Debug;

    /// How many of free block `id`'s first bytes a request of `rounded` bytes takes with no device call (`rounded`,
    /// or more where the shape asks for whole pieces); None when it needs the device (`obtain` places it).
    fn ready(cache: &Cache, st: &Self::ShardState, shape: Shape, id: BlockId, rounded: usize) -> Option<usize>;

    /// Whether taking `rounded` bytes of a free block of `size` splits off the rest.
    fn splits(sh: &Shared<Self>, shape: Shape, kind: PoolKind, size: usize, rounded: usize) -> bool;

    /// A free block from `best_fit` or new device memory, and how many of its first bytes (all ready) the request
    /// takes, as in `ready`. Fails changing nothing (beyond handles cached).
    fn obtain(
        p: Parts<'_, Self>,
        rounded: usize,
        best_fit: Option<BlockId>,
        ctx: &GrowContext<'_, Self>,
    ) -> Result<(BlockId, usize), GrowError>;

    /// What the shard can give back, in the order the cache takes it out; forgets its side of each whole segment.
    fn unused(p: Parts<'_, Self>, scope: Scope) -> Vec<Give>;

    /// Gives `d` back to the device (no lock held); returns the bytes the device got back (0 if cached as handles).
    fn give_back(sh: &Shared<Self>, d: &Detached) -> Result<usize>;

    /// After `give_back`: forgets `g` if it went back, else keeps it (a whole segment kept is back in the cache as
    /// `readded`, for the backing to record again). Returns whether the give's block returns to the free blocks.
    fn settle(p: Parts<'_, Self>, g: &Give, given_back: bool, readded: Option<SegmentId>) -> bool;

    /// Gives every segment back (teardown; streams synchronized), except those a `busy` stream (one that could not
    /// be waited for) may still use. Returns the first error after trying all.
    fn teardown(p: Parts<'_, Self>, busy: &[Stream]) -> Result<()>;
}

/// A backing with everything the core asks of one; code above the seam is generic over this.
pub(crate) trait Memory: Backing + HeldOutside + Sleeps + Reports + Shares {}

impl<B: Backing + HeldOutside + Sleeps + Reports + Shares> Memory for B {}

/// Sharing a block's device memory with other processes.
pub(crate) trait Shares: Backing {
    /// Exports the device memory under the live block at [addr, addr + size) of `seg`: a key per allocation or a
    /// shareable handle per physical handle, each made once and kept while its memory is.
    fn share(p: Parts<'_, Self>, seg: SegmentId, addr: usize, size: usize) -> Result<SharedMemory>;
}

/// Device memory a backing holds outside any segment, shared by the device's shards (none by default).
pub(crate) trait HeldOutside: Backing {
    /// Frees cached handles and reservations whose release was refused; returns bytes of device memory freed.
    fn free_cached(_sh: &Shared<Self>) -> Result<usize> {
        Ok(0)
    }

    /// Frees cached handles until `bytes` are freed or none is left (the smallest that covers the rest, else the
    /// largest); returns bytes freed. Refused reservations are left alone.
    fn free_cached_upto(_sh: &Shared<Self>, _bytes: usize) -> Result<usize> {
        Ok(0)
    }

    /// Bytes held outside any segment (cached handles).
    fn cached_bytes(&self) -> usize {
        0
    }

    /// Whether `free_cached` has reservations whose release was refused to give back besides cached handles.
    fn keeps_reservations(&self) -> bool {
        false
    }
}

/// Taking a shard's live memory off the device and back (Note [sleep]); a backing that cannot keeps the defaults.
pub(crate) trait Sleeps: Backing {
    /// Whether sleep can take live blocks off the device.
    const SLEEPS_LIVE: bool = false;

    /// Takes the shard's mapped memory off the device (to host memory with `offload`); returns bytes given back.
    fn sleep_pool(_p: Parts<'_, Self>, _offload: bool) -> Result<usize> {
        Ok(0)
    }

    /// Appends the (bytes, attr) of each physical handle `wake_map` needs.
    fn wake_needs(_p: Parts<'_, Self>, _out: &mut Vec<(usize, crate::sys::aclrtMemAttr)>) {}

    /// One physical handle of a `wake_needs` size, within the memory limit. Never called for a backing whose
    /// `wake_needs` names none.
    fn wake_handle(_sh: &Shared<Self>, _bytes: usize, _attr: crate::sys::aclrtMemAttr) -> Result<PhysicalHandle> {
        Err(crate::error::Error::Internal("this kind of segment maps no physical handle to wake into".into()))
    }

    /// Frees the unmapped (handle, bytes) a wake did not keep. One the runtime refuses to free stays with the
    /// backing's cached handles, counted reserved, and the next `free_cached` tries again.
    fn free_wake_handles(_sh: &Shared<Self>, handles: impl IntoIterator<Item = (PhysicalHandle, usize)>) {
        // Only `wake_handle` makes them, and by default it makes none.
        debug_assert!(handles.into_iter().next().is_none(), "a physical handle to free without wake_handle");
    }

    /// Maps `handles` (in `wake_needs` order) under the sleeping memory and restores its contents, still counted
    /// asleep until `wake_commit`; on failure the handles not mapped stay in `handles` (Note [sleep]).
    fn wake_map(_p: Parts<'_, Self>, _handles: &mut WakeHandles) -> Result<()> {
        Ok(())
    }

    /// Undoes `wake_map`: the handles it mapped, unmapped, onto `out` as (handle, bytes).
    fn wake_undo(_p: Parts<'_, Self>, _out: &mut Vec<(PhysicalHandle, usize)>) -> Result<()> {
        Ok(())
    }

    /// Makes what `wake_map` mapped awake for good.
    fn wake_commit(_p: Parts<'_, Self>) -> Result<()> {
        Ok(())
    }
}

/// What a backing tells statistics, snapshots, the out-of-memory report and the invariant checks. Read only.
pub(crate) trait Reports: Backing {
    /// Device memory `seg` holds (mapped bytes of a range, a fixed segment's size).
    fn held_bytes(st: &Self::ShardState, seg: SegmentId) -> usize;

    /// The longest run a request could get from `cache` with no device call.
    fn largest_free(cache: &Cache, st: &Self::ShardState) -> usize;

    /// The segment's entry in a snapshot: (expandable, mapped bytes).
    fn describe(st: &Self::ShardState, seg: SegmentId) -> (bool, usize);

    /// Appends the (address, bytes) runs of block [addr, addr + size) of `seg` that device memory backs.
    fn mapped_runs(st: &Self::ShardState, seg: SegmentId, addr: usize, size: usize, out: &mut Vec<(usize, usize)>);

    /// Backing-specific invariants of segment `seg` (none by default).
    fn check_segment(_cache: &Cache, _st: &Self::ShardState, _seg: SegmentId) -> Result<(), String> {
        Ok(())
    }

    /// What `seg` (at [base, base + size)) holds as the segment observer was told it, as (event, address, bytes,
    /// handle): RESERVE for a range then MAP per mapped piece, or MAP for a fixed segment's allocation.
    fn held_pieces(
        st: &Self::ShardState,
        seg: SegmentId,
        base: usize,
        size: usize,
        out: &mut Vec<(SegmentEvent, usize, usize, Option<PhysicalHandle>)>,
    );
}

/// The physical handles a wake allocated, with their sizes, in the order of the needs they were made for.
pub type WakeHandles = std::collections::VecDeque<(PhysicalHandle, usize)>;

/// Why memory could not be obtained.
#[derive(Debug)]
pub(crate) enum GrowError {
    /// The memory fraction limit would be exceeded: `size` more bytes with `charged` already against `limit`.
    OverLimit {
        size: usize,
        limit: usize,
        charged: usize,
    },
    /// No address space for another range of `range` bytes: the process budget (`refused` None) or the runtime refused.
    AddressSpace {
        range: usize,
        refused: Option<crate::runtime::AclCallError>,
    },
    /// Garbage collection is due before growing by `needed` bytes (see `reclaim`).
    Collect {
        needed: usize,
    },
    /// `reserved_headroom` wants `bytes` of other shards' free pieces moved here (see `ladder`).
    NeedsRoom {
        bytes: usize,
    },
    Runtime(crate::runtime::AclCallError),
    /// Not a memory shortage: fails the call as it is.
    Other(crate::error::Error),
}

impl GrowError {
    /// Whether the request is tried again after this; what the try reserved stays for the retry.
    pub fn is_retried(&self) -> bool {
        matches!(self, GrowError::Collect { .. } | GrowError::NeedsRoom { .. })
    }

    pub fn is_out_of_memory(&self) -> bool {
        match self {
            GrowError::OverLimit { .. }
            | GrowError::AddressSpace { .. }
            | GrowError::Collect { .. }
            | GrowError::NeedsRoom { .. } => true,
            GrowError::Runtime(e) => e.is_out_of_memory(),
            GrowError::Other(_) => false,
        }
    }
}
