//! A shard's address ranges: sizing a new one, reserving it within the per-reservation cap and the process-wide
//! budget (Note [address-space budget] in `budget`), giving back a range that holds nothing, and teardown.
//! A range is released whole only when nothing in it is mapped and no block of it is handed out; its directory
//! entries go with it, so a pointer into it is unknown again, and the runtime may hand the addresses to anyone.

use super::{budget, ExpandableRanges, RangePool, RangeView, RetiredSpans, VmmRange, SMALL_BUFFER};
use crate::core::alloc::directory::ADDRESS_LIMIT;
use crate::core::alloc::policy::PoolKind;
use crate::core::alloc::shared::Shared;
use crate::core::backing::{keep_first, lock};
use crate::core::backing::{Detached, Give, GrowError, HeldOutside, Scope, What};
use crate::core::cache::segment::SegmentId;
use crate::core::hooks::SegmentEvent;
use crate::error::{Error, Result};
use crate::sys;

impl RangePool<'_> {
    /// Forgets a range's addresses in the directory: only the pages its mapping ever registered (mapping registers
    /// each piece and `pages` never shrinks, so past its top the release has nothing to remove).
    pub(super) fn unregister(&self, r: &VmmRange, size: usize) {
        self.sh.directory.remove(r.base, (r.top() * r.page_size).min(size));
    }

    /// Address space for a new range serving `rounded` bytes aligned to `align`: the device's size (large pool;
    /// twice it with `reserved_headroom`, whose page moves leave holes, so a nearly full device would refuse sooner)
    /// or a sixteenth of it (small pool), within the budget's share, never below the request, and within the
    /// per-reservation cap with the alignment padding. None when even the request cannot fit one reservation.
    fn range_bytes(&self, rounded: usize, page: usize, align: usize) -> Option<usize> {
        let total = self.sh.backing.device_total;
        let usual = match self.kind {
            PoolKind::Large if self.sh.backing.reserved_headroom.is_some() => 2 * total,
            PoolKind::Large => total,
            PoolKind::Small => total / 16,
        };
        // Room for a retry padded to the alignment (`reserve_aligned`).
        let cap = (budget::MAX_RESERVATION - align) / page * page;
        let need = rounded.div_ceil(page) * page;
        let want = usual.min(budget::share()).div_ceil(page).max(1) * page;
        (need <= cap).then(|| want.max(need).min(cap))
    }

    /// Makes another range for this shard, large enough for `rounded` bytes, charged to the process budget.
    pub(super) fn make_range(&mut self, rounded: usize) -> Result<SegmentId, GrowError> {
        let sh = self.sh.clone();
        let spec = sh.backing.page_spec(self.kind);
        // A 1 GiB page maps only at a 1 GiB boundary; other pages at 2 MiB, which every reservation has.
        let align = if spec.attr == sys::ACL_HBM_MEM_HUGE1G { spec.size } else { SMALL_BUFFER };
        let Some(va) = self.range_bytes(rounded, spec.size, align) else {
            // Larger than any device this runtime drives: out of memory, with no recovery to try.
            return Err(GrowError::Other(Error::OutOfMemory(format!(
                "cannot allocate {rounded} bytes: more than one reservation of address space holds (at most {} \
                 bytes with its alignment)",
                budget::MAX_RESERVATION
            ))));
        };
        let (reserved_at, base, reserved_len) = self.reserve_aligned(va, align)?;
        if base + va > ADDRESS_LIMIT {
            let _ = release_unused(&sh, reserved_at, reserved_len);
            return Err(GrowError::Other(Error::Unsupported(format!(
                "the runtime reserved device addresses up to {:#x}, above the {ADDRESS_LIMIT:#x} this allocator supports",
                base + va
            ))));
        }
        // The directory learns a range's pages as they are mapped (`mapping`): registering many GiB up front is slow.
        let (seg, _) = self.add_segment(base, va, None);
        self.record_range(seg, base, (reserved_at, reserved_len), false);
        self.segment_event(SegmentEvent::Reserve, base, va, None);
        sh.counters.range_added();
        Ok(seg)
    }

    /// Reserves `va` bytes of address space at an `align` boundary: (address to release, aligned start, bytes
    /// reserved). The runtime only promises its own granularity, so an unaligned reservation is given back and taken
    /// again `align` larger. Each try is charged to the budget first; a refusal (the budget's or the runtime's
    /// 207001) is an address-space failure. A refused give-back is kept for `free_cached`; the padded try goes on.
    fn reserve_aligned(&self, va: usize, align: usize) -> Result<(usize, usize, usize), GrowError> {
        let at = self.reserve_charged(va)?;
        if at % align == 0 {
            return Ok((at, at, va));
        }
        let _ = release_unused(self.sh, at, va);
        let padded = va + align;
        let at = self.reserve_charged(padded)?;
        Ok((at, at.next_multiple_of(align), padded))
    }

    /// One `aclrtReserveMemAddress` of `bytes`, charged to the budget.
    fn reserve_charged(&self, bytes: usize) -> Result<usize, GrowError> {
        if !budget::take(bytes) {
            return Err(GrowError::AddressSpace { range: bytes, refused: None });
        }
        let sh = &self.sh;
        sh.rt.on_device(sh.device, || sh.rt.reserve(bytes)).map_err(|e| {
            budget::give(bytes);
            if e.is_out_of_memory() {
                GrowError::AddressSpace { range: bytes, refused: Some(e) }
            } else {
                GrowError::Runtime(e)
            }
        })
    }

    /// Forgets this backing's side of range `seg`, which holds nothing; the cache still has the segment.
    fn forget_range(&mut self, seg: SegmentId) -> VmmRange {
        self.backing.ranges.retain(|&r| r != seg);
        let r = self.backing.tables.take(seg);
        self.unregister(&r, self.segments.get(seg).size);
        r
    }

    /// Every range that holds nothing, given whole (for `release_range`).
    pub(super) fn give_empty_ranges(&mut self) -> Vec<Give> {
        let empty: Vec<SegmentId> =
            self.backing.ranges.iter().copied().filter(|&seg| self.view().range_holds_nothing(seg)).collect();
        let give = |seg| {
            let r = self.forget_range(seg);
            Give {
                // Address space only.
                memory: 0,
                device: (r.reserved_at, r.reserved_len),
                // Nothing is mapped: no queued work can touch it.
                sync: false,
                for_request: r.for_request,
                ..Give::pages(What::Segment, seg, r.base, self.segments.get(seg).size)
            }
        };
        empty.into_iter().map(give).collect()
    }

    /// `make_range` for the request being served: given back by `refused` if the request fails for good.
    pub(super) fn make_range_for_request(&mut self, rounded: usize) -> Result<SegmentId, GrowError> {
        let seg = self.make_range(rounded)?;
        self.range_mut(seg).for_request = true;
        Ok(seg)
    }

    /// After a try failed with `e`: unless the ladder retries, the still-empty ranges made for requests go back (a
    /// refused request leaves the device's address space as it found it).
    #[cold]
    #[inline(never)]
    pub(super) fn refused(&mut self, e: &GrowError) {
        if e.is_retried() {
            return;
        }
        for seg in self.backing.ranges.clone() {
            if self.range(seg).for_request {
                self.range_mut(seg).for_request = false;
                self.unmake_range(seg);
            }
        }
    }

    /// Gives back range `seg`, made by a request that then failed, if it holds nothing (between the ladder's tries
    /// another request may have been placed there, or a refused unmap left a piece). A refused release is kept for
    /// `free_cached` (`release_unused`).
    pub(super) fn unmake_range(&mut self, seg: SegmentId) {
        if !self.view().range_holds_nothing(seg) {
            return;
        }
        let size = self.segments.get(seg).size;
        // Out of the shard: the backing's side, then the segment.
        let r = self.forget_range(seg);
        self.remove_segment(seg);
        // No segment any more, released or kept: the observer forgets it either way (nothing is mapped in it).
        self.segment_event(SegmentEvent::Release, r.base, size, None);
        let _ = release_unused(self.sh, r.reserved_at, r.reserved_len);
        self.sh.counters.range_removed();
    }

    /// Records segment `seg` as a range of this shard with nothing mapped, at `base` over the reservation `reserved`
    /// (address, bytes): a new one, or one `release_range` could not give back.
    pub(super) fn record_range(&mut self, seg: SegmentId, base: usize, reserved: (usize, usize), for_request: bool) {
        let spec = self.sh.backing.page_spec(self.kind);
        let (reserved_at, reserved_len) = reserved;
        let range = VmmRange {
            base,
            page_size: spec.size,
            attr: spec.attr,
            for_request,
            pages: Vec::new(),
            mapped: 0,
            reserved_at,
            reserved_len,
            slept: Vec::new(),
            stuck: Vec::new(),
            retired: RetiredSpans::default(),
        };
        self.backing.tables.set(seg, range);
        self.backing.ranges.push(seg);
    }

    /// Teardown of the range: unmap, free physical, release (the documented order); the caller synchronized the
    /// streams. Moved handles' old addresses go first, so each handle is freed once; one whose old address stays
    /// mapped (a refused unmap) is unmapped at its new pages but not freed.
    pub(super) fn destroy_range(&mut self, seg: SegmentId) -> Result<()> {
        let mut first_error = self.flush_retired(seg).err();
        let r = self.range(seg);
        let heads: Vec<usize> = r.pieces().map(|p| p.head as usize).filter(|&i| !r.retired_at(i)).collect();
        for head in heads {
            let result = match self.range(seg).page(head) {
                // Not cached: the handle is still mapped at an old address.
                Some(p) if self.range(seg).is_moved(p.handle) => self.unmap_leaving(seg, head).map(|_| ()),
                _ => self.unmap_piece(seg, head),
            };
            keep_first(&mut first_error, result);
        }
        keep_first(&mut first_error, ExpandableRanges::free_cached(self.sh));
        keep_first(&mut first_error, self.drop_slept(seg));
        let (reserved_at, reserved_len) = (self.range(seg).reserved_at, self.range(seg).reserved_len);
        // A refused release is kept for teardown's `free_cached` to retry. The observer hears of the release once
        // nothing it was told of is mapped in it (a piece whose unmap was refused stays told, and so does the range).
        let r = self.range(seg);
        if r.mapped == 0 && r.stuck.is_empty() {
            self.segment_event(SegmentEvent::Release, r.base, self.segments.get(seg).size, None);
        }
        let _ = release_unused(self.sh, reserved_at, reserved_len);
        first_error.map_or(Ok(()), Err)
    }

    /// Free pieces of range `seg` onto `out` in address order; for `Scope::Pieces` and `Scope::Unused` at most
    /// `bytes` of them, largest first.
    pub(super) fn give_pieces(&mut self, seg: SegmentId, scope: Scope, bytes: usize, out: &mut Vec<Give>) {
        let mut pieces = self.view().wholly_free_pieces(seg, false);
        let page = self.range(seg).page_size;
        if let Scope::Pieces(_) | Scope::Unused(_) = scope {
            pieces.sort_unstable_by_key(|&(head, units)| (std::cmp::Reverse(units), head));
            let mut taken = 0;
            pieces.retain(|&(_, units)| {
                let keep = taken < bytes;
                taken += if keep { units * page } else { 0 };
                keep
            });
        }
        pieces.sort_unstable();
        self.give_pieces_of(seg, pieces, out);
    }

    /// Pieces (first page, pages) of range `seg` as gives onto `out`, naming the handle mapped there.
    pub(super) fn give_pieces_of(&self, seg: SegmentId, pieces: Vec<(usize, usize)>, out: &mut Vec<Give>) {
        let r = self.range(seg);
        let (base, page) = (r.base, r.page_size);
        out.extend(pieces.into_iter().map(|(head, units)| {
            Give::pages(What::Piece, seg, base + head * page, units * page).with_handle(r.page(head).map(|p| p.handle))
        }));
    }
}

impl RangeView<'_> {
    /// Whether range `seg` holds nothing (may be released whole): one free block, no page mapped, asleep or stuck.
    fn range_holds_nothing(&self, seg: SegmentId) -> bool {
        let r = self.range(seg);
        r.mapped == 0 && r.slept.is_empty() && r.stuck.is_empty() && self.is_wholly_free(seg)
    }
}

/// Releases a reservation no range uses (`at` as the runtime returned it, `len` bytes charged). One the runtime
/// refuses stays charged and is kept (`ExpandableRanges::unreleased`) for `release_kept` to retry.
pub(super) fn release_unused(
    sh: &Shared<ExpandableRanges>,
    at: usize,
    len: usize,
) -> Result<(), crate::runtime::AclCallError> {
    match sh.rt.on_device(sh.device, || sh.rt.release(at)) {
        Ok(()) => {
            budget::give(len);
            Ok(())
        }
        Err(e) => {
            lock(&sh.backing.unreleased).push((at, len));
            Err(e)
        }
    }
}

/// Retries every reservation `release_unused` kept; one refused again stays kept. The first refusal is the error.
pub(super) fn release_kept(sh: &Shared<ExpandableRanges>) -> Result<()> {
    let kept = std::mem::take(&mut *lock(&sh.backing.unreleased));
    let mut first_error = None;
    for (at, len) in kept {
        if let Err(e) = release_unused(sh, at, len) {
            first_error.get_or_insert(Error::runtime(e, "releasing a reserved address range no segment uses"));
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Gives a detached empty range back to the runtime (no lock held).
pub(super) fn release_range(sh: &Shared<ExpandableRanges>, d: &Detached) -> Result<usize> {
    let (reserved_at, reserved_len) = d.device;
    sh.segment_event(SegmentEvent::Release, d.addr, d.size, None, d.pool);
    sh.rt.on_device(sh.device, || sh.rt.release(reserved_at)).map_err(|e| {
        // `settle` puts the range back.
        sh.segment_event(SegmentEvent::Reserve, d.addr, d.size, None, d.pool);
        Error::runtime(e, "releasing an address range that holds nothing")
    })?;
    budget::give(reserved_len);
    sh.counters.range_removed();
    Ok(0)
}
