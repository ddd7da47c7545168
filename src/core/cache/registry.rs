//! Pointer registry: start of an allocated or held block → its id. An open-addressing table whose keys are
//! 512-byte aligned and never `usize::MAX`, the empty slot (docs/design.md, Note [a registry for
//! aligned addresses]).

use super::block::BlockId;

const EMPTY: usize = usize::MAX;
const FIB: usize = 0x9E37_79B9_7F4A_7C15;
const MIN_SLOTS: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Slot {
    addr: usize,
    id: BlockId,
}

const VACANT: Slot = Slot { addr: EMPTY, id: 0 };

/// Where a look-up found its key (for a removal without a second probe).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found {
    slot: usize,
    pub id: BlockId,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    slots: Box<[Slot]>,
    /// 64 - log2(slots.len()): the product's bits that pick a slot.
    shift: u32,
    len: usize,
}

impl Registry {
    #[inline(always)]
    fn home(&self, addr: usize) -> usize {
        addr.wrapping_mul(FIB) >> self.shift
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The key's slot and id, if registered.
    #[inline]
    pub fn find(&self, addr: usize) -> Option<Found> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        loop {
            let s = self.slots[i];
            if s.addr == addr {
                return Some(Found { slot: i, id: s.id });
            }
            if s.addr == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The id registered at `addr` (the map's signature, for callers that only look).
    #[inline]
    pub fn get(&self, addr: &usize) -> Option<&BlockId> {
        let f = self.find(*addr)?;
        Some(&self.slots[f.slot].id)
    }

    /// Registers `addr` (not registered: the caller's block is new there).
    #[inline]
    pub fn insert(&mut self, addr: usize, id: BlockId) {
        debug_assert!(addr != EMPTY);
        debug_assert!(self.find(addr).is_none(), "{addr:#x} registered twice");
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(addr);
        while self.slots[i].addr != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = Slot { addr, id };
        self.len += 1;
    }

    #[inline]
    pub fn remove(&mut self, addr: &usize) -> Option<BlockId> {
        let f = self.find(*addr)?;
        self.remove_found(f);
        Some(f.id)
    }

    /// Unregisters the key `find` found (nothing changed since).
    #[inline]
    pub fn remove_found(&mut self, f: Found) {
        let mask = self.mask();
        let mut hole = f.slot;
        let mut i = hole;
        // Backward shift: each later key of the run whose home is not cyclically in (hole, i] fills the hole.
        loop {
            i = (i + 1) & mask;
            let s = self.slots[i];
            if s.addr == EMPTY {
                break;
            }
            let home = self.home(s.addr);
            let stays = if hole < i { hole < home && home <= i } else { hole < home || home <= i };
            if !stays {
                self.slots[hole] = s;
                hole = i;
            }
        }
        self.slots[hole] = VACANT;
        self.len -= 1;
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![VACANT; n].into_boxed_slice());
        self.shift = usize::BITS - n.trailing_zeros();
        let mask = n - 1;
        for s in old.iter().filter(|s| s.addr != EMPTY) {
            let mut i = self.home(s.addr);
            while self.slots[i].addr != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Mixed inserts and removals on clustered, aligned addresses (runs of
    /// 512-byte blocks, 2 MiB strides, colliding homes) agree with a
    /// HashMap at every step: every registered address is found with its
    /// id, every removed one is gone, and the table grows and wraps.
    #[test]
    fn agrees_with_a_hash_map_through_growth_and_removals() {
        let mut reg = Registry::default();
        let mut model: HashMap<usize, BlockId> = HashMap::new();
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let addr_of = |k: u64| 0x7f00_0000_0000usize + ((k as usize % 64) << 21) + ((k as usize / 64) << 9);
        for step in 0..200_000u32 {
            let k = next(6000);
            let addr = addr_of(k);
            let present = model.contains_key(&addr);
            if present && next(3) != 0 {
                assert_eq!(reg.remove(&addr), model.remove(&addr));
            } else if !present {
                reg.insert(addr, step);
                model.insert(addr, step);
            }
            assert_eq!(reg.len(), model.len());
            if step % 4096 == 0 {
                for (&a, &id) in &model {
                    assert_eq!(reg.get(&a), Some(&id), "{a:#x} lost at step {step}");
                }
            }
        }
        for k in 0..6000 {
            let a = addr_of(k);
            assert_eq!(reg.get(&a).copied(), model.get(&a).copied());
        }
        for (a, _) in model.drain() {
            assert!(reg.remove(&a).is_some());
        }
        assert_eq!(reg.len(), 0);
        assert_eq!(reg.get(&addr_of(1)), None);
        assert_eq!(reg.remove(&addr_of(1)), None);
    }

    /// Keys whose homes collide at the end of the table wrap to its start;
    /// removing the first of the run keeps the others reachable.
    #[test]
    fn removal_in_a_wrapped_run_keeps_the_rest() {
        let mut reg = Registry::default();
        reg.insert(512, 0); // allocates 16 slots
        let last: Vec<usize> = (1..100_000usize).map(|k| k * 512).filter(|&a| reg.home(a) == 15).take(3).collect();
        assert_eq!(last.len(), 3);
        reg.remove(&512);
        for (i, &a) in last.iter().enumerate() {
            reg.insert(a, i as BlockId + 1);
        }
        assert_eq!(reg.remove(&last[0]), Some(1));
        assert_eq!(reg.get(&last[1]), Some(&2));
        assert_eq!(reg.get(&last[2]), Some(&3));
        assert_eq!(reg.len(), 2);
    }
}
