//! Blocks (pieces of one segment) and the arena that holds them. Blocks are addressed by index, never by
//! pointer, and slots are reused, so the hot path never allocates.
//! Invariants (checked by `invariants`): the blocks of a segment tile it in address order through
//! `prev`/`next`; no two adjacent blocks are both free.

/// Index of a segment in its shard's table; defined here so that `block` needs nothing of `segment`.
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
    /// Freed by the caller and held whole for a request of the same size (Note [exact-size reuse]).
    Held,
    /// Being given back with no lock held (`reclaim`); nobody else may use or merge it.
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
    /// Its free takes the slow path (`stream_order`): other streams used it, or it is exported (`sharing`).
    pub has_other_streams: bool,
    /// The class of the free list it is on (so removal needs no `class_of`); meaningless off the free index.
    pub class: u16,
    /// The free index's insertion count when it filed the block, so that `find` orders a tie with the top
    /// newest first, as the lists do (Note [the top block]). 64 bits, so the count never wraps.
    pub filed: u64,
}

// `class` and `filed` fit the struct's padding.
const _: () = assert!(std::mem::size_of::<Block>() == 56);

impl Block {
    /// The one free block covering a new segment (its `segment` is set once the segment has an id).
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

/// Slab of blocks with reusable slots. The freed slots are a stack, `free_slots` with `spare` on top: a
/// warm free/malloc pair frees one slot and takes one, which `spare` serves with no vector push or pop.
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

    /// The blocks from `first` (NIL: none) along the link `next` reads, up to NIL.
    pub fn walk(&self, first: BlockId, next: fn(&Block) -> BlockId) -> impl Iterator<Item = BlockId> + '_ {
        std::iter::successors((first != NIL).then_some(first), move |&id| {
            Some(next(self.get(id))).filter(|&n| n != NIL)
        })
    }

    /// Number of live blocks (paces the debug invariant checks).
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
