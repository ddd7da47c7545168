//! Blocks and the arena that holds them.
//!
//! A block is a piece of one segment: allocated to a caller, free (in a free
//! index), pending (freed by the caller, waiting for events on other
//! streams), held for reuse, or being given back to the device. Blocks are addressed by index, never by pointer, and slots are
//! reused through a free-slot list, so the hot path never allocates.
//!
//! Invariants (checked by `invariants`): the blocks of a segment tile it in
//! address order through `prev`/`next`; no two adjacent blocks are both free.

/// Index of a segment in its shard's table. Defined with the blocks, which
/// name their segment by it, so that `block` needs nothing of `segment`
/// (which builds on blocks and re-exports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SegmentId(pub u32);

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
    /// Its free takes the slow path: other streams used this block
    /// (record_stream), or it is exported to other processes (`sharing`);
    /// see `stream_order`.
    pub has_other_streams: bool,
    /// The size class of the free list the block is on, set when a free
    /// index takes it (so taking it off needs no `class_of`); meaningless
    /// off the free index (the reuse lists compute their class). Fits the
    /// struct's padding.
    pub class: u16,
    /// When the free index filed the block on a list or as its top (its
    /// count of insertions then), so that `find` orders a tie with the top
    /// as the lists order theirs, newest first (Note [the top block]). 64 bits,
    /// so that the count never wraps (a 32-bit one misordered a block
    /// left filed while 2^31 others were); it takes what was padding.
    pub filed: u64,
}

// The filing count took the struct's padding: a block is still 56 bytes.
const _: () = assert!(std::mem::size_of::<Block>() == 56);

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
///
/// The freed slots are a stack: `free_slots` with `spare` on top. A warm
/// pair through the top block frees one slot (the free's merge) and takes
/// one (the next malloc's split), so the one in `spare` serves it with no
/// vector push or pop; the order slots come back in is the stack's either
/// way.
#[derive(Debug)]
pub(crate) struct BlockArena {
    blocks: Vec<Block>,
    free_slots: Vec<BlockId>,
    /// The slot freed last, or NIL (then `free_slots`' last is).
    spare: BlockId,
}

impl Default for BlockArena {
    fn default() -> Self {
        BlockArena { blocks: Vec::new(), free_slots: Vec::new(), spare: NIL }
    }
}

impl BlockArena {
    #[inline]
    pub fn insert(&mut self, block: Block) -> BlockId {
        let id = if self.spare != NIL {
            std::mem::replace(&mut self.spare, NIL)
        } else if let Some(id) = self.free_slots.pop() {
            id
        } else {
            self.blocks.push(block);
            return (self.blocks.len() - 1) as BlockId;
        };
        self.blocks[id as usize] = block;
        id
    }

    /// Returns the slot to the arena. The caller has unlinked the block.
    #[inline]
    pub fn remove(&mut self, id: BlockId) {
        debug_assert!(id != self.spare && !self.free_slots.contains(&id));
        self.blocks[id as usize].segment = SegmentId(u32::MAX);
        if self.spare != NIL {
            self.free_slots.push(self.spare);
        }
        self.spare = id;
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
    #[cfg(any(debug_assertions, test))]
    pub fn live(&self) -> usize {
        self.blocks.len() - self.free_slots.len() - usize::from(self.spare != NIL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots come back last freed first, whether the spare or the stack
    /// holds them, a live slot is never handed out, and `live` counts
    /// what is in use.
    #[test]
    fn freed_slots_come_back_last_first_and_never_a_live_one() {
        let mut arena = BlockArena::default();
        let ids: Vec<BlockId> = (0..6).map(|i| arena.insert(Block::segment_root(i << 20, 512))).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 5]);
        // One freed, one taken: the spare alone, again and again.
        for _ in 0..3 {
            arena.remove(ids[2]);
            assert_eq!(arena.live(), 5);
            assert_eq!(arena.insert(Block::segment_root(7 << 20, 1024)), ids[2]);
            assert_eq!(arena.get(ids[2]).addr, 7 << 20);
        }
        // Several freed: they return in the reverse order, then new slots.
        for &id in &[ids[4], ids[1], ids[3]] {
            arena.remove(id);
        }
        assert_eq!(arena.live(), 3);
        let mut live: Vec<BlockId> = vec![ids[0], ids[2], ids[5]];
        for expect in [ids[3], ids[1], ids[4], 6, 7] {
            let id = arena.insert(Block::segment_root(9 << 20, 512));
            assert_eq!(id, expect);
            assert!(!live.contains(&id), "slot {id} handed out while live");
            live.push(id);
        }
        assert_eq!(arena.live(), live.len());
        // A free between takes: the newest freed comes first.
        arena.remove(ids[0]);
        arena.remove(6);
        assert_eq!(arena.insert(Block::segment_root(0, 512)), 6);
        arena.remove(7);
        assert_eq!(arena.insert(Block::segment_root(0, 512)), 7);
        assert_eq!(arena.insert(Block::segment_root(0, 512)), ids[0]);
        assert_eq!(arena.insert(Block::segment_root(0, 512)), 8);
    }
}
