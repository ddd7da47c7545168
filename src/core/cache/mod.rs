//! The caching layer's state for one shard (one stream, one pool kind) and the block surgery on it (take
//! with split, return with coalesce, carve). It knows nothing of where device memory comes from and makes
//! no device call; a segment's device side is the backing's, kept by segment id.

use crate::core::alloc::policy::{Policy, PoolKind};
use crate::core::report::stats::ShardCounters;
use crate::error::Error;
use crate::runtime::Stream;
use block::{Block, BlockArena, BlockId, BlockState, NIL};
use free_index::FreeIndex;
use registry::Registry;
use reuse::ReuseLists;
use segment::{Segment, SegmentId, SegmentTable};
use stream_order::{PollClock, StreamOrder};

pub(crate) mod block;
pub(crate) mod free_index;
mod inspect;
pub(crate) mod registry;
pub(crate) mod reuse;
pub(crate) mod segment;
pub(crate) mod size_class;
pub(crate) mod stream_order;

pub(crate) struct Cache {
    /// This shard's id in the directory.
    pub(super) id: u32,
    pub(super) kind: PoolKind,
    pub(super) stream: Stream,
    pub(super) blocks: BlockArena,
    pub(super) segments: SegmentTable,
    pub(super) index: FreeIndex,
    pub(super) reuse: ReuseLists,
    /// Start address of every allocated or held block.
    pub(super) registry: Registry,
    pub(super) order: StreamOrder,
    /// When a free polls `order`.
    pub(super) poll: PollClock,
    pub(super) counters: ShardCounters,
    /// The pool the shard serves (0: the default pool); changed only while the shard holds nothing.
    pub(super) pool: u64,
}

impl Cache {
    /// An empty cache; a small-pool one holds up to `reuse_bytes` for exact-size reuse.
    pub fn new(id: u32, kind: PoolKind, stream: Stream, pool: u64, reuse_bytes: usize) -> Self {
        Cache {
            id,
            kind,
            stream,
            blocks: Default::default(),
            segments: Default::default(),
            index: Default::default(),
            reuse: ReuseLists::new(if kind == PoolKind::Small { reuse_bytes } else { 0 }),
            registry: Default::default(),
            order: Default::default(),
            poll: PollClock::default(),
            counters: Default::default(),
            pool,
        }
    }

    pub fn counters(&self) -> &ShardCounters {
        &self.counters
    }

    /// Hands out held block `id` again (Note [exact-size reuse]).
    #[inline]
    pub fn reuse_block(&mut self, id: BlockId, requested: usize) -> usize {
        let b = self.blocks.get_mut(id);
        b.state = BlockState::Allocated;
        b.requested = requested;
        let (addr, size) = (b.addr, b.size);
        self.counters.block_allocated(size, requested);
        addr
    }

    /// Returns the held blocks to the free blocks; returns how many (Note [resting reuse lists]).
    pub fn drain_reuse(&mut self) -> usize {
        let mut drained = 0;
        while let Some(id) = self.reuse.pop_any(&self.blocks) {
            self.registry.remove(&self.blocks.get(id).addr);
            self.return_block(id);
            drained += 1;
        }
        drained
    }

    /// The best free block for `rounded` bytes that `policy` lets serve it.
    #[inline]
    pub fn find_free(&self, policy: &Policy, rounded: usize) -> Option<BlockId> {
        self.index.find(&self.blocks, rounded, |b| policy.may_use(b, rounded))
    }

    /// Allocates free block `id` for `requested` bytes (rounded to `rounded`), splitting off the rest when
    /// `splits(kind, block size)` says so.
    #[inline(always)]
    pub fn take(
        &mut self,
        id: BlockId,
        rounded: usize,
        requested: usize,
        splits: impl FnOnce(PoolKind, usize) -> bool,
    ) -> usize {
        let size = self.blocks.get(id).size;
        self.index.remove(&mut self.blocks, id);
        let size = if splits(self.kind, size) {
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
        addr
    }

    /// Splits free block `id` at `off` bytes; both parts stay free and indexed. Returns the back.
    pub fn split_front(&mut self, id: BlockId, off: usize) -> BlockId {
        self.index.remove(&mut self.blocks, id);
        let back = split_off(&mut self.blocks, id, off);
        self.index.insert(&mut self.blocks, id);
        self.index.insert(&mut self.blocks, back);
        back
    }

    /// Cuts [addr, addr + size) out of free block `id` as a `Reclaiming` block off the index; the parts around
    /// it stay free. Returns the new block.
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

    /// Allocates [addr, addr + size) of free block `id` (which holds the whole span) for `requested` bytes;
    /// the parts around it stay free. Returns the new block.
    pub fn claim(&mut self, id: BlockId, addr: usize, size: usize, requested: usize) -> BlockId {
        let mid = self.carve(id, addr, size);
        let b = self.blocks.get_mut(mid);
        b.state = BlockState::Allocated;
        b.requested = requested;
        self.registry.insert(addr, mid);
        self.counters.block_allocated(size, requested);
        mid
    }

    /// Puts a block back among the free ones, merging it with free neighbours.
    #[inline(always)]
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

    /// Adds a segment [base, base + size), the `serial`th on the device, with one free block over it.
    pub fn add_segment(&mut self, base: usize, size: usize, serial: u64) -> (SegmentId, BlockId) {
        let block = self.blocks.insert(Block::segment_root(base, size));
        let seg = self.segments.insert(Segment { base, size, first: block, other_streams: Vec::new(), serial });
        self.blocks.get_mut(block).segment = seg;
        self.index.insert(&mut self.blocks, block);
        (seg, block)
    }

    /// Removes segment `seg`, which is one free block.
    pub fn remove_segment(&mut self, seg: SegmentId) -> Segment {
        let first = self.segments.get(seg).first;
        debug_assert_eq!(self.blocks.get(first).next, NIL, "a segment of more than one block is removed");
        self.index.remove(&mut self.blocks, first);
        let s = self.segments.remove(seg);
        self.blocks.remove(s.first);
        s
    }

    /// A message for a pointer this shard of device `device` does not hand out.
    pub fn unknown_pointer(&self, device: i32, addr: usize, what: &str) -> Error {
        // None: outside every segment; Some(None): in one, but in none of its blocks.
        let inside =
            self.segments.containing(addr).map(|seg| self.block_containing(seg, addr).map(|id| self.blocks.get(id)));
        let detail = match inside {
            Some(Some(b)) if b.addr == addr && b.state == BlockState::Pending => {
                "it was already freed (its free waits for other streams)".to_string()
            }
            Some(Some(b)) if b.addr == addr => "it was already freed".to_string(),
            Some(Some(b)) if b.state == BlockState::Allocated => {
                format!("it points {} bytes inside the block at {:#x}; pass the block's start", addr - b.addr, b.addr)
            }
            Some(_) => "it lies in this allocator's memory but not at a live block".to_string(),
            None => "this allocator did not allocate it".to_string(),
        };
        Error::UnknownPointer(format!("{what} of {addr:#x} on device {device}: {detail}"))
    }
}

/// Cuts block `id` (off every free list) at `at` bytes: `id` keeps the front, a new free block (on no list)
/// gets the rest. Returns the new block.
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
