//! Note [handles of their own]
//!
//! A fresh handle is normally sized by the rule (`PieceRule`: 32 to 48 MiB
//! on a roomy device, up to 1 GiB at scale) and mapped ahead of the
//! request over the free pages after it, so that the blocks placed next
//! share it. A request at least as large as that handle gains nothing from
//! sharing: it would fill a fresh handle or more by itself. Such a request
//! (large pool only) gets handles of its own instead: one handle for each
//! run of pages it lacks, exactly that run, however long, and nothing
//! mapped ahead. Three things follow.
//! - Fewer calls: a 98 MiB activation that lacks all its pages takes one
//!   physical allocation and one map, not three of each (48, 48, 2 MiB).
//! - The handle is freed with its block. A shared handle frees only when
//!   every block on it has, which in a growing workload rarely happens; a
//!   handle of its own is wholly free the moment its block is, and can
//!   then move where the next request grows (`handle_moves`, Note [moves of
//!   wholly free handles]) or go back to the device at `empty_cache`.
//! - Nothing is mapped ahead of a large request, whose neighbours are the
//!   next large requests rather than small blocks that would use it.
//!
//! The bound is the fresh handle the rule would make for this request,
//! not a constant: on a roomy device 32 to 48 MiB, at scale the larger
//! ones. Only while the device is roomy, though: once its free memory
//! shrinks the rule's handles (a 128th of what it reports free), pages
//! must stay movable in small pieces, and a large request that took one
//! handle for all it lacks would have it pinned whole by any small block
//! best fit later puts in its last page or in its hole, and the smallest
//! device the program fits on would grow. There every request gets the
//! rule's handles. The bound follows the rule rather than a fixed size
//! because, in the model of the backing (`scripts/handle-moves.py --exact
//! N --whole`), the figures do not depend on a fixed bound between the
//! rule's smallest and largest handles (BENCHMARKS.md, "Models of
//! placement and growth").

use super::RangeCache;
use crate::core::policy::PoolKind;

impl RangeCache {
    /// Whether a request of `size` bytes that lacks pages gets handles of
    /// its own, given the `fresh` bytes a fresh handle would have (Note
    /// [handles of their own]).
    #[inline]
    pub(super) fn owns_handles(&self, size: usize, fresh: usize) -> bool {
        self.kind == PoolKind::Large && size >= fresh
    }
}
