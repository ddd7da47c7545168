//! Which shard owns an address: a lock-free radix table over 2 MiB granules.
//!
//! A free, query or record_stream names only an address; the block lives in
//! one shard. Segments change only when memory is obtained or given back,
//! so the table is written then and read by every free with two loads and
//! no lock (PyTorch shards its pointer map's lock for the same reason; we
//! need none). It only points at a shard: the shard's own registry says
//! whether a live block starts there.
//!
//! Every segment is at least 2 MiB (`policy`), so one granule meets at most
//! two segments: the end of one and the start of the next. An entry packs
//! the shard below a boundary, the shard from the boundary on, and the
//! boundary's offset in the granule.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const GRANULE_SHIFT: u32 = 21;
const GRANULE: usize = 1 << GRANULE_SHIFT;
/// Addresses below 2^48 (user-space host addresses, and device addresses
/// of 16 to 24 TiB) are covered.
const ADDRESS_BITS: u32 = 48;
const LEAF_BITS: u32 = 14;
const ROOT_BITS: u32 = ADDRESS_BITS - GRANULE_SHIFT - LEAF_BITS;
const LEAF_LEN: usize = 1 << LEAF_BITS;
/// The largest address the table can hold (exclusive).
pub(crate) const ADDRESS_LIMIT: usize = 1 << ADDRESS_BITS;

const SHARD_BITS: u32 = 21;
const SHARD_MASK: u64 = (1 << SHARD_BITS) - 1;
/// Shard ids the table can hold (ids are stored plus one; 0 is none).
pub(crate) const MAX_SHARDS: usize = (1 << SHARD_BITS) - 2;

/// One granule: (below + 1) | (from + 1) << 21 | boundary << 42.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Entry {
    below: u64,
    from: u64,
    boundary: u64,
}

impl Entry {
    fn unpack(v: u64) -> Self {
        Entry { below: v & SHARD_MASK, from: (v >> SHARD_BITS) & SHARD_MASK, boundary: v >> (2 * SHARD_BITS) }
    }

    fn pack(self) -> u64 {
        self.below | self.from << SHARD_BITS | self.boundary << (2 * SHARD_BITS)
    }
}

type Leaf = [AtomicU64; LEAF_LEN];

pub(crate) struct Directory {
    root: Box<[AtomicPtr<Leaf>]>,
}

impl Default for Directory {
    fn default() -> Self {
        Directory { root: (0..1usize << ROOT_BITS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect() }
    }
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Directory")
    }
}

impl Directory {
    /// The shard owning `addr`, if a segment registered here covers it.
    #[inline]
    pub fn owner(&self, addr: usize) -> Option<u32> {
        if addr >= ADDRESS_LIMIT {
            return None;
        }
        let g = addr >> GRANULE_SHIFT;
        let leaf = self.root[g >> LEAF_BITS].load(Ordering::Acquire);
        if leaf.is_null() {
            return None;
        }
        // SAFETY: a non-null leaf pointer was published by `slot` from a
        // live Box and is freed only when the directory drops.
        let v = unsafe { &(*leaf)[g & (LEAF_LEN - 1)] }.load(Ordering::Acquire);
        let e = Entry::unpack(v);
        let id = if (addr & (GRANULE - 1)) as u64 >= e.boundary { e.from } else { e.below };
        id.checked_sub(1).map(|i| i as u32)
    }

    /// Records that `shard` owns [base, base + size). The caller checked
    /// `base + size <= ADDRESS_LIMIT` and `shard < MAX_SHARDS`.
    pub fn insert(&self, base: usize, size: usize, shard: u32) {
        self.update(base, size, |e, head, tail_end| {
            let id = shard as u64 + 1;
            match (head, tail_end) {
                // Starts inside this granule: owns from its start on.
                (Some(off), _) => Entry { from: id, boundary: off as u64, ..e },
                // Ends inside it: owns below its end, unless a later
                // segment already set the boundary at its own start.
                (None, Some(end)) => {
                    let boundary = if e.from != 0 { e.boundary } else { end as u64 };
                    Entry { below: id, boundary, ..e }
                }
                (None, None) => Entry { below: id, from: id, boundary: 0 },
            }
        });
    }

    /// Forgets [base, base + size) (registered with `insert`).
    pub fn remove(&self, base: usize, size: usize) {
        self.update(base, size, |e, head, tail_end| match (head, tail_end) {
            (Some(_), _) => Entry { from: 0, ..e },
            (None, Some(_)) => Entry { below: 0, ..e },
            (None, None) => Entry { below: 0, from: 0, boundary: 0 },
        });
    }

    /// Applies `f(entry, start offset if the range starts in the granule,
    /// end offset if it ends in it)` to every granule the range meets.
    fn update(&self, base: usize, size: usize, f: impl Fn(Entry, Option<usize>, Option<usize>) -> Entry) {
        let end = base + size;
        let (first, last) = (base >> GRANULE_SHIFT, (end - 1) >> GRANULE_SHIFT);
        for g in first..=last {
            let start = g << GRANULE_SHIFT;
            let head = (g == first && base > start).then(|| base - start);
            let tail_end = (g == last && end < start + GRANULE).then(|| end - start);
            let slot = self.slot(g);
            let mut cur = slot.load(Ordering::Acquire);
            loop {
                let next = f(Entry::unpack(cur), head, tail_end).pack();
                match slot.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(v) => cur = v,
                }
            }
        }
    }

    fn slot(&self, g: usize) -> &AtomicU64 {
        let root = &self.root[g >> LEAF_BITS];
        let mut leaf = root.load(Ordering::Acquire);
        if leaf.is_null() {
            let fresh: Box<Leaf> = Box::new(std::array::from_fn(|_| AtomicU64::new(0)));
            let fresh = Box::into_raw(fresh);
            match root.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => leaf = fresh,
                Err(existing) => {
                    // SAFETY: `fresh` came from Box::into_raw above and was
                    // never published.
                    drop(unsafe { Box::from_raw(fresh) });
                    leaf = existing;
                }
            }
        }
        // SAFETY: as in `owner`.
        unsafe { &(*leaf)[g & (LEAF_LEN - 1)] }
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        for root in self.root.iter() {
            let leaf = root.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !leaf.is_null() {
                // SAFETY: published from Box::into_raw in `slot`; no reader
                // remains once the directory is dropped.
                drop(unsafe { Box::from_raw(leaf) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn unaligned_neighbours_share_a_granule() {
        let d = Directory::default();
        let a = 0x7f00_0000_0000 + 64;
        d.insert(a, 2 * MIB, 3);
        d.insert(a + 2 * MIB + 4096, 20 * MIB, 5);
        assert_eq!(d.owner(a), Some(3));
        assert_eq!(d.owner(a + 2 * MIB - 1), Some(3));
        assert_eq!(d.owner(a + 2 * MIB + 4096), Some(5));
        assert_eq!(d.owner(a + 22 * MIB + 4095), Some(5));
        assert_eq!(d.owner(a - 1), None);
        assert_eq!(d.owner(a + 22 * MIB + 4096), None);
        d.remove(a, 2 * MIB);
        assert_eq!(d.owner(a), None);
        assert_eq!(d.owner(a + 2 * MIB + 4096), Some(5));
        // The later segment registered first, then an earlier one ends in
        // its first granule.
        d.insert(a, 2 * MIB, 7);
        assert_eq!(d.owner(a + 2 * MIB - 1), Some(7));
        assert_eq!(d.owner(a + 2 * MIB + 4096), Some(5));
        d.remove(a + 2 * MIB + 4096, 20 * MIB);
        assert_eq!(d.owner(a + 3 * MIB), None);
        assert_eq!(d.owner(a + MIB), Some(7));
    }

    #[test]
    fn addresses_past_the_limit_have_no_owner() {
        let d = Directory::default();
        assert_eq!(d.owner(ADDRESS_LIMIT), None);
        assert_eq!(d.owner(usize::MAX), None);
    }
}
