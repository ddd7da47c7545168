//! Note [expandable segments on ACL VMM]
//!
//! In expandable mode each (pool kind, stream) owns one reserved virtual
//! range (`aclrtReserveMemAddress`), sized from the device's total memory.
//! Its blocks tile the whole range, mapped or not; the range starts as one
//! free block. Physical memory is mapped page by page, only under blocks
//! that are handed out, so free neighbours always coalesce and the range
//! grows and shrinks instead of piling up fixed segments.
//!
//! - A page is one physical handle (`aclrtMallocPhysical`), mapped whole:
//!   2 MiB in the small pool, `page_size` in the large pool.
//! - Best fit over the range's free blocks naturally fills holes before the
//!   tail, since the tail is the largest free block.
//! - Physical page recycling: pages unmapped from free blocks go to a
//!   per-size handle cache and are mapped again wherever a block needs them
//!   (any range of the same page size), so one allocation can be backed by
//!   pages freed anywhere — without a second address range per allocation.
//!   Pages move this way under memory pressure (the OOM ladder); moving
//!   them eagerly on every growth was measured to cost 3x in speed on the
//!   shipped traces for a few percent of peak memory. Only `empty_cache` and
//!   teardown give handles back to the runtime.
//! - Pages are unmapped only after synchronizing the streams that used them.
//! - A mapping attempt that fails part-way unmaps what it mapped, keeping the
//!   handles in the cache: no half-mapped block is ever left behind.
//! - Reserved bytes count physical memory held (mapped or cached).

use super::block::{Block, BlockId, BlockState, NIL};
use super::policy::PoolKind;
use super::segment::Segment;
use super::state::{GrowError, State};
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;
use crate::sys;

/// Virtual-memory bookkeeping of one expandable segment.
#[derive(Debug, Clone)]
pub struct VmmRange {
    pub page_size: usize,
    pub attr: sys::aclrtMemAttr,
    /// The handle mapped at each page, if any.
    pub pages: Vec<Option<PhysicalHandle>>,
    pub mapped: usize,
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
        // Reserve address space for 9/8 of the device (as PyTorch does): enough
        // for everything the device can hold plus slack for holes.
        let va = (self.device_total / 8 * 9).div_ceil(spec.size).max(1) * spec.size;
        let rt = self.rt.clone();
        let base = rt.on_device(self.device, || rt.reserve(va)).map_err(GrowError::Runtime)?;
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
                pages: vec![None; va / spec.size],
                mapped: 0,
            })),
        });
        self.blocks.get_mut(block).segment = seg;
        self.pools[slot as usize][kind as usize].insert(&mut self.blocks, block);
        self.ranges[slot as usize][kind as usize] = Some(seg);
        self.stats.range_added();
        Ok(seg)
    }

    pub(super) fn page_spec(&self, kind: PoolKind) -> PageSpec {
        match kind {
            PoolKind::Small => PageSpec { size: super::policy::SMALL_BUFFER, attr: sys::ACL_HBM_MEM_HUGE },
            PoolKind::Large => self.large_page,
        }
    }

    /// Maps every unmapped page under [addr, addr + size) of segment `seg`.
    /// On failure, unmaps what this call mapped (handles go to the cache).
    pub(super) fn ensure_mapped(&mut self, seg: u32, addr: usize, size: usize) -> Result<(), GrowError> {
        let (base, page) = {
            let s = self.segments.get(seg);
            (s.base, s.vmm.as_ref().expect("expandable segment").page_size)
        };
        let first = (addr - base) / page;
        let last = (addr + size - 1 - base) / page;
        let mut mapped_now = Vec::new();
        for i in first..=last {
            if self.range(seg).pages[i].is_some() {
                continue;
            }
            match self.map_page(seg, i) {
                Ok(()) => mapped_now.push(i),
                Err(e) => {
                    for j in mapped_now {
                        // Undo: the pages were never used, no sync needed.
                        let _ = self.unmap_page(seg, j);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn range(&self, seg: u32) -> &VmmRange {
        self.segments.get(seg).vmm.as_deref().expect("expandable segment")
    }

    fn range_mut(&mut self, seg: u32) -> &mut VmmRange {
        self.segments.get_mut(seg).vmm.as_deref_mut().expect("expandable segment")
    }

    fn map_page(&mut self, seg: u32, i: usize) -> Result<(), GrowError> {
        let (base, spec) = {
            let s = self.segments.get(seg);
            let r = s.vmm.as_ref().expect("expandable segment");
            (s.base, PageSpec { size: r.page_size, attr: r.attr })
        };
        let handle = match self.handle_cache.get_mut(&spec.size).and_then(Vec::pop) {
            Some(h) => h,
            None => {
                let reserved = self.stats.get().reserved_bytes as usize;
                if let Some(limit) = self.limit {
                    if reserved + spec.size > limit {
                        return Err(GrowError::OverLimit { size: spec.size, limit });
                    }
                }
                let rt = self.rt.clone();
                let h = rt
                    .on_device(self.device, || rt.malloc_physical(self.device, spec.attr, spec.size))
                    .map_err(GrowError::Runtime)?;
                self.stats.physical_allocated(spec.size);
                h
            }
        };
        let rt = self.rt.clone();
        let addr = base + i * spec.size;
        if let Err(e) = rt.on_device(self.device, || rt.map(addr, spec.size, handle)) {
            self.handle_cache.entry(spec.size).or_default().push(handle);
            return Err(GrowError::Runtime(e));
        }
        let r = self.range_mut(seg);
        r.pages[i] = Some(handle);
        r.mapped += 1;
        self.stats.page_mapped();
        Ok(())
    }

    /// Unmaps page `i` of `seg`; its handle goes to the cache. The caller
    /// has made sure no queued work uses it.
    fn unmap_page(&mut self, seg: u32, i: usize) -> Result<()> {
        let (addr, page, handle) = {
            let s = self.segments.get(seg);
            let r = s.vmm.as_ref().expect("expandable segment");
            (s.base + i * r.page_size, r.page_size, r.pages[i].expect("mapped page"))
        };
        let rt = self.rt.clone();
        rt.on_device(self.device, || rt.unmap(addr)).map_err(|e| Error::runtime(e, "unmapping a free page"))?;
        let r = self.range_mut(seg);
        r.pages[i] = None;
        r.mapped -= 1;
        self.handle_cache.entry(page).or_default().push(handle);
        self.stats.page_unmapped();
        Ok(())
    }

    /// The longest run of mapped bytes inside one free block, over all
    /// expandable segments: what a request can get without mapping.
    pub(super) fn largest_mapped_free(&self) -> usize {
        let mut best = 0;
        for seg in self.segments.ids() {
            let s = self.segments.get(seg);
            let Some(r) = &s.vmm else { continue };
            let mut id = s.first;
            while id != NIL {
                let b = self.blocks.get(id);
                if b.state == BlockState::Free {
                    let (mut run, mut at) = (0usize, b.addr);
                    while at < b.addr + b.size {
                        let page = (at - s.base) / r.page_size;
                        let page_end = (s.base + (page + 1) * r.page_size).min(b.addr + b.size);
                        if r.pages[page].is_some() {
                            run += page_end - at;
                            best = best.max(run);
                        } else {
                            run = 0;
                        }
                        at = page_end;
                    }
                }
                id = b.next;
            }
        }
        best
    }

    /// Pages under the first `size` bytes of free block `id` that are not mapped.
    pub(super) fn unmapped_under(&self, id: BlockId, size: usize) -> usize {
        let b = self.blocks.get(id);
        let s = self.segments.get(b.segment);
        let Some(r) = &s.vmm else { return 0 };
        let first = (b.addr - s.base) / r.page_size;
        let last = (b.addr + size - 1 - s.base) / r.page_size;
        (first..=last).filter(|&i| r.pages[i].is_none()).count()
    }

    /// Pages of `seg` that lie entirely inside free blocks and are mapped.
    fn free_mapped_pages(&self, seg: u32) -> Vec<usize> {
        let s = self.segments.get(seg);
        let r = s.vmm.as_ref().expect("expandable segment");
        let mut out = Vec::new();
        let mut id = s.first;
        while id != NIL {
            let b = self.blocks.get(id);
            if b.state == BlockState::Free {
                let first = (b.addr - s.base).div_ceil(r.page_size);
                let end = (b.addr + b.size - s.base) / r.page_size;
                out.extend((first..end).filter(|&i| r.pages[i].is_some()));
            }
            id = b.next;
        }
        out
    }

    /// Unmaps every page that only free blocks cover, in all expandable
    /// segments, after synchronizing the streams that used those segments.
    /// Handles go to the cache (still reserved). Returns pages unmapped.
    pub(super) fn unmap_free_pages(&mut self) -> Result<usize> {
        let segs: Vec<(u32, Vec<usize>)> = self
            .segments
            .ids()
            .filter(|&s| self.segments.get(s).vmm.is_some())
            .map(|s| (s, self.free_mapped_pages(s)))
            .filter(|(_, pages)| !pages.is_empty())
            .collect();
        if segs.is_empty() {
            return Ok(0);
        }
        let ids: Vec<u32> = segs.iter().map(|(s, _)| *s).collect();
        self.sync_streams_of(&ids)?;
        let mut n = 0;
        for (seg, pages) in segs {
            for i in pages {
                self.unmap_page(seg, i)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Gives every cached physical handle back to the runtime.
    pub(super) fn free_cached_handles(&mut self) -> Result<usize> {
        let rt = self.rt.clone();
        let mut freed = 0;
        let mut first_error = None;
        let sizes: Vec<usize> = self.handle_cache.keys().copied().collect();
        for size in sizes {
            let handles = std::mem::take(self.handle_cache.get_mut(&size).expect("listed size"));
            let mut kept = Vec::new();
            for h in handles {
                match rt.on_device(self.device, || rt.free_physical(h)) {
                    Ok(()) => {
                        self.stats.physical_freed(size);
                        freed += size;
                    }
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

    /// Teardown of one expandable segment: unmap, free physical, release
    /// (the documented order). The caller synchronized the streams.
    pub(super) fn destroy_range(&mut self, seg: u32) -> Result<()> {
        let mapped: Vec<usize> = {
            let r = self.range(seg);
            (0..r.pages.len()).filter(|&i| r.pages[i].is_some()).collect()
        };
        let mut first_error = None;
        for i in mapped {
            if let Err(e) = self.unmap_page(seg, i) {
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.free_cached_handles() {
            first_error.get_or_insert(e);
        }
        let base = self.segments.get(seg).base;
        let rt = self.rt.clone();
        if let Err(e) = rt.on_device(self.device, || rt.release(base)) {
            first_error.get_or_insert(Error::runtime(e, "releasing a reserved address range"));
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
