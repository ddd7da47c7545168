//! Pointer registry: device address of an allocated block → its id.
//!
//! A hash map with a multiplicative hash of the address, its high half
//! folded into the low half: addresses are at least 512-byte aligned (large
//! blocks often 2 MiB aligned), so their own low bits carry nothing.
//! Frees by pointer, queries and 2D-copy checks resolve in O(1).

use super::block::BlockId;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    #[inline]
    fn write_usize(&mut self, addr: usize) {
        // The product's high half carries the entropy; fold it into the low
        // bits too, since the table indexes buckets by the low bits (and
        // page-aligned addresses would otherwise all share them).
        let h = (addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
}

pub type Registry = HashMap<usize, BlockId, BuildHasherDefault<AddrHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// The table picks buckets by the hash's low bits: addresses 2 MiB apart
    /// (large blocks of an expandable range) must still spread over them.
    #[test]
    fn page_aligned_addresses_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<AddrHasher>::default();
        let mut buckets = std::collections::HashSet::new();
        for i in 0..1024usize {
            buckets.insert(build.hash_one(0x7f00_0000_0000usize + (i << 21)) & 1023);
        }
        assert!(buckets.len() > 600, "1024 addresses fell in {} of 1024 buckets", buckets.len());
    }
}
