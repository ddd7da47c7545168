//! What garbage collection and the release threshold give back of expandable ranges: cached handles, wholly free
//! pieces, empty ranges, moved handles' old addresses (docs/design.md, Note [unused memory of expandable ranges]).

use super::RangePool;
use crate::core::backing::Give;
use crate::core::cache::block::BlockState;
use crate::core::cache::segment::SegmentId;

impl RangePool<'_> {
    /// Onto `out`: the old addresses of moved handles whose live pages in `seg` are wholly free, about `bytes` of them.
    pub(super) fn give_pinning(&mut self, seg: SegmentId, bytes: usize, out: &mut Vec<Give>) {
        let r = self.range(seg);
        if bytes == 0 || r.retired.is_empty() {
            return;
        }
        let page = r.page_size;
        let (mut handles, mut taken) = (Vec::new(), 0);
        for (head, units) in self.view().wholly_free_pieces(seg, true) {
            if taken >= bytes {
                break;
            }
            if let Some(p) = r.page(head).filter(|p| r.is_moved(p.handle)) {
                handles.push(p.handle);
                taken += units * page;
            }
        }
        self.give_retired_of(seg, |h| handles.contains(&h), out);
    }

    /// After the free of the block at `addr`: the pieces under it the free left wholly free, about `bytes` of them,
    /// onto `out` (for a moved handle, its old addresses instead). Looks only at the free block holding `addr`.
    pub(super) fn give_freed(&mut self, addr: usize, bytes: usize, out: &mut Vec<Give>) {
        let Some(seg) = self.segments.containing(addr) else { return };
        // A range given whole just before (emptied since the free by another thread's reclaim) has nothing more.
        if !self.backing.ranges.contains(&seg) {
            return;
        }
        let Some(holder) = self.block_containing(seg, addr) else { return };
        let b = self.blocks.get(holder);
        if b.state != BlockState::Free {
            // Held for reuse or waiting for other streams: in use still.
            return;
        }
        let (lo, hi) = (b.addr, b.addr + b.size);
        let r = self.range(seg);
        let (base, page) = (r.base, r.page_size);
        let Some(first) = r.page((addr - base) / page) else { return };
        let (mut pieces, mut moved, mut taken) = (Vec::new(), Vec::new(), 0);
        let mut i = first.head as usize;
        // The freed block's pages are mapped (it was handed out): walk its
        // pieces, and the mapped ones after it, while they lie in the block.
        while taken < bytes {
            let Some(p) = r.page(i) else { break };
            if base + p.end() * page > hi {
                break;
            }
            if base + i * page >= lo {
                if r.is_moved(p.handle) {
                    moved.push(p.handle);
                } else {
                    pieces.push((i, p.units as usize));
                }
                taken += p.units as usize * page;
            }
            i = p.end();
        }
        self.give_pieces_of(seg, pieces, out);
        // With nothing moved, none is picked.
        self.give_retired_of(seg, |h| moved.contains(&h), out);
    }
}
