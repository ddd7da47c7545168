//! Which shard owns an address: a lock-free radix table over 2 MiB granules.
//!
//! A free names only an address. Segments change only when memory is obtained or given back, so the table is
//! written then and read by every free with two loads and no lock. It only points at a shard: the shard's registry
//! says whether a live block starts there.
//!
//! Every segment is at least 2 MiB (`policy`), so a granule meets at most two segments. An entry packs the shard
//! below a boundary, the shard from the boundary on, and the boundary's offset in the granule.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const GRANULE_SHIFT: u32 = 21;
const GRANULE: usize = 1 << GRANULE_SHIFT;
/// Addresses below 2^48 (user-space host addresses, and device addresses of 16 to 24 TiB) are covered.
const ADDRESS_BITS: u32 = 48;
const LEAF_BITS: u32 = 14;
const ROOT_BITS: u32 = ADDRESS_BITS - GRANULE_SHIFT - LEAF_BITS;
const LEAF_LEN: usize = 1 << LEAF_BITS;
const ROOT_LEN: usize = 1 << ROOT_BITS;
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

/// Tables that may start as zeroed memory ("no shard", "no leaf").
///
/// # Safety
/// All-zero bytes must be a valid value of the type.
unsafe trait ZeroIsEmpty {}
// SAFETY: an AtomicU64 has u64's representation; zero is the empty entry.
unsafe impl ZeroIsEmpty for Leaf {}
// SAFETY: an AtomicPtr has a pointer's representation; zero is null.
unsafe impl ZeroIsEmpty for [AtomicPtr<Leaf>; ROOT_LEN] {}

/// A table on the heap, zeroed by the allocator: a fresh 128 KiB leaf comes from pages the kernel already zeroed,
/// so only the granules written are ever touched.
fn zeroed<T: ZeroIsEmpty>() -> Box<T> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: both tables have a nonzero size; a non-null result is a zeroed allocation of `layout`, a valid T by
    // ZeroIsEmpty, and the global allocator's block of T's layout is what Box frees.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(p)
    }
}

pub(crate) struct Directory {
    /// A fixed-length array: a look-up's index needs no bounds check.
    root: Box<[AtomicPtr<Leaf>; ROOT_LEN]>,
    /// Granules `remove` looked at (tests: what a call cost).
    #[cfg(test)]
    visited: std::sync::atomic::AtomicUsize,
}

impl Default for Directory {
    fn default() -> Self {
        Directory {
            root: zeroed(),
            #[cfg(test)]
            visited: Default::default(),
        }
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
        // SAFETY: a non-null leaf was published by `slot` from a live Box and is freed only when the directory drops.
        let v = unsafe { &(*leaf)[g & (LEAF_LEN - 1)] }.load(Ordering::Acquire);
        let e = Entry::unpack(v);
        let id = if (addr & (GRANULE - 1)) as u64 >= e.boundary { e.from } else { e.below };
        id.checked_sub(1).map(|i| i as u32)
    }

    /// Records that `shard` owns [base, base + size). The caller checked `base + size <= ADDRESS_LIMIT` and
    /// `shard < MAX_SHARDS`.
    pub fn insert(&self, base: usize, size: usize, shard: u32) {
        let end = base + size;
        let (first, last) = (base >> GRANULE_SHIFT, (end - 1) >> GRANULE_SHIFT);
        let id = shard as u64 + 1;
        for g in first..=last {
            Self::apply(self.slot(g), Self::span(g, first, last, base, end), |e, head, tail_end| {
                match (head, tail_end) {
                    // Starts inside this granule: owns from its start on.
                    (Some(off), _) => Entry { from: id, boundary: off as u64, ..e },
                    // Ends inside it: owns below its end, unless a later segment set the boundary at its start.
                    (None, Some(end)) => {
                        let boundary = if e.from != 0 { e.boundary } else { end as u64 };
                        Entry { below: id, boundary, ..e }
                    }
                    (None, None) => Entry { below: id, from: id, boundary: 0 },
                }
            });
        }
    }

    /// Forgets [base, base + size), registered whole or in parts. A missing leaf is skipped, not made; an empty
    /// entry is not written.
    pub fn remove(&self, base: usize, size: usize) {
        if size == 0 {
            return;
        }
        let end = base + size;
        let (first, last) = (base >> GRANULE_SHIFT, (end - 1) >> GRANULE_SHIFT);
        let mut g = first;
        while g <= last {
            let leaf = self.root[g >> LEAF_BITS].load(Ordering::Acquire);
            let leaf_last = last.min(g | (LEAF_LEN - 1));
            if leaf.is_null() {
                g = leaf_last + 1;
                continue;
            }
            for g in g..=leaf_last {
                // SAFETY: as in `owner`.
                let slot = unsafe { &(*leaf)[g & (LEAF_LEN - 1)] };
                #[cfg(test)]
                self.visited.fetch_add(1, Ordering::Relaxed);
                Self::apply(slot, Self::span(g, first, last, base, end), |e, head, tail_end| match (head, tail_end) {
                    (Some(_), _) => Entry { from: 0, ..e },
                    (None, Some(_)) => Entry { below: 0, ..e },
                    (None, None) => Entry { below: 0, from: 0, boundary: 0 },
                });
            }
            g = leaf_last + 1;
        }
    }

    /// (start offset if [base, end) starts inside granule `g`, end offset if it ends inside).
    #[inline]
    fn span(g: usize, first: usize, last: usize, base: usize, end: usize) -> (Option<usize>, Option<usize>) {
        let start = g << GRANULE_SHIFT;
        let head = (g == first && base > start).then(|| base - start);
        let tail_end = (g == last && end < start + GRANULE).then(|| end - start);
        (head, tail_end)
    }

    /// Replaces the entry in `slot` with `f(entry, head, tail_end)`; an unchanged entry is not written.
    #[inline]
    fn apply(
        slot: &AtomicU64,
        (head, tail_end): (Option<usize>, Option<usize>),
        f: impl Fn(Entry, Option<usize>, Option<usize>) -> Entry,
    ) {
        let mut cur = slot.load(Ordering::Acquire);
        loop {
            let next = f(Entry::unpack(cur), head, tail_end).pack();
            if next == cur {
                return;
            }
            match slot.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(v) => cur = v,
            }
        }
    }

    /// Leaves made so far (tests: what a call cost).
    #[cfg(test)]
    pub(crate) fn leaves(&self) -> usize {
        self.root.iter().filter(|l| !l.load(Ordering::Acquire).is_null()).count()
    }

    /// Granules `remove` has looked at so far (tests: what a call cost).
    #[cfg(test)]
    pub(crate) fn visited(&self) -> usize {
        self.visited.load(Ordering::Relaxed)
    }

    fn slot(&self, g: usize) -> &AtomicU64 {
        let root = &self.root[g >> LEAF_BITS];
        let mut leaf = root.load(Ordering::Acquire);
        if leaf.is_null() {
            let fresh = Box::into_raw(zeroed::<Leaf>());
            match root.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => leaf = fresh,
                Err(existing) => {
                    // SAFETY: `fresh` came from Box::into_raw above and was never published.
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
                // SAFETY: published from Box::into_raw in `slot`; no reader remains once the directory is dropped.
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

    /// Threads insert and remove segments that share granules (each in its
    /// own zone, zones meeting inside granules, the segment's bounds moving
    /// every round) while readers look addresses up. The segment's thread
    /// sees its own addresses map to it while registered and to nothing once
    /// removed; a reader that saw a segment registered (through `state`)
    /// both before and after a look-up must get its shard. Each round starts
    /// from an empty directory, so threads also race to publish the leaf.
    /// Real threads on x86 check the update logic and the leaf race; they
    /// cannot show a memory ordering that is too weak (x86 orders loads and
    /// stores more strongly than Rust's model asks).
    #[test]
    fn concurrent_inserts_and_removes_in_shared_granules_keep_owners() {
        const ZONES: usize = 3;
        const READERS: usize = 1;
        const ROUNDS: usize = 100;
        const CYCLES: u64 = 500;
        // Zones of 5 MiB + 12 KiB from just below a leaf boundary: each
        // meets its neighbours inside a granule, and one segment may cross
        // into the next leaf.
        let leaf_span = GRANULE << LEAF_BITS;
        let origin = 0x3000_0000_0000 + 5 * leaf_span - 7 * MIB - 4096;
        let zone_len = 5 * MIB + 3 * 4096;
        let zone = |z: usize| origin + z * zone_len;
        // The segment of zone z in cycle c: at least 2 MiB, inside the zone,
        // and one time in four the whole zone (meeting both neighbours').
        let segment = |z: usize, c: u64| {
            let h = (c.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (z as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)) >> 16;
            if h % 4 == 0 {
                return (zone(z), zone_len);
            }
            let lead = (h % (zone_len - 2 * MIB) as u64) as usize & !511;
            let len = (2 * MIB + ((h >> 24) as usize % (zone_len - 2 * MIB - lead + 1))) & !511;
            (zone(z) + lead, len.max(2 * MIB))
        };
        let shard = |z: usize, c: u64| (z as u64 * 100_003 + c) as u32 % MAX_SHARDS as u32;
        // The addresses checked in a segment: its ends, the bytes around
        // each granule boundary inside it, its middle.
        let probes = |base: usize, len: usize| {
            let mut v = vec![base, base + len - 1, base + len / 2];
            let mut g = (base + GRANULE) & !(GRANULE - 1);
            while g < base + len {
                v.extend([g - 1, g]);
                g += GRANULE;
            }
            v
        };
        for round in 0..ROUNDS {
            let d = Directory::default();
            // Per zone: cycle << 1 | registered.
            let state: Vec<AtomicU64> = (0..ZONES).map(|_| AtomicU64::new(0)).collect();
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                let writers: Vec<_> = (0..ZONES)
                    .map(|z| {
                        let (d, state) = (&d, &state);
                        s.spawn(move || {
                            for c in 1..=CYCLES {
                                let c = c + round as u64 * CYCLES;
                                let (base, len) = segment(z, c);
                                assert!(base >= zone(z) && base + len <= zone(z + 1), "segment leaves its zone");
                                let id = shard(z, c);
                                d.insert(base, len, id);
                                state[z].store(c << 1 | 1, Ordering::Release);
                                for a in probes(base, len) {
                                    assert_eq!(
                                        d.owner(a),
                                        Some(id),
                                        "zone {z} cycle {c}: {a:#x} in {base:#x}+{len:#x}"
                                    );
                                }
                                state[z].store(c << 1, Ordering::Release);
                                d.remove(base, len);
                                for a in probes(base, len) {
                                    assert_eq!(d.owner(a), None, "zone {z} cycle {c}: {a:#x} after removal");
                                }
                            }
                        })
                    })
                    .collect();
                let readers: Vec<_> = (0..READERS)
                    .map(|r| {
                        let (d, state, stop) = (&d, &state, &stop);
                        s.spawn(move || {
                            let mut seen = 0u64;
                            let mut z = r;
                            while !stop.load(Ordering::Relaxed) {
                                z = (z + 1) % ZONES;
                                let before = state[z].load(Ordering::Acquire);
                                if before & 1 == 0 {
                                    continue;
                                }
                                let c = before >> 1;
                                let (base, len) = segment(z, c);
                                let found: Vec<_> = probes(base, len).into_iter().map(|a| (a, d.owner(a))).collect();
                                if state[z].load(Ordering::Acquire) != before {
                                    continue;
                                }
                                for (a, owner) in found {
                                    assert_eq!(owner, Some(shard(z, c)), "zone {z} cycle {c}: {a:#x} seen by a reader");
                                }
                                seen += 1;
                            }
                            seen
                        })
                    })
                    .collect();
                // The readers stop even when a writer failed.
                let written: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
                stop.store(true, Ordering::Relaxed);
                for r in readers {
                    r.join().unwrap();
                }
                for w in written {
                    if let Err(panic) = w {
                        std::panic::resume_unwind(panic);
                    }
                }
            });
            // Everything was removed: the zones' granules are empty again.
            for z in 0..ZONES {
                let mut g = zone(z) & !(GRANULE - 1);
                while g < zone(z + 1) {
                    assert_eq!(d.owner(g), None);
                    assert_eq!(d.owner(g + GRANULE - 1), None);
                    g += GRANULE;
                }
            }
        }
    }

    const GIB: usize = 1 << 30;

    /// Removing what was never inserted makes no leaf: 64 GiB (a device's
    /// range, over three leaves) from an empty directory, and from one whose
    /// only leaf is the range's first.
    #[test]
    fn removing_a_range_never_inserted_makes_no_leaf() {
        let d = Directory::default();
        let base = 0x2000_0000_0000 + 3 * MIB;
        d.remove(base, 64 * GIB);
        assert_eq!((d.leaves(), d.visited()), (0, 0));
        d.insert(base, 2 * MIB, 4);
        assert_eq!(d.leaves(), 1);
        d.remove(base, 64 * GIB);
        assert_eq!(d.leaves(), 1, "leaves made for granules nothing was inserted in");
        assert_eq!(d.visited(), LEAF_LEN - (base >> GRANULE_SHIFT) % LEAF_LEN, "only the existing leaf is walked");
        assert_eq!(d.owner(base), None);
        // Nothing at all: no granule to look at.
        d.remove(base + MIB, 0);
        assert_eq!(d.owner(base + MIB), None);
    }

    /// A 64 GiB range over three leaves, starting and ending inside granules
    /// its neighbours share, inserted in pieces (its first page, some in its
    /// second leaf, its last page), then removed whole: nothing in it has an
    /// owner any more, its neighbours keep theirs, and the one leaf nothing
    /// was inserted in was never made.
    #[test]
    fn removing_a_partly_inserted_range_clears_it_and_keeps_its_neighbours() {
        let leaf_span = GRANULE << LEAF_BITS;
        let base = 0x2000_0000_0000 + leaf_span - 3 * MIB + 4096;
        let end = base + 64 * GIB;
        let (below, range, above, piece) = (1, 2, 3, 9);
        let d = Directory::default();
        d.insert(base - 4 * MIB, 4 * MIB, below);
        d.insert(end, 4 * MIB, above);
        let pieces = [(base, 2 * MIB), (base + 40 * GIB + 512, 6 * MIB), (end - 2 * MIB, 2 * MIB)];
        for (i, &(at, len)) in pieces.iter().enumerate() {
            d.insert(at, len, if i == 1 { piece } else { range });
        }
        assert_eq!(d.owner(base + 40 * GIB + 512), Some(piece));
        assert_eq!(d.owner(end - 1), Some(range));
        let leaves = d.leaves();
        // The range's first and third leaves, and the one its upper
        // neighbour reaches into; its second leaf holds nothing.
        assert_eq!(leaves, 3);
        d.remove(base, end - base);
        assert_eq!(d.leaves(), leaves, "a leaf made to clear it");
        let mut probes = vec![base, base + MIB, base + 2 * MIB - 1, base + 2 * MIB, end - 2 * MIB, end - 1];
        probes.extend(pieces.iter().flat_map(|&(at, len)| [at, at + len / 2, at + len - 1]));
        probes.extend((0..64).map(|i| base + i * GIB + 7 * MIB));
        for a in probes {
            assert_eq!(d.owner(a), None, "{a:#x} in the removed range");
        }
        for a in [base - 4 * MIB, base - 2 * MIB, base - 1] {
            assert_eq!(d.owner(a), Some(below), "{a:#x} below the range");
        }
        for a in [end, end + 2 * MIB, end + 4 * MIB - 1] {
            assert_eq!(d.owner(a), Some(above), "{a:#x} above the range");
        }
        assert_eq!((d.owner(base - 4 * MIB - 1), d.owner(end + 4 * MIB)), (None, None));
    }

    #[test]
    fn addresses_past_the_limit_have_no_owner() {
        let d = Directory::default();
        assert_eq!(d.owner(ADDRESS_LIMIT), None);
        assert_eq!(d.owner(usize::MAX), None);
    }
}
