//! A snapshot of segments and blocks (expensive: it locks each shard in turn), and its JSON form
//! (docs/snapshot-format.md), and PyTorch's form (`pytorch_snapshot`).
//!
//! It describes device memory, not address space: a segment's `size` is the memory it holds, its blocks the pieces
//! of that memory; an expandable range's unmapped space appears only as `address_space_bytes`. Taken while no other
//! call runs, the totals match the stats: segment sizes add up to `segment_bytes` (plus `cached_handle_bytes`:
//! `reserved_bytes`), active blocks to `allocated_bytes`, pending-free ones to `pending_free_bytes`.

use super::history::Action;
pub use super::pytorch_snapshot::BlockSnapshotState;
use super::pytorch_snapshot::{document, split_into_runs, BlockSnapshotState as State, BlockView, SegmentView, Value};
use super::stats::Stats;
use crate::core::alloc::device::Device;
use crate::core::backing::Memory;
use crate::core::cache::block::{Block, BlockState};
use crate::core::hooks::{SegmentEvent, SegmentPiece};
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// A piece of a segment's memory in one state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockSnapshot {
    pub address: usize,
    pub size: usize,
    /// Bytes the caller asked for (0 unless active or pending-free).
    pub requested: usize,
    pub state: BlockSnapshotState,
    pub stream: usize,
    /// Shared with other processes: exported (active), or held imported after its free (pending-free).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exported: bool,
}

/// One fixed segment or expandable range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// Start of the segment's address range.
    pub address: usize,
    /// Device memory it holds (fixed: the aclrtMalloc length; expandable: its mapped pages).
    pub size: usize,
    /// Its address range: an expandable segment's reserved range; the part of a fixed segment blocks tile.
    pub address_space_bytes: usize,
    /// The kind: "small" or "large".
    pub pool: &'static str,
    /// The pool that owns it (Note [pools]): 0 for the default pool, else the id `pool_create` returned.
    pub pool_id: u64,
    pub stream: usize,
    pub expandable: bool,
    /// Address order; an expandable range's unmapped pages are left out.
    pub blocks: Vec<BlockSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    pub device: i32,
    pub stats: Stats,
    pub segments: Vec<SegmentSnapshot>,
}

impl<B: Memory> Device<B> {
    pub fn snapshot(&self) -> crate::error::Result<Snapshot> {
        let stats = self.stats()?;
        let mut segments = Vec::new();
        let mut runs = Vec::new();
        for (entry, shard) in self.streams.iter().flat_map(|e| e.shards.iter().map(move |s| (e, s))) {
            let pool = shard.lock_anyway();
            // Read under the shard's lock: an entry changes pools only while empty.
            let pool_id = entry.pool();
            let stream = pool.stream().0;
            for seg_id in pool.cache.segments.ids() {
                let seg = pool.cache.segments.get(seg_id);
                let (expandable, held) = B::describe(&pool.backing, seg_id);
                let mut blocks = Vec::new();
                for (id, b) in pool.cache.blocks_of(seg_id) {
                    let exported = pool.cache.order.shared(id);
                    let BlockView { state, requested, .. } = view_of(b);
                    runs.clear();
                    B::mapped_runs(&pool.backing, seg_id, b.addr, b.size, &mut runs);
                    blocks.extend(runs.iter().map(|&(address, size)| BlockSnapshot {
                        address,
                        size,
                        requested,
                        state,
                        stream,
                        exported,
                    }));
                }
                segments.push(SegmentSnapshot {
                    address: seg.base,
                    size: held,
                    address_space_bytes: seg.size,
                    pool: pool.cache.kind.name(),
                    pool_id,
                    stream,
                    expandable,
                    blocks,
                });
            }
        }
        Ok(Snapshot { device: self.sh.device, stats, segments })
    }

    /// What the device holds now, as the segment observer would have been told it (for `npualloc_for_each_segment`);
    /// shards are read one at a time, so memory gained or given back meanwhile may or may not be in it.
    pub fn held_segments(&self) -> Vec<(SegmentEvent, SegmentPiece)> {
        let mut out = Vec::new();
        let mut pieces = Vec::new();
        for shard in self.streams.shards() {
            let pool = shard.lock_anyway();
            let pool_id = pool.pool_id();
            for seg_id in pool.cache.segments.ids() {
                let seg = pool.cache.segments.get(seg_id);
                B::held_pieces(&pool.backing, seg_id, seg.base, seg.size, &mut pieces);
                out.extend(pieces.drain(..).map(|(event, addr, size, handle)| {
                    let handle = handle.map_or(std::ptr::null_mut(), |h| h.0 as *mut std::ffi::c_void);
                    (event, SegmentPiece { addr, size, handle, pool: pool_id })
                }));
            }
        }
        out
    }

    pub fn snapshot_json(&self) -> crate::error::Result<String> {
        Ok(self.snapshot()?.to_json())
    }

    /// The snapshot in PyTorch's format; shards are read one at a time, as for `held_segments`.
    pub fn pytorch_snapshot(&self) -> crate::error::Result<Value> {
        let mut segments = Vec::new();
        for (pool_id, shard) in self.streams.iter().flat_map(|e| e.shards.iter().map(move |s| (e.pool(), s))) {
            let pool = shard.lock()?;
            let stream = pool.stream().0;
            for seg_id in pool.cache.segments.ids() {
                let seg = pool.cache.segments.get(seg_id);
                let blocks: Vec<BlockView> = pool.cache.blocks_of(seg_id).map(|(_, b)| view_of(b)).collect();
                let (expandable, _) = B::describe(&pool.backing, seg_id);
                let mut runs = Vec::new();
                B::mapped_runs(&pool.backing, seg_id, seg.base, seg.size, &mut runs);
                for (run, blocks) in runs.iter().zip(split_into_runs(&blocks, &runs)) {
                    segments.push(SegmentView {
                        addr: run.0,
                        size: run.1,
                        kind: pool.cache.kind.name(),
                        stream,
                        pool: pool_id,
                        expandable,
                        blocks,
                    });
                }
            }
        }
        segments.sort_by_key(|s| s.addr);
        let allocated: usize =
            segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state == State::Active).map(|b| b.size).sum();
        self.sh.history.record(Action::Snapshot, 0, allocated, crate::runtime::Stream::DEFAULT, 0);
        Ok(document(self.sh.device, &segments, &self.sh.history.events()))
    }
}

/// A block as both snapshots show it (its requested bytes 0 when cached).
fn view_of(b: &Block) -> BlockView {
    let (state, requested) = match b.state {
        BlockState::Allocated => (State::Active, b.requested),
        BlockState::Pending => (State::PendingFree, b.requested),
        BlockState::Free | BlockState::Held | BlockState::Reclaiming => (State::Cached, 0),
    };
    BlockView { addr: b.addr, size: b.size, requested, state }
}

impl Snapshot {
    /// The JSON document of `npualloc_snapshot_json` (docs/snapshot-format.md).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a snapshot always serializes")
    }
}

/// The stats as a JSON object, in table order.
impl Serialize for Stats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.fields())
    }
}

impl Serialize for SegmentSnapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seg = s.serialize_struct("SegmentSnapshot", 9)?;
        seg.serialize_field("address", &self.address)?;
        seg.serialize_field("size", &self.size)?;
        seg.serialize_field("address_space_bytes", &self.address_space_bytes)?;
        // Repeats "size" for readers of the first format.
        seg.serialize_field("mapped_bytes", &self.size)?;
        seg.serialize_field("pool", self.pool)?;
        seg.serialize_field("pool_id", &self.pool_id)?;
        seg.serialize_field("stream", &self.stream)?;
        seg.serialize_field("expandable", &self.expandable)?;
        seg.serialize_field("blocks", &self.blocks)?;
        seg.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_the_documented_fields_in_order() {
        let stats = Stats { reserved_bytes: 4096, segment_bytes: 4096, ..Stats::default() };
        use BlockSnapshotState::{Active, Cached, PendingFree};
        let blocks = [(65536, 1024, 1000, Active), (66560, 1024, 0, Cached), (67584, 2048, 2000, PendingFree)].map(
            |(address, size, requested, state)| BlockSnapshot {
                address,
                size,
                requested,
                state,
                stream: 7,
                exported: state == Active,
            },
        );
        let segment = SegmentSnapshot {
            address: 65536,
            size: 4096,
            address_space_bytes: 8192,
            pool: "large",
            pool_id: 3,
            stream: 7,
            expandable: true,
            blocks: blocks.to_vec(),
        };
        let snap = Snapshot { device: 1, stats, segments: vec![segment] };
        let json = snap.to_json();
        let stats_json: Vec<String> = Stats::FIELDS
            .iter()
            .map(|f| format!("\"{f}\":{}", if matches!(*f, "segment_bytes" | "reserved_bytes") { 4096 } else { 0 }))
            .collect();
        let expected = format!(
            "{{\"device\":1,\"stats\":{{{}}},\"segments\":[{{\"address\":65536,\"size\":4096,\
             \"address_space_bytes\":8192,\"mapped_bytes\":4096,\"pool\":\"large\",\"pool_id\":3,\"stream\":7,\"expandable\":true,\
             \"blocks\":[{{\"address\":65536,\"size\":1024,\"requested\":1000,\"state\":\"active\",\"stream\":7,\"exported\":true}},\
             {{\"address\":66560,\"size\":1024,\"requested\":0,\"state\":\"cached\",\"stream\":7}},\
             {{\"address\":67584,\"size\":2048,\"requested\":2000,\"state\":\"pending-free\",\"stream\":7}}]}}]}}",
            stats_json.join(",")
        );
        assert_eq!(json, expected);
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["stats"].as_object().unwrap().len(), Stats::FIELDS.len());
    }
}
