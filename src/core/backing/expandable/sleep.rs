//! Sleep and wake of one shard's ranges (Note [sleep] in `core::sleep`).
//!
//! A *run* is a stretch of consecutive mapped pages of one range (one or
//! more pieces back to back). Sleep takes each run whole: with offload, one
//! pinned host buffer (`aclrtMallocHost`) and one device-to-host copy for
//! the run, however many blocks lie on it; then its pieces are unmapped and
//! their handles freed. The range stays reserved and keeps its blocks, so
//! every address stays valid. Wake maps handles of the same sizes at the
//! same pages, copies the run back in one call and frees the host buffer.

use super::{Piece, RangePool};
use crate::core::history::Action;
use crate::core::segment::SegmentId;
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;
use crate::sys;

/// The row of a run's 2D copy: every run is a whole number of 2 MiB pages
/// (the smallest page), and `aclrtMemcpy2d` takes rows of at most 5000000
/// bytes and at most 5242880 rows (10 TiB a copy).
const COPY_ROW: usize = 2 << 20;

/// Pages unmapped by sleep: pieces of `pieces[k]` pages each, back to back
/// from page `head`; their contents in `host` (0: discarded).
#[derive(Debug, Clone)]
pub struct SleptRun {
    pub head: u32,
    pub pieces: Vec<u32>,
    /// The pinned host buffer holding the run's bytes, 0 when discarded.
    pub host: usize,
}

impl SleptRun {
    /// Pages the run covers.
    pub fn units(&self) -> usize {
        self.pieces.iter().map(|&u| u as usize).sum()
    }

    /// Whether page `i` lies on the run.
    pub fn covers(&self, i: usize) -> bool {
        (self.head as usize..self.head as usize + self.units()).contains(&i)
    }
}

/// aclrtMemcpyKind values (acl_rt.h: ACL_MEMCPY_HOST_TO_DEVICE 1,
/// ACL_MEMCPY_DEVICE_TO_HOST 2).
const HOST_TO_DEVICE: u32 = 1;
const DEVICE_TO_HOST: u32 = 2;

/// One synchronous copy of `bytes` (a whole number of `COPY_ROW`s) as rows.
fn copy(
    rt: &crate::runtime::Runtime,
    dst: usize,
    src: usize,
    bytes: usize,
    kind: u32,
) -> Result<(), crate::runtime::AclCallError> {
    debug_assert_eq!(bytes % COPY_ROW, 0);
    // SAFETY: both regions are `bytes` long and live: a mapped run of this
    // allocator's range and a host buffer of at least that size from
    // aclrtMallocHost; nothing else uses either during the copy.
    unsafe { rt.memcpy2d(dst as *mut _, COPY_ROW, src as *const _, COPY_ROW, COPY_ROW, bytes / COPY_ROW, kind) }
}

impl RangePool {
    /// Takes every mapped run of this shard's ranges off the device (its
    /// contents to host memory with `offload`). The caller synchronized
    /// nothing: the streams that used each range are synchronized here.
    /// Returns the device bytes given back. On failure the runs already
    /// taken stay asleep (the caller wakes them).
    pub(crate) fn sleep_ranges(&mut self, offload: bool) -> Result<usize> {
        let mut freed = 0;
        for seg in self.backing.ranges.clone() {
            if self.range(seg).mapped == 0 {
                continue;
            }
            self.sync_streams_of(seg)?;
            let mut i = 0;
            while i < self.range(seg).top() {
                let Some(first) = self.range(seg).page(i) else {
                    i += 1;
                    continue;
                };
                let mut pieces = vec![first];
                let mut end = first.end();
                while let Some(p) = self.range(seg).page(end) {
                    pieces.push(p);
                    end = p.end();
                }
                freed += self.sleep_run(seg, &pieces, offload)?;
                i = end;
            }
        }
        Ok(freed)
    }

    /// Sleeps one run made of `pieces` (consecutive, in page order).
    fn sleep_run(&mut self, seg: SegmentId, pieces: &[Piece], offload: bool) -> Result<usize> {
        let sh = self.sh.clone();
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let head = pieces[0].head as usize;
        let addr = base + head * page;
        let bytes: usize = pieces.iter().map(|p| p.units as usize * page).sum();
        let host = if offload {
            let host = sh
                .rt
                .malloc_host(bytes)
                .map_err(|e| Error::runtime(e, format!("allocating {bytes} bytes of host memory to offload into")))?;
            if let Err(e) = sh.rt.on_device(sh.device, || copy(&sh.rt, host, addr, bytes, DEVICE_TO_HOST)) {
                let _ = sh.rt.free_host(host);
                return Err(Error::runtime(e, "copying a sleeping run to host memory"));
            }
            host
        } else {
            0
        };
        let mut run = SleptRun { head: head as u32, pieces: Vec::with_capacity(pieces.len()), host };
        let mut freed = 0;
        let mut failed = None;
        for p in pieces {
            let at = base + p.head as usize * page;
            let size = p.units as usize * page;
            if let Err(e) = sh.rt.on_device(sh.device, || sh.rt.unmap(at)) {
                failed = Some(Error::runtime(e, "unmapping a sleeping page"));
                break;
            }
            sh.counters.page_unmapped();
            sh.history.record(Action::SegmentUnmap, at, size, self.stream);
            let r = self.range_mut(seg);
            r.pages[p.head as usize..p.end()].fill(None);
            r.mapped -= p.units as usize;
            run.pieces.push(p.units);
            match super::free_handle(&sh, p.handle, size) {
                Ok(()) => freed += size,
                // Still held, now in the cache: a later empty_cache retries.
                Err(_) => sh.backing.cache_handle(size, p.handle),
            }
        }
        if run.pieces.is_empty() {
            if host != 0 {
                let _ = sh.rt.free_host(host);
            }
        } else {
            self.range_mut(seg).slept.push(run);
        }
        failed.map_or(Ok(freed), Err)
    }

    /// Appends the (bytes, attr) of every handle this shard's wake needs.
    pub(crate) fn wake_needs(&self, out: &mut Vec<(usize, sys::aclrtMemAttr)>) {
        for &seg in &self.backing.ranges {
            let r = self.range(seg);
            for run in &r.slept {
                out.extend(run.pieces.iter().map(|&u| (u as usize * r.page_size, r.attr)));
            }
        }
    }

    /// Maps `handles` (from `wake_needs`, in its order) under every sleeping
    /// run and copies offloaded contents back. A run whose mapping fails is
    /// left asleep (what it mapped undone) and its handles, with those of
    /// the runs after it, are left in `handles` for the caller to free.
    pub(crate) fn wake_ranges(&mut self, handles: &mut std::collections::VecDeque<PhysicalHandle>) -> Result<()> {
        let mut first_error = None;
        for seg in self.backing.ranges.clone() {
            // In `wake_needs` order: the handles were allocated for it.
            let mut runs = std::mem::take(&mut self.range_mut(seg).slept).into_iter();
            while let Some(run) = runs.next() {
                match self.wake_run(seg, &run, handles) {
                    Ok(None) => {}
                    // Mapped, but the copy back or the host free failed.
                    Ok(Some(e)) => {
                        first_error.get_or_insert(e);
                    }
                    Err(e) => {
                        let r = self.range_mut(seg);
                        r.slept.push(run);
                        r.slept.extend(runs);
                        return Err(e);
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Wakes one run: Err when its mapping failed (it stays asleep), else
    /// the error of a copy back or host free that failed after mapping.
    fn wake_run(
        &mut self,
        seg: SegmentId,
        run: &SleptRun,
        handles: &mut std::collections::VecDeque<PhysicalHandle>,
    ) -> Result<Option<Error>> {
        let sh = self.sh.clone();
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let mut head = run.head as usize;
        let mut mapped: Vec<(usize, PhysicalHandle)> = Vec::new();
        for &units in &run.pieces {
            let h = handles.pop_front().expect("one handle per sleeping piece");
            let at = base + head * page;
            if let Err(e) = sh.rt.on_device(sh.device, || sh.rt.map(at, units as usize * page, h)) {
                // Undo this run: its handles go back to the caller.
                handles.push_front(h);
                for &(at, h) in mapped.iter().rev() {
                    let _ = sh.rt.on_device(sh.device, || sh.rt.unmap(at));
                    handles.push_front(h);
                }
                let r = self.range_mut(seg);
                let first = run.head as usize;
                r.pages[first..head].fill(None);
                r.mapped -= head - first;
                return Err(Error::runtime(e, "mapping a waking page"));
            }
            let piece = Piece { handle: h, head: head as u32, units };
            let r = self.range_mut(seg);
            if r.pages.len() < piece.end() {
                r.pages.resize(piece.end(), None);
            }
            r.pages[head..piece.end()].fill(Some(piece));
            r.mapped += units as usize;
            mapped.push((at, h));
            head = piece.end();
        }
        for _ in &mapped {
            sh.counters.page_mapped();
        }
        let addr = base + run.head as usize * page;
        let bytes = run.units() * page;
        sh.history.record(Action::SegmentMap, addr, bytes, self.stream);
        if run.host == 0 {
            return Ok(None);
        }
        let copied = sh
            .rt
            .on_device(sh.device, || copy(&sh.rt, addr, run.host, bytes, HOST_TO_DEVICE))
            .map_err(|e| Error::runtime(e, "copying an offloaded run back"));
        let freed = sh.rt.free_host(run.host).map_err(|e| Error::runtime(e, "freeing an offload buffer"));
        Ok(copied.err().or(freed.err()))
    }

    /// Frees the host buffers of `seg`'s sleeping runs (teardown).
    pub(super) fn drop_slept(&mut self, seg: SegmentId) -> Result<()> {
        let sh = self.sh.clone();
        let mut first_error = None;
        for run in std::mem::take(&mut self.range_mut(seg).slept) {
            if run.host != 0 {
                if let Err(e) = sh.rt.free_host(run.host) {
                    first_error.get_or_insert(Error::runtime(e, "freeing an offload buffer"));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
