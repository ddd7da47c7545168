//! The hasher of maps keyed by a device address (the trace recorder's block
//! ids; the core's pointer registry is a table of its own, `core::registry`).
//!
//! Block addresses are distinct integers, at least 512-byte aligned (large
//! blocks often 2 MiB aligned), so their own low bits carry nothing: one
//! multiply mixes them, and the product's high half is folded into the low
//! bits the table picks buckets by. SipHash would cost more than the rest of
//! a cache hit.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from a device address to `V`.
pub type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    /// Keys other than integers (none are used today) still hash correctly.
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    #[inline]
    fn write_u64(&mut self, addr: u64) {
        let h = addr.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }

    #[inline]
    fn write_usize(&mut self, addr: usize) {
        self.write_u64(addr as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// The table picks buckets by the hash's low bits: addresses 2 MiB apart
    /// (large blocks of an expandable range) must still spread over them.
    #[test]
    fn page_aligned_addresses_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<AddrHasher>::default();
        for key_width in ["usize", "u64"] {
            let mut buckets = std::collections::HashSet::new();
            for i in 0..1024usize {
                let addr = 0x7f00_0000_0000usize + (i << 21);
                let h = if key_width == "usize" { build.hash_one(addr) } else { build.hash_one(addr as u64) };
                buckets.insert(h & 1023);
            }
            assert!(buckets.len() > 600, "{key_width}: 1024 addresses fell in {} of 1024 buckets", buckets.len());
        }
    }
}
