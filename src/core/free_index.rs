//! The free-block index of one pool: segregated free lists with bitmaps.
//!
//! Finding a block is O(1) in the number of classes (two bitmap look-ups)
//! plus a bounded best-fit scan: inside the request's own class the smallest
//! block that fits wins (an exact fit stops the scan), and if none fits, the
//! smallest of the first few blocks of the next non-empty class. Pure
//! "good fit" (take any block of a larger class) was measured to multiply
//! reserved memory with exact-size segments; the bounded scan keeps
//! best-fit's fragmentation at segregated-fit speed (docs/anchors.md §e,
//! idea 1).
//!
//! A block on a list carries its class (`Block::class`, set by `insert`), so
//! taking it off (`remove`, twice in a warm pair through the index) reads
//! it instead of computing `class_of` again; debug builds check that the
//! two agree.

use super::block::{BlockArena, BlockId, NIL};
use super::size_class::{class_of, CLASS_COUNT};

/// How many blocks one class scan looks at, at most.
const MAX_SCAN: usize = 16;
const WORDS: usize = CLASS_COUNT.div_ceil(64);
// `Block::class` holds a class.
const _: () = assert!(CLASS_COUNT <= u16::MAX as usize);

#[derive(Debug)]
pub struct FreeIndex {
    heads: Box<[BlockId; CLASS_COUNT]>,
    bitmap: [u64; WORDS],
    /// Bit w set when `bitmap[w]` is non-zero.
    summary: u16,
    pub count: usize,
    pub bytes: usize,
}

impl Default for FreeIndex {
    fn default() -> Self {
        FreeIndex { heads: Box::new([NIL; CLASS_COUNT]), bitmap: [0; WORDS], summary: 0, count: 0, bytes: 0 }
    }
}

impl FreeIndex {
    #[inline]
    pub fn insert(&mut self, arena: &mut BlockArena, id: BlockId) {
        let size = arena.get(id).size;
        let class = class_of(size);
        let head = self.heads[class];
        {
            let b = arena.get_mut(id);
            b.free_prev = NIL;
            b.free_next = head;
            b.class = class as u16;
        }
        if head != NIL {
            arena.get_mut(head).free_prev = id;
        }
        self.heads[class] = id;
        self.bitmap[class / 64] |= 1 << (class % 64);
        self.summary |= 1 << (class / 64);
        self.count += 1;
        self.bytes += size;
    }

    #[inline]
    pub fn remove(&mut self, arena: &mut BlockArena, id: BlockId) {
        let (size, prev, next, class) = {
            let b = arena.get(id);
            (b.size, b.free_prev, b.free_next, b.class as usize)
        };
        debug_assert_eq!(class, class_of(size), "a block's size changed while it was on a free list");
        if prev != NIL {
            arena.get_mut(prev).free_next = next;
        } else {
            debug_assert_eq!(self.heads[class], id);
            self.heads[class] = next;
            if next == NIL {
                self.bitmap[class / 64] &= !(1 << (class % 64));
                if self.bitmap[class / 64] == 0 {
                    self.summary &= !(1 << (class / 64));
                }
            }
        }
        if next != NIL {
            arena.get_mut(next).free_prev = prev;
        }
        let b = arena.get_mut(id);
        b.free_prev = NIL;
        b.free_next = NIL;
        self.count -= 1;
        self.bytes -= size;
    }

    /// The first non-empty class at or above `class`.
    #[inline]
    fn next_class(&self, class: usize) -> Option<usize> {
        let word = class / 64;
        if word >= WORDS {
            return None;
        }
        let bits = self.bitmap[word] & (!0u64 << (class % 64));
        if bits != 0 {
            return Some(word * 64 + bits.trailing_zeros() as usize);
        }
        let higher = self.summary & (!0u16).checked_shl(word as u32 + 1).unwrap_or(0);
        if higher == 0 {
            return None;
        }
        let w = higher.trailing_zeros() as usize;
        Some(w * 64 + self.bitmap[w].trailing_zeros() as usize)
    }

    /// Finds a free block of at least `size` bytes that `accept` allows,
    /// preferring the smallest (see the module docs). Does not remove it.
    #[inline]
    pub fn find(&self, arena: &BlockArena, size: usize, accept: impl Fn(usize) -> bool) -> Option<BlockId> {
        self.find_in_class(arena, size, class_of(size), accept)
    }

    /// `find` for a caller that has `class_of(size)` already.
    #[inline]
    pub fn find_in_class(
        &self,
        arena: &BlockArena,
        size: usize,
        mut class: usize,
        accept: impl Fn(usize) -> bool,
    ) -> Option<BlockId> {
        debug_assert_eq!(class, class_of(size));
        loop {
            class = self.next_class(class)?;
            let mut best = NIL;
            let mut best_size = usize::MAX;
            let mut id = self.heads[class];
            let mut scanned = 0;
            while id != NIL && scanned < MAX_SCAN {
                let b = arena.get(id);
                if b.size >= size && b.size < best_size && accept(b.size) {
                    best = id;
                    best_size = b.size;
                    if b.size == size {
                        break;
                    }
                }
                id = b.free_next;
                scanned += 1;
            }
            if best != NIL {
                return Some(best);
            }
            class += 1;
            if class >= CLASS_COUNT {
                return None;
            }
        }
    }

    /// Size of the largest free block (a scan of the top class only).
    pub fn largest(&self, arena: &BlockArena) -> usize {
        let Some(w) = (0..WORDS).rev().find(|&w| self.bitmap[w] != 0) else {
            return 0;
        };
        let class = w * 64 + 63 - self.bitmap[w].leading_zeros() as usize;
        let mut id = self.heads[class];
        let mut largest = 0;
        while id != NIL {
            let b = arena.get(id);
            largest = largest.max(b.size);
            id = b.free_next;
        }
        largest
    }

    /// Every block on the lists, for the invariant checker and snapshots.
    pub fn iter<'a>(&'a self, arena: &'a BlockArena) -> impl Iterator<Item = BlockId> + 'a {
        self.heads.iter().flat_map(move |&head| {
            std::iter::successors((head != NIL).then_some(head), move |&id| {
                let next = arena.get(id).free_next;
                (next != NIL).then_some(next)
            })
        })
    }

    /// Every block of at least `size` bytes' class or above (some blocks of
    /// the first class may be smaller than `size`).
    pub fn iter_from<'a>(&'a self, arena: &'a BlockArena, size: usize) -> impl Iterator<Item = BlockId> + 'a {
        self.heads[class_of(size)..].iter().flat_map(move |&head| {
            std::iter::successors((head != NIL).then_some(head), move |&id| {
                let next = arena.get(id).free_next;
                (next != NIL).then_some(next)
            })
        })
    }

    /// Whether `id` sits on the list of its class.
    pub fn contains(&self, arena: &BlockArena, id: BlockId) -> bool {
        let class = class_of(arena.get(id).size);
        let mut cur = self.heads[class];
        while cur != NIL {
            if cur == id {
                return true;
            }
            cur = arena.get(cur).free_next;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::block::Block;

    fn block(size: usize, addr: usize) -> Block {
        Block::segment_root(addr, size)
    }

    fn index_of(sizes: &[usize]) -> (BlockArena, FreeIndex, Vec<BlockId>) {
        let mut arena = BlockArena::default();
        let mut index = FreeIndex::default();
        let ids = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let id = arena.insert(block(s, i << 32));
                index.insert(&mut arena, id);
                id
            })
            .collect();
        (arena, index, ids)
    }

    #[test]
    fn finds_the_smallest_fit_in_class() {
        // All in one class (17..18 units scale): 9 KiB .. 9.5 KiB.
        let (arena, index, ids) = index_of(&[9728, 9216, 9728]);
        assert_eq!(index.find(&arena, 9216, |_| true), Some(ids[1]));
        assert_eq!(index.find(&arena, 9217, |_| true).map(|id| arena.get(id).size), Some(9728));
    }

    #[test]
    fn moves_to_larger_classes() {
        let (arena, index, ids) = index_of(&[512, 4 << 20, 3 << 20]);
        assert_eq!(index.find(&arena, 1 << 20, |_| true), Some(ids[2]));
        assert_eq!(index.find(&arena, 5 << 20, |_| true), None);
        assert_eq!(index.find(&arena, 512, |_| true), Some(ids[0]));
        assert_eq!(index.find(&arena, 1024, |s| s > 3 << 20), Some(ids[1]));
    }

    #[test]
    fn remove_clears_bitmaps_and_counts() {
        let (mut arena, mut index, ids) = index_of(&[1 << 30, 2048]);
        assert_eq!(index.largest(&arena), 1 << 30);
        index.remove(&mut arena, ids[0]);
        assert_eq!(index.find(&arena, 4096, |_| true), None);
        assert_eq!(index.largest(&arena), 2048);
        assert_eq!(index.count, 1);
        assert_eq!(index.bytes, 2048);
        assert!(index.contains(&arena, ids[1]));
        assert!(!index.contains(&arena, ids[0]));
        assert_eq!(index.iter(&arena).count(), 1);
    }
}
