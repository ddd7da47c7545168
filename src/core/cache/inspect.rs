//! A shard's read-only questions, apart from its transitions.

use super::Cache;
use crate::core::cache::block::{Block, BlockId, BlockState, NIL};
use crate::core::cache::segment::SegmentId;
use crate::runtime::Stream;

impl Cache {
    /// Every stream whose work may use segment `seg`: its owner and those recorded on its blocks.
    pub fn streams_of(&self, seg: SegmentId) -> Vec<Stream> {
        self.owner_and(&self.segments.get(seg).other_streams)
    }

    /// The owner, then each of `others` not listed yet, in their order.
    fn owner_and<'a>(&self, others: impl IntoIterator<Item = &'a Stream>) -> Vec<Stream> {
        let mut out = vec![self.stream];
        for &s in others {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// The blocks of segment `seg`, in address order (they tile it).
    pub fn blocks_of(&self, seg: SegmentId) -> impl Iterator<Item = (BlockId, &Block)> + '_ {
        self.blocks.walk(self.segments.get(seg).first, |b| b.next).map(|id| (id, self.blocks.get(id)))
    }

    /// The free blocks of segment `seg` as (address, size), in address order.
    pub fn free_runs(&self, seg: SegmentId) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.blocks_of(seg).filter(|(_, b)| b.state == BlockState::Free).map(|(_, b)| (b.addr, b.size))
    }

    pub fn is_wholly_free(&self, seg: SegmentId) -> bool {
        let b = self.blocks.get(self.segments.get(seg).first);
        b.state == BlockState::Free && b.next == NIL
    }

    pub fn block_containing(&self, seg: SegmentId, addr: usize) -> Option<BlockId> {
        self.blocks_of(seg).find(|(_, b)| addr >= b.addr && addr < b.addr + b.size).map(|(id, _)| id)
    }

    /// The allocated block containing `addr` (interior pointers allowed).
    pub fn allocated_block_at(&self, addr: usize) -> Option<BlockId> {
        let id = match self.registry.get(&addr) {
            Some(&id) => id,
            None => self.block_containing(self.segments.containing(addr)?, addr)?,
        };
        (self.blocks.get(id).state == BlockState::Allocated).then_some(id)
    }

    pub fn block(&self, id: BlockId) -> &Block {
        self.blocks.get(id)
    }

    /// (base, size) of the segment holding block `id`.
    pub fn segment_range(&self, id: BlockId) -> (usize, usize) {
        let s = self.segments.get(self.blocks.get(id).segment);
        (s.base, s.size)
    }

    /// Bytes waiting for cross-stream events.
    pub fn pending_bytes(&self) -> usize {
        self.order.pending_bytes()
    }

    /// Events pending frees wait for (see `reclaim`).
    pub fn pending_events(&self) -> Vec<crate::runtime::Event> {
        self.order.pending_events()
    }

    pub fn take_all_events(&mut self) -> Vec<crate::runtime::Event> {
        self.order.take_all_events()
    }

    /// Ends every export of this shard's live blocks (`StreamOrder::end_all_exports`).
    pub fn end_all_exports(&mut self, keep_held: bool) {
        let blocks = &self.blocks;
        self.order.end_all_exports(keep_held, |b| blocks.get(b).size);
    }

    /// The address of a block another process holds imported (live or freed), if any.
    pub fn imported_block(&self) -> Option<usize> {
        self.order.imported_blocks().next().map(|b| self.blocks.get(b).addr)
    }

    /// Whether a freed block of segment `seg` waits for other processes to let go of it.
    pub fn held_for_importers(&self, seg: SegmentId) -> bool {
        self.order.held_blocks().any(|b| self.blocks.get(b).segment == seg)
    }

    /// Streams any segment of this shard was used on (teardown).
    pub fn all_streams(&self) -> Vec<Stream> {
        self.owner_and(self.segments.ids().flat_map(|seg| &self.segments.get(seg).other_streams))
    }

    /// No segment, so no block of any state. The shard may change stream only if `Pool::holds_nothing` too: a whole
    /// segment out for a give-back is not in the cache but may come back.
    pub fn holds_nothing(&self) -> bool {
        self.segments.ids().next().is_none() && self.counters.live() == 0 && self.pending_bytes() == 0
    }

    /// Live (allocated) blocks and bytes.
    pub fn live(&self) -> (u64, u64) {
        (self.counters.live(), self.counters.allocated)
    }
}
