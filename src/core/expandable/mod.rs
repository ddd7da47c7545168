//! Note [expandable segments on ACL VMM]
//!
//! In expandable mode each (pool kind, stream) owns one reserved virtual
//! range (`aclrtReserveMemAddress`). Its blocks tile the whole range, mapped
//! or not; the range starts as one free block. Physical memory is mapped
//! only under blocks that are handed out, so free neighbours always coalesce
//! and the range grows and shrinks instead of piling up fixed segments.
//!
//! - Pages: the mapping unit is `page_size` in the large pool (2 MiB by
//!   default) and 2 MiB in the small pool. A physical handle
//!   (`aclrtMallocPhysical`, mapped whole) covers one or more consecutive
//!   pages: a *piece*. How big a fresh piece may be (`PieceRule`) trades
//!   runtime calls against movable memory: a piece is never split, so a
//!   small live block pins all of it. While the device has plenty of room,
//!   growth maps what a block lacks with handles of up to 16 MiB (a 300 MiB
//!   block: 19 pairs of calls, not 150); a live block then pins at most
//!   that much that `empty_cache` cannot return. As free device memory
//!   shrinks, so do fresh pieces, down to 4 MiB: near a full device, where
//!   moving pages is what lets a request fit, a hole holds whole pieces
//!   that can move.
//! - Placement (`placement`): best fit over the range's free blocks; when
//!   that would map pages, a free block with a mapped run that fits wins
//!   instead (mapped first), so holes are reused before the range grows.
//!   With `reserved_headroom`, when no mapped run fits, the request goes
//!   where the fewest pages are missing (a page mapped there is one fewer
//!   to move); without it that rule saved no maps and cost min capacity.
//! - Physical page recycling (`mapping`): pieces unmapped from free blocks go
//!   to a handle cache (by size) and are mapped again wherever a block needs
//!   them; one allocation can be backed by pieces freed anywhere, with no
//!   second address range. A cached handle may reach past the request into
//!   the free block's unmapped pages: it is held anyway.
//! - Pieces move under memory pressure (the OOM ladder), and, with
//!   `reserved_headroom`, whenever growth would take reserved memory past
//!   that headroom over the peak of allocated bytes (`headroom`).
//! - Pages are unmapped only after synchronizing the streams that used them.
//! - A mapping attempt that fails part-way unmaps what it mapped, keeping the
//!   handles in the cache: no half-mapped block is ever left behind.
//! - Reserved bytes count physical memory held (mapped or cached). Only
//!   `empty_cache`, the OOM ladder and teardown give handles back.
//! - The large pool reserves twice the device's memory of address space
//!   (PyTorch reserves 9/8): holes in the address space cost nothing once
//!   their pages have moved, so the range must hold a fragmented layout of a
//!   nearly full device. The small pool reserves 9/8.

mod headroom;
mod mapping;
mod placement;

use super::block::Block;
use super::policy::PoolKind;
use super::segment::Segment;
use super::state::{GrowError, State};
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;
use crate::sys;

/// How big a fresh physical handle may be (see the Note): `1/share` of the
/// device memory not yet reserved, within [`floor`, `ceiling`] bytes (and
/// never more than the pages a placement lacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceRule {
    pub floor: usize,
    /// 0: always `floor`.
    pub share: usize,
    pub ceiling: usize,
}

impl PieceRule {
    /// 4 MiB to 16 MiB, a 16th of what is unreserved (BENCHMARKS.md). A
    /// larger share pinned enough pages to push min capacity past 1.05x peak
    /// on bert; higher ceilings saved a fifth of the maps but kept several
    /// times more memory from a mid-trace `empty_cache`. With
    /// `reserved_headroom`, always 4 MiB: moving pages to stay within the
    /// headroom is that mode's point, and large pieces rarely fit the place
    /// they would move to.
    pub fn for_config(config: &crate::config::Config) -> Self {
        let share = if config.reserved_headroom.is_some() { 0 } else { 16 };
        PieceRule { floor: 4 << 20, share, ceiling: 16 << 20 }
    }
}

/// One physical handle mapped over `units` consecutive pages from `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub handle: PhysicalHandle,
    pub head: u32,
    pub units: u32,
}

impl Piece {
    fn end(&self) -> usize {
        (self.head + self.units) as usize
    }
}

/// Virtual-memory bookkeeping of one expandable segment.
#[derive(Debug, Clone)]
pub struct VmmRange {
    /// The mapping unit: every handle is a whole number of these.
    pub page_size: usize,
    pub attr: sys::aclrtMemAttr,
    /// The piece mapped over each page, if any; pages past the end have
    /// never been mapped (the vector grows with the highest mapping).
    pub pages: Vec<Option<Piece>>,
    /// Pages mapped.
    pub mapped: usize,
    /// The address `aclrtReserveMemAddress` returned: the range may start
    /// above it, at the page attr's alignment (`reserve_aligned`).
    pub reserved_at: usize,
}

impl VmmRange {
    /// The piece mapped over page `i`, if any.
    #[inline]
    pub fn page(&self, i: usize) -> Option<Piece> {
        self.pages.get(i).copied().flatten()
    }

    /// No page at or above this index has ever been mapped.
    #[inline]
    pub fn top(&self) -> usize {
        self.pages.len()
    }
}

/// Page geometry of one pool kind in expandable mode.
#[derive(Debug, Clone, Copy)]
pub struct PageSpec {
    pub size: usize,
    pub attr: sys::aclrtMemAttr,
}

/// The large pool's page for `page_size`, checked against the runtime's
/// granularity (only queried when the VMM API exists).
pub(super) fn large_page_spec(rt: &crate::runtime::Runtime, device: i32, config: &crate::config::Config) -> Result<PageSpec> {
    use crate::config::PageSize;
    let attr = match config.page_size {
        PageSize::Gib1 => sys::ACL_HBM_MEM_HUGE1G,
        _ => sys::ACL_HBM_MEM_HUGE,
    };
    let spec = PageSpec { size: config.page_size.bytes(), attr };
    if rt.has_vmm() {
        let g = rt
            .on_device(device, || rt.granularity(device, attr))
            .map_err(|e| Error::runtime(e, "querying the physical memory granularity"))?;
        if g == 0 || spec.size % g != 0 {
            return Err(Error::bad_config(
                "page_size",
                format!("{} is not a multiple of the device's granularity of {g} bytes", config.page_size.as_str()),
            ));
        }
    }
    Ok(spec)
}

impl State {
    /// The expandable segment of (kind, slot), creating it on first use.
    pub(super) fn range_for(&mut self, kind: PoolKind, slot: u16) -> Result<u32, GrowError> {
        if let Some(seg) = self.ranges[slot as usize][kind as usize] {
            return Ok(seg);
        }
        let spec = self.page_spec(kind);
        // Address space, in eighths of the device (see the Note).
        let eighths = match kind {
            PoolKind::Large => 16,
            PoolKind::Small => 9,
        };
        let va = (self.device_total / 8 * eighths).div_ceil(spec.size).max(1) * spec.size;
        // A 1 GiB page maps only at a 1 GiB boundary; other pages at their
        // handles' 2 MiB granularity, which every reservation has.
        let align = if spec.attr == sys::ACL_HBM_MEM_HUGE1G { spec.size } else { super::policy::SMALL_BUFFER };
        let (reserved_at, base) = self.reserve_aligned(va, align)?;
        let block = self.blocks.insert(Block::segment_root(base, va, kind, slot));
        let seg = self.segments.insert(Segment {
            base,
            size: va,
            kind,
            stream_slot: slot,
            first: block,
            other_streams: Vec::new(),
            serial: 0,
            vmm: Some(Box::new(VmmRange {
                page_size: spec.size,
                attr: spec.attr,
                pages: Vec::new(),
                mapped: 0,
                reserved_at,
            })),
        });
        self.blocks.get_mut(block).segment = seg;
        self.pools[slot as usize][kind as usize].insert(&mut self.blocks, block);
        self.ranges[slot as usize][kind as usize] = Some(seg);
        self.stats.range_added();
        Ok(seg)
    }

    /// Reserves `va` bytes of address space starting at an `align` boundary:
    /// (address to release, aligned start). The runtime only promises its
    /// own granularity, so an unaligned reservation is given back and taken
    /// again `align` larger, its start rounded up.
    fn reserve_aligned(&self, va: usize, align: usize) -> Result<(usize, usize), GrowError> {
        let rt = self.rt.clone();
        let at = rt.on_device(self.device, || rt.reserve(va)).map_err(GrowError::Runtime)?;
        if at % align == 0 {
            return Ok((at, at));
        }
        rt.on_device(self.device, || rt.release(at)).map_err(GrowError::Runtime)?;
        let padded = va.checked_add(align).ok_or(GrowError::AddressSpace)?;
        let at = rt.on_device(self.device, || rt.reserve(padded)).map_err(GrowError::Runtime)?;
        Ok((at, at.next_multiple_of(align)))
    }

    pub(super) fn page_spec(&self, kind: PoolKind) -> PageSpec {
        match kind {
            PoolKind::Small => PageSpec { size: super::policy::SMALL_BUFFER, attr: sys::ACL_HBM_MEM_HUGE },
            PoolKind::Large => self.large_page,
        }
    }

    /// Pages one fresh handle of `seg` covers at most, now. Free device
    /// memory is estimated as total minus reserved: a wrong guess (another
    /// process holds memory) costs one refused call and a retry at the floor.
    fn fresh_piece_pages(&self, seg: u32) -> usize {
        let PieceRule { floor, share, ceiling } = self.pieces;
        let unreserved = self.device_total.saturating_sub(self.stats.get().reserved_bytes as usize);
        let bytes = if share == 0 { floor } else { (unreserved / share).clamp(floor, ceiling.max(floor)) };
        (bytes / self.range(seg).page_size).max(1)
    }

    /// Pages of a handle of the floor size: how far a cached handle may
    /// reach past what a placement needs.
    fn floor_pages(&self, seg: u32) -> usize {
        (self.pieces.floor / self.range(seg).page_size).max(1)
    }

    fn range(&self, seg: u32) -> &VmmRange {
        self.segments.get(seg).vmm.as_deref().expect("expandable segment")
    }

    fn range_mut(&mut self, seg: u32) -> &mut VmmRange {
        self.segments.get_mut(seg).vmm.as_deref_mut().expect("expandable segment")
    }

    /// Unmaps every piece that only free blocks cover, in all expandable
    /// segments, after synchronizing the streams that used those segments.
    /// Handles go to the cache (still reserved). Returns pages unmapped.
    pub(super) fn unmap_free_pages(&mut self) -> Result<usize> {
        let segs: Vec<(u32, Vec<(usize, usize)>)> = self
            .segments
            .ids()
            .filter(|&s| self.segments.get(s).vmm.is_some())
            .map(|s| (s, self.free_pieces(s)))
            .filter(|(_, pieces)| !pieces.is_empty())
            .collect();
        if segs.is_empty() {
            return Ok(0);
        }
        let ids: Vec<u32> = segs.iter().map(|(s, _)| *s).collect();
        self.sync_streams_of(&ids)?;
        let mut n = 0;
        for (seg, pieces) in segs {
            for (head, units) in pieces {
                self.unmap_piece(seg, head)?;
                n += units;
            }
        }
        Ok(n)
    }

    /// Gives every cached physical handle back to the runtime.
    pub(super) fn free_cached_handles(&mut self) -> Result<usize> {
        let mut freed = 0;
        let mut first_error = None;
        let sizes: Vec<usize> = self.handle_cache.keys().copied().collect();
        for size in sizes {
            let handles = std::mem::take(self.handle_cache.get_mut(&size).expect("listed size"));
            let mut kept = Vec::new();
            for h in handles {
                match self.free_handle(h, size) {
                    Ok(()) => freed += size,
                    Err(e) => {
                        first_error.get_or_insert(Error::runtime(e, "freeing a cached physical page"));
                        kept.push(h);
                    }
                }
            }
            self.handle_cache.insert(size, kept);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(freed),
        }
    }

    /// Gives one unmapped handle of `size` bytes back to the runtime.
    fn free_handle(&mut self, h: PhysicalHandle, size: usize) -> Result<(), crate::runtime::AclCallError> {
        let rt = self.rt.clone();
        rt.on_device(self.device, || rt.free_physical(h))?;
        self.stats.physical_freed(size);
        Ok(())
    }

    /// Teardown of one expandable segment: unmap, free physical, release
    /// (the documented order). The caller synchronized the streams.
    pub(super) fn destroy_range(&mut self, seg: u32) -> Result<()> {
        let heads: Vec<usize> = {
            let r = self.range(seg);
            r.pages.iter().enumerate().filter_map(|(i, p)| p.filter(|p| p.head as usize == i).map(|_| i)).collect()
        };
        let mut first_error = None;
        for head in heads {
            if let Err(e) = self.unmap_piece(seg, head) {
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.free_cached_handles() {
            first_error.get_or_insert(e);
        }
        let reserved_at = self.range(seg).reserved_at;
        let rt = self.rt.clone();
        if let Err(e) = rt.on_device(self.device, || rt.release(reserved_at)) {
            first_error.get_or_insert(Error::runtime(e, "releasing a reserved address range"));
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
