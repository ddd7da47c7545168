//! Exact-size reuse lists: the last blocks freed at each size, held unsplit for a request of exactly that
//! size. A held block is in no free index: paths that need free memory whole drain them first
//! (docs/design.md, Note [exact-size reuse]). Held only while drains do not outweigh hits (docs/design.md,
//! Note [resting reuse lists]).

use super::block::{BlockArena, BlockId, NIL};
use super::size_class::{class_of, CLASS_COUNT};
use crate::core::report::stats::{DeviceCounters, Stats};

/// Blocks one size class holds at most.
const PER_CLASS: u8 = 16;

/// The largest block held: small-pool blocks only. A large block costs little more through the free index,
/// and holding one keeps its memory from coalescing, which raises peak reserved memory.
const MAX_BLOCK: usize = crate::core::alloc::policy::SMALL_SIZE;

const WORDS: usize = CLASS_COUNT.div_ceil(64);

/// Frees refused by the first rest.
const REST_FIRST: u32 = 256;
/// A drain rests the lists when it returns more than this many blocks per hit since the last drain.
const WASTED: usize = 4;
/// A drain of fewer blocks costs too little to rest for.
const MIN_WASTED: usize = 8;
const REST_MAX: u32 = 1 << 16;

#[derive(Debug)]
pub(crate) struct ReuseLists {
    heads: Box<[BlockId; CLASS_COUNT]>,
    counts: Box<[u8; CLASS_COUNT]>,
    /// Bit c set when class c's list is non-empty (for draining).
    used: [u64; WORDS],
    pub count: usize,
    pub bytes: usize,
    /// Held bytes at most now: `budget`, or 0 while resting.
    limit: usize,
    /// Held bytes at most (`reuse_cache_mb`); 0 turns reuse off.
    budget: usize,
    /// Blocks handed out again since the last drain.
    hits: u32,
    /// Frees still to refuse before holding again (0: not resting).
    resting: u32,
    /// Length of the next rest.
    rest_len: u32,
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
            budget: limit,
            hits: 0,
            resting: 0,
            rest_len: REST_FIRST,
        }
    }

    /// A held block of exactly `size` bytes (of class `class`), taken off its list.
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
        self.hits = self.hits.wrapping_add(1);
        Some(id)
    }

    /// Holds block `id` (of `size` bytes) if there is room.
    #[inline]
    pub fn push(&mut self, arena: &mut BlockArena, id: BlockId, size: usize) -> bool {
        if self.bytes + size > self.limit || size > MAX_BLOCK {
            if self.resting != 0 {
                self.rest_step();
            }
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

    /// One refused free of a rest; the last one ends it.
    #[inline]
    fn rest_step(&mut self) {
        self.resting -= 1;
        if self.resting == 0 {
            self.limit = self.budget;
        }
    }

    /// A drain returned `drained` held blocks: rests the lists when they are at least `MIN_WASTED` and more
    /// than `WASTED` per hit since the last drain.
    pub fn drained(&mut self, drained: usize) {
        let hits = std::mem::take(&mut self.hits) as usize;
        if drained >= MIN_WASTED && drained > WASTED * hits {
            self.limit = 0;
            self.resting = self.rest_len;
            self.rest_len = (self.rest_len * 2).min(REST_MAX);
        } else {
            self.rest_len = REST_FIRST;
        }
    }

    /// A drain of `drained` held blocks served the request that made it: weighed, unless the out-of-memory
    /// ladder ever ran (then layouts count more than speed, and the lists hold again).
    #[cold]
    #[inline(never)]
    pub fn weigh(&mut self, drained: usize, device: &DeviceCounters) {
        let mut s = Stats::default();
        device.add_to(&mut s);
        if s.num_alloc_retries != 0 || s.num_ooms != 0 {
            self.hold_again();
        } else {
            self.drained(drained);
        }
    }

    /// Ends a rest, and forgets the wasted periods before it.
    pub fn hold_again(&mut self) {
        self.hits = 0;
        self.resting = 0;
        self.limit = self.budget;
        self.rest_len = REST_FIRST;
    }

    #[cfg(test)]
    pub fn is_resting(&self) -> bool {
        self.resting != 0
    }

    #[inline]
    pub fn holds(&self) -> bool {
        self.count != 0
    }

    /// Takes some held block off its list (None once none is held; draining needs no buffer), and clears the
    /// bits `pop` leaves set on the lists it emptied.
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
        self.heads.iter().flat_map(move |&head| arena.walk(head, |b| b.free_next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cache::block::Block;

    fn drain(lists: &mut ReuseLists, arena: &BlockArena) -> usize {
        let mut n = 0;
        while lists.pop_any(arena).is_some() {
            n += 1;
        }
        lists.drained(n);
        n
    }

    /// Frees refused in a row before `push` holds again.
    fn refusals(lists: &mut ReuseLists, arena: &mut BlockArena, id: BlockId) -> u32 {
        let mut n = 0;
        while !lists.push(arena, id, 512) {
            n += 1;
            assert!(n <= REST_MAX, "the rest does not end");
        }
        n
    }

    fn hold(lists: &mut ReuseLists, arena: &mut BlockArena, ids: &[BlockId]) {
        for &id in ids {
            assert!(lists.push(arena, id, 512));
        }
    }

    fn hit(lists: &mut ReuseLists, arena: &BlockArena) {
        assert!(lists.pop(arena, 512, class_of(512)).is_some());
    }

    /// A drain of 8 or more blocks nobody asked for again rests the lists
    /// for 256 frees, then 512 after another wasted period; a drain of
    /// fewer, or of at most four per hit, holds on and sets the rest back;
    /// nothing held is lost on the way (Note [resting reuse lists]).
    #[test]
    fn wasted_periods_rest_the_lists_and_productive_ones_do_not() {
        let mut arena = BlockArena::default();
        let mut lists = ReuseLists::new(64 << 20);
        let ids: Vec<BlockId> = (0..12).map(|i| arena.insert(Block::segment_root(i << 24, 512))).collect();
        hold(&mut lists, &mut arena, &ids[..10]);
        assert_eq!(drain(&mut lists, &arena), 10);
        assert!(lists.is_resting());
        assert_eq!(refusals(&mut lists, &mut arena, ids[0]), REST_FIRST);
        assert!(!lists.is_resting());
        // Another wasted period rests twice as long.
        hold(&mut lists, &mut arena, &ids[1..10]);
        assert_eq!(drain(&mut lists, &arena), 10);
        assert_eq!(refusals(&mut lists, &mut arena, ids[0]), 2 * REST_FIRST);
        // Seven drained, no hit: too few to rest for; the rest is set back.
        hold(&mut lists, &mut arena, &ids[1..7]);
        assert_eq!(drain(&mut lists, &arena), 7);
        assert!(!lists.is_resting());
        // Eight drained for two hits: productive.
        hold(&mut lists, &mut arena, &ids[..10]);
        hit(&mut lists, &arena);
        hit(&mut lists, &arena);
        assert_eq!(drain(&mut lists, &arena), 8);
        assert!(!lists.is_resting(), "8 drained for 2 hits");
        // Nine drained for two hits: wasted, and the rest is the first
        // length again.
        hold(&mut lists, &mut arena, &ids[..11]);
        hit(&mut lists, &arena);
        hit(&mut lists, &arena);
        assert_eq!(drain(&mut lists, &arena), 9);
        assert!(lists.is_resting(), "9 drained for 2 hits");
        assert_eq!(refusals(&mut lists, &mut arena, ids[3]), REST_FIRST);
        assert_eq!((lists.count, lists.bytes), (1, 512));
        // `hold_again` ends a rest at once.
        hold(&mut lists, &mut arena, &ids[4..12]);
        assert_eq!(drain(&mut lists, &arena), 9);
        assert!(lists.is_resting());
        lists.hold_again();
        assert!(!lists.is_resting());
        assert!(lists.push(&mut arena, ids[0], 512));
    }

    /// A rest never grows past its cap.
    #[test]
    fn rests_are_capped() {
        let mut arena = BlockArena::default();
        let mut lists = ReuseLists::new(64 << 20);
        let ids: Vec<BlockId> = (0..8).map(|i| arena.insert(Block::segment_root(i << 24, 512))).collect();
        let mut last = 0;
        for _ in 0..12 {
            hold(&mut lists, &mut arena, &ids);
            assert_eq!(drain(&mut lists, &arena), 8);
            last = refusals(&mut lists, &mut arena, ids[0]);
            hit(&mut lists, &arena);
            // The hit above counts for the next period: undo it.
            lists.hits = 0;
        }
        assert_eq!(last, REST_MAX);
    }

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
