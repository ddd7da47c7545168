//! Blocks and the arena that holds them.
//!
//! A block is a piece of one segment: allocated to a caller, free (in a free
//! index), pending (freed by the caller, waiting for events on other
//! streams), held for reuse, or being given back to the device. Blocks are addressed by index, never by pointer, and slots are
//! reused through a free-slot list, so the hot path never allocates.
//!
//! Invariants (checked by `invariants`): the blocks of a segment tile it in
//! address order through `prev`/`next`; no two adjacent blocks are both free.

use super::segment::SegmentId;

/// Index of a block in the arena.
pub(crate) type BlockId = u32;
/// "No block" in link fields.
pub(crate) const NIL: BlockId = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockState {
    Free,
    Allocated,
    /// Freed by the caller, not reusable until events on other streams complete.
    Pending,
    /// Freed by the caller and held whole for a request of the same size
    /// (see Note [exact-size reuse] in `reuse`).
    Held,
    /// Taken out of the pool while its memory is given back to the device
    /// with no lock held (see `reclaim`); nobody else may use or merge it.
    Reclaiming,
}

#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub addr: usize,
    pub size: usize,
    /// Bytes the caller asked for (0 unless allocated or pending).
    pub requested: usize,
    pub segment: SegmentId,
    /// Address-order neighbours inside the segment.
    pub prev: BlockId,
    pub next: BlockId,
    /// Links of the free list this block is on (when free).
    pub free_prev: BlockId,
    pub free_next: BlockId,
    pub state: BlockState,
    /// Other streams used this block (record_stream); see `stream_order`.
    pub has_other_streams: bool,
    /// The size class of the free list the block is on, set when a free
    /// index takes it (so taking it off needs no `class_of`); meaningless
    /// off the free index (the reuse lists compute their class). Fits the
    /// struct's padding.
    pub class: u16,
    /// When the free index filed the block on a list (its count of
    /// insertions then), so that `find` orders a tie with the top as the
    /// lists order theirs, newest first (Note [the top block]).
    pub filed: u32,
}

impl Block {
    /// The one free block covering a new segment (its `segment` is set once
    /// the segment has an id).
    pub fn segment_root(addr: usize, size: usize) -> Block {
        Block {
            addr,
            size,
            requested: 0,
            segment: SegmentId(u32::MAX),
            prev: NIL,
            next: NIL,
            free_prev: NIL,
            free_next: NIL,
            state: BlockState::Free,
            has_other_streams: false,
            class: 0,
            filed: 0,
        }
    }
}

/// Slab of blocks with reusable slots.
#[derive(Debug, Default)]
pub(crate) struct BlockArena {
    blocks: Vec<Block>,
    free_slots: Vec<BlockId>,
}

impl BlockArena {
    pub fn insert(&mut self, block: Block) -> BlockId {
        if let Some(id) = self.free_slots.pop() {
            self.blocks[id as usize] = block;
            id
        } else {
            self.blocks.push(block);
            (self.blocks.len() - 1) as BlockId
        }
    }

    /// Returns the slot to the arena. The caller has unlinked the block.
    pub fn remove(&mut self, id: BlockId) {
        debug_assert!(!self.free_slots.contains(&id));
        self.blocks[id as usize].segment = SegmentId(u32::MAX);
        self.free_slots.push(id);
    }

    #[inline]
    pub fn get(&self, id: BlockId) -> &Block {
        &self.blocks[id as usize]
    }

    #[inline]
    pub fn get_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.blocks[id as usize]
    }

    /// Number of live blocks (the debug invariant checks' pace).
    #[cfg(debug_assertions)]
    pub fn live(&self) -> usize {
        self.blocks.len() - self.free_slots.len()
    }
}
