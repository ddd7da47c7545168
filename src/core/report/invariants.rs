//! A shard's figures for the statistics, and its invariant checker (run under debug assertions after every
//! transition, `Pool::after_transition`, and by tests):
//! - a segment's blocks tile it exactly, in address order, with consistent back links; no two neighbours are free;
//! - the free index holds exactly the free blocks (its counts agree with the segments' and with a walk);
//! - the registry maps exactly the allocated and held blocks; the reuse lists hold exactly the held blocks;
//! - pending blocks are exactly those waiting in the stream order; the counters equal a recount;
//! - the backing's own rules (`Backing::check_segment`).
//!
//! The device-wide recount of reserved bytes is `Device::check_invariants`.

use super::stats::Stats;
use crate::core::alloc::pool::Pool;
use crate::core::backing::Memory;
use crate::core::cache::block::{BlockState, NIL};

impl<B: Memory> Pool<B> {
    /// Device memory this shard's segments hold.
    pub fn held_bytes(&self) -> usize {
        self.cache.segments.ids().map(|s| B::held_bytes(&self.backing, s)).sum()
    }

    /// The longest run a request could get from this shard with no device call.
    pub fn largest_free(&self) -> usize {
        B::largest_free(&self.cache, &self.backing)
    }

    /// Adds this shard's block and segment figures to `s` (not its largest free run, a maximum).
    pub fn add_figures(&self, s: &mut Stats) {
        self.counters().add_to(s);
        s.pending_free_bytes += (self.cache.pending_bytes() + self.cache.order.quarantined_bytes()) as u64;
        s.pending_free_blocks += self.cache.order.pending_count() as u64;
        s.exported_blocks += self.cache.order.exported_count() as u64;
        s.held_for_importers_bytes += self.cache.order.held_bytes() as u64;
        for seg in self.cache.segments.ids() {
            s.segment_bytes += B::held_bytes(&self.backing, seg) as u64;
            s.address_space_bytes += self.cache.segments.get(seg).size as u64;
        }
        // torch_npu's inactive split blocks: cached pieces of a fixed segment of more than one block. A stats
        // call walks the cached blocks only, never the live ones.
        let c = &self.cache;
        for id in c.index.iter(&c.blocks).chain(c.reuse.iter(&c.blocks)) {
            let b = c.blocks.get(id);
            if (b.prev != NIL || b.next != NIL) && !B::describe(&self.backing, b.segment).0 {
                s.inactive_split_blocks += 1;
                s.inactive_split_bytes += b.size as u64;
            }
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let c = &self.cache;
        let (mut allocated, mut requested, mut active) = (0u64, 0u64, 0u64);
        let (mut free_count, mut free_bytes) = (0usize, 0usize);
        let mut pending = 0usize;
        let (mut held, mut held_bytes) = (0usize, 0usize);
        for seg_id in c.segments.ids() {
            let seg = c.segments.get(seg_id);
            B::check_segment(c, &self.backing, seg_id)?;
            let mut expect = seg.base;
            let mut prev = NIL;
            let mut prev_free = false;
            for (id, b) in c.blocks_of(seg_id) {
                if b.addr != expect {
                    return Err(format!("segment {:#x}: block at {:#x}, expected {expect:#x}", seg.base, b.addr));
                }
                if b.prev != prev || b.segment != seg_id {
                    return Err(format!("block {:#x}: links or ownership disagree with its segment", b.addr));
                }
                if b.size == 0 || b.size % crate::core::alloc::policy::MIN_BLOCK_SIZE != 0 {
                    return Err(format!("block {:#x}: size {} not a positive multiple of 512", b.addr, b.size));
                }
                let is_free = b.state == BlockState::Free;
                if is_free && prev_free {
                    return Err(format!("block {:#x}: two free neighbours were not merged", b.addr));
                }
                let registered = matches!(b.state, BlockState::Allocated | BlockState::Held);
                if registered && c.registry.get(&b.addr) != Some(&id) {
                    let what = if b.state == BlockState::Held { "held" } else { "allocated" };
                    return Err(format!("{what} block {:#x} is missing from the registry", b.addr));
                }
                match b.state {
                    BlockState::Free => {
                        free_count += 1;
                        free_bytes += b.size;
                        if !c.index.contains(&c.blocks, id) {
                            return Err(format!("free block {:#x} is missing from its index", b.addr));
                        }
                    }
                    BlockState::Allocated => {
                        allocated += b.size as u64;
                        requested += b.requested as u64;
                        active += 1;
                    }
                    BlockState::Held => {
                        held += 1;
                        held_bytes += b.size;
                    }
                    BlockState::Pending => {
                        pending += 1;
                        if !c.order.is_pending(id) {
                            return Err(format!("pending block {:#x} is not waiting on any event", b.addr));
                        }
                    }
                    // Between detach and settle (see `reclaim`).
                    BlockState::Reclaiming => {}
                }
                prev_free = is_free;
                expect = b.addr + b.size;
                prev = id;
            }
            if expect != seg.base + seg.size {
                return Err(format!("segment {:#x}: blocks end at {expect:#x}, not at its end", seg.base));
            }
        }
        let (walked, walked_bytes) =
            c.index.iter(&c.blocks).fold((0, 0), |(n, bytes), id| (n + 1, bytes + c.blocks.get(id).size));
        if c.index.count != free_count || walked != free_count {
            return Err(format!(
                "free index holds {} ({walked} walked) blocks, segments have {free_count}",
                c.index.count
            ));
        }
        if c.index.bytes != free_bytes || walked_bytes != free_bytes {
            return Err(format!(
                "free index counts {} bytes ({walked_bytes} walked), segments have {free_bytes} free",
                c.index.bytes
            ));
        }
        if c.registry.len() as u64 != active + held as u64 {
            return Err(format!(
                "registry holds {} pointers, {} blocks are allocated and {held} held",
                c.registry.len(),
                active
            ));
        }
        let listed = c.reuse.iter(&c.blocks).filter(|&id| c.blocks.get(id).state == BlockState::Held).count();
        if listed != held || c.reuse.count != held || c.reuse.bytes != held_bytes {
            return Err(format!(
                "reuse lists hold {} blocks ({} bytes, {listed} held), segments have {held} ({held_bytes} bytes)",
                c.reuse.count, c.reuse.bytes
            ));
        }
        if c.order.pending_count() != pending {
            return Err(format!("{} pending frees, {} pending blocks", c.order.pending_count(), pending));
        }
        for id in c.order.blocks_with_uses() {
            if c.blocks.get(id).state != BlockState::Allocated {
                return Err(format!("block {:#x} has stream uses but is not allocated", c.blocks.get(id).addr));
            }
        }
        let n = c.counters;
        if n.allocated != allocated || n.requested != requested || n.live() != active {
            return Err(format!(
                "counters say {} allocated / {} requested / {} active, recount {allocated} / {requested} / {active}",
                n.allocated,
                n.requested,
                n.live()
            ));
        }
        Ok(())
    }
}
