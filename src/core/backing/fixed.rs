//! Fixed segments: each growth is one `aclrtMalloc` of a segment sized by the policy, given back with `aclrtFree`
//! only when entirely free. Everything is always mapped, so any free block that fits is ready.

use super::{
    keep_first, kept_or_made, lock, Backing, Detached, Give, GrowContext, GrowError, HeldOutside, Parts, PerSegment,
    Reports, Scope, Sleeps, What,
};
use crate::core::alloc::directory::ADDRESS_LIMIT;
use crate::core::alloc::policy::MIN_BLOCK_SIZE;
use crate::core::alloc::policy::{PoolKind, Shape};
use crate::core::alloc::shared::Shared;
use crate::core::cache::block::BlockId;
use crate::core::cache::segment::SegmentId;
use crate::core::cache::Cache;
use crate::core::hooks::SegmentEvent;
use crate::core::report::history::Action;
use crate::error::{Error, Result};
use crate::runtime::{PhysicalHandle, Stream};

/// The fixed-segment backing. Its shards share the keys of allocations exported to other processes, by allocation
/// start (closed before the allocation goes back, as the runtime asks).
#[derive(Debug, Default)]
pub(crate) struct FixedSegments {
    keys: std::sync::Mutex<std::collections::HashMap<usize, [u8; crate::runtime::KEY_LEN]>>,
}

impl FixedSegments {
    /// Frees the allocation at `at` of `len` bytes (of pool `pool`), telling the segment observer: a refused free is
    /// told as mapped again. Its export, if any, ends first (a refused close ends with the free).
    fn free_raw(sh: &Shared<Self>, pool: u64, at: usize, len: usize) -> Result<(), crate::runtime::AclCallError> {
        sh.segment_event(SegmentEvent::Unmap, at, len, None, pool);
        let key = lock(&sh.backing.keys).remove(&at);
        if let Some(key) = key {
            let _ = sh.rt.on_device(sh.device, || sh.rt.close_key(&key));
        }
        if let Err(e) = sh.rt.on_device(sh.device, || sh.rt.free(at)) {
            sh.segment_event(SegmentEvent::Map, at, len, None, pool);
            return Err(e);
        }
        sh.limit.refund(len);
        sh.counters.segment_removed(len);
        Ok(())
    }
}

impl super::Shares for FixedSegments {
    fn share(pool: Parts<'_, Self>, seg: SegmentId, addr: usize, _size: usize) -> Result<super::SharedMemory> {
        let raw = pool.backing.get(seg);
        let (at, len) = (raw.at, raw.len);
        let sh = pool.sh;
        let key = kept_or_made(&sh.backing.keys, at, || {
            let key = sh.rt.on_device(sh.device, || sh.rt.export_key(at, len));
            key.map_err(|e| Error::runtime(e, "exporting a segment to another process"))
        })?;
        Ok(super::SharedMemory::Key { key, offset: addr - at })
    }
}

impl Backing for FixedSegments {
    /// A shard's segments: what `aclrtMalloc` returned for each.
    type ShardState = PerSegment<Raw>;

    #[inline(always)]
    fn ready(_: &Cache, _: &PerSegment<Raw>, _: Shape, _: BlockId, rounded: usize) -> Option<usize> {
        Some(rounded)
    }

    #[inline]
    /// A no_split pool's block is a whole segment, or a whole cached block.
    fn splits(sh: &Shared<Self>, shape: Shape, kind: PoolKind, size: usize, rounded: usize) -> bool {
        !shape.no_split && sh.policy.should_split(kind, size, rounded)
    }

    fn obtain(
        mut pool: Parts<'_, Self>,
        rounded: usize,
        best_fit: Option<BlockId>,
        ctx: &GrowContext<'_, Self>,
    ) -> Result<(BlockId, usize), GrowError> {
        if let Some(id) = best_fit {
            return Ok((id, rounded));
        }
        let sh = pool.sh.clone();
        // A no_split pool's block is a segment of its own.
        let needed = if pool.shape.no_split { rounded } else { sh.policy.segment_size(rounded) };
        if ctx.may_collect && sh.gc_due(needed) {
            return Err(GrowError::Collect { needed });
        }
        let (raw, base, size) = obtain_aligned(&mut pool, needed, rounded)?;
        if base.checked_add(size).is_none_or(|end| end > ADDRESS_LIMIT) {
            // The directory cannot hold it; give it straight back.
            let _ = sh.rt.on_device(sh.device, || sh.rt.free(raw.at));
            sh.limit.refund(raw.len);
            return Err(GrowError::Other(Error::Unsupported(format!(
                "the runtime returned device address {base:#x}, above the {ADDRESS_LIMIT:#x} this allocator supports"
            ))));
        }
        Ok((add_raw(&mut pool, raw, base, size), rounded))
    }

    /// Whole free segments leave the shard and the directory here: once freed, their range may come straight back
    /// from the runtime to any shard before `settle` runs.
    fn unused(pool: Parts<'_, Self>, _: Scope) -> Vec<Give> {
        let free: Vec<SegmentId> = pool.segments.ids().filter(|&s| pool.is_wholly_free(s)).collect();
        let give = |seg| {
            let s = pool.cache.segments.get(seg);
            let raw = pool.backing.take(seg);
            pool.sh.directory.remove(raw.at, raw.len);
            Give { device: (raw.at, raw.len), claim: true, ..Give::pages(What::Segment, seg, s.base, s.size) }
        };
        free.into_iter().map(give).collect()
    }

    fn give_back(sh: &Shared<Self>, d: &Detached) -> Result<usize> {
        let (at, len) = d.device;
        // Refused: `settle` puts it back, still held.
        Self::free_raw(sh, d.pool, at, len)
            .map_err(|e| Error::runtime(e, "returning a cached segment to the device"))?;
        Ok(len)
    }

    fn settle(pool: Parts<'_, Self>, g: &Give, given_back: bool, readded: Option<SegmentId>) -> bool {
        match readded {
            Some(seg) => pool.backing.set(seg, Raw { at: g.device.0, len: g.device.1 }),
            None if given_back => {
                pool.sh.history.record(Action::SegmentFree, g.addr, g.size, pool.stream, pool.cache.pool)
            }
            None => {}
        }
        false
    }

    fn teardown(pool: Parts<'_, Self>, busy: &[Stream]) -> Result<()> {
        let sh = pool.sh.clone();
        let mut first_error = None;
        let segs: Vec<SegmentId> = pool.segments.ids().collect();
        for seg in segs {
            // Memory another process holds stays where it is (`sharing`).
            if pool.streams_of(seg).iter().any(|s| busy.contains(s)) || pool.held_for_importers(seg) {
                continue;
            }
            let raw = *pool.backing.get(seg);
            sh.directory.remove(raw.at, raw.len);
            let freed = Self::free_raw(&sh, pool.cache.pool, raw.at, raw.len);
            keep_first(&mut first_error, freed.map_err(|e| Error::runtime(e, "returning a segment at teardown")));
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Fixed segments hold nothing outside a segment.
impl HeldOutside for FixedSegments {}

/// Fixed segments never sleep while live (`SLEEPS_LIVE` false).
impl Sleeps for FixedSegments {}

impl Reports for FixedSegments {
    fn held_bytes(st: &PerSegment<Raw>, seg: SegmentId) -> usize {
        st.get(seg).len
    }

    fn largest_free(pool: &Cache, _: &PerSegment<Raw>) -> usize {
        pool.index.largest(&pool.blocks)
    }

    fn describe(st: &PerSegment<Raw>, seg: SegmentId) -> (bool, usize) {
        (false, st.get(seg).len)
    }

    fn mapped_runs(_: &PerSegment<Raw>, _: SegmentId, addr: usize, size: usize, out: &mut Vec<(usize, usize)>) {
        out.push((addr, size));
    }

    fn held_pieces(
        st: &PerSegment<Raw>,
        seg: SegmentId,
        _: usize,
        _: usize,
        out: &mut Vec<(SegmentEvent, usize, usize, Option<PhysicalHandle>)>,
    ) {
        let raw = st.get(seg);
        out.push((SegmentEvent::Map, raw.at, raw.len, None));
    }
}

/// What `aclrtMalloc` returned for a segment: the address to free and the bytes held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Raw {
    at: usize,
    len: usize,
}

/// A segment of `size` bytes from `aclrtMalloc` able to hold `rounded` bytes from a boundary of the pool's alignment
/// (512 bytes unless its shape asks for more; `size` is a multiple of it): (allocation, first byte blocks may use,
/// bytes blocks may use). The runtime promises only 64-byte alignment: an unaligned result loses its first partial
/// unit if the rest still serves the request, else it is freed (or, if that fails, kept as a segment of its own)
/// and asked for again one unit larger. Bytes are charged against the limit as they are obtained.
fn obtain_aligned(
    pool: &mut Parts<'_, FixedSegments>,
    size: usize,
    rounded: usize,
) -> Result<(Raw, usize, usize), GrowError> {
    let sh = pool.sh.clone();
    let align = pool.shape.align();
    debug_assert!(align >= MIN_BLOCK_SIZE && size % align == 0, "{size} bytes at alignment {align}");
    let first = malloc_charged(&sh, size)?;
    if first.at % align == 0 {
        return Ok((first, first.at, size));
    }
    let usable = size - align;
    if usable >= rounded {
        return Ok((first, first.at.next_multiple_of(align), usable));
    }
    // Freed first: on a nearly full device both may not fit at once.
    if sh.rt.on_device(sh.device, || sh.rt.free(first.at)).is_ok() {
        sh.limit.refund(size);
    } else {
        add_raw(pool, first, first.at.next_multiple_of(align), usable);
    }
    let second = malloc_charged(&sh, size + align)?;
    Ok((second, second.at.next_multiple_of(align), size))
}

/// `len` bytes from `aclrtMalloc`, charged against the limit.
fn malloc_charged(sh: &Shared<FixedSegments>, len: usize) -> Result<Raw, GrowError> {
    let at = sh.limit.charged(len, || sh.rt.on_device(sh.device, || sh.rt.malloc(len)))?;
    Ok(Raw { at, len })
}

/// Adds a segment over `raw`, blocks at [base, base + size); returns its free block.
fn add_raw(pool: &mut Parts<'_, FixedSegments>, raw: Raw, base: usize, size: usize) -> BlockId {
    pool.sh.counters.segment_added(raw.len);
    pool.sh.history.record(Action::SegmentAlloc, base, size, pool.stream, pool.cache.pool);
    let (seg, block) = pool.add_segment(base, size, Some((raw.at, raw.len)));
    pool.backing.set(seg, raw);
    pool.segment_event(SegmentEvent::Map, raw.at, raw.len, None);
    block
}
