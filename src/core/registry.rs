//! Pointer registry: device address of an allocated block → its id.
//!
//! A hash map with the crate's address hasher ([`crate::addr_hash`]):
//! frees by pointer, queries and 2D-copy checks resolve in O(1).

use super::block::BlockId;
use crate::addr_hash::AddrMap;

pub type Registry = AddrMap<usize, BlockId>;
