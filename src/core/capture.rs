//! Streams in graph capture: no path synchronizes a capturing stream, and memory a graph may replay on is
//! neither handed to other work nor given back while it may still replay (docs/design.md, Note [capture]).

use super::backing::Memory;
use super::cache::block::{BlockId, BlockState};
use crate::core::alloc::pool::Pool;
use crate::error::Result;
use crate::runtime::Stream;

impl<B: Memory> Pool<B> {
    /// Frees the allocated block at `addr` of a graph stream's pool into quarantine (Note [capture]).
    #[cold]
    #[inline(never)]
    pub fn free_quarantined(&mut self, addr: usize) -> Result<()> {
        let id = match self.cache.registry.get(&addr) {
            Some(&id) if self.cache.blocks.get(id).state == BlockState::Allocated => id,
            _ => return Err(self.unknown_pointer(addr, "free")),
        };
        self.quarantine(id, addr);
        Ok(())
    }

    /// Takes block `id` (allocated, at `addr`) out of use for good; its export ends (importers keep theirs).
    pub(super) fn quarantine(&mut self, id: BlockId, addr: usize) {
        let _ = self.cache.order.end_export(id);
        self.cache.registry.remove(&addr);
        let b = self.cache.blocks.get(id);
        let (size, requested) = (b.size, b.requested);
        self.cache.counters.block_freed(size, requested);
        self.cache.order.quarantine(id, size);
        self.sh.history.freed(addr, requested, self.stream(), self.pool_id(), false);
        self.cache.blocks.get_mut(id).state = BlockState::Pending;
        self.after_transition();
    }

    /// True if the free of block `id`, used by other streams, must be quarantined: a graph stream used it, or
    /// one of its streams captures now (asked of the runtime; this path makes runtime calls anyway).
    pub(super) fn used_by_graph(&self, id: BlockId) -> bool {
        self.cache.order.graph_used(id)
            || self.cache.order.uses_of(id).iter().any(|&s| capturing_now(&self.sh.rt, self.sh.device, s))
    }

    /// Notes that a graph stream uses the allocated block at `addr`.
    pub fn note_graph_use(&mut self, addr: usize) {
        if let Some(&id) = self.cache.registry.get(&addr) {
            self.cache.order.note_graph_use(id);
        }
    }
}

/// True if the runtime says `stream` captures now (false if it cannot tell).
pub(crate) fn capturing_now(rt: &crate::runtime::Runtime, device: i32, stream: Stream) -> bool {
    rt.on_device(device, || rt.is_capturing(stream)).unwrap_or(false)
}
