//! On a roomy device, a large-pool request at least as large as a fresh handle gets handles of its own: exactly
//! the pages it lacks, nothing mapped ahead (docs/design.md, Note [handles of their own]).

use super::RangePool;
use crate::core::policy::PoolKind;

impl RangePool<'_> {
    /// Whether a request of `size` bytes that lacks pages gets handles of its own, a fresh handle being `fresh` bytes.
    #[inline]
    pub(super) fn owns_handles(&self, size: usize, fresh: usize) -> bool {
        self.kind == PoolKind::Large && size >= fresh
    }
}
