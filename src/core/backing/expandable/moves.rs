//! A wholly free handle is mapped again where a large-pool placement of its range
//! lacks pages; its old address, retired, is used by nothing until a
//! synchronization lets it be unmapped (docs/design.md, Note [moves of wholly free handles]).

use super::mapping::Placement;
use super::{Piece, RangePool, RangeView, Retired};
use crate::core::alloc::policy::PoolKind;
use crate::core::backing::{Give, What};
use crate::core::cache::block::BlockState;
use crate::core::cache::segment::SegmentId;
use crate::core::report::history::Action;
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;

impl RangePool<'_> {
    /// Maps a wholly free handle of the placement's range at page `i` instead of a fresh handle; past the `run` pages
    /// that need mapping it may cover unmapped free pages up to `room_end`, as a fresh handle mapped ahead does (its
    /// pages are physical already). Returns the pages it covers; None when no handle could move (nothing changed).
    pub(super) fn move_free_handle(
        &mut self,
        ctx: &Placement<'_>,
        i: usize,
        run: usize,
        room_end: usize,
    ) -> Option<usize> {
        if !self.sh.backing.handle_moves || self.kind != PoolKind::Large || !ctx.device.may_move {
            return None;
        }
        // Nor while the stream grows often: calls matter more then (Note [mapping ahead while growth is frequent]).
        // Asked first: the usual answer, and the cheapest (no scan of the range).
        if self.pace(ctx.device.sibling).1 {
            return None;
        }
        let seg = ctx.seg;
        let (base, page) = (self.range(seg).base, self.range(seg).page_size);
        let first = (ctx.addr - base) / page;
        let end = (ctx.addr + ctx.size - 1 - base) / page + 1;
        // Not the placement's own free block: carving it would cut the block being placed.
        let (lo, hi) = self.block_containing(seg, ctx.addr).map_or((first, end), |id| {
            let b = self.blocks.get(id);
            ((b.addr - base) / page, (b.addr + b.size - base).div_ceil(page))
        });
        let apart = |(head, units): (usize, usize), a: usize, b: usize| head + units <= a || b <= head;
        let mut fits: Vec<(usize, usize)> = self
            .view()
            .wholly_free_pieces(seg, true)
            .into_iter()
            .filter(|&p| apart(p, first, end) && apart(p, lo, hi))
            .collect();
        // The unmapped free pages from page i, as far as the largest piece.
        let avail = self.range(seg).mappable_end(i + run, room_end.min(i + fits.iter().map(|p| p.1).max()?)) - i;
        // Retired old addresses stay within what the range maps in use: on a roomy device nothing else bounds them,
        // and each costs address space and a driver mapping record. Past that a fresh handle is made.
        let r = self.range(seg);
        let in_use = r.mapped - r.retired_units();
        fits.retain(|p| p.1 <= avail && r.retired_units() + p.1 <= in_use);
        // Only on a roomy device, as handles of their own: near a full one a large handle moved under a small run
        // would be pinned whole by it. (Asked only when a handle could move: the answer sizes fresh handles too.)
        if fits.is_empty() || (self.sh.backing.pieces().reads_free_memory() && !self.fresh_piece(ctx).1) {
            return None;
        }
        let covering =
            fits.iter().copied().filter(|&(_, units)| units >= run).min_by_key(|&(head, units)| (units, head));
        let (head, units) =
            covering.or_else(|| fits.iter().copied().max_by_key(|&(head, units)| (units, std::cmp::Reverse(head))))?;
        let (old, new, bytes) = (base + head * page, base + i * page, units * page);
        let handle = self.range(seg).page(head)?.handle;
        let holder = self.block_containing(seg, old)?;
        debug_assert_eq!(self.blocks.get(holder).state, BlockState::Free);
        let block = self.carve(holder, old, bytes);
        let sh = self.sh.clone();
        if self.map_told(new, bytes, handle).is_err() {
            // A fresh handle is tried instead.
            self.return_block(block);
            return None;
        }
        sh.directory.insert(new, bytes, self.id);
        let r = self.range_mut(seg);
        r.set(Piece { handle, head: i as u32, units: units as u32 });
        r.retired.push(Retired { head: head as u32, units: units as u32, block, flushing: false });
        sh.counters.handle_moved();
        sh.history.record(Action::SegmentMap, new, bytes, self.stream, self.cache.pool);
        Some(units)
    }

    /// Undoes a never-used mapping a failed placement made at page `head` (no synchronization needed): a moved handle
    /// goes back to its old (free) pages, any other to the handle cache. A refused unmap leaves the pages mapped.
    pub(super) fn undo_piece(&mut self, seg: SegmentId, head: usize) {
        let r = self.range(seg);
        let Some(p) = r.page(head) else { return };
        // The handle's latest retired span is where it was before this move.
        let moved = r
            .retired
            .iter()
            .rposition(|x| x.head as usize != head && r.page(x.head as usize).is_some_and(|q| q.handle == p.handle));
        let Some(k) = moved else {
            let _ = self.unmap_piece(seg, head);
            return;
        };
        let (addr, bytes) = (self.segments.get(seg).base + head * r.page_size, p.units as usize * r.page_size);
        if self.unmap_recorded(addr, bytes, p.handle).is_err() {
            // Still a consistent move: its new pages lie in a free block.
            return;
        }
        let r = self.range_mut(seg);
        r.clear(head, p.units as usize);
        let rec = r.retired.remove(k);
        self.return_block(rec.block);
    }

    /// Gives back the retired spans of `seg` not being flushed yet whose handle `pick` accepts, marked as flushing.
    pub(super) fn give_retired_of(
        &mut self,
        seg: SegmentId,
        pick: impl Fn(PhysicalHandle) -> bool,
        out: &mut Vec<Give>,
    ) {
        let r = self.range_mut(seg);
        let (base, page, pages) = (r.base, r.page_size, &r.pages);
        for x in r.retired.iter_mut() {
            let mapped = pages.get(x.head as usize).copied().flatten();
            if let Some(p) = mapped.filter(|p| !x.flushing && pick(p.handle)) {
                x.flushing = true;
                let give = Give::pages(What::Retired, seg, base + x.head as usize * page, x.units as usize * page);
                out.push(give.with_handle(Some(p.handle)));
            }
        }
    }

    /// After `give_back` of a retired span: forgets it once unmapped (its block then returns to the free ones: true),
    /// else keeps it retired for the next reclaim.
    pub(super) fn settle_retired(&mut self, g: &Give, unmapped: bool) -> bool {
        let r = self.range_mut(g.segment);
        let head = ((g.addr - r.base) / r.page_size) as u32;
        if unmapped {
            return self.forget_retired(g.segment, head);
        }
        if let Some(x) = r.retired.iter_mut().find(|x| x.head == head) {
            x.flushing = false;
        }
        false
    }

    /// Unmaps every retired span of `seg` (the caller synchronized its streams); one refused stays retired and the
    /// first refusal is the error.
    pub(super) fn flush_retired(&mut self, seg: SegmentId) -> Result<()> {
        let sh = self.sh.clone();
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let mut first_error = None;
        let spans: Vec<Retired> = self.range(seg).retired.iter().copied().collect();
        for x in spans {
            let addr = base + x.head as usize * page;
            let handle = self.range(seg).page(x.head as usize).map(|p| p.handle);
            match super::unmap_told(&sh, self.cache.pool, addr, x.units as usize * page, handle) {
                Ok(()) => {
                    sh.counters.page_unmapped();
                    if self.forget_retired(seg, x.head) {
                        self.return_block(x.block);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(Error::runtime(e, "unmapping the old address of a moved page"));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Forgets the just-unmapped retired span at page `head` in the page table (its block is the caller's to free;
    /// the handle stays mapped at its new pages). False when no span starts there.
    fn forget_retired(&mut self, seg: SegmentId, head: u32) -> bool {
        let r = self.range_mut(seg);
        let (base, page) = (r.base, r.page_size);
        let Some(k) = r.retired.iter().position(|x| x.head == head) else { return false };
        let x = r.retired.remove(k);
        let (head, units) = (x.head as usize, x.units as usize);
        r.clear(head, units);
        self.sh.history.record(Action::SegmentUnmap, base + head * page, units * page, self.stream, self.cache.pool);
        true
    }
}

impl RangeView<'_> {
    /// Retired spans' invariants: each covers a `Reclaiming` block of exactly its pages, every page maps its handle,
    /// and that handle is mapped at one live piece of the range besides.
    pub(super) fn check_retired(&self, seg: SegmentId) -> Result<(), String> {
        let (s, r) = (self.segments.get(seg), self.range(seg));
        for x in r.retired.iter() {
            let (head, end) = (x.head as usize, (x.head + x.units) as usize);
            let b = self.blocks.get(x.block);
            if b.state != BlockState::Reclaiming
                || b.addr != s.base + head * r.page_size
                || b.size != (end - head) * r.page_size
            {
                return Err(format!("range {:#x}: retired span at page {head} is not a block of its own", s.base));
            }
            let Some(p) = r.page(head).filter(|p| p.head as usize == head && p.end() == end) else {
                return Err(format!("range {:#x}: retired span at page {head} maps no whole piece", s.base));
            };
            // Mapped at each of its retired spans and at one live piece.
            let of_handle = |i: usize| r.page(i).is_some_and(|q| q.head as usize == i && q.handle == p.handle);
            let retired = r.retired.iter().filter(|y| of_handle(y.head as usize)).count();
            if (0..r.top()).filter(|&i| of_handle(i)).count() != retired + 1 {
                return Err(format!(
                    "range {:#x}: the handle retired at page {head} is not mapped at one live piece",
                    s.base
                ));
            }
        }
        Ok(())
    }
}
