//! `reserved_headroom`: keep reserved memory within a fraction over the peak of allocated bytes by moving free
//! pieces instead of allocating new ones. When a fresh handle would take reserved memory past
//! `(1 + headroom) x peak allocated` (this request included), cached handles too large to serve it are freed, then
//! free pieces elsewhere in the shard's ranges are unmapped (largest first) so their handles back the request.
//! Unmapping synchronizes the range's streams: once per placement, never within the headroom. Pieces move from the
//! growing shard and from the same stream's other shard (`move_from_sibling`, only when its lock is free); other
//! streams' free pieces reach it through the OOM ladder. Off by default: on a busy device those synchronizations cost
//! more than the memory they save (BENCHMARKS.md, "Models of placement and growth").

use super::mapping::{Placement, Victim};
use super::{give_handle, RangePool};
use crate::core::backing::lock;

impl RangePool<'_> {
    /// Whether `extra` fresh bytes would take reserved memory past the headroom (false when it is off).
    pub(super) fn over_headroom(&self, ctx: &Placement<'_>, extra: usize) -> bool {
        let Some(headroom) = self.sh.backing.reserved_headroom else { return false };
        let d = ctx.device;
        let peak = d.allocated_peak.max(d.allocated + ctx.size as u64) as f64;
        (self.sh.counters.reserved() + extra) as f64 > peak * (1.0 + headroom)
    }

    /// Puts a handle usable for `run` pages (of `avail` free) in the cache if one can be had without allocating:
    /// frees cached handles no page here can use, then moves the largest free piece that fits.
    pub(super) fn make_room(&mut self, ctx: &mut Placement<'_>, page: usize, run: usize, avail: usize) {
        self.trim_cache(page, avail, run * page);
        if !self.over_headroom(ctx, run * page) {
            return;
        }
        // The victims stay valid through the placement because no handle
        // moves in this mode (Note [moves of wholly free handles]).
        debug_assert!(!self.sh.backing.handle_moves, "handle moves with reserved_headroom");
        let mut victims = ctx.victims.take().unwrap_or_else(|| self.movable_pieces(ctx));
        // Largest first, then lowest address: the first piece that fits,
        // here or in the stream's other pool (see `move_from_sibling`).
        let own = victims.iter().position(|v| v.pages <= avail);
        if self.move_from_sibling(ctx, page, avail, own.map_or(0, |i| victims[i].pages)) {
            ctx.victims = Some(victims);
            return;
        }
        if let Some(pos) = own {
            let v = victims.remove(pos);
            // The placement's range is synchronized once; an older range each time one of its pieces moves (rare).
            let synced = if v.seg == ctx.seg {
                ctx.synced = ctx.synced || self.sync_streams_of(ctx.seg).is_ok();
                ctx.synced
            } else {
                self.sync_streams_of(v.seg).is_ok()
            };
            if synced {
                let _ = self.unmap_piece(v.seg, v.head);
            }
        }
        ctx.victims = Some(victims);
    }

    /// Moves the largest free piece of the stream's other pool that fits `avail` pages here, if it is larger than
    /// `beat` pages, no one holds that pool now (never waited for; same stream, so holding it stalls no other
    /// stream) and its pages are whole pages here. Returns whether a piece moved.
    fn move_from_sibling(&mut self, ctx: &mut Placement<'_>, page: usize, avail: usize, beat: usize) -> bool {
        let Some(sibling) = ctx.device.sibling else { return false };
        let mut moved = false;
        let synced = &mut ctx.sibling_synced;
        sibling.try_with(&mut |mut other| {
            // Its held blocks may coalesce into whole free pieces.
            other.drain_reuse();
            let mut best: Option<(usize, crate::core::cache::segment::SegmentId, usize)> = None;
            for seg in other.backing.ranges.clone() {
                let theirs = other.range(seg).page_size;
                if theirs % page != 0 {
                    continue;
                }
                let fits = |units: usize| units * theirs / page;
                for (head, units) in other.view().wholly_free_pieces(seg, false) {
                    let n = fits(units);
                    if n <= avail && best.is_none_or(|(m, _, _)| n > m) {
                        best = Some((n, seg, head));
                    }
                }
            }
            let Some((pages, seg, head)) = best else { return };
            if pages <= beat {
                return;
            }
            *synced = *synced || other.sync_streams_of(seg).is_ok();
            moved = *synced && other.unmap_piece(seg, head).is_ok();
        });
        moved
    }

    /// Free pieces outside the request: largest first (fewest calls per byte moved), then lowest page, for a
    /// deterministic order (no order of equal pieces helps across workloads).
    fn movable_pieces(&self, ctx: &Placement<'_>) -> Vec<Victim> {
        let page = self.range(ctx.seg).page_size;
        let mut found: Vec<Victim> = Vec::new();
        // Every range of the shard: a request that opened a new range may take the older ones' pages.
        for &seg in &self.backing.ranges {
            let s = self.range(seg);
            if s.page_size != page {
                continue;
            }
            found.extend(
                self.view()
                    .wholly_free_pieces(seg, false)
                    .into_iter()
                    .filter(|&(head, units)| {
                        let (lo, hi) = (s.base + head * page, s.base + (head + units) * page);
                        seg != ctx.seg || hi <= ctx.addr || lo >= ctx.addr + ctx.size
                    })
                    .map(|(head, pages)| Victim { pages, head, seg }),
            );
        }
        found.sort_unstable_by_key(|v| (std::cmp::Reverse(v.pages), v.seg, v.head));
        found
    }

    /// Frees cached handles (of `page` multiples) larger than `avail` pages, largest first, until `bytes` are freed:
    /// they cannot serve this placement and only count against the headroom.
    fn trim_cache(&mut self, page: usize, avail: usize, bytes: usize) {
        let mut sizes: Vec<usize> = lock(&self.sh.backing.handles)
            .iter()
            .filter(|(&b, hs)| b % page == 0 && b / page > avail && !hs.is_empty())
            .map(|(&b, _)| b)
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let mut freed = 0;
        for size in sizes {
            while freed < bytes {
                let Some(h) = lock(&self.sh.backing.handles).get_mut(&size).and_then(Vec::pop) else { break };
                if give_handle(self.sh, h, size).is_err() {
                    return;
                }
                freed += size;
            }
        }
    }
}
