//! Note [capture]: streams in graph capture (ACL graphs:
//! `aclmdlRICaptureBegin`, what `torch.npu.graph` and vllm-ascend use).
//!
//! While a stream captures, work submitted to it is recorded into a model,
//! not run, and the model replays it later, any number of times, on any
//! stream (`aclmdlRIExecuteAsync`). The runtime refuses `aclrtStreamQuery`,
//! `aclrtSynchronizeStream` and `aclrtDestroyStream` on a capturing stream
//! (ACL_ERROR_RT_STREAM_CAPTURED). So:
//! - a capturing stream met for the first time is accepted from
//!   `aclmdlRICaptureGetInfo`, never queried (`device::check_live_stream`);
//! - no path synchronizes a capturing stream: `Runtime::synchronize_stream`
//!   asks `aclmdlRICaptureGetInfo` first and fails as the runtime would,
//!   and every caller treats that as a stream it could not wait for (the
//!   memory it used is kept);
//! - memory the captured work may use must never be handed to other work
//!   or given back while the graph may still replay. The host says which
//!   memory that is by routing the capture to a private pool
//!   (`npualloc_pool_begin` on the capturing stream, as PyTorch routes a
//!   capture with `beginAllocateToPool`; Note [pools]): the capture's
//!   allocations come from the pool, a block freed during the capture is
//!   reused only by later allocations routed to that pool, and the pool's
//!   memory is given back only at `npualloc_pool_destroy` (empty_cache, the
//!   ladder, garbage collection and the release threshold leave it). A
//!   routed capturing stream's pool entry is not a graph stream.
//! - Without a route (the fallback), a stream the allocator has seen
//!   capturing is a *graph stream* for good (`StreamEntry::mark_graph`) in
//!   the default pool; every block freed on a graph stream, and every block
//!   recorded (`record_stream`) on one, is quarantined when freed: never
//!   reused, never given back (teardown leaves it to the runtime). Graph
//!   streams' shards are skipped by `empty_cache`, the OOM ladder, garbage
//!   collection and the release threshold, and teardown neither
//!   synchronizes graph streams nor frees memory they used. Quarantined
//!   bytes count as `pending_free_bytes`.
//!
//! The allocator learns that a stream captures when it first meets the
//! stream, when a synchronize it wanted is refused, when `record_stream`
//! names it, and when a block used by it is freed. A stream the allocator
//! served before its capture began, whose capture allocations are all
//! cache hits and which no reclaim path tries to synchronize, is not seen:
//! blocks freed on it during an unrouted capture are reused as usual.
//! Routing the capture to a pool closes that gap: a pool becomes a graph
//! pool (`Record::captured`) when a route to it begins on a capturing
//! stream, when its entry is made for a capturing stream, or when a request
//! routed to an existing entry finds its stream capturing (the routed path
//! asks the runtime until the entry has seen a capture, as torch_npu's
//! route filter asks for every routed allocation; torch_npu routes before
//! `aclmdlRICaptureBegin`, docs/anchors.md "Graph capture"). A graph pool's
//! cached memory stays through sleep and `pool_empty_cache`.

use super::backing::Backing;
use super::cache::block::{BlockId, BlockState};
use super::pool::Pool;
use crate::error::Result;
use crate::runtime::Stream;

impl<B: Backing> Pool<B> {
    /// Frees the allocated block at `addr` of a graph stream's pool into
    /// quarantine (Note [capture]).
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

    /// Takes block `id` (allocated, at `addr`) out of use for good.
    pub(super) fn quarantine(&mut self, id: BlockId, addr: usize) {
        self.cache.registry.remove(&addr);
        let (size, requested) = {
            let b = self.cache.blocks.get(id);
            (b.size, b.requested)
        };
        self.cache.counters.block_freed(size, requested);
        self.cache.order.quarantine(id, size);
        self.sh.history.freed(addr, requested, self.stream(), false);
        self.cache.blocks.get_mut(id).state = BlockState::Pending;
        self.after_transition();
    }

    /// True if the free of block `id`, used by other streams, must be
    /// quarantined: a graph stream used it, or one of its streams captures
    /// now (asked of the runtime; this path makes runtime calls anyway).
    pub(super) fn used_by_graph(&self, id: BlockId) -> bool {
        if self.cache.order.graph_used(id) {
            return true;
        }
        let (rt, device) = (&self.sh.rt, self.sh.device);
        self.cache.order.uses_of(id).iter().any(|&s| rt.on_device(device, || rt.is_capturing(s)).unwrap_or(false))
    }

    /// Notes that a graph stream uses the allocated block at `addr`.
    pub fn note_graph_use(&mut self, addr: usize) {
        if let Some(&id) = self.cache.registry.get(&addr) {
            self.cache.order.note_graph_use(id);
        }
    }

    /// Bytes of blocks quarantined here.
    pub fn quarantined_bytes(&self) -> usize {
        self.cache.order.quarantined_bytes()
    }
}

/// True if the runtime says `stream` captures now (false if it cannot tell).
pub(crate) fn capturing_now(rt: &crate::runtime::Runtime, device: i32, stream: Stream) -> bool {
    rt.on_device(device, || rt.is_capturing(stream)).unwrap_or(false)
}
