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
