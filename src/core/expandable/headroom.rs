//! `reserved_headroom`: keep reserved memory within a fraction over the peak
//! of allocated bytes by moving free pieces instead of allocating new ones.
//!
//! When a placement needs a fresh handle and that would take reserved
//! memory past `(1 + headroom) x peak allocated` (this request included),
//! cached handles too large to serve it are freed first, then free pieces
//! elsewhere are unmapped (largest first) so their handles back the request.
//! Unmapping needs the streams that used those pieces synchronized: once per
//! placement, and never when the headroom is not exceeded. Placement helps:
//! with a headroom a request that needs pages goes where the fewest are
//! missing (`placement`), so fewer pieces move. Off by default:
//! on a busy device those synchronizations cost more than the memory they
//! save (see BENCHMARKS.md).

use super::mapping::Placement;
use crate::core::state::State;

impl State {
    /// Whether `extra` fresh bytes would take reserved memory past the
    /// headroom (always false when `reserved_headroom` is off).
    pub(super) fn over_headroom(&self, ctx: &Placement, extra: usize) -> bool {
        let Some(headroom) = self.reserved_headroom else { return false };
        let s = self.stats.get();
        let peak = s.allocated_bytes_peak.max(s.allocated_bytes + ctx.size as u64) as f64;
        (s.reserved_bytes + extra as u64) as f64 > peak * (1.0 + headroom)
    }

    /// Puts a handle usable for `run` pages (of `avail` free) in the cache
    /// if one can be had without allocating: frees cached handles no page
    /// here can use, then moves the largest free piece that fits.
    pub(super) fn make_room(&mut self, ctx: &mut Placement, page: usize, run: usize, avail: usize) {
        self.trim_cache(page, avail, run * page);
        if !self.over_headroom(ctx, run * page) {
            return;
        }
        let victims = match ctx.victims.take() {
            Some(v) => v,
            None => self.movable_pieces(ctx, page),
        };
        let mut victims = victims;
        // Largest first, then lowest address: the first piece that fits.
        if let Some(pos) = victims.iter().position(|v| v.0 <= avail) {
            let (_, _, seg, head) = victims.remove(pos);
            let synced = ctx.synced.contains(&seg) || self.sync_streams_of(&[seg]).is_ok();
            if synced {
                if !ctx.synced.contains(&seg) {
                    ctx.synced.push(seg);
                }
                let _ = self.unmap_piece(seg, head);
            }
        }
        ctx.victims = Some(victims);
    }

    /// Free pieces of `page`-sized ranges outside the request, as
    /// (pages, address, segment, head): largest first (fewest calls per
    /// byte moved), then by segment and lowest page. Which of equal pieces
    /// goes first changes how many move later by a fifth either way on bert
    /// (BENCHMARKS.md); none was better on every trace.
    fn movable_pieces(&self, ctx: &Placement, page: usize) -> Vec<(usize, usize, u32, usize)> {
        let mut found = Vec::new();
        for seg in self.segments.ids() {
            let s = self.segments.get(seg);
            if !s.vmm.as_ref().is_some_and(|r| r.page_size == page) {
                continue;
            }
            for (head, units) in self.free_pieces(seg) {
                let (lo, hi) = (s.base + head * page, s.base + (head + units) * page);
                if seg == ctx.seg && hi > ctx.addr && lo < ctx.addr + ctx.size {
                    continue;
                }
                found.push((units, lo, seg, head));
            }
        }
        found.sort_unstable_by_key(|&(units, _, seg, head)| (std::cmp::Reverse(units), seg, head));
        found
    }

    /// Frees cached handles (of `page` multiples) larger than `avail` pages,
    /// largest first, until `bytes` are freed: they cannot serve this
    /// placement and only count against the headroom.
    fn trim_cache(&mut self, page: usize, avail: usize, bytes: usize) {
        let mut sizes: Vec<usize> = self
            .handle_cache
            .iter()
            .filter(|(&b, hs)| b % page == 0 && b / page > avail && !hs.is_empty())
            .map(|(&b, _)| b)
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let mut freed = 0;
        for size in sizes {
            while freed < bytes {
                let Some(h) = self.handle_cache.get_mut(&size).and_then(Vec::pop) else { break };
                if self.free_handle(h, size).is_err() {
                    self.handle_cache.entry(size).or_default().push(h);
                    return;
                }
                freed += size;
            }
        }
    }
}
