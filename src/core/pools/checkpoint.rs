//! A pool's live blocks, listed and set back, for PyTorch's graph trees (torch_npu's `getCheckpointState`,
//! `setCheckpointPoolState`, `checkPoolLiveAllocations`; docs/design.md, Note [pool checkpoints]).

use super::super::backing::Memory;
use super::super::cache::block::BlockState;
use super::super::hooks::SegmentEvent;
use crate::core::alloc::device::Device;
use crate::core::alloc::policy::MIN_BLOCK_SIZE;
use crate::core::alloc::pool::Pool;
use crate::core::report::history::Action;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use std::collections::HashSet;
use std::sync::MutexGuard;

/// A live block of a pool, as a checkpoint keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveBlock {
    pub addr: usize,
    pub size: usize,
    /// The bytes its caller asked for.
    pub requested: usize,
    pub stream: Stream,
}

/// What `pool_restore` changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Blocks that were live and are freed (in address order).
    pub freed: Vec<usize>,
    /// Blocks made live again (in address order); one live at the same address and size stays, in neither.
    pub made: Vec<usize>,
}

impl<B: Memory> Device<B> {
    /// The live blocks of `pool`, in address order.
    pub fn pool_live_blocks(&self, pool: u64) -> Result<Vec<LiveBlock>> {
        self.check_usable()?;
        self.check_pool(pool)?;
        let mut out = Vec::new();
        for shard in self.streams.iter().filter(|e| e.pool() == pool).flat_map(|e| &e.shards) {
            let p = shard.lock()?;
            // The entry may have retired and served another pool since.
            if p.pool_id() == pool {
                out.extend(live_of(&p));
            }
        }
        out.sort_unstable_by_key(|b| b.addr);
        Ok(out)
    }

    /// Makes the live blocks of `pool` exactly `blocks` (an earlier `pool_live_blocks`): other live blocks are
    /// freed, and each of `blocks` not live is allocated again at its address. Checked before anything
    /// changes: INVALID_ARGUMENT when a block is not one a listing could give, overlaps another, lies outside
    /// the pool's free or mapped memory, or when a live block that goes was used by other streams or imported
    /// (its free would wait for them). Pool 0 is refused.
    pub fn pool_restore(&self, pool: u64, blocks: &[LiveBlock]) -> Result<Restored> {
        self.check_usable()?;
        if pool == 0 {
            return Err(Error::InvalidArgument(
                "restore of pool 0: only a private pool's live blocks can be set back (the default pool's \
                 frees follow rules a restore would skip: graph streams' quarantine)"
                    .into(),
            ));
        }
        self.check_pool(pool)?;
        let mut want = blocks.to_vec();
        want.sort_unstable_by_key(|b| b.addr);
        let unit = MIN_BLOCK_SIZE;
        if let Some(b) = want.iter().find(|b| {
            b.requested == 0
                || b.requested > b.size
                || b.addr.checked_add(b.size).is_none()
                || b.addr % unit != 0
                || b.size % unit != 0
        }) {
            return Err(Error::InvalidArgument(format!(
                "restore of pool {pool}: the block at {:#x} has {} bytes for a request of {}: not a block \
                 npualloc_pool_live_blocks lists (addresses and sizes are whole {unit}-byte units, a request \
                 is 1 byte to the block's size)",
                b.addr, b.size, b.requested
            )));
        }
        if let Some(w) = want.windows(2).find(|w| w[0].addr + w[0].size > w[1].addr) {
            return Err(Error::InvalidArgument(format!(
                "restore of pool {pool}: the blocks at {:#x} ({} bytes) and {:#x} overlap",
                w[0].addr, w[0].size, w[1].addr
            )));
        }
        // Nothing gives memory back meanwhile, and every shard of the pool stays locked from the checks to the
        // end, taken in table order (the lock rules in `device`). Checked again: a pool destroyed meanwhile
        // follows other rules (Note [pools]).
        let _ladder = self.ladder.lock().unwrap_or_else(|e| e.into_inner());
        self.check_pool(pool)?;
        let mut shards: Vec<(usize, MutexGuard<'_, Pool<B>>)> = Vec::new();
        for (i, e) in self.streams.iter().enumerate().filter(|(_, e)| e.pool() == pool) {
            for (kind, shard) in e.shards.iter().enumerate() {
                let p = shard.lock()?;
                if p.pool_id() == pool {
                    shards.push((2 * i + kind, p));
                }
            }
        }
        let mut kept = HashSet::new();
        let place =
            want.iter().map(|b| self.check_restorable(pool, &shards, b, &mut kept)).collect::<Result<Vec<_>>>()?;
        // A block that goes and that other streams used or another process imported would record events
        // (device calls that may fail halfway); torch_npu refuses it too ("Events should have synchronized").
        for (_, p) in &shards {
            for l in live_of(p).filter(|l| !kept.contains(&l.addr)) {
                let c = &p.cache;
                let id = *c.registry.get(&l.addr).expect("a live block is registered");
                if c.blocks.get(id).has_other_streams {
                    return Err(Error::InvalidArgument(format!(
                        "restore of pool {pool}: the live block at {:#x} would be freed, and other streams used it \
                         (record_stream) or another process imported it: its free would wait for them; erase those \
                         uses or free it first; nothing was changed",
                        l.addr
                    )));
                }
            }
        }
        let mut done = Restored::default();
        for (_, p) in shards.iter_mut() {
            let gone: Vec<usize> = live_of(p).map(|l| l.addr).filter(|a| !kept.contains(a)).collect();
            for addr in gone {
                p.free(addr)?;
                self.sh.trace(move |t| t.free(addr));
                done.freed.push(addr);
            }
            p.drain_reuse();
        }
        for (b, &at) in want.iter().zip(&place).filter(|(b, _)| !kept.contains(&b.addr)) {
            let p = &mut shards[at].1;
            let seg = p.cache.segments.containing(b.addr).expect("checked: the block lies in a segment");
            let id = p.cache.block_containing(seg, b.addr).expect("checked: a block holds the address");
            p.cache.claim(id, b.addr, b.size, b.requested);
            p.after_transition();
            let stream = p.stream();
            self.sh.trace_alloc(b.addr, b.requested, stream);
            self.sh.history.record(Action::Alloc, b.addr, b.requested, stream, pool);
            done.made.push(b.addr);
        }
        for (id, p) in &shards {
            if let Some((entry, kind)) = self.streams.entry_by_id(*id as u32) {
                self.published(entry, kind, p);
            }
        }
        done.freed.sort_unstable();
        Ok(done)
    }

    /// The index in `shards` of the shard `b` would be restored in, once its memory is checked to be free
    /// and mapped there; a live block that is `b` already goes in `kept`.
    fn check_restorable(
        &self,
        pool: u64,
        shards: &[(usize, MutexGuard<'_, Pool<B>>)],
        b: &LiveBlock,
        kept: &mut HashSet<usize>,
    ) -> Result<usize> {
        let end = b.addr + b.size;
        let refuse = |why: String| {
            Err(Error::InvalidArgument(format!(
                "restore of pool {pool}: the block at {:#x} ({} bytes) {why}; nothing was changed",
                b.addr, b.size
            )))
        };
        let shard = self.sh.directory.owner(b.addr);
        let Some(at) = shards.iter().position(|(id, _)| Some(*id as u32) == shard) else {
            return refuse("is not in the pool's memory (given back since, or another pool's)".into());
        };
        let p = &shards[at].1;
        let c = &p.cache;
        if c.stream != b.stream {
            return refuse(format!(
                "was listed on stream {:#x}, and its memory is stream {:#x}'s",
                b.stream.0, c.stream.0
            ));
        }
        let align = p.shape().align();
        if b.addr % align != 0 || b.size % align != 0 {
            return refuse(format!("breaks the pool's {align}-byte alignment"));
        }
        let Some(seg) = c.segments.containing(b.addr) else {
            return refuse("is not in the pool's memory (given back since)".into());
        };
        let (base, size) = (c.segments.get(seg).base, c.segments.get(seg).size);
        if end > base + size {
            return refuse(format!("runs past the end of its segment ({:#x}, {size} bytes)", base));
        }
        for (_, blk) in c.blocks_of(seg).filter(|(_, x)| x.addr < end && x.addr + x.size > b.addr) {
            match blk.state {
                BlockState::Allocated if blk.addr == b.addr && blk.size == b.size => {
                    kept.insert(b.addr);
                }
                BlockState::Allocated if blk.has_other_streams => {
                    return refuse(format!(
                        "overlaps the live block at {:#x}, whose free would wait for other streams' work or \
                         another process's import",
                        blk.addr
                    ));
                }
                BlockState::Allocated | BlockState::Free | BlockState::Held => {}
                BlockState::Pending => {
                    return refuse(format!(
                        "overlaps the freed block at {:#x}, which waits for other streams' work (synchronize first)",
                        blk.addr
                    ));
                }
                BlockState::Reclaiming => {
                    return refuse(format!("overlaps memory at {:#x} that is being given back", blk.addr));
                }
            }
        }
        let mut runs = Vec::new();
        B::mapped_runs(&p.backing, seg, b.addr, b.size, &mut runs);
        // How far the memory is mapped from `b.addr` on.
        let (Ok(next) | Err(next)) =
            runs.iter().try_fold(b.addr, |next, &(from, len)| if from == next { Ok(from + len) } else { Err(next) });
        if next < end {
            return refuse(format!("is not mapped from {next:#x} on (given back since)"));
        }
        // A no_split pool's block is whole handles (or a whole segment): a restore may not cut one.
        if p.shape().no_split {
            let mut pieces = Vec::new();
            B::held_pieces(&p.backing, seg, base, size, &mut pieces);
            let cut = pieces.iter().filter(|piece| piece.0 == SegmentEvent::Map).find_map(|&(_, at, n, handle)| {
                let (from, to) = if handle.is_some() { (at, at + n) } else { (base, base + size) };
                (from < end && b.addr < to && (from < b.addr || to > end)).then_some((from, to))
            });
            if let Some((from, to)) = cut {
                return refuse(format!(
                    "would cut the memory mapped at {from:#x}..{to:#x}, and the pool's no_split blocks are whole \
                     pieces of their own"
                ));
            }
        }
        Ok(at)
    }
}

/// The allocated blocks of shard `p`.
fn live_of<B: Memory>(p: &Pool<B>) -> impl Iterator<Item = LiveBlock> + '_ {
    let c = &p.cache;
    c.segments
        .ids()
        .flat_map(move |seg| c.blocks_of(seg).filter(|(_, b)| b.state == BlockState::Allocated))
        .map(move |(_, b)| LiveBlock { addr: b.addr, size: b.size, requested: b.requested, stream: c.stream })
}
