//! Pointer registry: device address of an allocated block → its id.
//!
//! A hash map with a multiplicative hash of the address. Addresses are
//! 512-byte aligned, so the low bits carry nothing and are shifted out first.
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
        self.0 = ((addr as u64) >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type Registry = HashMap<usize, BlockId, BuildHasherDefault<AddrHasher>>;
