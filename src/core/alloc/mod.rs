//! Allocate and free, the hot path: a device's streams (`streams`), each stream's shards (`shard`), a shard's
//! pool of blocks (`pool`), the address directory a free finds its shard by (`directory`), and what every
//! shard of a device shares (`shared`, `policy`).

pub(super) mod device;
pub(super) mod directory;
pub(crate) mod policy;
pub(super) mod pool;
pub(super) mod shard;
pub(super) mod shared;
pub(super) mod streams;
