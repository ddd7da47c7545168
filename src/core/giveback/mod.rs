//! Giving device memory back: detach what is unused, give it back and settle the cache (`reclaim`); the
//! out-of-memory recovery (`ladder`); other allocators on the same device asked to give back (`peers`); a
//! stream's shards forgotten (`forget`); an allocator's teardown.

pub(super) mod forget;
pub(super) mod ladder;
pub(super) mod peers;
pub(super) mod reclaim;
pub(super) mod teardown;
