//! Note [exact-size reuse]
//!
//! Framework allocation streams repeat: a step frees a tensor and the next
//! step asks for one of the same size on the same stream. The reuse lists
//! keep the last few blocks freed at each size aside, still registered and
//! unsplit, and hand them out again to a request of exactly that rounded
//! size. A hit touches one list head and the block: no free-index search, no
//! split, no coalescing, no registry update.
//!
//! - Lists are per stream slot and size class, LIFO, intrusive through the
//!   block's free-list links; only the head is looked at, and it must match
//!   the rounded size exactly.
//! - A held block is not in any free index and does not coalesce, so every
//!   path that needs free memory to be whole (growth, page moves, the OOM
//!   ladder, empty_cache, release, teardown) first returns the held blocks
//!   to their pools (`State::drain_reuse`): a request that would grow its
//!   stream's pool drains that stream's lists; the OOM ladder and
//!   empty_cache drain them all.
//! - Blocks other streams used (record_stream) never enter: their frees wait
//!   for events.
//! - Bounded: small-pool blocks only, a few per size, and a cap on held
//!   bytes (`reuse_cache_mb`), so the lists stay a small, hot working set.

use super::block::{BlockArena, BlockId, NIL};
use super::size_class::{class_of, CLASS_COUNT};

/// Blocks one size class holds at most.
const PER_CLASS: u8 = 16;

/// The largest block held: small-pool blocks only. Large blocks went
/// through the free index in measurements at no cost in speed, and holding
/// them changed layouts enough to raise peak reserved memory.
const MAX_BLOCK: usize = super::policy::SMALL_SIZE;

const WORDS: usize = CLASS_COUNT.div_ceil(64);

/// Reuse lists of one stream slot.
#[derive(Debug)]
struct Lists {
    heads: Box<[BlockId; CLASS_COUNT]>,
    counts: Box<[u8; CLASS_COUNT]>,
    /// Bit c set when class c's list is non-empty (for draining).
    used: [u64; WORDS],
}

impl Default for Lists {
    fn default() -> Self {
        Lists { heads: Box::new([NIL; CLASS_COUNT]), counts: Box::new([0; CLASS_COUNT]), used: [0; WORDS] }
    }
}

/// The reuse lists of one allocator.
#[derive(Debug, Default)]
pub struct ReuseLists {
    slots: Vec<Lists>,
    /// Held blocks and their bytes.
    pub count: usize,
    pub bytes: usize,
    /// Held bytes at most; 0 turns reuse off.
    pub limit: usize,
}

impl ReuseLists {
    pub fn new(limit: usize) -> Self {
        ReuseLists { limit, ..Default::default() }
    }

    /// A held block of exactly `size` bytes on `slot`, taken off its list.
    #[inline]
    pub fn pop(&mut self, arena: &BlockArena, slot: u16, size: usize) -> Option<BlockId> {
        let lists = self.slots.get_mut(slot as usize)?;
        let class = class_of(size);
        let id = lists.heads[class];
        if id == NIL {
            return None;
        }
        let b = arena.get(id);
        if b.size != size {
            return None;
        }
        lists.heads[class] = b.free_next;
        lists.counts[class] -= 1;
        self.count -= 1;
        self.bytes -= size;
        Some(id)
    }

    /// Holds block `id` (of `size` bytes on `slot`) if there is room.
    #[inline]
    pub fn push(&mut self, arena: &mut BlockArena, slot: u16, id: BlockId, size: usize) -> bool {
        if self.bytes + size > self.limit || size > MAX_BLOCK {
            return false;
        }
        if self.slots.len() <= slot as usize {
            self.slots.resize_with(slot as usize + 1, Lists::default);
        }
        let lists = &mut self.slots[slot as usize];
        let class = class_of(size);
        if lists.counts[class] >= PER_CLASS {
            return false;
        }
        let b = arena.get_mut(id);
        b.free_prev = NIL;
        b.free_next = lists.heads[class];
        lists.heads[class] = id;
        lists.counts[class] += 1;
        lists.used[class / 64] |= 1 << (class % 64);
        self.count += 1;
        self.bytes += size;
        true
    }

    /// Whether stream slot `slot` holds any block.
    #[inline]
    pub fn holds(&self, slot: u16) -> bool {
        self.slots.get(slot as usize).is_some_and(|l| l.used.iter().any(|&w| w != 0))
    }

    /// Empties the lists of `slot`, or of every slot; returns the blocks
    /// that were held.
    pub fn take(&mut self, arena: &BlockArena, slot: Option<u16>) -> Vec<BlockId> {
        let mut out = Vec::new();
        for (i, lists) in self.slots.iter_mut().enumerate() {
            if slot.is_some_and(|s| s as usize != i) {
                continue;
            }
            for w in 0..WORDS {
                let mut bits = std::mem::take(&mut lists.used[w]);
                while bits != 0 {
                    let class = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let mut id = std::mem::replace(&mut lists.heads[class], NIL);
                    while id != NIL {
                        out.push(id);
                        self.bytes -= arena.get(id).size;
                        id = arena.get(id).free_next;
                    }
                    lists.counts[class] = 0;
                }
            }
        }
        self.count -= out.len();
        out
    }

    /// Every held block, for the invariant checker.
    pub fn iter<'a>(&'a self, arena: &'a BlockArena) -> impl Iterator<Item = BlockId> + 'a {
        self.slots.iter().flat_map(move |lists| {
            lists.heads.iter().flat_map(move |&head| {
                std::iter::successors((head != NIL).then_some(head), move |&id| {
                    let next = arena.get(id).free_next;
                    (next != NIL).then_some(next)
                })
            })
        })
    }
}
