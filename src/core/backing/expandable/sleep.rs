//! Sleep and wake of one shard's ranges (Note [sleep] in `core::sleep`). A *run* is a stretch of consecutive mapped
//! pages of one range; sleep takes each run whole: with offload, one pinned host buffer and one device-to-host copy
//! per run, however many blocks lie on it; then its pieces are unmapped and their handles freed. The range stays
//! reserved and keeps its blocks, so every address stays valid. Wake maps handles of the same sizes at the same
//! pages, copies the run back in one call and frees the host buffer.

use super::{ExpandableRanges, Piece, RangePool};
use crate::core::alloc::shared::Shared;
use crate::core::backing::{keep_first, GrowError, Sleeps, WakeHandles};
use crate::core::cache::segment::SegmentId;
use crate::core::report::history::Action;
use crate::error::{Error, Result};
use crate::runtime::PhysicalHandle;
use crate::sys;

/// The row of a run's 2D copy: every run is a whole number of 2 MiB pages (the smallest page), and `aclrtMemcpy2d`
/// takes rows of at most 5000000 bytes and at most 5242880 rows (10 TiB a copy).
const COPY_ROW: usize = 2 << 20;

/// Pages unmapped by sleep: pieces of `pieces[k]` pages each, back to back from page `head`.
#[derive(Debug, Clone)]
pub struct SleptRun {
    pub head: u32,
    pub pieces: Vec<u32>,
    /// The pinned host buffer holding the run's bytes, 0 when discarded.
    pub host: usize,
    /// The handles a wake under way mapped, one per piece (empty until `wake_map`; asleep until `wake_commit`).
    pub woken: Vec<PhysicalHandle>,
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

/// aclrtMemcpyKind values (acl_rt.h: ACL_MEMCPY_HOST_TO_DEVICE 1, ACL_MEMCPY_DEVICE_TO_HOST 2).
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
    // SAFETY: both regions are `bytes` long and live (a mapped run of this allocator's range and an aclrtMallocHost
    // buffer at least that large), and nothing else uses either during the copy.
    unsafe { rt.memcpy2d(dst as *mut _, COPY_ROW, src as *const _, COPY_ROW, COPY_ROW, bytes / COPY_ROW, kind, None) }
}

impl Sleeps for ExpandableRanges {
    const SLEEPS_LIVE: bool = true;

    fn wake_handle(sh: &Shared<Self>, bytes: usize, attr: sys::aclrtMemAttr) -> Result<PhysicalHandle> {
        super::new_handle(sh, attr, bytes).map_err(|e| match e {
            GrowError::Runtime(e) => Error::runtime(e, "allocating device memory to wake into"),
            _ => Error::OutOfMemory("over the memory limit".into()),
        })
    }

    /// A handle the runtime refuses to free goes to the handle cache: a mapping may take it first.
    fn free_wake_handles(sh: &Shared<Self>, handles: impl IntoIterator<Item = (PhysicalHandle, usize)>) {
        for (h, bytes) in handles {
            let _ = super::give_handle(sh, h, bytes);
        }
    }

    /// Takes every mapped run of this shard's ranges off the device (to host memory with `offload`), synchronizing
    /// the streams that used each range first. Returns the device bytes given back; on failure the runs already taken
    /// stay asleep (the caller wakes them).
    fn sleep_pool(mut pool: RangePool<'_>, offload: bool) -> Result<usize> {
        let mut freed = 0;
        for seg in pool.backing.ranges.clone() {
            if pool.range(seg).mapped == 0 {
                continue;
            }
            pool.sync_streams_of(seg)?;
            // Moved handles' old addresses are unmapped, not slept: their
            // memory sleeps at the new pages (Note [moves of wholly free handles]).
            pool.flush_retired(seg)?;
            // A run: pieces back to back (sleeping one leaves the others' pages as they are).
            let pieces: Vec<Piece> = pool.range(seg).pieces().collect();
            for run in pieces.chunk_by(|a, b| a.end() == b.head as usize) {
                freed += pool.sleep_run(seg, run, offload)?;
            }
        }
        Ok(freed)
    }

    /// Appends the (bytes, attr) of every handle this shard's wake needs.
    fn wake_needs(pool: RangePool<'_>, out: &mut Vec<(usize, sys::aclrtMemAttr)>) {
        for &seg in &pool.backing.ranges {
            let r = pool.range(seg);
            for run in r.slept.iter().filter(|run| run.woken.is_empty()) {
                out.extend(run.pieces.iter().map(|&u| (u as usize * r.page_size, r.attr)));
            }
        }
    }

    /// First step of a wake (Note [sleep]): maps `handles` (in `wake_needs` order) under every sleeping run and copies
    /// offloaded contents back, each run still asleep in the bookkeeping (pages owned and unmapped, host buffer kept)
    /// until `wake_commit`. On failure the run that failed is undone (its handles back at the front of `handles`);
    /// the runs mapped before it wait for `wake_commit` or `wake_undo`.
    fn wake_map(mut pool: RangePool<'_>, handles: &mut WakeHandles) -> Result<()> {
        for seg in pool.backing.ranges.clone() {
            for k in 0..pool.range(seg).slept.len() {
                if pool.range(seg).slept[k].woken.is_empty() {
                    pool.wake_map_run(seg, k, handles)?;
                }
            }
        }
        Ok(())
    }

    /// Undoes `wake_map`: unmaps every run it mapped (asleep again, host copies kept), handles onto `out` as
    /// (handle, bytes) for the caller to free. A piece that cannot be unmapped stays mapped (`VmmRange::stuck`).
    fn wake_undo(mut pool: RangePool<'_>, out: &mut Vec<(PhysicalHandle, usize)>) -> Result<()> {
        let sh = pool.sh.clone();
        let id = pool.cache.pool;
        let mut first_error = None;
        for seg in pool.backing.ranges.clone() {
            let (base, page) = (pool.segments.get(seg).base, pool.range(seg).page_size);
            let mut stuck = Vec::new();
            for run in &mut pool.range_mut(seg).slept {
                let mut at = base + run.head as usize * page;
                for (&units, h) in run.pieces.iter().zip(std::mem::take(&mut run.woken)) {
                    let size = units as usize * page;
                    match super::unmap_told(&sh, id, at, size, Some(h)) {
                        Ok(()) => out.push((h, size)),
                        Err(e) => {
                            stuck.push((at, h, size));
                            first_error.get_or_insert(Error::Internal(stuck_message(at, e)));
                        }
                    }
                    at += size;
                }
            }
            for (at, h, size) in stuck {
                pool.keep_stuck(seg, at, h, size);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Last step of a wake: every run `wake_map` mapped becomes mapped pages again and its host buffer is freed.
    /// Returns the first host free that failed (the run is awake all the same).
    fn wake_commit(mut pool: RangePool<'_>) -> Result<()> {
        let sh = pool.sh.clone();
        let mut first_error = None;
        for seg in pool.backing.ranges.clone() {
            let (base, page) = (pool.segments.get(seg).base, pool.range(seg).page_size);
            let (woken, asleep): (Vec<SleptRun>, Vec<SleptRun>) =
                std::mem::take(&mut pool.range_mut(seg).slept).into_iter().partition(|r| !r.woken.is_empty());
            pool.range_mut(seg).slept = asleep;
            for run in woken {
                let r = pool.range_mut(seg);
                let mut head = run.head as usize;
                for (&units, &handle) in run.pieces.iter().zip(&run.woken) {
                    let piece = Piece { handle, head: head as u32, units };
                    r.set(piece);
                    head = piece.end();
                    sh.counters.page_mapped();
                }
                let addr = base + run.head as usize * page;
                sh.history.record(Action::SegmentMap, addr, run.units() * page, pool.stream, pool.cache.pool);
                keep_first(&mut first_error, free_host(&sh, run.host));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl RangePool<'_> {
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
        let mut run = SleptRun { head: head as u32, pieces: Vec::with_capacity(pieces.len()), host, woken: Vec::new() };
        let mut freed = 0;
        let mut failed = None;
        for p in pieces {
            let at = base + p.head as usize * page;
            let size = p.units as usize * page;
            if let Err(e) = self.unmap_recorded(at, size, p.handle) {
                failed = Some(Error::runtime(e, "unmapping a sleeping page"));
                break;
            }
            self.range_mut(seg).clear(p.head as usize, p.units as usize);
            run.pieces.push(p.units);
            if super::give_handle(&sh, p.handle, size).is_ok() {
                freed += size;
            }
        }
        if run.pieces.is_empty() {
            let _ = free_host(&sh, host);
        } else {
            self.range_mut(seg).slept.push(run);
        }
        failed.map_or(Ok(freed), Err)
    }

    /// Maps one run at its pages and copies it back; undone on failure.
    fn wake_map_run(&mut self, seg: SegmentId, k: usize, handles: &mut WakeHandles) -> Result<()> {
        let sh = self.sh.clone();
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let run = self.range(seg).slept[k].clone();
        self.unstick(seg, &run)?;
        let mut at = base + run.head as usize * page;
        let mut mapped: Vec<(usize, PhysicalHandle, usize)> = Vec::with_capacity(run.pieces.len());
        let mut failed = None;
        for &units in &run.pieces {
            let Some((h, size)) = handles.pop_front() else {
                failed = Some(Error::Internal("wake has no handle left for a sleeping piece".into()));
                break;
            };
            if let Err(e) = self.map_told(at, units as usize * page, h) {
                handles.push_front((h, size));
                failed = Some(Error::OutOfMemory(format!(
                    "mapping {} bytes of device memory at {at:#x} under a sleeping block was refused ({e})",
                    units as usize * page
                )));
                break;
            }
            mapped.push((at, h, size));
            at += units as usize * page;
        }
        let addr = base + run.head as usize * page;
        let bytes = run.units() * page;
        if failed.is_none() && run.host != 0 {
            if let Err(e) = sh.rt.on_device(sh.device, || copy(&sh.rt, addr, run.host, bytes, HOST_TO_DEVICE)) {
                failed = Some(Error::runtime(e, "copying an offloaded run back to the device"));
            }
        }
        let Some(e) = failed else {
            self.range_mut(seg).slept[k].woken = mapped.into_iter().map(|(_, h, _)| h).collect();
            return Ok(());
        };
        // Undo this run: nothing of it was recorded; its handles go back,
        // but those of pieces that cannot be unmapped stay with the range.
        let mut stuck = None;
        for &(at, h, size) in mapped.iter().rev() {
            match super::unmap_told(&sh, self.cache.pool, at, size, Some(h)) {
                Ok(()) => handles.push_front((h, size)),
                Err(u) => {
                    self.keep_stuck(seg, at, h, size);
                    stuck.get_or_insert((at, u));
                }
            }
        }
        match stuck {
            None => Err(e),
            Some((at, u)) => Err(Error::Internal(format!("{e}; then {}", stuck_message(at, u)))),
        }
    }

    /// Records a piece mapped at `at` that an undo could not unmap.
    fn keep_stuck(&mut self, seg: SegmentId, at: usize, handle: PhysicalHandle, size: usize) {
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let piece = Piece { handle, head: ((at - base) / page) as u32, units: (size / page) as u32 };
        self.range_mut(seg).stuck.push(piece);
    }

    /// Unmaps and frees the pieces an earlier undo left mapped on `run`'s pages, so the run can be mapped again; if
    /// one still cannot be unmapped, the run cannot wake.
    fn unstick(&mut self, seg: SegmentId, run: &SleptRun) -> Result<()> {
        let (first, end) = (run.head as usize, run.head as usize + run.units());
        let on_run = |p: &Piece| (p.head as usize) < end && first < p.end();
        let (base, page) = (self.segments.get(seg).base, self.range(seg).page_size);
        let pieces: Vec<Piece> = self.range(seg).stuck.iter().copied().filter(on_run).collect();
        for p in pieces {
            let at = base + p.head as usize * page;
            self.free_stuck(seg, p).map_err(|u| {
                Error::Internal(format!(
                    "the sleeping block at {at:#x} cannot wake: an earlier wake that failed left its page mapped, and \
                     unmapping it failed again ({}); still asleep, nothing changed",
                    Error::runtime(u, "aclrtUnmapMem")
                ))
            })?;
        }
        Ok(())
    }

    /// Unmaps a stuck piece, forgets it, and gives its handle back (to the handle cache if the free is refused).
    fn free_stuck(&mut self, seg: SegmentId, p: Piece) -> Result<(), crate::runtime::AclCallError> {
        let sh = self.sh.clone();
        let page = self.range(seg).page_size;
        let at = self.segments.get(seg).base + p.head as usize * page;
        let size = p.units as usize * page;
        super::unmap_told(&sh, self.cache.pool, at, size, Some(p.handle))?;
        self.range_mut(seg).stuck.retain(|q| q.head != p.head);
        let _ = super::give_handle(&sh, p.handle, size);
        Ok(())
    }

    /// Teardown: frees the host buffers of `seg`'s sleeping runs, and unmaps and frees the pieces an undo left on them.
    pub(super) fn drop_slept(&mut self, seg: SegmentId) -> Result<()> {
        let sh = self.sh.clone();
        let mut first_error = None;
        for p in self.range(seg).stuck.clone() {
            if let Err(e) = self.free_stuck(seg, p) {
                first_error.get_or_insert(Error::runtime(e, "unmapping a page a failed wake left mapped"));
            }
        }
        for run in std::mem::take(&mut self.range_mut(seg).slept) {
            keep_first(&mut first_error, free_host(&sh, run.host));
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Frees the offload buffer `host` (0: none).
fn free_host(sh: &Shared<ExpandableRanges>, host: usize) -> Result<()> {
    if host == 0 {
        return Ok(());
    }
    sh.rt.free_host(host).map_err(|e| Error::runtime(e, "freeing an offload buffer"))
}

/// What a failed undo unmap left: said in the error of the wake.
fn stuck_message(at: usize, e: crate::runtime::AclCallError) -> String {
    format!(
        "unmapping {at:#x} to undo the wake failed ({}): that page stays mapped under its sleeping block and its \
         handle stays held, counted reserved; the next wake or teardown unmaps and frees it. Still asleep",
        Error::runtime(e, "aclrtUnmapMem")
    )
}
