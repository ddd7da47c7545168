//! Where a request goes inside an expandable range, and what the range's free blocks hold mapped.

use super::{RangePool, RangeView};
use crate::core::backing::{GrowContext, GrowError};
use crate::core::cache::block::BlockId;
use crate::core::cache::segment::SegmentId;

/// Free blocks the mapped-first search looks at, smallest classes first.
const MAPPED_FIT_SCAN: usize = 64;

impl RangePool<'_> {
    /// Places a request of `rounded` bytes given its best fit: as is when its pages are mapped; else in a free block
    /// with a mapped run that fits; else, with a headroom, where the fewest pages are missing, and without one at the
    /// best fit, mapping what it lacks. Returns the free block to take (its first `rounded` bytes mapped).
    pub(super) fn place_in_range(
        &mut self,
        best_fit: BlockId,
        rounded: usize,
        device: &GrowContext<'_, super::ExpandableRanges>,
    ) -> Result<BlockId, GrowError> {
        if self.view().unmapped_under(best_fit, rounded) == 0 {
            return Ok(best_fit);
        }
        if let Some((id, off)) = self.view().find_mapped_fit(rounded) {
            return Ok(if off > 0 { self.split_front(id, off) } else { id });
        }
        let (mut id, mut off) = match self.sh.backing.reserved_headroom {
            Some(_) => self.view().find_most_mapped(rounded).unwrap_or((best_fit, 0)),
            None => (best_fit, 0),
        };
        if self.view().touches_slept(id, off, rounded) {
            (id, off) = self.awake_place(rounded)?;
        }
        // Mapped before the split: a failure leaves the block whole.
        let b = self.blocks.get(id);
        let (seg, addr, size) = (b.segment, b.addr, b.size);
        self.ensure_mapped(seg, addr + off, rounded, size - off, device)?;
        Ok(if off > 0 { self.split_front(id, off) } else { id })
    }

    /// A free block and offset for `rounded` bytes that touch no sleeping page, in a new range if need be: while
    /// asleep, pages of sleeping runs belong to their blocks (Note [sleep]).
    fn awake_place(&mut self, rounded: usize) -> Result<(BlockId, usize), GrowError> {
        if let Some(found) = self.view().find_awake_fit(rounded) {
            return Ok(found);
        }
        let seg = self.make_range_for_request(rounded)?;
        Ok((self.segments.get(seg).first, 0))
    }

    /// Places a request of a no_split pool at the start of its best fit (or of a new range), over whole handles no
    /// other block touches; returns the block and the bytes the request takes of it.
    /// Invariant of a no_split shard: every handle lies inside one block. Pages are mapped only under the request's
    /// own pages (nothing ahead, no cached handle past them) and the request takes every handle it touches to its
    /// end, so a free block starts where a handle starts (or on unmapped pages), and freeing and coalescing keep
    /// handle boundaries on block boundaries.
    pub(super) fn place_unshared(
        &mut self,
        rounded: usize,
        best_fit: Option<BlockId>,
        device: &GrowContext<'_, super::ExpandableRanges>,
    ) -> Result<(BlockId, usize), GrowError> {
        // A sleeping run ends where a handle ended (`awake_place`).
        let (id, off) = match best_fit {
            Some(id) if !self.view().touches_slept(id, 0, rounded) => (id, 0),
            _ => self.awake_place(rounded)?,
        };
        let b = self.blocks.get(id);
        let (seg, addr, size) = (b.segment, b.addr + off, b.size - off);
        let (base, page) = (self.range(seg).base, self.range(seg).page_size);
        // Whole pages: under `page_size:20m` or `1g` a page holds several 2 MiB units, and its handle is the block's.
        let pages = (addr + rounded - base).div_ceil(page) * page + base - addr;
        debug_assert!(pages <= size, "a no_split free block ends inside a page");
        let pages = pages.min(size);
        self.ensure_mapped(seg, addr, pages, pages, device)?;
        let r = self.range(seg);
        let first = (addr - base) / page;
        debug_assert!(r.page(first).is_none_or(|p| p.head as usize == first), "a handle crosses a no_split block");
        let last = r.page((addr + pages - 1 - base) / page).expect("mapped just now");
        let taken = (last.end() * page + base - addr).min(size);
        debug_assert_eq!(taken, last.end() * page + base - addr, "a handle crosses a no_split block");
        // Mapped before the split: a failure leaves the block whole.
        Ok((if off > 0 { self.split_front(id, off) } else { id }, taken))
    }
}

impl RangeView<'_> {
    /// Free blocks that can hold `size` bytes, smallest classes first, at most `MAPPED_FIT_SCAN` of them.
    fn fit_candidates(&self, size: usize) -> impl Iterator<Item = BlockId> + '_ {
        self.index
            .iter_from(&self.blocks, size)
            .filter(move |&id| self.blocks.get(id).size >= size)
            .take(MAPPED_FIT_SCAN)
    }

    /// With a headroom (every page mapped is one fewer to move): the free block and offset (its start, or its end
    /// below the range's top) where `size` bytes lack the fewest mapped pages; smaller blocks win ties.
    fn find_most_mapped(&self, size: usize) -> Option<(BlockId, usize)> {
        let mut best: Option<(usize, BlockId, usize)> = None;
        for id in self.fit_candidates(size) {
            let b = self.blocks.get(id);
            let r = self.range(b.segment);
            let page = r.page_size;
            let lacking = |at: usize| {
                let (first, last) = ((at - r.base) / page, (at + size - 1 - r.base) / page);
                (first..=last).filter(|&i| r.page(i).is_none()).count()
            };
            // The end only below the top: the range's last block ends far past anything mapped.
            let below_top = b.addr + b.size <= r.base + r.top() * page;
            let end = if below_top && b.size > size { Some(b.size - size) } else { None };
            for off in std::iter::once(0).chain(end) {
                if self.touches_slept(id, off, size) {
                    continue;
                }
                let n = lacking(b.addr + off);
                if best.is_none_or(|(m, _, _)| n < m) {
                    best = Some((n, id, off));
                }
            }
        }
        best.map(|(_, id, off)| (id, off))
    }

    /// Whether `size` bytes at offset `off` of block `id` lie on a sleeping page (awake: one branch on an empty list).
    fn touches_slept(&self, id: BlockId, off: usize, size: usize) -> bool {
        let b = self.blocks.get(id);
        let r = self.range(b.segment);
        if r.slept.is_empty() {
            return false;
        }
        let at = b.addr + off - r.base;
        r.slept_within(at / r.page_size, (at + size - 1) / r.page_size + 1)
    }

    /// While asleep: a free block and offset where `size` bytes touch no sleeping page (at the block's start, or just
    /// past a sleeping run inside it), smallest classes first.
    fn find_awake_fit(&self, size: usize) -> Option<(BlockId, usize)> {
        self.fit_candidates(size).find_map(|id| {
            let b = self.blocks.get(id);
            let r = self.range(b.segment);
            let past_runs = r.slept.iter().map(|run| r.base + (run.head as usize + run.units()) * r.page_size);
            let offsets = std::iter::once(0)
                .chain(past_runs.filter(|&end| end > b.addr && end + size <= b.addr + b.size).map(|end| end - b.addr));
            let mut offsets: Vec<usize> = offsets.collect();
            offsets.sort_unstable();
            offsets.into_iter().find(|&off| !self.touches_slept(id, off, size)).map(|off| (id, off))
        })
    }

    /// A free block holding a fully mapped run of at least `size` bytes, and the run's offset in it.
    fn find_mapped_fit(&self, size: usize) -> Option<(BlockId, usize)> {
        // Candidates come smallest class first: the first run that fits is a good enough fit.
        self.fit_candidates(size).find_map(|id| {
            let b = self.blocks.get(id);
            let r = self.range(b.segment);
            let lo = b.addr - r.base;
            let (run_lo, _) = r.mapped_spans(lo, lo + b.size).find(|&(from, to)| to - from >= size)?;
            Some((id, run_lo - lo))
        })
    }

    /// Unmapped pages under the first `size` bytes of free block `id` (a sleeping page counts as unmapped).
    #[inline]
    pub(super) fn unmapped_under(&self, id: BlockId, size: usize) -> usize {
        let b = self.blocks.get(id);
        let r = self.range(b.segment);
        let end = b.addr + size;
        // Every page below the top mapped (none ever given back): no per-page walk, and a block ending below the
        // top (a cache hit) needs no division either.
        let dense = r.mapped == r.top();
        if dense && end <= r.base + r.top() * r.page_size {
            return 0;
        }
        let first = (b.addr - r.base) / r.page_size;
        let last = (end - 1 - r.base) / r.page_size;
        if dense {
            return (last + 1).saturating_sub(r.top().max(first));
        }
        (first..=last).filter(|&i| r.page(i).is_none()).count()
    }

    /// The bytes a no_split request of `size` takes of free block `id` with no device call: to the end of the last
    /// handle under its first `size` bytes, if every page there is mapped.
    #[cold]
    #[inline(never)]
    pub(super) fn whole_handles_under(&self, id: BlockId, size: usize) -> Option<usize> {
        let b = self.blocks.get(id);
        let r = self.range(b.segment);
        if self.unmapped_under(id, size) != 0 {
            return None;
        }
        // It starts where a handle starts (a free block's start is one).
        let first = (b.addr - r.base) / r.page_size;
        if (b.addr - r.base) % r.page_size != 0 || r.page(first)?.head as usize != first {
            return None;
        }
        let last = r.page((b.addr + size - 1 - r.base) / r.page_size)?;
        let taken = last.end() * r.page_size + r.base - b.addr;
        // Never past the block: in a no_split shard a handle lies inside one.
        (taken <= b.size).then_some(taken)
    }

    /// The longest run of mapped bytes inside one free block, over all ranges: what a request gets without mapping.
    pub(in crate::core) fn largest_mapped_free(&self) -> usize {
        let mut best = 0;
        for seg in self.segments.ids() {
            let r = self.range(seg);
            for (addr, size) in self.free_runs(seg) {
                for (from, to) in r.mapped_spans(addr - r.base, addr + size - r.base) {
                    best = best.max(to - from);
                }
            }
        }
        best
    }

    /// Pieces of `seg` wholly inside free blocks, as (head, pages): without `moved`, what may be unmapped into the
    /// cache; with it, also those of handles mapped at a retired span (which may move again, never be unmapped into
    /// the cache).
    pub(super) fn wholly_free_pieces(&self, seg: SegmentId, moved: bool) -> Vec<(usize, usize)> {
        let r = self.range(seg);
        let mut out = Vec::new();
        for (addr, size) in self.free_runs(seg) {
            let end = ((addr + size - r.base) / r.page_size).min(r.top());
            let mut i = (addr - r.base).div_ceil(r.page_size);
            while i < end {
                match r.page(i) {
                    // A moved handle's new pages are never unmapped while its old ones are still mapped.
                    Some(p) if p.head as usize == i && p.end() <= end && (moved || !r.is_moved(p.handle)) => {
                        out.push((i, p.units as usize));
                        i = p.end();
                    }
                    Some(p) => i = p.end().max(i + 1),
                    None => i += 1,
                }
            }
        }
        out
    }
}
