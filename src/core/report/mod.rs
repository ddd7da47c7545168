//! What an allocator reports: statistics (`stats`), snapshots of its segments and blocks (`snapshot`,
//! `pytorch_snapshot` for PyTorch's pickle format), the history of allocations (`history`), a live block's
//! description (`inspect`), the out-of-memory message (`oom`), and the consistency checks (`invariants`).

pub mod history;
pub(super) mod inspect;
pub(super) mod invariants;
pub(super) mod oom;
pub mod pytorch_snapshot;
pub(super) mod snapshot;
pub(super) mod stats;
