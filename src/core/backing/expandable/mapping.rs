//! Mapping pages under a block and unmapping free pieces: which handle backs
//! which pages (cached or fresh), and rolling back a partial mapping.

use super::{PageSpec, Piece, RangePool};
use crate::core::alloc::policy::PoolKind;
use crate::core::backing::lock;
use crate::core::backing::{GrowContext, GrowError, Sibling};
use crate::core::cache::segment::SegmentId;
use crate::core::report::history::Action;
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;

/// One placement being mapped: a request of `size` bytes at `addr` of segment `seg`.
pub(super) struct Placement<'a> {
    pub(super) seg: SegmentId,
    pub(super) addr: usize,
    pub(super) size: usize,
    /// Whether the placement's streams were synchronized for a page move (once per placement).
    pub(super) synced: bool,
    /// Free pieces that may move here, found on the first move.
    pub(super) victims: Option<Vec<Victim>>,
    /// Allocated bytes over the device and their peak.
    pub(super) device: &'a GrowContext<'a, super::ExpandableRanges>,
    /// Whether the sibling shard's streams were synchronized for a move.
    pub(super) sibling_synced: bool,
    /// Whether this placement made a fresh handle already.
    pub(super) grew: bool,
}

/// A free piece that may move: its range, first page and length in pages (`Placement` caches those found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Victim {
    pub pages: usize,
    pub head: usize,
    pub seg: SegmentId,
}

impl RangePool<'_> {
    /// Maps every unmapped page under [addr, addr + size) of `seg`, each run with as few handles as the cache allows;
    /// a cached handle may reach past `size` into the free block's unmapped pages, up to `addr + room`. On failure,
    /// unmaps what this call mapped (handles go to the cache).
    pub(super) fn ensure_mapped(
        &mut self,
        seg: SegmentId,
        addr: usize,
        size: usize,
        room: usize,
        device: &GrowContext<'_, super::ExpandableRanges>,
    ) -> Result<(), GrowError> {
        let (base, page, floor_pages) = (self.range(seg).base, self.range(seg).page_size, self.floor_pages(seg));
        let first = (addr - base) / page;
        let end = (addr + size - 1 - base) / page + 1;
        // Whole pages inside the free block (its first page, if shared with the previous block, is mapped already).
        let room_end = (addr + room - base) / page;
        let mut ctx =
            Placement { seg, addr, size, synced: false, victims: None, device, sibling_synced: false, grew: false };
        let mut mapped_now = Vec::new();
        let mut i = first;
        let failed = loop {
            if i >= end {
                return Ok(());
            }
            if let Some(p) = self.range(seg).page(i) {
                i = p.end();
                continue;
            }
            // Placement never reaches a sleeping page: it belongs to its run's blocks until wake (Note [sleep]).
            if self.range(seg).slept_at(i) {
                break GrowError::Other(Error::Internal(format!(
                    "a placement at {addr:#x} reached page {i}, which is asleep; nothing was mapped there"
                )));
            }
            let cell_end = self.cell_end(seg, i);
            let (end_here, room_here) = (end.min(cell_end), room_end.min(cell_end));
            let r = self.range(seg);
            let run = r.mappable_end(i + 1, end_here) - i;
            let avail = r.mappable_end(i + run, room_here.min(i + floor_pages.max(run))) - i;
            match self.map_piece(&mut ctx, i, run, avail, room_here) {
                Ok(units) => {
                    mapped_now.push(i);
                    i += units;
                }
                Err(e) => break e,
            }
        };
        for head in mapped_now {
            // Undo: the pages were never used, no sync needed.
            self.undo_piece(seg, head);
        }
        // The handles stay cached: the ladder's retry maps them again, or `reclaim` gives them back.
        Err(failed)
    }

    /// The first page past the cell holding page `i` (Note [handles within cells]); `usize::MAX` if no cells.
    fn cell_end(&self, seg: SegmentId, i: usize) -> usize {
        let cell = self.sh.backing.cell;
        if cell == usize::MAX || self.kind != PoolKind::Large {
            return usize::MAX;
        }
        // The parser made the cell a whole number of the large pool's pages.
        let pages = (cell / self.range(seg).page_size).max(1);
        (i / pages + 1) * pages
    }

    /// Maps one handle at page `i`. From page `i`, `run` pages need mapping, `avail` are unmapped free pages a cached
    /// handle may cover, and a fresh handle mapped ahead may cover unmapped free pages up to page `room_end`. Returns
    /// the pages covered.
    fn map_piece(
        &mut self,
        ctx: &mut Placement<'_>,
        i: usize,
        run: usize,
        avail: usize,
        room_end: usize,
    ) -> Result<usize, GrowError> {
        let (base, spec) = {
            let r = self.range(ctx.seg);
            (r.base, PageSpec { size: r.page_size, attr: r.attr })
        };
        let mut cached = self.cached_handle(spec.size, run, avail);
        // A wholly free handle moves here before any fresh handle or synchronized page move (`moves`).
        if cached.is_none() {
            if let Some(units) = self.move_free_handle(ctx, i, run, room_end) {
                return Ok(units);
            }
        }
        // (Sizing a fresh handle may ask the device: only with a headroom.)
        if cached.is_none()
            && self.sh.backing.reserved_headroom.is_some()
            && self.over_headroom(ctx, run.min(self.fresh_piece(ctx).0) * spec.size)
        {
            self.make_room(ctx, spec.size, run, avail);
            cached = self.cached_handle(spec.size, run, avail);
            // Nothing here could move; other streams' pieces may, with this shard's lock dropped (see `ladder`).
            if cached.is_none() && ctx.device.may_borrow && self.over_headroom(ctx, run * spec.size) {
                // Enough for the rest of the request, not just this run: the retry may not ask again.
                return Err(GrowError::NeedsRoom {
                    bytes: (ctx.addr + ctx.size - (base + i * spec.size)).max(run * spec.size),
                });
            }
        }
        let (handle, bytes) = match cached {
            Some(cached) => cached,
            None => {
                // Mapped ahead, what the run needs, the floor: each tried when the larger one is refused as out of
                // memory (another process holds some, or physical memory is fragmented).
                let (fresh_pages, roomy) = self.fresh_piece(ctx);
                let (requests, ahead_now) = self.pace(ctx.device.sibling);
                // On a roomy device, a large-pool request at least as large as a fresh handle gets handles of its
                // own: exactly the pages it lacks, nothing mapped ahead (docs/design.md, Note [handles of their own]).
                let own = roomy && self.kind == PoolKind::Large && ctx.size >= fresh_pages * spec.size;
                // A fresh handle may reach over the unmapped free pages it covers, never a sleeping one.
                let ahead = if ahead_now && !own {
                    self.range(ctx.seg).mappable_end(i + run, room_end.min(i + fresh_pages.max(run))) - i
                } else {
                    run
                };
                let first = if own { run } else { ahead.min(fresh_pages) };
                if ctx.device.may_collect {
                    // Garbage collection before growing past its threshold, for all the pages the request lacks.
                    let needed = first.max(self.lacking(ctx, i)) * spec.size;
                    if self.sh.gc_due(needed) {
                        return Err(GrowError::Collect { needed });
                    }
                }
                let sizes = [first, run.min(fresh_pages), run.min(self.floor_pages(ctx.seg))];
                let mut got = self.fresh_handle(spec, sizes[0]);
                for w in sizes.windows(2) {
                    match got {
                        Err(ref e) if e.is_out_of_memory() && w[1] < w[0] => {
                            // What the device said was too kind: ask again next time.
                            self.sh.backing.free_memory.forget();
                            got = self.fresh_handle(spec, w[1]);
                        }
                        _ => {}
                    }
                }
                let made = got?;
                // The pacing counts a growth that cells cut into several handles once (Note [handles within cells]).
                if !ctx.grew || self.sh.backing.cell == usize::MAX {
                    self.backing.fresh += 1;
                    self.backing.recent.push(requests);
                }
                ctx.grew = true;
                made
            }
        };
        let sh = self.sh.clone();
        let addr = base + i * spec.size;
        if let Err(e) = self.map_told(addr, bytes, handle) {
            sh.backing.cache_handle(bytes, handle);
            return Err(GrowError::Runtime(e));
        }
        // Blocks handed out here can now be freed by address; the entry stays until the range is released (`ranges`).
        sh.directory.insert(addr, bytes, self.id);
        let units = bytes / spec.size;
        let piece = Piece { handle, head: i as u32, units: units as u32 };
        self.range_mut(ctx.seg).set(piece);
        sh.counters.page_mapped();
        sh.history.record(Action::SegmentMap, addr, bytes, self.stream, self.cache.pool);
        Ok(units)
    }

    /// A new physical handle of `pages` pages, within the memory limit.
    fn fresh_handle(&mut self, spec: PageSpec, pages: usize) -> Result<(PhysicalHandle, usize), GrowError> {
        let bytes = pages * spec.size;
        Ok((super::new_handle(self.sh, spec.attr, bytes)?, bytes))
    }

    /// A cached handle for `run` pages that need mapping followed by `avail` unmapped free pages, taken off the
    /// cache: the largest of at most `run` pages, else the smallest of at most `avail`. The cache is keyed by size
    /// alone, though a handle fits only where its page does (docs/runtime-behaviour.md "where a 1 GiB-page handle
    /// may be mapped"): sizes keep the pools apart, as no small-pool handle is a whole number of 1 GiB or 20 MiB
    /// pages and a small-pool placement reaches far below a 1 GiB handle's 512 pages (core tests `handle_cache_kinds`).
    pub(super) fn cached_handle(&mut self, page: usize, run: usize, avail: usize) -> Option<(PhysicalHandle, usize)> {
        let mut cache = lock(&self.sh.backing.handles);
        let sizes = |limit: usize| {
            cache
                .iter()
                .filter(move |(&bytes, hs)| !hs.is_empty() && bytes % page == 0 && bytes / page <= limit)
                .map(|(&bytes, _)| bytes)
        };
        let bytes = sizes(run).max().or_else(|| sizes(avail).min())?;
        let h = cache.get_mut(&bytes).and_then(Vec::pop)?;
        Some((h, bytes))
    }

    /// Unmaps the piece at `head`, caching its handle; the caller made sure no queued work uses it.
    pub(super) fn unmap_piece(&mut self, seg: SegmentId, head: usize) -> Result<()> {
        let handle = self.unmap_leaving(seg, head)?;
        let page = self.range(seg).page_size;
        self.sh.backing.cache_handle(handle.1 * page, handle.0);
        Ok(())
    }

    /// Unmaps the piece at `head`; returns its handle and pages (teardown leaves a handle still mapped at an old
    /// address uncached).
    pub(super) fn unmap_leaving(&mut self, seg: SegmentId, head: usize) -> Result<(PhysicalHandle, usize)> {
        let (addr, page, piece) = {
            let r = self.range(seg);
            (r.base + head * r.page_size, r.page_size, r.page(head).expect("mapped page"))
        };
        debug_assert_eq!(piece.head as usize, head);
        let units = piece.units as usize;
        self.unmap_recorded(addr, units * page, piece.handle)
            .map_err(|e| Error::runtime(e, "unmapping a free page"))?;
        self.range_mut(seg).clear(head, units);
        Ok((piece.handle, units))
    }

    /// The stream's request count, and whether a fresh handle made now maps ahead: the rule says so and the stream
    /// grows often, over its life or in a burst (Note [mapping ahead while growth is frequent]). The other pool is
    /// counted when its lock is free; else this pool alone decides, by the lifetime rule (its own request count
    /// would make the other pool's handles look recent).
    pub(super) fn pace(&self, sibling: Option<&dyn Sibling<super::ExpandableRanges>>) -> (u64, bool) {
        use super::growth::{growth_is_frequent, in_burst};
        let (requests, fresh) = (self.counters().allocs, self.backing.fresh);
        if !self.sh.backing.pieces().ahead {
            return (requests, false);
        }
        let Some(sibling) = sibling else {
            let frequent = growth_is_frequent(requests, fresh) || in_burst(requests, self.backing.recent.iter());
            return (requests, frequent);
        };
        let mut paced = None;
        sibling.try_with(&mut |other| {
            let (requests, fresh) = (requests + other.counters().allocs, fresh + other.backing.fresh);
            let recent = self.backing.recent.iter().chain(other.backing.recent.iter());
            paced = Some((requests, growth_is_frequent(requests, fresh) || in_burst(requests, recent)));
        });
        paced.unwrap_or_else(|| (requests, growth_is_frequent(requests, fresh)))
    }

    /// Pages of the placement from page `i` on that are not mapped.
    fn lacking(&self, ctx: &Placement<'_>, i: usize) -> usize {
        let r = self.range(ctx.seg);
        let end = (ctx.addr + ctx.size - 1 - r.base) / r.page_size + 1;
        (i..end).filter(|&j| r.page(j).is_none()).count()
    }
}
