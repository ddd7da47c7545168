//! Note [moves of wholly free handles]
//!
//! On a roomy device nothing is ever unmapped, so the pages of a freed
//! block stay mapped in their hole while the range grows elsewhere: peak
//! reserved memory stays above the live bytes (BENCHMARKS.md, "Models of
//! placement and growth"). When a large-pool
//! placement would make a fresh handle for a run of unmapped pages, a
//! handle of the same range that lies wholly inside free blocks moves
//! there instead (`handle_moves`, on by default):
//!
//! - When: on a roomy device (as handles of their own), in the default
//!   pool, and only while the stream does not grow often, by the rule that
//!   decides mapping ahead (Note [mapping ahead while growth is frequent]).
//!   A move saves memory at the cost of calls: a run covered by several
//!   moved handles takes one call each, where one handle of its own takes
//!   two, so moving on every growth can spend more calls than a warm-up
//!   may. While growth is frequent calls matter more, and once the stream
//!   has served 1000 requests or more per fresh handle (a long-running
//!   server meeting a new, larger batch) memory does. With
//!   `map_ahead:false`, which puts memory first throughout, every growth
//!   may move (BENCHMARKS.md, "Memory against peers", and "Models of
//!   placement and growth" for what moving on every growth costs).
//! - Which: among the range's wholly free pieces (`free_pieces`) that fit
//!   the unmapped free pages from the run's start (as far as a fresh handle
//!   mapped ahead may reach) and lie outside the placement's free block
//!   (which carving would cut), the smallest that covers the run;
//!   else the largest, and the rest of the run is mapped next (another
//!   move, a cached or a fresh handle).
//! - How: its old pages are carved out of their free block as a block of
//!   their own in state `Reclaiming`, so no placement can be handed them,
//!   and are kept as a retired span of the range (`VmmRange::retired`):
//!   still mapped in the page table, yet counted nowhere (the memory is
//!   counted once, at the new pages). The same handle is then mapped at
//!   the new pages: one runtime call instead of two (no
//!   `aclrtMallocPhysical`), and no synchronization.
//! - Why no synchronization is needed: the old pages are free blocks of
//!   the same range, so of the same stream (a block freed with work of other
//!   streams pending stays `Pending` until its events complete, and is no
//!   free block). Work the stream queued on the old address runs before any
//!   work it queues on the new one (stream order), exactly as when a
//!   caching allocator hands a freed block to the same stream again. The
//!   old address only must never be used again before a synchronization
//!   has made that work complete and the address is unmapped.
//! - The runtime allows it: a handle may be mapped at two addresses at
//!   once, the driver checks only that the address is not mapped yet
//!   (docs/runtime-behaviour.md,
//!   "one handle mapped at two addresses at once"); the emulator too (emu
//!   tests `vmm`).
//! - Flushing: every path that synchronizes and unmaps for a shard unmaps
//!   its retired spans too: the reclaim (`detach` hands them out with
//!   `Detached::retired`, the generic machinery synchronizes their streams,
//!   `give_back` unmaps and `settle` frees the pages without caching the
//!   handle), sleep (`sleep_ranges`, after its synchronization) and
//!   teardown (`destroy_range`). A refused unmap leaves the span retired,
//!   tried again at the next reclaim.
//! - While a handle is mapped at a retired span, its live mapping is never
//!   unmapped into the handle cache (`free_pieces` skips it: the reclaim,
//!   headroom and OOM paths), so a handle is cached or freed only once its
//!   retired mappings are gone. It may move again when wholly free (its
//!   live address retired in turn): with handles of their own, the next,
//!   larger batch takes the handles the last one freed.
//! - Snapshots show a retired span as unmapped address space (no block),
//!   since its memory is the new pages'.
//! - The small pool does not move: its handles are 8 MiB at most. Nor do
//!   private pools (Note [pools]) and graph streams (Note [capture]): a
//!   captured graph replays on the old addresses of blocks freed during its
//!   capture, which sleep would unmap and not map again at wake.
//! - Nor with `reserved_headroom` (the key is refused there). That
//!   mode holds reserved memory within its bound by unmapping free pieces,
//!   after a synchronization, where the request needs them, and a moved
//!   handle is never one of those pieces while its old address is mapped,
//!   so with both on that bound would not hold. Its list of pieces, found
//!   once a placement, could also hold a piece that moved later in the
//!   same placement, whose old address it would then unmap (and cache the
//!   handle mapped still).

use super::mapping::Placement;
use super::{Piece, RangeCache, RangePool, Retired};
use crate::core::backing::Detached;
use crate::core::cache::block::{BlockId, BlockState};
use crate::core::cache::segment::SegmentId;
use crate::core::history::Action;
use crate::core::policy::PoolKind;
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;

impl RangePool<'_> {
    /// Maps a wholly free handle of the placement's range at page `i`,
    /// where `run` pages need mapping, instead of a fresh handle; it may
    /// reach past the run over the free block's unmapped pages up to page
    /// `room_end`, as a fresh handle mapped ahead does (the handle's pages
    /// are physical already: covering free pages costs nothing). Returns the
    /// pages it covers; None when no handle could move (nothing changed).
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
        // Nor while the stream grows often (in its life or in a burst): a
        // move saves memory at the cost of calls (a run covered by several
        // moved handles takes a call each, where one handle of its own takes
        // two), and there calls matter more, as for mapping ahead (Note
        // [mapping ahead while growth is frequent]). Asked first: it is
        // the usual answer, and the cheapest (no scan of the range).
        if self.pace(ctx.device.sibling).1 {
            return None;
        }
        let seg = ctx.seg;
        let (base, page) = {
            let s = self.segments.get(seg);
            (s.base, s.extent.page_size)
        };
        let first = (ctx.addr - base) / page;
        let end = (ctx.addr + ctx.size - 1 - base) / page + 1;
        // The placement's own free block: carving it would cut the block
        // being placed.
        let (lo, hi) = self.block_containing(seg, ctx.addr).map_or((first, end), |id| {
            let b = self.blocks.get(id);
            ((b.addr - base) / page, (b.addr + b.size - base).div_ceil(page))
        });
        let apart = |(head, units): (usize, usize), a: usize, b: usize| head + units <= a || b <= head;
        let mut fits: Vec<(usize, usize)> = self
            .wholly_free_pieces(seg, true)
            .into_iter()
            .filter(|&p| apart(p, first, end) && apart(p, lo, hi))
            .collect();
        // The unmapped free pages from page i, as far as the largest piece.
        let reach = room_end.min(i + fits.iter().map(|p| p.1).max()?);
        let mut avail = run;
        while i + avail < reach && self.range(seg).mappable(i + avail) {
            avail += 1;
        }
        // The old addresses a range keeps mapped stay within what it maps
        // in use: nothing else bounds them on a roomy device, where nothing
        // reclaims, and each costs address space (and, on a card, the
        // driver's record of a mapping). Past that a fresh handle is made.
        let r = self.range(seg);
        let in_use = r.mapped - r.retired_units();
        fits.retain(|p| p.1 <= avail && r.retired_units() + p.1 <= in_use);
        // Only on a roomy device, as handles of their own: near a full one a
        // large handle moved under a small run would be pinned whole by it,
        // where the rule's small fresh handles stay movable. (Asked only
        // when a handle could move: the answer sizes fresh handles too.)
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
        if sh.rt.on_device(sh.device, || sh.rt.map(new, bytes, handle)).is_err() {
            // A fresh handle is tried instead.
            self.return_block(block);
            return None;
        }
        sh.directory.insert(new, bytes, self.id);
        let r = self.range_mut(seg);
        r.set(Piece { handle, head: i as u32, units: units as u32 });
        r.retired.push(Retired { head: head as u32, units: units as u32, block, flushing: false });
        sh.counters.handle_moved();
        sh.history.record(Action::SegmentMap, new, bytes, self.stream);
        Some(units)
    }

    /// Undoes a mapping a failed placement made at page `head` (never
    /// used: no synchronization needed). A moved handle goes back to its old
    /// pages, which are free again; any other goes to the handle cache. A
    /// refused unmap leaves the pages mapped under the free block.
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
        let sh = self.sh.clone();
        if sh.rt.on_device(sh.device, || sh.rt.unmap(addr)).is_err() {
            // Still a consistent move: its new pages lie in a free block.
            return;
        }
        sh.counters.page_unmapped();
        sh.history.record(Action::SegmentUnmap, addr, bytes, self.stream);
        let r = self.range_mut(seg);
        r.clear(head, p.units as usize);
        let rec = r.retired.remove(k);
        self.return_block(rec.block);
    }

    /// The retired spans of every range not being flushed yet, detached for
    /// a reclaim (`Backing::detach` with `Scope::All`).
    pub(super) fn detach_retired(&mut self, out: &mut Vec<Detached>) {
        for seg in self.backing.ranges.clone() {
            self.detach_retired_of(seg, |_| true, out);
        }
    }

    /// The retired spans of range `seg` not being flushed yet that map a
    /// handle `pick` accepts, detached for a reclaim.
    pub(super) fn detach_retired_of(
        &mut self,
        seg: SegmentId,
        pick: impl Fn(PhysicalHandle) -> bool,
        out: &mut Vec<Detached>,
    ) {
        let r = self.range(seg);
        let picked = |x: &Retired| !x.flushing && r.page(x.head as usize).is_some_and(|p| pick(p.handle));
        if !r.retired.iter().any(picked) {
            return;
        }
        let heads: Vec<u32> = r.retired.iter().filter(|x| picked(x)).map(|x| x.head).collect();
        let (base, page, serial) = {
            let s = self.segments.get(seg);
            (s.base, s.extent.page_size, s.serial)
        };
        let streams = self.streams_of(seg);
        for x in self.range_mut(seg).retired.iter_mut().filter(|x| heads.contains(&x.head)) {
            x.flushing = true;
            let (addr, size) = (base + x.head as usize * page, x.units as usize * page);
            out.push(Detached {
                segment: seg,
                block: x.block,
                addr,
                size,
                memory: size,
                device: (addr, size),
                serial,
                streams: streams.clone(),
                retired: true,
                for_request: false,
            });
        }
    }

    /// After `give_back` of a retired span: forgets it once unmapped, else
    /// keeps it retired for the next reclaim.
    pub(super) fn settle_retired(&mut self, d: &Detached, unmapped: bool) {
        if unmapped {
            self.forget_retired(d.segment, d.block);
            return;
        }
        if let Some(x) = self.range_mut(d.segment).retired.iter_mut().find(|x| x.block == d.block) {
            x.flushing = false;
        }
    }

    /// Unmaps every retired span of `seg` (the caller synchronized its
    /// streams: sleep, teardown). One the runtime refuses stays retired;
    /// the first refusal is the error.
    pub(super) fn flush_retired(&mut self, seg: SegmentId) -> Result<()> {
        let sh = self.sh.clone();
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let mut first_error = None;
        let spans: Vec<Retired> = self.range(seg).retired.iter().copied().collect();
        for x in spans {
            let addr = base + x.head as usize * page;
            match sh.rt.on_device(sh.device, || sh.rt.unmap(addr)) {
                Ok(()) => {
                    sh.counters.page_unmapped();
                    self.forget_retired(seg, x.block);
                }
                Err(e) => {
                    first_error.get_or_insert(Error::runtime(e, "unmapping the old address of a moved page"));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A retired span just unmapped: its pages unmapped in the page table
    /// and its block free again (coalesced); the handle stays mapped at its
    /// new pages, neither cached nor freed.
    fn forget_retired(&mut self, seg: SegmentId, block: BlockId) {
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let r = self.range_mut(seg);
        let Some(k) = r.retired.iter().position(|x| x.block == block) else { return };
        let x = r.retired.remove(k);
        let (head, units) = (x.head as usize, x.units as usize);
        r.clear(head, units);
        self.sh.history.record(Action::SegmentUnmap, base + head * page, units * page, self.stream);
        self.return_block(block);
    }
}

impl RangeCache {
    /// Retired spans' invariants (`check_segment`): each covers a
    /// `Reclaiming` block of exactly its pages, every page maps its handle,
    /// and that handle is mapped at one live piece of the range besides.
    pub(super) fn check_retired(&self, seg: SegmentId) -> Result<(), String> {
        let s = self.segments.get(seg);
        let r = &s.extent;
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
