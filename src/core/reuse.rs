//! Note [exact-size reuse]
//!
//! Framework allocation streams repeat: a step frees a tensor and the next
//! step asks for one of the same size on the same stream. The reuse lists
//! keep the last few blocks freed at each size aside, still registered and
//! unsplit, and hand them out again to a request of exactly that rounded
//! size. A hit touches one list head and the block: no free-index search, no
//! split, no coalescing, no registry update.
//!
//! - Lists are per shard (so per stream) and size class, LIFO, intrusive
//!   through the block's free-list links; only the head is looked at, and it must match
//!   the rounded size exactly.
//! - A held block is not in any free index and does not coalesce, so every
//!   path that needs free memory to be whole (growth, page moves, the OOM
//!   ladder, empty_cache, release, teardown) first returns the held blocks
//!   to their pool (`Pool::drain_reuse`): a request that would grow its
//!   shard drains that shard's lists; the OOM ladder and empty_cache drain
//!   every shard's.
//! - Blocks other streams used (record_stream) never enter: their frees wait
//!   for events.
//! - Bounded: small-pool blocks only, a few per size, and a cap on held
//!   bytes per stream (`reuse_cache_mb`), so the lists stay a small, hot
//!   working set.

use super::block::{BlockArena, BlockId, NIL};
use super::size_class::{class_of, CLASS_COUNT};

/// Blocks one size class holds at most.
const PER_CLASS: u8 = 16;

/// The largest block held: small-pool blocks only. Large blocks went
/// through the free index in measurements at no cost in speed, and holding
/// them changed layouts enough to raise peak reserved memory.
const MAX_BLOCK: usize = super::policy::SMALL_SIZE;

const WORDS: usize = CLASS_COUNT.div_ceil(64);

/// The reuse lists of one shard.
#[derive(Debug)]
pub(crate) struct ReuseLists {
    heads: Box<[BlockId; CLASS_COUNT]>,
    counts: Box<[u8; CLASS_COUNT]>,
    /// Bit c set when class c's list is non-empty (for draining).
    used: [u64; WORDS],
    /// Held blocks and their bytes.
    pub count: usize,
    pub bytes: usize,
    /// Held bytes at most; 0 turns reuse off.
    limit: usize,
}

impl ReuseLists {
    pub fn new(limit: usize) -> Self {
        ReuseLists {
            heads: Box::new([NIL; CLASS_COUNT]),
            counts: Box::new([0; CLASS_COUNT]),
            used: [0; WORDS],
            count: 0,
            bytes: 0,
            limit,
        }
    }

    /// A held block of exactly `size` bytes (of class `class`, which the
    /// caller computed once for this list and the free index), taken off
    /// its list.
    #[inline]
    pub fn pop(&mut self, arena: &BlockArena, size: usize, class: usize) -> Option<BlockId> {
        debug_assert_eq!(class, class_of(size));
        if self.count == 0 {
            return None;
        }
        let id = self.heads[class];
        if id == NIL {
            return None;
        }
        let b = arena.get(id);
        if b.size != size {
            return None;
        }
        self.heads[class] = b.free_next;
        self.counts[class] -= 1;
        self.count -= 1;
        self.bytes -= size;
        Some(id)
    }

    /// Holds block `id` (of `size` bytes) if there is room.
    #[inline]
    pub fn push(&mut self, arena: &mut BlockArena, id: BlockId, size: usize) -> bool {
        if self.bytes + size > self.limit || size > MAX_BLOCK {
            return false;
        }
        let class = class_of(size);
        if self.counts[class] >= PER_CLASS {
            return false;
        }
        let b = arena.get_mut(id);
        b.free_prev = NIL;
        b.free_next = self.heads[class];
        self.heads[class] = id;
        self.counts[class] += 1;
        self.used[class / 64] |= 1 << (class % 64);
        self.count += 1;
        self.bytes += size;
        true
    }

    /// Whether any block is held.
    #[inline]
    pub fn holds(&self) -> bool {
        self.count != 0
    }

    /// Takes some held block off its list; None once none is held. Draining
    /// pops until None, with no buffer to allocate (the lists' links are the
    /// blocks' own, and the caller returns each block before the next pop).
    /// A class's bit stays set after `pop` empties its list (the hit path
    /// does not clear it); such a bit is cleared here.
    pub fn pop_any(&mut self, arena: &BlockArena) -> Option<BlockId> {
        if self.count == 0 {
            return None;
        }
        loop {
            let w = self.used.iter().position(|&w| w != 0)?;
            let class = w * 64 + self.used[w].trailing_zeros() as usize;
            let id = self.heads[class];
            if id == NIL {
                self.used[w] &= !(1 << (class % 64));
                continue;
            }
            let b = arena.get(id);
            self.heads[class] = b.free_next;
            self.counts[class] -= 1;
            if self.heads[class] == NIL {
                self.used[w] &= !(1 << (class % 64));
            }
            self.count -= 1;
            self.bytes -= b.size;
            return Some(id);
        }
    }

    /// Every held block, for the invariant checker.
    pub fn iter<'a>(&'a self, arena: &'a BlockArena) -> impl Iterator<Item = BlockId> + 'a {
        self.heads.iter().flat_map(move |&head| {
            std::iter::successors((head != NIL).then_some(head), move |&id| {
                let next = arena.get(id).free_next;
                (next != NIL).then_some(next)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::block::Block;

    /// Draining pops every held block once, also after `pop` emptied a
    /// class's list and left its bit set, and counts come back to zero.
    #[test]
    fn pop_any_drains_every_held_block_once_after_pops_emptied_a_list() {
        let mut arena = BlockArena::default();
        let mut lists = ReuseLists::new(64 << 20);
        // Two classes of two blocks, one class of one block, and a class
        // past the first bitmap word.
        let sizes = [512, 512, 8192, 8192, 65536, 1 << 20];
        let ids: Vec<BlockId> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let id = arena.insert(Block::segment_root(i << 24, s));
                assert!(lists.push(&mut arena, id, s));
                id
            })
            .collect();
        // The hit path empties the 64 KiB list (its bit stays set) and takes
        // one 512 B block.
        assert_eq!(lists.pop(&arena, 65536, class_of(65536)), Some(ids[4]));
        assert_eq!(lists.pop(&arena, 512, class_of(512)), Some(ids[1]));
        assert_eq!(lists.pop(&arena, 65536, class_of(65536)), None);
        let mut drained = Vec::new();
        while let Some(id) = lists.pop_any(&arena) {
            drained.push(id);
        }
        drained.sort_unstable();
        assert_eq!(drained, vec![ids[0], ids[2], ids[3], ids[5]]);
        assert_eq!((lists.count, lists.bytes, lists.holds()), (0, 0, false));
        assert_eq!(lists.iter(&arena).count(), 0);
        // The lists work again after draining.
        assert!(lists.push(&mut arena, ids[2], 8192));
        assert_eq!(lists.pop_any(&arena), Some(ids[2]));
        assert_eq!(lists.pop_any(&arena), None);
    }
}
