//! The free-block index of one pool: segregated free lists with bitmaps. A find is two bitmap look-ups plus
//! a bounded best-fit scan: the smallest fitting block of the request's class, else the smallest of the
//! first few of the next non-empty class. Pure "good fit" splits large blocks for small requests and
//! multiplies reserved memory; the bounded scan keeps best-fit's fragmentation at segregated-fit speed
//! (docs/anchors.md §e, idea 1).
//! One free block sits on no list, the top (`FreeIndex::top`); counts and walks include it where the lists
//! would file it (docs/design.md, Note [the top block]).

use super::block::{BlockArena, BlockId, NIL};
use super::size_class::{class_of, CLASS_COUNT};

/// How many blocks one class scan looks at, at most.
const MAX_SCAN: usize = 16;
const WORDS: usize = CLASS_COUNT.div_ceil(64);
// `Block::class` holds a class.
const _: () = assert!(CLASS_COUNT <= u16::MAX as usize);

#[derive(Debug)]
pub struct FreeIndex {
    /// The free block on no list (Note [the top block]), or NIL.
    top: BlockId,
    /// Insertions so far; 64 bits never wrap, so the later of two filings is the larger count.
    filed: u64,
    heads: Box<[BlockId; CLASS_COUNT]>,
    bitmap: [u64; WORDS],
    /// Bit w set when `bitmap[w]` is non-zero.
    summary: u16,
    pub count: usize,
    pub bytes: usize,
}

impl Default for FreeIndex {
    fn default() -> Self {
        FreeIndex {
            top: NIL,
            filed: 0,
            heads: Box::new([NIL; CLASS_COUNT]),
            bitmap: [0; WORDS],
            summary: 0,
            count: 0,
            bytes: 0,
        }
    }
}

impl FreeIndex {
    #[inline]
    pub fn insert(&mut self, arena: &mut BlockArena, id: BlockId) {
        let size = arena.get(id).size;
        self.count += 1;
        self.bytes += size;
        self.filed += 1;
        if self.top == NIL {
            let b = arena.get_mut(id);
            b.free_prev = NIL;
            b.free_next = NIL;
            b.filed = self.filed;
            self.top = id;
            return;
        }
        let class = class_of(size);
        let head = self.heads[class];
        {
            let b = arena.get_mut(id);
            b.free_prev = NIL;
            b.free_next = head;
            b.class = class as u16;
            b.filed = self.filed;
        }
        if head != NIL {
            arena.get_mut(head).free_prev = id;
        }
        self.heads[class] = id;
        self.bitmap[class / 64] |= 1 << (class % 64);
        self.summary |= 1 << (class / 64);
    }

    #[inline(always)]
    pub fn remove(&mut self, arena: &mut BlockArena, id: BlockId) {
        if id == self.top {
            self.top = NIL;
            self.count -= 1;
            self.bytes -= arena.get(id).size;
        } else {
            self.remove_listed(arena, id);
        }
    }

    #[inline(never)]
    fn remove_listed(&mut self, arena: &mut BlockArena, id: BlockId) {
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

    /// Finds (without removing) a free block of at least `size` bytes that `accept` allows, preferring the smallest.
    #[inline]
    pub fn find(&self, arena: &BlockArena, size: usize, accept: impl Fn(usize) -> bool) -> Option<BlockId> {
        self.find_in_class(arena, size, class_of(size), accept)
    }

    /// `find` for a caller that has `class_of(size)` already. Inline is the warm case: the top fits and no
    /// listed block can beat it (the first listed class lies above the top's, so every candidate is larger).
    #[inline(always)]
    pub fn find_in_class(
        &self,
        arena: &BlockArena,
        size: usize,
        class: usize,
        accept: impl Fn(usize) -> bool,
    ) -> Option<BlockId> {
        debug_assert_eq!(class, class_of(size));
        let first = self.next_class(class);
        if self.top != NIL {
            let t = arena.get(self.top).size;
            if t >= size && accept(t) {
                match first {
                    Some(c) if c <= class_of(t) => {}
                    _ => return Some(self.top),
                }
            }
        }
        self.find_weighed(arena, size, first?, &accept)
    }

    /// The lists' best fit from class `first` on, weighed against the top.
    #[inline(never)]
    fn find_weighed(
        &self,
        arena: &BlockArena,
        size: usize,
        first: usize,
        accept: &impl Fn(usize) -> bool,
    ) -> Option<BlockId> {
        let listed = self.find_listed(arena, size, first, accept);
        if self.top != NIL {
            let t = arena.get(self.top).size;
            if t >= size && accept(t) {
                return match listed.map(|id| arena.get(id)) {
                    Some(b) if b.size < t || (b.size == t && self.filed_after_top(arena, b.filed)) => listed,
                    _ => Some(self.top),
                };
            }
        }
        listed
    }

    #[inline]
    fn filed_after_top(&self, arena: &BlockArena, filed: u64) -> bool {
        filed > arena.get(self.top).filed
    }

    #[cfg(test)]
    fn counting_from(filed: u64) -> Self {
        FreeIndex { filed, ..Default::default() }
    }

    #[cfg(test)]
    fn skip_filings(&mut self, n: u64) {
        self.filed += n;
    }

    /// The lists' best fit (the top aside), from `class`, the first non-empty one at or above the request's.
    #[inline]
    fn find_listed(
        &self,
        arena: &BlockArena,
        size: usize,
        mut class: usize,
        accept: &impl Fn(usize) -> bool,
    ) -> Option<BlockId> {
        loop {
            debug_assert_ne!(self.heads[class], NIL);
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
            if class + 1 >= CLASS_COUNT {
                return None;
            }
            class = self.next_class(class + 1)?;
        }
    }

    /// Size of the largest free block (a scan of the top class only).
    pub fn largest(&self, arena: &BlockArena) -> usize {
        let top = if self.top == NIL { 0 } else { arena.get(self.top).size };
        let Some(w) = (0..WORDS).rev().find(|&w| self.bitmap[w] != 0) else {
            return top;
        };
        let class = w * 64 + 63 - self.bitmap[w].leading_zeros() as usize;
        let listed = arena.walk(self.heads[class], |b| b.free_next).map(|id| arena.get(id).size);
        listed.fold(top, usize::max)
    }

    /// Every free block (the top included).
    pub fn iter<'a>(&'a self, arena: &'a BlockArena) -> impl Iterator<Item = BlockId> + 'a {
        self.iter_from(arena, 0) // class_of(0) is 0, the first class
    }

    /// Every block of `size`'s class or above (some of the first class may be smaller), smallest first: in class
    /// order, each list newest first, the top in its place by `filed`.
    pub fn iter_from<'a>(&'a self, arena: &'a BlockArena, size: usize) -> impl Iterator<Item = BlockId> + 'a {
        let top_class = if self.top == NIL { usize::MAX } else { class_of(arena.get(self.top).size) };
        (class_of(size)..CLASS_COUNT).flat_map(move |class| {
            let mut top = (class == top_class).then_some(self.top);
            let mut list = arena.walk(self.heads[class], |b| b.free_next).peekable();
            // The top goes just before the first list block not filed after it.
            std::iter::from_fn(move || {
                if top.is_some() && list.peek().is_none_or(|&id| !self.filed_after_top(arena, arena.get(id).filed)) {
                    return top.take();
                }
                list.next()
            })
        })
    }

    pub fn contains(&self, arena: &BlockArena, id: BlockId) -> bool {
        (self.top != NIL && id == self.top)
            || arena.walk(self.heads[class_of(arena.get(id).size)], |b| b.free_next).any(|cur| cur == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cache::block::Block;

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

    /// The first block inserted is the top (on no list); `find` weighs it
    /// against the lists by size, and every walk sees it exactly once, in
    /// its class's place.
    #[test]
    fn the_top_is_found_by_size_and_walked_once() {
        // Top 64 KiB; lists: 8 KiB, 1 MiB, and another 64 KiB.
        let (mut arena, mut index, ids) = index_of(&[64 << 10, 8 << 10, 1 << 20, 64 << 10]);
        assert_eq!(index.top, ids[0]);
        assert_eq!(arena.get(ids[0]).free_next, NIL);
        assert_eq!(index.heads[class_of(64 << 10)], ids[3]);
        // A smaller fitting list block wins, and a list block of the top's
        // size; the top wins over a larger one.
        assert_eq!(index.find(&arena, 4096, |_| true), Some(ids[1]));
        assert_eq!(index.find(&arena, 60 << 10, |_| true), Some(ids[3]));
        assert_eq!(index.find(&arena, 100 << 10, |_| true), Some(ids[2]));
        let (small, small_index, small_ids) = index_of(&[64 << 10, 1 << 20]);
        assert_eq!(small_index.find(&small, 60 << 10, |_| true), Some(small_ids[0]));
        // Of two of one size, the one filed later wins, the top or not.
        let (mut tie, mut tie_index, tie_ids) = index_of(&[64 << 10, 64 << 10]);
        assert_eq!(tie_index.find(&tie, 60 << 10, |_| true), Some(tie_ids[1]));
        tie_index.remove(&mut tie, tie_ids[0]);
        tie_index.insert(&mut tie, tie_ids[0]);
        assert_eq!(tie_index.top, tie_ids[0]);
        assert_eq!(tie_index.find(&tie, 60 << 10, |_| true), Some(tie_ids[0]));
        assert_eq!(tie_index.iter(&tie).collect::<Vec<_>>(), vec![tie_ids[0], tie_ids[1]]);
        // `accept` applies to the top too.
        assert_eq!(index.find(&arena, 60 << 10, |s| s != 64 << 10), Some(ids[2]));
        let walked: Vec<BlockId> = index.iter(&arena).collect();
        // The 64 KiB list block was filed after the top: it walks first.
        assert_eq!(walked, vec![ids[1], ids[3], ids[0], ids[2]]);
        let from: Vec<BlockId> = index.iter_from(&arena, 32 << 10).collect();
        assert_eq!(from, vec![ids[3], ids[0], ids[2]]);
        assert_eq!(index.iter_from(&arena, 2 << 20).count(), 0);
        assert!(index.contains(&arena, ids[0]));
        assert_eq!(index.largest(&arena), 1 << 20);
        assert_eq!((index.count, index.bytes), (4, (136 << 10) + (1 << 20)));
        // Taking the top leaves none; the next insert becomes the top.
        index.remove(&mut arena, ids[0]);
        assert_eq!(index.top, NIL);
        assert!(!index.contains(&arena, ids[0]));
        assert_eq!(index.find(&arena, 60 << 10, |_| true), Some(ids[3]));
        assert_eq!((index.count, index.bytes), (3, (72 << 10) + (1 << 20)));
        arena.get_mut(ids[0]).size = 2 << 20;
        index.insert(&mut arena, ids[0]);
        assert_eq!(index.top, ids[0]);
        assert_eq!(index.largest(&arena), 2 << 20);
        assert_eq!(index.find(&arena, 1 << 20, |_| true), Some(ids[2]));
        assert_eq!(index.find(&arena, (1 << 20) + 512, |_| true), Some(ids[0]));
        // A top larger than every list block is still the largest alone.
        index.remove(&mut arena, ids[2]);
        assert_eq!(index.largest(&arena), 2 << 20);
        assert_eq!(index.iter(&arena).count(), index.count);
    }

    /// The inline answer (the top, when no listed class at or above the
    /// request's lies at or below the top's) is what the full weighing of
    /// the lists against the top gives, on random indexes and requests,
    /// with and without an `accept` that refuses some sizes.
    #[test]
    fn the_top_shortcut_agrees_with_the_full_weighing() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut shortcuts = 0;
        for round in 0..300 {
            let count = 1 + next(12);
            let sizes: Vec<usize> = (0..count)
                .map(|_| {
                    let span = 1 << (4 + next(12));
                    (1 + next(span)) as usize * 512
                })
                .collect();
            let (arena, index, _) = index_of(&sizes);
            for _ in 0..40 {
                let span = 1 << (4 + next(12));
                let size = (1 + next(span)) as usize * 512;
                let class = class_of(size);
                let limit = if round % 2 == 0 { usize::MAX } else { (1 + next(1 << 14)) as usize * 512 };
                let accept = |b: usize| b < limit;
                let fast = index.find_in_class(&arena, size, class, accept);
                let full = match index.next_class(class) {
                    Some(first) => index.find_weighed(&arena, size, first, &accept),
                    None => {
                        let t = arena.get(index.top).size;
                        (t >= size && accept(t)).then_some(index.top)
                    }
                };
                assert_eq!(fast, full, "sizes {sizes:?}, request {size}, limit {limit}");
                if let (Some(id), Some(first)) = (fast, index.next_class(class)) {
                    shortcuts += usize::from(id == index.top && first > class_of(arena.get(id).size));
                }
            }
        }
        // The shortcut with listed blocks present was taken, not only the
        // empty-lists case.
        assert!(shortcuts > 0);
    }

    /// Ties between the top and a list block go to the one filed later
    /// however many insertions lie between them: from a count just below
    /// 2^32 (where a 32-bit count wrapped), a list block filed, then 2^31
    /// insertions, then a top of its size: the top is newer, so it wins the
    /// tie and walks first; filed the other way round, the list block wins.
    #[test]
    fn ties_follow_filing_order_across_billions_of_insertions() {
        for start in [u32::MAX as u64 - 1, 0, 1 << 40] {
            let mut arena = BlockArena::default();
            let mut index = FreeIndex::counting_from(start);
            let [a, b, c] = [0, 1, 2].map(|i| arena.insert(block(64 << 10, i << 32)));
            // `a` is the top, `b` listed; `a` leaves so `c` can be the top.
            index.insert(&mut arena, a);
            index.insert(&mut arena, b);
            index.remove(&mut arena, a);
            index.skip_filings(1 << 31);
            index.insert(&mut arena, c);
            assert_eq!(index.top, c);
            assert_eq!(index.find(&arena, 60 << 10, |_| true), Some(c), "from {start}: the newer top wins");
            assert_eq!(index.iter(&arena).collect::<Vec<_>>(), vec![c, b], "from {start}");
            // Now a list block newer than the top by 2^31 + 1 insertions.
            index.skip_filings((1 << 31) + 1);
            index.insert(&mut arena, a);
            assert_eq!(index.find(&arena, 60 << 10, |_| true), Some(a), "from {start}: the newer list block wins");
            assert_eq!(index.iter(&arena).collect::<Vec<_>>(), vec![a, c, b], "from {start}");
        }
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
