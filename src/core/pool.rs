//! The state of one shard (one stream, one pool kind) and its transitions:
//! take a block (with split), return a block (with coalesce), hold a block
//! for exact-size reuse, free a block other streams used. Everything here
//! runs under the shard's lock and touches only this shard; device calls
//! made here (growth through the backing, events for cross-stream frees)
//! block only this shard.

use super::backing::{Backing, Detached, GrowContext, GrowError, Scope};
use super::block::{Block, BlockArena, BlockId, BlockState, NIL};
use super::free_index::FreeIndex;
use super::history::Action;
use super::policy::PoolKind;
use super::registry::Registry;
use super::reuse::ReuseLists;
use super::segment::{Segment, SegmentId, SegmentTable};
use super::shared::Shared;
use super::size_class::class_of;
use super::stats::ShardCounters;
use super::stream_order::{PollClock, StreamOrder};
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::sync::Arc;

mod inspect;

/// Why a malloc left the hit path.
#[derive(Debug)]
pub(crate) enum Miss {
    /// Serving it needs device calls (growth, mapping): see `Pool::grow`.
    NeedsDevice,
}

pub(crate) struct Pool<B: Backing> {
    pub(super) sh: Arc<Shared<B>>,
    /// This shard's id in the directory.
    pub(super) id: u32,
    pub(super) kind: PoolKind,
    pub(super) stream: Stream,
    pub(super) blocks: BlockArena,
    pub(super) segments: SegmentTable<B::Extent>,
    pub(super) index: FreeIndex,
    /// Freed blocks held for exact-size reuse.
    pub(super) reuse: ReuseLists,
    /// Start address of every allocated or held block.
    pub(super) registry: Registry,
    pub(super) order: StreamOrder,
    /// When a free polls `order` (beside `id` and `kind`: no extra space).
    pub(super) poll: PollClock,
    pub(super) counters: ShardCounters,
    pub(super) backing: B::ShardState,
    #[cfg(debug_assertions)]
    transitions: u64,
}

impl<B: Backing> std::fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("id", &self.id).field("kind", &self.kind).finish()
    }
}

impl<B: Backing> Pool<B> {
    pub fn new(sh: Arc<Shared<B>>, id: u32, kind: PoolKind, stream: Stream) -> Self {
        let reuse = ReuseLists::new(if kind == PoolKind::Small { sh.reuse_bytes } else { 0 });
        Pool {
            sh,
            id,
            kind,
            stream,
            blocks: Default::default(),
            segments: Default::default(),
            index: Default::default(),
            reuse,
            registry: Default::default(),
            order: Default::default(),
            poll: PollClock::default(),
            counters: Default::default(),
            backing: Default::default(),
            #[cfg(debug_assertions)]
            transitions: 0,
        }
    }

    pub fn counters(&self) -> &ShardCounters {
        &self.counters
    }

    /// Hands this empty shard to another stream (a retired entry taken over).
    pub fn set_stream(&mut self, stream: Stream) {
        debug_assert!(self.segments.ids().next().is_none(), "a shard with segments changes stream");
        self.stream = stream;
    }

    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// The shard's cumulative (allocs, frees), taken out (`take_counts`);
    /// what the backing keeps in terms of them starts again with them.
    pub fn take_counts(&mut self) -> (u64, u64) {
        B::counts_taken(&mut self.backing);
        self.counters.take_counts()
    }

    /// Serves `size` bytes (rounded to `rounded`) from this shard's cache,
    /// with no device call: a held block of that size, or a free block that
    /// is ready.
    #[inline(always)]
    pub fn malloc_cached(&mut self, size: usize, rounded: usize) -> Result<usize, Miss> {
        // One class computation serves both look-ups.
        let class = class_of(rounded);
        if let Some(id) = self.reuse.pop(&self.blocks, rounded, class) {
            return Ok(self.reuse_block(id, size));
        }
        let policy = &self.sh.policy;
        match self.index.find_in_class(&self.blocks, rounded, class, |b| policy.may_use(b, rounded)) {
            Some(id) if B::ready(self, id, rounded) => Ok(self.take_block(id, rounded, size)),
            _ => Err(Miss::NeedsDevice),
        }
    }

    /// The miss path: held blocks go back first (they may coalesce into a
    /// fit), completed cross-stream frees are reaped, then the backing
    /// places the request or grows (asking for garbage collection first
    /// when `ctx.may_collect` and the growth would pass its threshold).
    pub fn grow(&mut self, size: usize, rounded: usize, ctx: &GrowContext<'_, B>) -> Result<usize, GrowError> {
        let drained = self.drain_reuse();
        if self.order.has_pending() {
            self.reap_pending();
        }
        let best_fit = self.find_free(rounded);
        if let Some(id) = best_fit {
            if B::ready(self, id, rounded) {
                // Held blocks alone kept the request from a fit.
                if drained != 0 {
                    self.reuse.weigh(drained, &self.sh.counters);
                }
                return Ok(self.take_block(id, rounded, size));
            }
        }
        let id = B::obtain(self, rounded, best_fit, ctx)?;
        Ok(self.take_block(id, rounded, size))
    }

    /// Hands out held block `id` again (see Note [exact-size reuse]).
    #[inline]
    fn reuse_block(&mut self, id: BlockId, requested: usize) -> usize {
        let b = self.blocks.get_mut(id);
        b.state = BlockState::Allocated;
        b.requested = requested;
        let (addr, size) = (b.addr, b.size);
        self.counters.block_allocated(size, requested);
        self.after_transition();
        addr
    }

    /// Returns the held blocks to the pool, coalescing; returns how many
    /// (only `grow` weighs them: Note [resting reuse lists]).
    pub fn drain_reuse(&mut self) -> usize {
        if !self.reuse.holds() {
            return 0;
        }
        let mut drained = 0;
        while let Some(id) = self.reuse.pop_any(&self.blocks) {
            let addr = self.blocks.get(id).addr;
            self.registry.remove(&addr);
            self.return_block(id);
            drained += 1;
        }
        self.after_transition();
        drained
    }

    #[inline]
    pub fn find_free(&self, rounded: usize) -> Option<BlockId> {
        let policy = &self.sh.policy;
        self.index.find(&self.blocks, rounded, |b| policy.may_use(b, rounded))
    }

    /// Moves a free block to allocated, splitting off what it does not need.
    pub fn take_block(&mut self, id: BlockId, rounded: usize, requested: usize) -> usize {
        let size = self.blocks.get(id).size;
        self.index.remove(&mut self.blocks, id);
        let size = if B::splits(self, size, rounded) {
            let rest = split_off(&mut self.blocks, id, rounded);
            self.index.insert(&mut self.blocks, rest);
            rounded
        } else {
            size
        };
        let b = self.blocks.get_mut(id);
        b.state = BlockState::Allocated;
        b.requested = requested;
        let addr = b.addr;
        self.registry.insert(addr, id);
        self.counters.block_allocated(size, requested);
        self.after_transition();
        addr
    }

    /// Splits free block `id` at `off` bytes; both parts stay free and
    /// indexed (the caller takes the back part at once). Returns the back.
    pub fn split_front(&mut self, id: BlockId, off: usize) -> BlockId {
        self.index.remove(&mut self.blocks, id);
        let back = split_off(&mut self.blocks, id, off);
        self.index.insert(&mut self.blocks, id);
        self.index.insert(&mut self.blocks, back);
        back
    }

    /// Cuts free block `id` (on the index) so that [addr, addr + size)
    /// becomes a block of its own in state `Reclaiming`, off the index; the
    /// parts around it stay free. Returns the new block.
    pub fn carve(&mut self, id: BlockId, addr: usize, size: usize) -> BlockId {
        self.index.remove(&mut self.blocks, id);
        let b = self.blocks.get(id);
        let (start, end) = (b.addr, b.addr + b.size);
        let mid = if addr > start {
            let back = split_off(&mut self.blocks, id, addr - start);
            self.index.insert(&mut self.blocks, id);
            back
        } else {
            id
        };
        if addr + size < end {
            let rest = split_off(&mut self.blocks, mid, size);
            self.index.insert(&mut self.blocks, rest);
        }
        self.blocks.get_mut(mid).state = BlockState::Reclaiming;
        mid
    }

    /// Frees the block at `addr` (its exact start address).
    #[inline]
    pub fn free(&mut self, addr: usize) -> Result<()> {
        // One look-up: a held block keeps its entry, any other leaves.
        let Some(found) = self.registry.find(addr) else {
            return Err(self.unknown_pointer(addr, "free"));
        };
        let id = found.id;
        let b = self.blocks.get(id);
        if b.state != BlockState::Allocated {
            return Err(self.unknown_pointer(addr, "free"));
        }
        let (size, requested, other) = (b.size, b.requested, b.has_other_streams);
        if other {
            return self.free_used_elsewhere(id, addr);
        }
        self.counters.block_freed(size, requested);
        self.sh.history.freed(addr, requested, self.stream, true);
        if self.reuse.push(&mut self.blocks, id, size) {
            let b = self.blocks.get_mut(id);
            b.state = BlockState::Held;
            b.requested = 0;
            self.after_transition();
            return Ok(());
        }
        self.registry.remove_found(found);
        self.return_block(id);
        // One predictable branch: nothing waits in most programs.
        if self.order.should_poll() {
            self.poll_on_free();
        }
        self.after_transition();
        Ok(())
    }

    /// The free of a block other streams used: it waits for their work
    /// (see Note [stream-ordered reuse]). Fails before anything changes.
    #[cold]
    #[inline(never)]
    fn free_used_elsewhere(&mut self, id: BlockId, addr: usize) -> Result<()> {
        if self.used_by_graph(id) {
            self.quarantine(id, addr);
            return Ok(());
        }
        let sh = self.sh.clone();
        let events = self.order.free_events(&sh.calls(), id)?;
        self.registry.remove(&addr);
        let (size, requested) = {
            let b = self.blocks.get(id);
            (b.size, b.requested)
        };
        self.counters.block_freed(size, requested);
        let deferred = self.order.defer(id, events, size);
        self.sh.history.freed(addr, requested, self.stream, !deferred);
        if deferred {
            self.blocks.get_mut(id).state = BlockState::Pending;
        } else {
            self.return_block(id);
        }
        // Other streams' work may be done already; if not, the next free
        // asks again (Note [stream-ordered reuse]).
        self.reap_pending();
        self.poll.poll_at_next_free();
        self.after_transition();
        Ok(())
    }

    /// The whole free fixed segments a destroyed pool's free gives back
    /// now, detached (the caller gives them back with no lock held).
    pub fn detach_whole_segments(&mut self) -> Vec<Detached> {
        B::detach(self, Scope::WholeSegments)
    }

    /// A message for a pointer this shard does not hand out.
    pub fn unknown_pointer(&self, addr: usize, what: &str) -> Error {
        let detail = match self.segments.containing(addr) {
            Some(seg) => {
                let inside = self.block_containing(seg, addr).map(|id| self.blocks.get(id));
                match inside {
                    Some(b) if b.addr == addr && b.state == BlockState::Pending => {
                        "it was already freed (its free waits for other streams)".to_string()
                    }
                    Some(b) if b.addr == addr => "it was already freed".to_string(),
                    Some(b) if b.state == BlockState::Allocated => {
                        format!(
                            "it points {} bytes inside the block at {:#x}; pass the block's start",
                            addr - b.addr,
                            b.addr
                        )
                    }
                    _ => "it lies in this allocator's memory but not at a live block".to_string(),
                }
            }
            None => "this allocator did not allocate it".to_string(),
        };
        Error::UnknownPointer(format!("{what} of {addr:#x} on device {}: {detail}", self.sh.device))
    }

    /// Puts a block back into the pool, merging it with free neighbours.
    pub fn return_block(&mut self, mut id: BlockId) {
        let (prev, next) = {
            let b = self.blocks.get_mut(id);
            b.state = BlockState::Free;
            b.requested = 0;
            b.has_other_streams = false;
            (b.prev, b.next)
        };
        if prev != NIL && self.blocks.get(prev).state == BlockState::Free {
            self.index.remove(&mut self.blocks, prev);
            self.absorb_next(prev, id); // `prev` takes over `id`'s next
            id = prev;
        }
        if next != NIL && self.blocks.get(next).state == BlockState::Free {
            self.index.remove(&mut self.blocks, next);
            self.absorb_next(id, next);
        }
        self.index.insert(&mut self.blocks, id);
    }

    /// Merges `next`, `id`'s free next neighbour (off its list), into `id`.
    #[inline]
    fn absorb_next(&mut self, id: BlockId, next: BlockId) {
        debug_assert_eq!(self.blocks.get(id).next, next);
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

    /// A free found frees waiting for other streams: polls them when due
    /// (Note [stream-ordered reuse]).
    #[cold]
    #[inline(never)]
    fn poll_on_free(&mut self) {
        if self.poll.due() || self.order.over_threshold() {
            let reaped = self.reap_pending();
            self.poll.polled(reaped);
        }
    }

    /// Returns to the pool the pending frees whose events completed.
    pub fn reap_pending(&mut self) -> usize {
        if !self.order.has_pending() {
            return 0;
        }
        let done = self.order.poll(&self.sh.rt);
        let n = done.len();
        for id in done {
            let b = self.blocks.get(id);
            self.sh.history.record(Action::FreeCompleted, b.addr, b.requested, self.stream);
            self.return_block(id);
        }
        n
    }

    /// Marks that `stream` (met before: the caller checked it) uses the
    /// allocated block at `addr`.
    pub fn record_stream(&mut self, addr: usize, stream: Stream) -> Result<()> {
        let id = match self.registry.get(&addr) {
            Some(&id) if self.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "record_stream")),
        };
        if self.stream == stream {
            return Ok(());
        }
        if self.order.note_use(id, stream) {
            let seg = self.blocks.get(id).segment;
            self.blocks.get_mut(id).has_other_streams = true;
            let others = &mut self.segments.get_mut(seg).other_streams;
            if !others.contains(&stream) {
                others.push(stream);
            }
        }
        Ok(())
    }

    /// Undoes `record_stream(addr, stream)` for the allocated block at
    /// `addr`: its free waits only for its other streams. A stream never
    /// recorded on it (the owner included) changes nothing. The segment's
    /// list of streams is kept: releasing it still synchronizes them, which
    /// is only conservative.
    pub fn erase_stream(&mut self, addr: usize, stream: Stream) -> Result<()> {
        let id = match self.registry.get(&addr) {
            Some(&id) if self.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "erase_stream")),
        };
        if self.order.forget_use(id, stream) {
            self.blocks.get_mut(id).has_other_streams = false;
        }
        Ok(())
    }

    /// Adds a segment [base, base + size) with one free block over it; the
    /// directory gets `claim` (the whole range the runtime gave, which holds
    /// the segment: at least 2 MiB, see `directory`), if any. Returns the
    /// segment and its block.
    pub fn add_segment(
        &mut self,
        base: usize,
        size: usize,
        extent: B::Extent,
        claim: Option<(usize, usize)>,
    ) -> (SegmentId, BlockId) {
        let block = self.blocks.insert(Block::segment_root(base, size));
        let seg = self.segments.insert(Segment {
            base,
            size,
            first: block,
            other_streams: Vec::new(),
            serial: self.sh.next_serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            extent,
        });
        self.blocks.get_mut(block).segment = seg;
        self.index.insert(&mut self.blocks, block);
        if let Some((at, len)) = claim {
            debug_assert!(at <= base && base + size <= at + len);
            self.sh.directory.insert(at, len, self.id);
        }
        (seg, block)
    }

    /// Removes segment `seg`, whose one block `block` is off the index.
    pub fn remove_segment(&mut self, seg: SegmentId) -> Segment<B::Extent> {
        let s = self.segments.remove(seg);
        self.blocks.remove(s.first);
        s
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
#[inline(always)]
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
