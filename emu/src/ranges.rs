//! A free-range allocator over an integer space (offsets in a memfd), with
//! best-fit lookup and coalescing of neighbours on insert. Both maps hold the
//! same ranges: `by_start` for neighbours, `by_size` for best fit, so every
//! operation is O(log n) even with 100k ranges.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub struct RangeSet {
    by_start: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
}

impl RangeSet {
    /// Takes `len` units from the smallest free range that fits.
    pub fn take(&mut self, len: u64) -> Option<u64> {
        let &(size, start) = self.by_size.range((len, 0)..).next()?;
        self.remove(start, size);
        if size > len {
            self.add(start + len, size - len);
        }
        Some(start)
    }

    /// Returns `[start, start + len)` to the set, merging with neighbours.
    pub fn insert(&mut self, mut start: u64, mut len: u64) {
        debug_assert!(len > 0);
        if let Some((&prev, &prev_len)) = self.by_start.range(..start).next_back() {
            debug_assert!(prev + prev_len <= start, "range freed twice");
            if prev + prev_len == start {
                self.remove(prev, prev_len);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.by_start.get(&(start + len)) {
            self.remove(start + len, next_len);
            len += next_len;
        }
        self.add(start, len);
    }

    /// Number of disjoint free ranges.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    fn add(&mut self, start: u64, len: u64) {
        self.by_start.insert(start, len);
        self.by_size.insert((len, start));
    }

    fn remove(&mut self, start: u64, len: u64) {
        self.by_start.remove(&start);
        self.by_size.remove(&(len, start));
    }
}

#[cfg(test)]
mod tests {
    use super::RangeSet;

    #[test]
    fn best_fit_and_coalescing() {
        let mut set = RangeSet::default();
        set.insert(0, 100);
        let a = set.take(10).unwrap();
        let b = set.take(20).unwrap();
        let c = set.take(30).unwrap();
        assert_eq!((a, b, c), (0, 10, 30));
        set.insert(b, 20);
        // Best fit picks the 20-hole, not the 40-tail.
        assert_eq!(set.take(15), Some(10));
        set.insert(10, 15);
        set.insert(a, 10);
        set.insert(c, 30);
        assert_eq!(set.len(), 1);
        assert_eq!(set.take(100), Some(0));
        assert_eq!(set.take(1), None);
    }
}
