//! The invariant checker: run under debug assertions after every state
//! transition (see `State::after_transition`) and by tests.
//!
//! - blocks of a segment tile it exactly, in address order, with consistent
//!   back links, and carry the segment's pool kind and stream;
//! - no two neighbours are both free;
//! - every free block is on its pool's index, and the index holds nothing
//!   else (counts and bytes agree);
//! - the registry maps exactly the allocated and held blocks, by start
//!   address; the reuse lists hold exactly the held blocks;
//! - pending blocks are exactly those waiting in the stream order;
//! - the statistics equal a recount.

use super::block::{BlockState, NIL};
use super::state::State;

impl State {
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = 0u64;
        let mut requested = 0u64;
        let mut active = 0u64;
        let mut reserved = 0u64;
        let mut free_count = 0usize;
        let mut pending = 0usize;
        let (mut held, mut held_bytes) = (0usize, 0usize);
        for seg_id in self.segments.ids() {
            let seg = self.segments.get(seg_id);
            match &seg.vmm {
                Some(r) => {
                    reserved += (r.mapped * r.page_size) as u64;
                    if r.pages.iter().filter(|p| p.is_some()).count() != r.mapped {
                        return Err(format!("range {:#x}: mapped count disagrees with its pages", seg.base));
                    }
                }
                None => reserved += seg.size as u64,
            }
            let mut expect = seg.base;
            let mut prev = NIL;
            let mut prev_free = false;
            let mut id = seg.first;
            while id != NIL {
                let b = self.blocks.get(id);
                if b.addr != expect {
                    return Err(format!("segment {:#x}: block at {:#x}, expected {expect:#x}", seg.base, b.addr));
                }
                if b.prev != prev || b.segment != seg_id || b.kind != seg.kind || b.stream_slot != seg.stream_slot {
                    return Err(format!("block {:#x}: links or ownership disagree with its segment", b.addr));
                }
                if b.size == 0 || b.size % super::policy::MIN_BLOCK_SIZE != 0 {
                    return Err(format!("block {:#x}: size {} not a positive multiple of 512", b.addr, b.size));
                }
                let is_free = b.state == BlockState::Free;
                if is_free && prev_free {
                    return Err(format!("block {:#x}: two free neighbours were not merged", b.addr));
                }
                match b.state {
                    BlockState::Free => {
                        free_count += 1;
                        if !self.pools[b.stream_slot as usize][b.kind as usize].contains(&self.blocks, id) {
                            return Err(format!("free block {:#x} is missing from its index", b.addr));
                        }
                    }
                    BlockState::Allocated => {
                        if let Some(r) = &seg.vmm {
                            let first = (b.addr - seg.base) / r.page_size;
                            let last = (b.addr + b.size - 1 - seg.base) / r.page_size;
                            if (first..=last).any(|i| r.page(i).is_none()) {
                                return Err(format!("allocated block {:#x} is not fully mapped", b.addr));
                            }
                        }
                        allocated += b.size as u64;
                        requested += b.requested as u64;
                        active += 1;
                        if self.registry.get(&b.addr) != Some(&id) {
                            return Err(format!("allocated block {:#x} is missing from the registry", b.addr));
                        }
                    }
                    BlockState::Held => {
                        held += 1;
                        held_bytes += b.size;
                        if self.registry.get(&b.addr) != Some(&id) {
                            return Err(format!("held block {:#x} is missing from the registry", b.addr));
                        }
                    }
                    BlockState::Pending => {
                        pending += 1;
                        if !self.order.pending().iter().any(|p| p.block == id) {
                            return Err(format!("pending block {:#x} is not waiting on any event", b.addr));
                        }
                    }
                }
                prev_free = is_free;
                expect = b.addr + b.size;
                prev = id;
                id = b.next;
            }
            if expect != seg.base + seg.size {
                return Err(format!("segment {:#x}: blocks end at {expect:#x}, not at its end", seg.base));
            }
        }
        for (&size, handles) in &self.handle_cache {
            reserved += (size * handles.len()) as u64;
        }
        let indexed: usize = self.pools.iter().flat_map(|p| p.iter()).map(|ix| ix.count).sum();
        let walked: usize = self.pools.iter().flat_map(|p| p.iter()).map(|ix| ix.iter(&self.blocks).count()).sum();
        if indexed != free_count || walked != free_count {
            return Err(format!("free index holds {indexed} ({walked} walked) blocks, segments have {free_count}"));
        }
        if self.registry.len() as u64 != active + held as u64 {
            return Err(format!(
                "registry holds {} pointers, {} blocks are allocated and {held} held",
                self.registry.len(),
                active
            ));
        }
        let listed = self.reuse.iter(&self.blocks).filter(|&id| self.blocks.get(id).state == BlockState::Held).count();
        if listed != held || self.reuse.count != held || self.reuse.bytes != held_bytes {
            return Err(format!(
                "reuse lists hold {} blocks ({} bytes, {listed} held), segments have {held} ({held_bytes} bytes)",
                self.reuse.count, self.reuse.bytes
            ));
        }
        if self.order.pending().len() != pending {
            return Err(format!("{} pending frees, {} pending blocks", self.order.pending().len(), pending));
        }
        let s = self.stats.get();
        if s.allocated_bytes != allocated || s.requested_bytes != requested || s.active_blocks != active {
            return Err(format!(
                "stats say {} allocated / {} requested / {} active, recount {allocated} / {requested} / {active}",
                s.allocated_bytes, s.requested_bytes, s.active_blocks
            ));
        }
        if s.reserved_bytes != reserved || s.segments != self.segments.len() as u64 {
            return Err(format!(
                "stats say {} reserved in {} segments, recount {reserved} in {}",
                s.reserved_bytes,
                s.segments,
                self.segments.len()
            ));
        }
        Ok(())
    }
}
