//! Fixed segments: each growth is one `aclrtMalloc` of a segment sized by
//! the policy (2 MiB for small blocks, 20 MiB or the rounded request for
//! large ones); a segment goes back with `aclrtFree` only when entirely
//! free. Everything in a segment is always mapped, so any free block that
//! fits is ready.

use super::{Backing, Detached, GrowContext, GrowError, Scope};
use crate::core::block::{BlockId, BlockState, NIL};
use crate::core::directory::ADDRESS_LIMIT;
use crate::core::pool::Pool;
use crate::core::segment::{Segment, SegmentId};
use crate::core::shared::Shared;
use crate::error::{Error, Result};
use crate::runtime::Stream;

/// The fixed-segment backing (no shared state beyond `Shared`).
#[derive(Debug, Default)]
pub(crate) struct FixedSegments;

impl Backing for FixedSegments {
    type Extent = ();
    type ShardState = ();

    #[inline(always)]
    fn ready(_: &Pool<Self>, _: BlockId, _: usize) -> bool {
        true
    }

    #[inline]
    fn splits(pool: &Pool<Self>, size: usize, rounded: usize) -> bool {
        pool.sh.policy.should_split(pool.kind, size, rounded)
    }

    fn obtain(
        pool: &mut Pool<Self>,
        rounded: usize,
        best_fit: Option<BlockId>,
        _: &GrowContext,
    ) -> Result<BlockId, GrowError> {
        if let Some(id) = best_fit {
            return Ok(id);
        }
        let sh = pool.sh.clone();
        let size = sh.policy.segment_size(rounded);
        sh.limit.charge(size)?;
        let base = match sh.rt.on_device(sh.device, || sh.rt.malloc(size)) {
            Ok(base) => base,
            Err(e) => {
                sh.limit.refund(size);
                return Err(GrowError::Runtime(e));
            }
        };
        if base.checked_add(size).is_none_or(|end| end > ADDRESS_LIMIT) {
            // The directory cannot hold it; give it straight back.
            let _ = sh.rt.on_device(sh.device, || sh.rt.free(base));
            sh.limit.refund(size);
            return Err(GrowError::Other(Error::Unsupported(format!(
                "the runtime returned device address {base:#x}, above the {ADDRESS_LIMIT:#x} this allocator supports"
            ))));
        }
        sh.counters.segment_added(size);
        let (_, block) = pool.add_segment(base, size, ());
        Ok(block)
    }

    /// Whole free segments leave the shard entirely (its table and the
    /// directory): once freed, their range may come straight back from the
    /// runtime to this or another shard, before `settle` runs.
    fn detach(pool: &mut Pool<Self>, _: Scope) -> Vec<Detached> {
        let free: Vec<SegmentId> = pool.segments.ids().filter(|&s| is_whole_free(pool, s)).collect();
        let mut out = Vec::with_capacity(free.len());
        for seg in free {
            let streams = pool.streams_of(seg);
            let first = pool.segments.get(seg).first;
            pool.index.remove(&mut pool.blocks, first);
            let s = pool.remove_segment(seg);
            pool.sh.directory.remove(s.base, s.size);
            out.push(Detached { segment: seg, block: NIL, addr: s.base, size: s.size, serial: s.serial, streams });
        }
        out
    }

    fn give_back(sh: &Shared<Self>, d: &Detached) -> Result<usize> {
        if let Err(e) = sh.rt.on_device(sh.device, || sh.rt.free(d.addr)) {
            // `settle` puts it back.
            return Err(Error::runtime(e, "returning a cached segment to the device"));
        }
        sh.limit.refund(d.size);
        sh.counters.segment_removed(d.size);
        Ok(d.size)
    }

    fn settle(pool: &mut Pool<Self>, d: Detached, given_back: bool) {
        if given_back {
            return;
        }
        let (seg, _) = pool.add_segment(d.addr, d.size, ());
        let owner = pool.stream;
        let s = pool.segments.get_mut(seg);
        s.serial = d.serial;
        s.other_streams = d.streams.into_iter().filter(|&st| st != owner).collect();
    }

    fn free_cached(_: &Shared<Self>) -> Result<usize> {
        Ok(0)
    }

    fn cached_bytes(&self) -> usize {
        0
    }

    fn held_bytes(seg: &Segment<()>) -> usize {
        seg.size
    }

    fn largest_free(pool: &Pool<Self>) -> usize {
        pool.index.largest(&pool.blocks)
    }

    fn teardown(pool: &mut Pool<Self>, busy: &[Stream]) -> Result<()> {
        let sh = pool.sh.clone();
        let mut first_error = None;
        let segs: Vec<SegmentId> = pool.segments.ids().collect();
        for seg in segs {
            if pool.streams_of(seg).iter().any(|s| busy.contains(s)) {
                continue;
            }
            let (base, size) = {
                let s = pool.segments.get(seg);
                (s.base, s.size)
            };
            sh.directory.remove(base, size);
            match sh.rt.on_device(sh.device, || sh.rt.free(base)) {
                Ok(()) => {
                    sh.limit.refund(size);
                    sh.counters.segment_removed(size);
                }
                Err(e) => {
                    first_error.get_or_insert(Error::runtime(e, "returning a segment at teardown"));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn check_segment(_: &Pool<Self>, _: SegmentId) -> Result<(), String> {
        Ok(())
    }

    fn describe(seg: &Segment<()>) -> (bool, usize) {
        (false, seg.size)
    }
}

/// Whether fixed segment `seg` holds one free block and nothing else.
fn is_whole_free(pool: &Pool<FixedSegments>, seg: SegmentId) -> bool {
    let b = pool.blocks.get(pool.segments.get(seg).first);
    b.state == BlockState::Free && b.next == NIL
}
