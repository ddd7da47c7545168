//! A snapshot of segments and blocks (an explicitly expensive call: it
//! locks each shard in turn), and its JSON form. docs/snapshot-format.md
//! describes every field.
//!
//! The snapshot describes device memory, not address space: a segment's
//! `size` is the memory it holds (a fixed segment's allocation, an
//! expandable range's mapped pages), and its blocks are the pieces of that
//! memory, so an expandable range's unmapped address space appears only as
//! `address_space_bytes`. Taken while no other call runs, the totals match
//! the stats: the segments' sizes add up to `segment_bytes`, which with
//! `cached_handle_bytes` makes `reserved_bytes`; active blocks add up to
//! `allocated_bytes`, pending-free ones to `pending_free_bytes`.

use super::backing::Backing;
use super::block::{BlockState, NIL};
use super::device::Device;
use super::stats::Stats;
use std::fmt::Write;

/// What a block in a snapshot is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockSnapshotState {
    /// Allocated to a caller.
    Active,
    /// Free memory kept by the allocator.
    Cached,
    /// Freed by the caller, waiting for other streams' work.
    PendingFree,
}

impl BlockSnapshotState {
    pub fn name(self) -> &'static str {
        match self {
            BlockSnapshotState::Active => "active",
            BlockSnapshotState::Cached => "cached",
            BlockSnapshotState::PendingFree => "pending-free",
        }
    }
}

/// A piece of a segment's memory in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSnapshot {
    pub address: usize,
    pub size: usize,
    /// Bytes the caller asked for (0 unless active or pending-free).
    pub requested: usize,
    pub state: BlockSnapshotState,
    pub stream: usize,
}

/// One fixed segment or expandable range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// Start of the segment's address range.
    pub address: usize,
    /// Device memory it holds (fixed: the aclrtMalloc length; expandable:
    /// its mapped pages).
    pub size: usize,
    /// Its address range: the reserved range of an expandable segment; the
    /// part of a fixed segment that blocks tile.
    pub address_space_bytes: usize,
    pub pool: &'static str,
    pub stream: usize,
    pub expandable: bool,
    /// Address order; an expandable range's unmapped pages are left out.
    pub blocks: Vec<BlockSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub device: i32,
    pub stats: Stats,
    pub segments: Vec<SegmentSnapshot>,
}

impl<B: Backing> Device<B> {
    pub fn snapshot(&self) -> crate::error::Result<Snapshot> {
        let stats = self.stats()?;
        let mut segments = Vec::new();
        let mut runs = Vec::new();
        for shard in self.streams.shards() {
            let pool = shard.lock_anyway();
            let stream = pool.stream().0;
            for seg_id in pool.segments.ids() {
                let seg = pool.segments.get(seg_id);
                let (expandable, held) = B::describe(seg);
                let mut blocks = Vec::new();
                let mut id = seg.first;
                while id != NIL {
                    let b = pool.blocks.get(id);
                    let (state, requested) = match b.state {
                        BlockState::Allocated => (BlockSnapshotState::Active, b.requested),
                        BlockState::Pending => (BlockSnapshotState::PendingFree, b.requested),
                        BlockState::Free | BlockState::Held | BlockState::Reclaiming => (BlockSnapshotState::Cached, 0),
                    };
                    runs.clear();
                    B::mapped_runs(seg, b.addr, b.size, &mut runs);
                    blocks.extend(runs.iter().map(|&(address, size)| BlockSnapshot {
                        address,
                        size,
                        requested,
                        state,
                        stream,
                    }));
                    id = b.next;
                }
                segments.push(SegmentSnapshot {
                    address: seg.base,
                    size: held,
                    address_space_bytes: seg.size,
                    pool: pool.kind.name(),
                    stream,
                    expandable,
                    blocks,
                });
            }
        }
        Ok(Snapshot { device: self.sh.device, stats, segments })
    }

    pub fn snapshot_json(&self) -> crate::error::Result<String> {
        Ok(self.snapshot()?.to_json())
    }
}

impl Snapshot {
    /// The JSON document of `npualloc_snapshot_json` (docs/snapshot-format.md).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(1024);
        let _ = write!(out, "{{\"device\":{},\"stats\":{{", self.device);
        for (i, (name, value)) in self.stats.fields().enumerate() {
            let _ = write!(out, "{}\"{name}\":{value}", if i == 0 { "" } else { "," });
        }
        out.push_str("},\"segments\":[");
        for (i, seg) in self.segments.iter().enumerate() {
            // "mapped_bytes" repeats "size" for readers of the first format.
            let _ = write!(
                out,
                "{}{{\"address\":{},\"size\":{},\"address_space_bytes\":{},\"mapped_bytes\":{},\"pool\":\"{}\",\
                 \"stream\":{},\"expandable\":{},\"blocks\":[",
                if i == 0 { "" } else { "," },
                seg.address,
                seg.size,
                seg.address_space_bytes,
                seg.size,
                seg.pool,
                seg.stream,
                seg.expandable,
            );
            for (j, b) in seg.blocks.iter().enumerate() {
                let _ = write!(
                    out,
                    "{}{{\"address\":{},\"size\":{},\"requested\":{},\"state\":\"{}\",\"stream\":{}}}",
                    if j == 0 { "" } else { "," },
                    b.address,
                    b.size,
                    b.requested,
                    b.state.name(),
                    b.stream,
                );
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }
}
