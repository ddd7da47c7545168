//! The allocator state behind one device allocator's lock, and its
//! transitions: take a block (with split), return a block (with coalesce),
//! add a segment, defer a cross-stream free.

use super::block::{Block, BlockArena, BlockId, BlockState, NIL};
use super::free_index::FreeIndex;
use super::policy::{Policy, PoolKind, MAX_REQUEST};
use super::registry::Registry;
use super::segment::{Segment, SegmentTable};
use super::stats::StatsRecorder;
use super::stream_order::{PendingFree, StreamOrder};
use super::streams::StreamSlots;
use crate::error::{Error, Result};
use super::expandable::PageSpec;
use crate::runtime::{PhysicalHandle, Runtime, Stream};
use std::collections::HashMap;
use std::sync::Arc;

/// Free indices of one stream: one per pool kind.
pub type StreamPools = [FreeIndex; 2];

pub struct State {
    pub rt: Arc<Runtime>,
    pub device: i32,
    pub policy: Policy,
    /// Device bytes this allocator may hold (memory fraction), if limited.
    pub limit: Option<usize>,
    pub gc_threshold: Option<f64>,
    pub release_threshold: Option<usize>,
    pub blocks: BlockArena,
    pub segments: SegmentTable,
    pub streams: StreamSlots,
    pub pools: Vec<StreamPools>,
    pub registry: Registry,
    /// Freed blocks held for exact-size reuse.
    pub reuse: super::reuse::ReuseLists,
    /// Config key `reserved_headroom` (expandable segments only).
    pub reserved_headroom: Option<f64>,
    /// How big the physical handles growth allocates are (expandable segments).
    pub pieces: super::expandable::PieceRule,
    pub order: StreamOrder,
    pub stats: StatsRecorder,
    /// Expandable mode: one reserved range per (stream slot, kind).
    pub expandable: bool,
    pub ranges: Vec<[Option<u32>; 2]>,
    /// The large pool's page in expandable mode.
    pub large_page: PageSpec,
    /// Unmapped physical pages kept for reuse, by page size.
    pub handle_cache: HashMap<usize, Vec<PhysicalHandle>>,
    /// Total device memory, sizing expandable ranges.
    pub device_total: usize,
    /// Set once a broken invariant is found: the allocator refuses work.
    pub broken: Option<String>,
    /// Config key `trace`: recorded under this lock, so the trace lists
    /// events in the allocator's order.
    pub trace: Option<crate::trace::TraceRecorder>,
    #[cfg(debug_assertions)]
    pub transitions: u64,
}

impl State {
    /// The slot of `stream`; a stream met for the first time is checked
    /// with the runtime first, so a bad handle fails here, changing nothing,
    /// rather than in a later synchronization.
    #[inline]
    pub fn stream_slot(&mut self, stream: Stream) -> Result<u16> {
        match self.streams.known(stream) {
            Some(slot) => Ok(slot),
            None => self.add_stream(stream),
        }
    }

    #[cold]
    fn add_stream(&mut self, stream: Stream) -> Result<u16> {
        // The default stream (NULL) always exists.
        if stream != Stream::DEFAULT {
            let rt = self.rt.clone();
            if let Err(e) = rt.on_device(self.device, || rt.check_stream(stream)) {
                return Err(if e.is_invalid_handle() || e.code == crate::sys::ACL_ERROR_RT_PARAM_INVALID {
                    Error::InvalidArgument(format!(
                        "stream {:#x} is not a live stream of device {} ({e})",
                        stream.raw() as usize,
                        self.device
                    ))
                } else {
                    Error::runtime(e, "checking a stream used for the first time")
                });
            }
        }
        let Some(slot) = self.streams.add(stream) else {
            return Err(Error::Unsupported(format!(
                "this allocator has already served {} streams on device {}, its most; it keeps each stream's pools \
                 for good, so reuse streams rather than create one per request",
                self.streams.all().len(),
                self.device
            )));
        };
        self.pools.push(Default::default());
        self.ranges.push([None, None]);
        Ok(slot)
    }

    /// Allocates `size` bytes on `stream`; returns the device address.
    pub fn malloc(&mut self, size: usize, stream: Stream) -> Result<usize> {
        if size == 0 {
            return Err(Error::InvalidArgument("size is 0; allocations must be at least 1 byte".into()));
        }
        if size >= MAX_REQUEST {
            return Err(Error::InvalidArgument(format!(
                "size {size} exceeds the largest supported request ({MAX_REQUEST} bytes)"
            )));
        }
        let rounded = self.policy.round(size);
        let slot = self.stream_slot(stream)?;
        if let Some(id) = self.reuse.pop(&self.blocks, slot, rounded) {
            return Ok(self.reuse_block(id, size));
        }
        let kind = self.policy.pool_for(rounded);
        let id = match self.find_free(slot, kind, rounded) {
            Some(id) if !self.needs_mapping(id, rounded) => id,
            best_fit => self.place_or_grow(size, rounded, kind, slot, best_fit)?,
        };
        Ok(self.take_block(id, rounded, size))
    }

    /// No free block fits without mapping pages or a new segment: first the
    /// stream's held blocks, which may coalesce into a fit, then the best
    /// fit (`best_fit` unless held blocks were returned) with what it lacks
    /// mapped, then growth (and the OOM ladder).
    fn place_or_grow(
        &mut self,
        size: usize,
        rounded: usize,
        kind: PoolKind,
        slot: u16,
        best_fit: Option<BlockId>,
    ) -> Result<BlockId> {
        let best_fit = if self.reuse.holds(slot) {
            self.drain_reuse(Some(slot));
            self.find_free(slot, kind, rounded)
        } else {
            best_fit
        };
        match best_fit {
            Some(best_fit) => match self.place(best_fit, rounded) {
                Ok(id) => Ok(id),
                Err(_) => self.alloc_slow(size, rounded, kind, slot),
            },
            None => self.alloc_slow(size, rounded, kind, slot),
        }
    }

    /// Hands out held block `id` again (see Note [exact-size reuse]).
    #[inline]
    fn reuse_block(&mut self, id: BlockId, requested: usize) -> usize {
        let b = self.blocks.get_mut(id);
        b.state = BlockState::Allocated;
        b.requested = requested;
        let (addr, size) = (b.addr, b.size);
        self.stats.block_allocated(size, requested);
        self.after_transition();
        addr
    }

    /// Returns the blocks held for stream slot `slot` (or for every slot)
    /// to their pools, coalescing.
    pub fn drain_reuse(&mut self, slot: Option<u16>) {
        if self.reuse.count == 0 {
            return;
        }
        for id in self.reuse.take(&self.blocks, slot) {
            let addr = self.blocks.get(id).addr;
            self.registry.remove(&addr);
            self.return_block(id);
        }
        self.after_transition();
    }

    /// Whether block `id` has unmapped pages under its first `rounded` bytes.
    #[inline]
    fn needs_mapping(&self, id: BlockId, rounded: usize) -> bool {
        self.expandable && self.unmapped_under(id, rounded) > 0
    }

    /// Maps what a request of `rounded` bytes needs, given its best fit
    /// (expandable segments only; fixed segments are always mapped).
    #[inline]
    pub fn place(&mut self, best_fit: BlockId, rounded: usize) -> Result<BlockId, GrowError> {
        if !self.expandable {
            return Ok(best_fit);
        }
        self.place_in_range(best_fit, rounded)
    }

    #[inline]
    pub fn find_free(&self, slot: u16, kind: PoolKind, rounded: usize) -> Option<BlockId> {
        let policy = &self.policy;
        self.pools[slot as usize][kind as usize].find(&self.blocks, rounded, |b| policy.may_use(b, rounded))
    }

    /// Moves a free block to allocated, splitting off what it does not need.
    pub fn take_block(&mut self, id: BlockId, rounded: usize, requested: usize) -> usize {
        let (kind, slot, size) = {
            let b = self.blocks.get(id);
            (b.kind, b.stream_slot, b.size)
        };
        let index = &mut self.pools[slot as usize][kind as usize];
        index.remove(&mut self.blocks, id);
        // Inside an expandable segment every remainder splits: unmapped tails
        // cost nothing, and the oversize rules exist for fixed segments.
        let split = if self.expandable {
            size - rounded >= super::policy::MIN_BLOCK_SIZE
        } else {
            self.policy.should_split(kind, size, rounded)
        };
        let size = if split {
            let rest = split_off(&mut self.blocks, id, rounded);
            index.insert(&mut self.blocks, rest);
            rounded
        } else {
            size
        };
        let b = self.blocks.get_mut(id);
        b.state = BlockState::Allocated;
        b.requested = requested;
        let addr = b.addr;
        self.registry.insert(addr, id);
        self.stats.block_allocated(size, requested);
        self.after_transition();
        addr
    }

    /// Splits free block `id` at `off` bytes; both parts stay free and
    /// indexed (the caller takes the back part at once). Returns the back.
    pub fn split_front(&mut self, id: BlockId, off: usize) -> BlockId {
        let (kind, slot) = {
            let b = self.blocks.get(id);
            (b.kind, b.stream_slot)
        };
        let index = &mut self.pools[slot as usize][kind as usize];
        index.remove(&mut self.blocks, id);
        let back = split_off(&mut self.blocks, id, off);
        index.insert(&mut self.blocks, id);
        index.insert(&mut self.blocks, back);
        back
    }

    /// Frees the block at `addr` (its exact start address).
    pub fn free(&mut self, addr: usize) -> Result<()> {
        use std::collections::hash_map::Entry;
        // One hash look-up: a held block keeps its entry, any other leaves.
        let Entry::Occupied(entry) = self.registry.entry(addr) else {
            return Err(self.unknown_pointer(addr, "free"));
        };
        let id = *entry.get();
        let b = self.blocks.get(id);
        if b.state != BlockState::Allocated {
            return Err(self.unknown_pointer(addr, "free"));
        }
        let (size, requested, other, slot) = (b.size, b.requested, b.has_other_streams, b.stream_slot);
        if other {
            // Fails before anything changes (see `other_stream_events`).
            let events = self.other_stream_events(id)?;
            self.registry.remove(&addr);
            self.stats.block_freed(size, requested);
            self.defer_free(id, events);
        } else {
            self.stats.block_freed(size, requested);
            if self.reuse.push(&mut self.blocks, slot, id, size) {
                let b = self.blocks.get_mut(id);
                b.state = BlockState::Held;
                b.requested = 0;
                self.after_transition();
                return Ok(());
            }
            entry.remove();
            self.return_block(id);
        }
        if self.order.should_poll() {
            self.reap_pending();
        }
        self.after_transition();
        Ok(())
    }

    /// A message for a pointer this allocator does not hand out.
    pub fn unknown_pointer(&self, addr: usize, what: &str) -> Error {
        let detail = match self.segments.containing(addr) {
            Some(seg) => {
                let inside = self.block_containing(seg, addr).map(|id| self.blocks.get(id));
                match inside {
                    Some(b) if b.addr == addr && b.state == BlockState::Pending => {
                        "it was already freed (its free waits for other streams)".to_string()
                    }
                    Some(b) if b.addr == addr && b.state == BlockState::Held => "it was already freed".to_string(),
                    Some(b) if b.addr == addr => "it was already freed".to_string(),
                    Some(b) if b.state == BlockState::Allocated => {
                        format!("it points {} bytes inside the block at {:#x}; pass the block's start", addr - b.addr, b.addr)
                    }
                    _ => "it lies in this allocator's memory but not at a live block".to_string(),
                }
            }
            None => "this allocator did not allocate it".to_string(),
        };
        Error::UnknownPointer(format!("{what} of {addr:#x} on device {}: {detail}", self.device))
    }

    /// Puts a block back into its pool, merging it with free neighbours.
    pub fn return_block(&mut self, mut id: BlockId) {
        {
            let b = self.blocks.get_mut(id);
            b.state = BlockState::Free;
            b.requested = 0;
            b.has_other_streams = false;
        }
        let (kind, slot) = {
            let b = self.blocks.get(id);
            (b.kind, b.stream_slot)
        };
        let prev = self.blocks.get(id).prev;
        if prev != NIL && self.blocks.get(prev).state == BlockState::Free {
            self.pools[slot as usize][kind as usize].remove(&mut self.blocks, prev);
            self.absorb_next(prev);
            id = prev;
        }
        let next = self.blocks.get(id).next;
        if next != NIL && self.blocks.get(next).state == BlockState::Free {
            self.pools[slot as usize][kind as usize].remove(&mut self.blocks, next);
            self.absorb_next(id);
        }
        self.pools[slot as usize][kind as usize].insert(&mut self.blocks, id);
        if let Some(threshold) = self.release_threshold {
            let seg = self.blocks.get(id).segment;
            let cached = self.stats.get().reserved_bytes - self.stats.get().allocated_bytes;
            let whole = self.segments.get(seg).first == id && self.blocks.get(id).next == NIL;
            if whole && self.segments.get(seg).vmm.is_none() && cached > threshold as u64 {
                let _ = self.release_segments(&[seg]);
            }
        }
    }

    /// Merges `id`'s next neighbour (free, already off its list) into `id`.
    fn absorb_next(&mut self, id: BlockId) {
        let next = self.blocks.get(id).next;
        let (next_size, next_next) = {
            let n = self.blocks.get(next);
            (n.size, n.next)
        };
        let b = self.blocks.get_mut(id);
        b.size += next_size;
        b.next = next_next;
        if next_next != NIL {
            self.blocks.get_mut(next_next).prev = id;
        }
        self.blocks.remove(next);
    }

    /// An event recorded on each other stream that used block `id`, so its
    /// free can wait for their work. A stream no event can be recorded on
    /// is waited for now instead; if that fails too, the events go back to
    /// the pool and the block stays allocated (the caller changes nothing).
    #[cold]
    #[inline(never)]
    fn other_stream_events(&mut self, id: BlockId) -> Result<Vec<crate::runtime::Event>> {
        let owner = self.streams.stream(self.blocks.get(id).stream_slot);
        let others: Vec<Stream> = self.order.uses(id).iter().copied().filter(|&s| s != owner).collect();
        let mut events = Vec::with_capacity(others.len());
        for stream in others {
            if let Ok(ev) = self.record_on(stream) {
                events.push(ev);
                continue;
            }
            match self.rt.on_device(self.device, || self.rt.synchronize_stream(stream)) {
                Ok(()) => self.stats.synced(),
                // A destroyed stream has no work left.
                Err(e) if e.is_invalid_handle() => {}
                Err(e) => {
                    for ev in events {
                        self.order.return_event(ev);
                    }
                    return Err(Error::runtime(
                        e,
                        "waiting for another stream's work on the block (no event could be recorded); it stays allocated",
                    ));
                }
            }
        }
        Ok(events)
    }

    /// Frees a block other streams used, given an event on each: pending
    /// until they complete (at once when there are none).
    #[cold]
    #[inline(never)]
    fn defer_free(&mut self, id: BlockId, events: Vec<crate::runtime::Event>) {
        self.order.take_uses(id);
        if events.is_empty() {
            self.return_block(id);
            return;
        }
        let size = self.blocks.get(id).size;
        self.blocks.get_mut(id).state = BlockState::Pending;
        self.order.push_pending(PendingFree { block: id, events }, size);
    }

    fn record_on(&mut self, stream: Stream) -> Result<crate::runtime::Event, crate::runtime::AclCallError> {
        let rt = self.rt.clone();
        let pooled = self.order.pooled_event();
        let recorded = rt.on_device(self.device, || {
            let ev = match pooled {
                Some(ev) => ev,
                None => rt.create_event()?,
            };
            Ok(rt.record_event(ev, stream).map(|()| ev).map_err(|e| (e, ev)))
        })?;
        recorded.map_err(|(e, ev)| {
            // Never recorded: as good as new. Pooled, it is reused or
            // destroyed at teardown; destroying it here could fail and leak it.
            self.order.return_event(ev);
            e
        })
    }

    /// Returns to their pools the pending frees whose events completed.
    pub fn reap_pending(&mut self) -> usize {
        if !self.order.has_pending() {
            return 0;
        }
        let rt = self.rt.clone();
        let done = self.order.drain_completed(|p| p.events.iter().all(|&ev| rt.event_complete(ev).unwrap_or(false)));
        let n = done.len();
        for p in done {
            let size = self.blocks.get(p.block).size;
            self.order.settle_bytes(size);
            for ev in p.events {
                self.order.return_event(ev);
            }
            self.return_block(p.block);
        }
        n
    }

    /// Marks that `stream` uses the allocated block at `addr`.
    pub fn record_stream(&mut self, addr: usize, stream: Stream) -> Result<()> {
        let id = match self.registry.get(&addr) {
            Some(&id) if self.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "record_stream")),
        };
        let (slot, seg) = {
            let b = self.blocks.get(id);
            (b.stream_slot, b.segment)
        };
        if self.streams.stream(slot) == stream {
            return Ok(());
        }
        // A stream the allocator has not met is checked (and given a slot).
        self.stream_slot(stream)?;
        if self.order.add_use(id, stream) {
            self.blocks.get_mut(id).has_other_streams = true;
            let others = &mut self.segments.get_mut(seg).other_streams;
            if !others.contains(&stream) {
                others.push(stream);
            }
        }
        Ok(())
    }

    /// Obtains a new segment able to hold `rounded` bytes and puts its one
    /// free block in the pool. Fails without side effects.
    pub fn grow(&mut self, rounded: usize, kind: PoolKind, slot: u16) -> Result<BlockId, GrowError> {
        if self.expandable {
            // The range is created once; after that a miss means no free
            // block of this size exists in it at all.
            if self.ranges[slot as usize][kind as usize].is_none() {
                self.range_for(kind, slot)?;
            }
            let id = self.find_free(slot, kind, rounded).ok_or(GrowError::AddressSpace)?;
            return self.place(id, rounded);
        }
        let size = self.policy.segment_size(rounded);
        let reserved = self.stats.get().reserved_bytes as usize;
        if let Some(limit) = self.limit {
            if reserved + size > limit {
                return Err(GrowError::OverLimit { size, limit });
            }
        }
        let rt = self.rt.clone();
        let base = rt.on_device(self.device, || rt.malloc(size)).map_err(GrowError::Runtime)?;
        self.stats.segment_added(size);
        let block = self.blocks.insert(Block::segment_root(base, size, kind, slot));
        let seg = self.segments.insert(Segment {
            base,
            size,
            kind,
            stream_slot: slot,
            first: block,
            other_streams: Vec::new(),
            serial: 0,
            vmm: None,
        });
        self.blocks.get_mut(block).segment = seg;
        self.pools[slot as usize][kind as usize].insert(&mut self.blocks, block);
        Ok(block)
    }

    /// The block of segment `seg` that contains `addr`.
    pub fn block_containing(&self, seg: u32, addr: usize) -> Option<BlockId> {
        let mut id = self.segments.get(seg).first;
        while id != NIL {
            let b = self.blocks.get(id);
            if addr >= b.addr && addr < b.addr + b.size {
                return Some(id);
            }
            id = b.next;
        }
        None
    }

    /// The allocated block containing `addr` (interior pointers allowed).
    pub fn allocated_block_at(&self, addr: usize) -> Option<BlockId> {
        if let Some(&id) = self.registry.get(&addr) {
            return (self.blocks.get(id).state == BlockState::Allocated).then_some(id);
        }
        let seg = self.segments.containing(addr)?;
        let id = self.block_containing(seg, addr)?;
        (self.blocks.get(id).state == BlockState::Allocated).then_some(id)
    }

    /// Size of the largest free block in any pool.
    pub fn largest_free(&self) -> usize {
        if self.expandable {
            return self.largest_mapped_free();
        }
        self.pools.iter().flat_map(|p| p.iter()).map(|ix| ix.largest(&self.blocks)).max().unwrap_or(0)
    }

    #[inline]
    pub fn after_transition(&mut self) {
        #[cfg(debug_assertions)]
        {
            // Full checks are O(blocks): run them on every transition while
            // the state is small, and periodically once it is large.
            self.transitions += 1;
            if self.blocks.live() < 512 || self.transitions % 1024 == 0 {
                if let Err(e) = self.check_invariants() {
                    panic!("allocator invariant broken: {e}");
                }
            }
        }
    }
}

/// Cuts block `id` (off every free list) at `at` bytes: `id` keeps the
/// front, a new free block (on no list) gets the rest. Returns the new block.
fn split_off(blocks: &mut BlockArena, id: BlockId, at: usize) -> BlockId {
    let b = blocks.get(id).clone();
    let rest = blocks.insert(Block {
        addr: b.addr + at,
        size: b.size - at,
        requested: 0,
        prev: id,
        free_prev: NIL,
        free_next: NIL,
        state: BlockState::Free,
        has_other_streams: false,
        ..b
    });
    if b.next != NIL {
        blocks.get_mut(b.next).prev = rest;
    }
    let front = blocks.get_mut(id);
    front.next = rest;
    front.size = at;
    rest
}

/// Why a segment could not be added.
#[derive(Debug)]
pub enum GrowError {
    /// The memory fraction limit would be exceeded.
    OverLimit { size: usize, limit: usize },
    /// An expandable segment's address range has no free block that large.
    AddressSpace,
    Runtime(crate::runtime::AclCallError),
}

impl GrowError {
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            GrowError::OverLimit { .. } | GrowError::AddressSpace => true,
            GrowError::Runtime(e) => e.is_out_of_memory(),
        }
    }
}
