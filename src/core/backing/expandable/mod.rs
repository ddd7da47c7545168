//! Expandable segments: reserved ranges per shard, physical pages mapped only under blocks handed out, unmapped
//! only after synchronizing the streams that used them (docs/design.md, Note [expandable segments on ACL VMM]).

pub(crate) mod budget;
mod growth;
mod headroom;
mod mapping;
mod moves;
mod placement;
mod ranges;
pub(crate) mod sleep;
mod unused;
mod vmm_range;

use super::{
    keep_first, kept_or_made, lock, Backing, Detached, Give, GrowContext, GrowError, HeldOutside, Parts, PerSegment,
    Reports, Scope, What,
};
use crate::core::alloc::policy::{PoolKind, Shape, SMALL_BUFFER};
use crate::core::alloc::shared::Shared;
use crate::core::cache::block::{BlockId, BlockState};
use crate::core::cache::segment::SegmentId;
use crate::core::cache::Cache;
use crate::core::hooks::SegmentEvent;
use crate::core::report::history::Action;
use crate::error::{Error, Result};
use crate::runtime::{AclCallError, PhysicalHandle, Stream};
use crate::sys;
use std::collections::HashMap;
use std::sync::Mutex;

#[cfg(test)]
pub(crate) use growth::{
    growth_is_frequent, in_burst, RecentHandles, AHEAD_WHILE_REQUESTS_PER_HANDLE, BURST_HANDLES, BURST_REQUESTS,
};
#[cfg(test)]
pub(crate) use growth::{FreeMemory, REFRESH_EVERY};
pub use growth::{GrowthView, PieceRule};
pub use vmm_range::{Piece, Retired, RetiredSpans, VmmRange};

/// The largest fresh handle of a small pool: four of its 2 MiB pages.
const SMALL_PIECE_CAP: usize = 4 * SMALL_BUFFER;

/// Page geometry of one pool kind in expandable mode.
#[derive(Debug, Clone, Copy)]
pub struct PageSpec {
    pub size: usize,
    pub attr: sys::aclrtMemAttr,
}

/// The large pool's page for `page_size`, checked against the runtime's granularity.
pub(crate) fn large_page_spec(
    rt: &crate::runtime::Runtime,
    device: i32,
    config: &crate::config::Config,
) -> Result<PageSpec> {
    use crate::config::PageSize;
    let attr = match config.page_size {
        PageSize::Gib1 => sys::ACL_HBM_MEM_HUGE1G,
        _ => sys::ACL_HBM_MEM_HUGE,
    };
    let spec = PageSpec { size: config.page_size.bytes(), attr };
    let g = rt
        .on_device(device, || rt.granularity(device, attr))
        .map_err(|e| Error::runtime(e, "querying the physical memory granularity"))?;
    if g == 0 || spec.size % g != 0 {
        return Err(Error::bad_config(
            "page_size",
            format!("{} is not a multiple of the device's granularity of {g} bytes", config.page_size.as_str()),
        ));
    }
    Ok(spec)
}

/// The expandable-range backing: what its shards share.
#[derive(Debug)]
pub(crate) struct ExpandableRanges {
    /// Unmapped physical handles kept for reuse, by size.
    handles: Mutex<HashMap<usize, Vec<PhysicalHandle>>>,
    /// Reservations no range uses whose release the runtime refused, as (address, bytes charged to the budget):
    /// still charged, released by a later `free_cached` (`ranges::release_unused`).
    unreleased: Mutex<Vec<(usize, usize)>>,
    /// How big fresh handles are.
    pieces: Mutex<PieceRule>,
    large_page: PageSpec,
    /// Total device memory, sizing ranges and fresh handles.
    device_total: usize,
    /// Config key `reserved_headroom`.
    reserved_headroom: Option<f64>,
    /// Config key `handle_moves` (Note [moves of wholly free handles]).
    handle_moves: bool,
    /// Config key `max_handle_mb` in bytes, the cell no large-pool handle crosses (Note [handles within cells]);
    /// `usize::MAX`: no cells.
    cell: usize,
    /// The device's free memory as last reported, sizing fresh handles.
    free_memory: growth::FreeMemory,
    /// The shareable handle of each exported handle (made once, as the runtime allows; forgotten when it is freed).
    shareable: Mutex<HashMap<PhysicalHandle, u64>>,
}

impl ExpandableRanges {
    pub fn new(config: &crate::config::Config, large_page: PageSpec, device_total: usize) -> Self {
        ExpandableRanges {
            handles: Mutex::default(),
            unreleased: Mutex::default(),
            pieces: Mutex::new(PieceRule::for_config(config)),
            large_page,
            device_total,
            reserved_headroom: config.reserved_headroom,
            // Not with `reserved_headroom`: that mode moves free pieces itself, and a moved handle is never one of
            // them (Note [moves of wholly free handles]).
            handle_moves: config.handle_moves.unwrap_or(config.reserved_headroom.is_none()),
            cell: config.max_handle.unwrap_or(usize::MAX),
            free_memory: growth::FreeMemory::default(),
            shareable: Mutex::default(),
        }
    }

    fn pieces(&self) -> PieceRule {
        *lock(&self.pieces)
    }

    /// Replaces the handle-size rule (tests pin it to study placement).
    #[cfg(test)]
    pub fn set_pieces(&self, rule: PieceRule) {
        *lock(&self.pieces) = rule;
    }

    /// Keeps an unmapped handle of `size` bytes for reuse.
    fn cache_handle(&self, size: usize, h: PhysicalHandle) {
        lock(&self.handles).entry(size).or_default().push(h);
    }

    fn page_spec(&self, kind: PoolKind) -> PageSpec {
        match kind {
            PoolKind::Small => PageSpec { size: SMALL_BUFFER, attr: sys::ACL_HBM_MEM_HUGE },
            PoolKind::Large => self.large_page,
        }
    }
}

/// A shard's ranges: their page tables, and their order (oldest first).
#[derive(Debug, Default)]
pub(crate) struct RangeOf {
    tables: PerSegment<VmmRange>,
    ranges: Vec<SegmentId>,
    /// Fresh handles this shard has made, and the stream's request count
    /// at its last few (Note [mapping ahead while growth is frequent]).
    fresh: u64,
    recent: growth::RecentHandles,
}

impl RangeOf {
    /// Bytes of range `seg` still mapped at moved handles' old addresses.
    #[cfg(test)]
    pub(crate) fn retired_bytes(&self, seg: SegmentId) -> usize {
        let r = self.tables.get(seg);
        r.retired_units() * r.page_size
    }
}

type RangePool<'a> = Parts<'a, ExpandableRanges>;

/// A shard's ranges with its cache, read only: the questions that need both the blocks and the page tables.
#[derive(Clone, Copy)]
pub(super) struct RangeView<'a> {
    cache: &'a Cache,
    st: &'a RangeOf,
}

impl std::ops::Deref for RangeView<'_> {
    type Target = Cache;

    #[inline(always)]
    fn deref(&self) -> &Cache {
        self.cache
    }
}

impl Backing for ExpandableRanges {
    type ShardState = RangeOf;

    /// A no_split pool's request takes every handle it touches whole: ready when those are mapped, else `obtain`
    /// maps what it lacks (`place_unshared`).
    #[inline]
    fn ready(cache: &Cache, st: &RangeOf, shape: Shape, id: BlockId, rounded: usize) -> Option<usize> {
        let view = RangeView { cache, st };
        if shape.no_split {
            return view.whole_handles_under(id, rounded);
        }
        (view.unmapped_under(id, rounded) == 0).then_some(rounded)
    }

    /// Inside a range every remainder splits (unmapped tails cost nothing); a no_split block ends where its last
    /// handle ends, so what splits off starts a handle of its own or unmapped pages.
    #[inline]
    fn splits(_: &Shared<Self>, _: Shape, _: PoolKind, size: usize, rounded: usize) -> bool {
        size - rounded >= crate::core::alloc::policy::MIN_BLOCK_SIZE
    }

    fn obtain(
        mut pool: RangePool<'_>,
        rounded: usize,
        best_fit: Option<BlockId>,
        ctx: &GrowContext<'_, Self>,
    ) -> Result<(BlockId, usize), GrowError> {
        let placed = match best_fit {
            _ if pool.shape.no_split => pool.place_unshared(rounded, best_fit, ctx),
            Some(id) => pool.place_in_range(id, rounded, ctx).map(|id| (id, rounded)),
            // No free block of the shard's ranges fits: another range.
            None => pool.make_range_for_request(rounded).and_then(|seg| {
                let id = pool.segments.get(seg).first;
                pool.place_in_range(id, rounded, ctx).map(|id| (id, rounded))
            }),
        };
        match placed {
            // The range it landed in is the request's now, whichever try made it.
            Ok((id, _)) => {
                let seg = pool.blocks.get(id).segment;
                pool.range_mut(seg).for_request = false;
            }
            Err(ref e) => pool.refused(e),
        }
        placed
    }

    /// Free pieces, each a block of its own, from every range. `Scope::All` adds the ranges that hold nothing and,
    /// last, moved handles' old addresses (`moves`); `Scope::Unused` adds the empty ranges and, after each range's
    /// pieces, the old addresses that pin its wholly free handles (`unused`).
    fn unused(mut pool: RangePool<'_>, scope: Scope) -> Vec<Give> {
        let mut out = Vec::new();
        let mut left = match scope {
            Scope::WholeSegments => return out,
            Scope::All => usize::MAX,
            Scope::Pieces(bytes) | Scope::Unused(bytes) => bytes,
            Scope::Freed { addr, bytes } => {
                let mut out = pool.give_empty_ranges();
                pool.give_freed(addr, bytes, &mut out);
                return out;
            }
        };
        if matches!(scope, Scope::All | Scope::Unused(_)) {
            out.extend(pool.give_empty_ranges());
        }
        for seg in pool.backing.ranges.clone() {
            if left == 0 {
                break;
            }
            let before = out.len();
            pool.give_pieces(seg, scope, left, &mut out);
            if let Scope::Unused(_) = scope {
                // Reads the free runs as they were before the pieces above
                // leave them: those are never-moved handles, which it skips.
                let taken: usize = out[before..].iter().map(|g| g.size).sum();
                pool.give_pinning(seg, left.saturating_sub(taken), &mut out);
            }
            left = left.saturating_sub(out[before..].iter().map(|g| g.size).sum());
        }
        if scope == Scope::All {
            for seg in pool.backing.ranges.clone() {
                pool.give_retired_of(seg, |_| true, &mut out);
            }
        }
        out
    }

    fn give_back(sh: &Shared<Self>, d: &Detached) -> Result<usize> {
        if d.what == What::Segment {
            return ranges::release_range(sh, d);
        }
        unmap_told(sh, d.pool, d.addr, d.size, d.handle).map_err(|e| Error::runtime(e, "unmapping a free page"))?;
        sh.counters.page_unmapped();
        // The handle stays reserved, in the cache, until `free_cached` (a retired span's stays mapped where it moved).
        Ok(0)
    }

    fn settle(mut pool: RangePool<'_>, g: &Give, given_back: bool, readded: Option<SegmentId>) -> bool {
        match g.what {
            What::Segment => {
                // A range `release_range` could not give back returns to the shard.
                if let Some(seg) = readded {
                    pool.record_range(seg, g.addr, g.device, g.for_request);
                }
                false
            }
            What::Retired => pool.settle_retired(g, given_back),
            What::Piece => {
                if given_back {
                    let (base, page) = (pool.range(g.segment).base, pool.range(g.segment).page_size);
                    let head = (g.addr - base) / page;
                    let piece = pool.range(g.segment).page(head).expect("a detached piece is mapped");
                    let units = piece.units as usize;
                    pool.range_mut(g.segment).clear(head, units);
                    pool.sh.backing.cache_handle(units * page, piece.handle);
                    pool.sh.history.record(Action::SegmentUnmap, g.addr, units * page, pool.stream, pool.cache.pool);
                }
                true
            }
        }
    }

    fn teardown(mut pool: RangePool<'_>, busy: &[Stream]) -> Result<()> {
        let mut first_error = None;
        for seg in std::mem::take(&mut pool.backing.ranges) {
            // Memory another process holds stays where it is (`sharing`).
            if pool.streams_of(seg).iter().any(|s| busy.contains(s)) || pool.held_for_importers(seg) {
                pool.backing.ranges.push(seg);
                continue;
            }
            keep_first(&mut first_error, pool.destroy_range(seg));
            pool.unregister(pool.range(seg), pool.segments.get(seg).size);
            pool.sh.counters.range_removed();
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl HeldOutside for ExpandableRanges {
    /// Also releases the reservations kept unreleased (address space, not counted in the bytes returned).
    fn free_cached(sh: &Shared<Self>) -> Result<usize> {
        let taken: Vec<(usize, Vec<PhysicalHandle>)> = lock(&sh.backing.handles).drain().collect();
        let mut freed = 0;
        let mut first_error = ranges::release_kept(sh).err();
        for (size, handles) in taken {
            for h in handles {
                match give_handle(sh, h, size) {
                    Ok(()) => freed += size,
                    Err(e) => _ = first_error.get_or_insert(Error::runtime(e, "freeing a cached physical page")),
                }
            }
        }
        first_error.map_or(Ok(freed), Err)
    }

    fn free_cached_upto(sh: &Shared<Self>, bytes: usize) -> Result<usize> {
        let mut freed = 0;
        while freed < bytes {
            let want = bytes - freed;
            let taken = {
                let mut cache = lock(&sh.backing.handles);
                let sizes = || cache.iter().filter(|(_, hs)| !hs.is_empty()).map(|(&size, _)| size);
                let size = sizes().filter(|&size| size >= want).min().or_else(|| sizes().max());
                size.and_then(|size| cache.get_mut(&size).and_then(Vec::pop).map(|h| (size, h)))
            };
            let Some((size, h)) = taken else { break };
            // Kept on refusal for a later `free_cached`: asking again now would pick the same handle.
            give_handle(sh, h, size).map_err(|e| Error::runtime(e, "freeing a cached physical page"))?;
            freed += size;
        }
        Ok(freed)
    }

    fn keeps_reservations(&self) -> bool {
        !lock(&self.unreleased).is_empty()
    }

    fn cached_bytes(&self) -> usize {
        lock(&self.handles).iter().map(|(size, hs)| size * hs.len()).sum()
    }
}

impl super::Shares for ExpandableRanges {
    /// Every handle mapped under the block's pages, in address order; the importer maps them into one range as here.
    fn share(pool: RangePool<'_>, seg: SegmentId, addr: usize, size: usize) -> Result<super::SharedMemory> {
        let r = pool.range(seg);
        let (base, page) = (r.base, r.page_size);
        let (first, last) = ((addr - base) / page, (addr + size - 1 - base) / page);
        let mut pieces = (first..=last)
            .map(|i| r.page(i).ok_or_else(|| Error::Unsupported(format!("block {addr:#x} is not mapped (asleep?)"))))
            .collect::<Result<Vec<_>>>()?;
        pieces.dedup_by_key(|p| p.head);
        let sh = pool.sh;
        let mut handles = Vec::with_capacity(pieces.len());
        for p in &pieces {
            let shareable = kept_or_made(&sh.backing.shareable, p.handle, || {
                sh.rt.on_device(sh.device, || sh.rt.export_handle(p.handle)).map_err(|e| {
                    Error::runtime(
                        e,
                        "exporting a physical handle to another process (the runtime exports a handle once \
                                 per process: a communication library that registered it may have exported it)",
                    )
                })
            })?;
            handles.push((shareable, p.units as usize * page));
        }
        let offset = addr - (base + pieces[0].head as usize * page);
        Ok(super::SharedMemory::Handles { handles, offset })
    }
}

impl Reports for ExpandableRanges {
    fn held_bytes(st: &RangeOf, seg: SegmentId) -> usize {
        // A moved handle counts once: at its new pages, not its retired ones.
        let r = st.tables.get(seg);
        let stuck: usize = r.stuck.iter().map(|p| p.units as usize).sum();
        (r.mapped - r.retired_units() + stuck) * r.page_size
    }

    fn largest_free(cache: &Cache, st: &RangeOf) -> usize {
        RangeView { cache, st }.largest_mapped_free()
    }

    fn check_segment(cache: &Cache, st: &RangeOf, seg: SegmentId) -> Result<(), String> {
        let pool = RangeView { cache, st };
        let (s, r) = (pool.segments.get(seg), pool.range(seg));
        if r.base != s.base {
            return Err(format!("range {:#x}: its page table says it starts at {:#x}", s.base, r.base));
        }
        if r.pages.iter().filter(|p| p.is_some()).count() != r.mapped {
            return Err(format!("range {:#x}: mapped count disagrees with its pages", s.base));
        }
        // A sleeping page is mapped again only by its wake (Note [sleep]).
        if let Some(i) = (0..r.top()).find(|&i| r.page(i).is_some() && r.slept_at(i)) {
            return Err(format!("range {:#x}: page {i} is asleep and mapped at once", s.base));
        }
        // A piece an undo could not unmap lies on a sleeping run, off the pages.
        if let Some(p) =
            r.stuck.iter().find(|p| !r.slept_within(p.head as usize, p.end()) || r.page(p.head as usize).is_some())
        {
            return Err(format!("range {:#x}: a piece left mapped at page {} lies on no sleeping run", s.base, p.head));
        }
        for (_, b) in pool.blocks_of(seg) {
            if matches!(b.state, BlockState::Allocated | BlockState::Held | BlockState::Pending) {
                let first = (b.addr - s.base) / r.page_size;
                let last = (b.addr + b.size - 1 - s.base) / r.page_size;
                if (first..=last).any(|i| r.page(i).is_none() && !r.slept.iter().any(|run| run.covers(i))) {
                    return Err(format!("allocated block {:#x} is not fully mapped", b.addr));
                }
            }
        }
        pool.check_retired(seg)
    }

    fn describe(st: &RangeOf, seg: SegmentId) -> (bool, usize) {
        let r = st.tables.get(seg);
        (true, (r.mapped - r.retired_units()) * r.page_size)
    }

    fn mapped_runs(st: &RangeOf, seg: SegmentId, addr: usize, size: usize, out: &mut Vec<(usize, usize)>) {
        let r = st.tables.get(seg);
        out.extend(r.mapped_spans(addr - r.base, addr + size - r.base).map(|(from, to)| (r.base + from, to - from)));
    }

    /// Pieces mapped now: every page-table piece (a moved handle at its new and, until flushed, its old address) and
    /// the pieces an undone wake could not unmap; none of a sleeping run.
    fn held_pieces(
        st: &RangeOf,
        seg: SegmentId,
        base: usize,
        size: usize,
        out: &mut Vec<(SegmentEvent, usize, usize, Option<PhysicalHandle>)>,
    ) {
        let r = st.tables.get(seg);
        out.push((SegmentEvent::Reserve, base, size, None));
        let page = r.page_size;
        for p in r.pieces().chain(r.stuck.iter().copied()) {
            out.push((SegmentEvent::Map, r.base + p.head as usize * page, p.units as usize * page, Some(p.handle)));
        }
    }
}

/// Tells the segment observer (pool `pool`), then unmaps `bytes` at `addr`; a refused unmap is told as mapped again.
fn unmap_told(
    sh: &Shared<ExpandableRanges>,
    pool: u64,
    addr: usize,
    bytes: usize,
    handle: Option<PhysicalHandle>,
) -> Result<(), AclCallError> {
    sh.segment_event(SegmentEvent::Unmap, addr, bytes, handle, pool);
    let unmapped = sh.rt.on_device(sh.device, || sh.rt.unmap(addr));
    if unmapped.is_err() {
        sh.segment_event(SegmentEvent::Map, addr, bytes, handle, pool);
    }
    unmapped
}

/// A new physical handle of `bytes`, within the memory limit.
fn new_handle(
    sh: &Shared<ExpandableRanges>,
    attr: sys::aclrtMemAttr,
    bytes: usize,
) -> Result<PhysicalHandle, GrowError> {
    let h = sh.limit.charged(bytes, || sh.rt.on_device(sh.device, || sh.rt.malloc_physical(sh.device, attr, bytes)))?;
    sh.counters.physical_allocated(bytes);
    Ok(h)
}

/// Gives an unmapped handle of `size` bytes back to the runtime; a refused one goes to the handle cache.
fn give_handle(sh: &Shared<ExpandableRanges>, h: PhysicalHandle, size: usize) -> Result<(), AclCallError> {
    // Forgotten before the free: a handle made once this one is freed may get its value, and another thread may
    // export it at once. Nothing else can share this one meanwhile: it is unmapped and out of the handle cache.
    let exported = lock(&sh.backing.shareable).remove(&h);
    if let Err(e) = sh.rt.on_device(sh.device, || sh.rt.free_physical(h)) {
        if let Some(shareable) = exported {
            lock(&sh.backing.shareable).insert(h, shareable);
        }
        sh.backing.cache_handle(size, h);
        return Err(e);
    }
    sh.limit.refund(size);
    sh.counters.physical_freed(size);
    Ok(())
}

impl RangePool<'_> {
    /// Pages one fresh handle of the placement's segment covers at most (Note [sizing a fresh handle]), and whether
    /// the device is roomy: its free memory did not make the handle smaller than the allocator's own use asks for
    /// (Note [handles of their own]). The peak of allocated bytes counts the request being placed. Small-pool handles
    /// stay within `SMALL_PIECE_CAP`: one live small block pins its whole handle against `empty_cache` and the OOM
    /// ladder.
    fn fresh_piece(&self, ctx: &mapping::Placement<'_>) -> (usize, bool) {
        let rule = self.sh.backing.pieces();
        let d = ctx.device;
        let allocated_peak = d.allocated_peak.max(d.allocated + ctx.size as u64);
        let allocated_peak = usize::try_from(allocated_peak).unwrap_or(usize::MAX);
        let free = if rule.reads_free_memory() {
            let reserved = self.sh.counters.reserved();
            self.sh.backing.free_memory.get(reserved, rule.binds_below(allocated_peak), || self.device_free())
        } else {
            0
        };
        let mut bytes = rule.fresh_bytes(GrowthView { free, allocated_peak });
        let roomy =
            rule.reads_free_memory() && bytes >= rule.fresh_bytes(GrowthView { free: usize::MAX, allocated_peak });
        if self.kind == PoolKind::Small {
            bytes = bytes.min(SMALL_PIECE_CAP);
        }
        ((bytes / self.range(ctx.seg).page_size).max(1), roomy)
    }

    /// Free device memory for sizing a handle, within a memory fraction's limit; a failed `aclrtGetMemInfo` falls
    /// back to the device's size less what this allocator reserved (a wrong guess costs one refused call).
    fn device_free(&self) -> usize {
        let sh = &self.sh;
        let reserved = sh.counters.reserved();
        let reported = sh
            .rt
            .on_device(sh.device, || sh.rt.mem_info())
            .map_or_else(|_| sh.backing.device_total.saturating_sub(reserved), |(free, _)| free);
        sh.limit.get().map_or(reported, |l| reported.min(l.saturating_sub(reserved)))
    }

    /// Pages of a floor-size handle: how far a cached handle may reach past what a placement needs.
    fn floor_pages(&self, seg: SegmentId) -> usize {
        (self.sh.backing.pieces().floor / self.range(seg).page_size).max(1)
    }

    fn view(&self) -> RangeView<'_> {
        RangeView { cache: self.cache, st: self.backing }
    }

    fn range(&self, seg: SegmentId) -> &VmmRange {
        self.backing.tables.get(seg)
    }

    fn range_mut(&mut self, seg: SegmentId) -> &mut VmmRange {
        self.backing.tables.get_mut(seg)
    }

    /// Maps `handle` at [addr, addr + bytes), then tells the segment observer.
    fn map_told(&self, addr: usize, bytes: usize, handle: PhysicalHandle) -> Result<(), AclCallError> {
        self.sh.rt.on_device(self.sh.device, || self.sh.rt.map(addr, bytes, handle))?;
        self.segment_event(SegmentEvent::Map, addr, bytes, Some(handle));
        Ok(())
    }

    /// `unmap_told` of `handle` at [addr, addr + bytes) of this shard's pool, counted and recorded once unmapped.
    fn unmap_recorded(&self, addr: usize, bytes: usize, handle: PhysicalHandle) -> Result<(), AclCallError> {
        unmap_told(self.sh, self.cache.pool, addr, bytes, Some(handle))?;
        self.sh.counters.page_unmapped();
        self.sh.history.record(Action::SegmentUnmap, addr, bytes, self.stream, self.cache.pool);
        Ok(())
    }

    /// Synchronizes the streams that used `seg`, before unmapping its pages under this shard's lock (headroom move).
    fn sync_streams_of(&self, seg: SegmentId) -> Result<()> {
        let sh = &self.sh;
        for st in self.streams_of(seg) {
            sh.counters.synced();
            match sh.rt.on_device(sh.device, || sh.rt.synchronize_stream(st)) {
                Ok(()) => {}
                // A destroyed stream has no work left (ACL requires a synchronize before destroying one).
                Err(e) if e.is_invalid_handle() => {}
                Err(e) => return Err(Error::runtime(e, "synchronizing a stream before unmapping memory")),
            }
        }
        Ok(())
    }
}

impl<'a> RangeView<'a> {
    #[inline(always)]
    fn range(&self, seg: SegmentId) -> &'a VmmRange {
        self.st.tables.get(seg)
    }
}
