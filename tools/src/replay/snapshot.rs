//! The allocator's segment layout, read from `snapshot_json()` for drawing.

use serde::Deserialize;

/// What a block is doing at the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Active,
    Cached,
    PendingFree,
}

impl BlockKind {
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Active => "active",
            BlockKind::Cached => "cached",
            BlockKind::PendingFree => "pending-free",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockView {
    /// From the segment's start.
    pub offset: u64,
    pub size: u64,
    pub kind: BlockKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentView {
    pub size: u64,
    /// Bytes backed by memory (less than `size` for a partly mapped
    /// expandable segment).
    pub mapped: u64,
    pub pool: String,
    pub expandable: bool,
    /// The part of the address range worth drawing: all of a fixed segment;
    /// for an expandable one, its mapped bytes or up to its last block in
    /// use, whichever is more (its free tail is address space, not memory).
    pub extent: u64,
    pub blocks: Vec<BlockView>,
}

/// Every segment at one moment of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMap {
    /// The step after which the snapshot was taken.
    pub step: usize,
    pub reserved: u64,
    pub segments: Vec<SegmentView>,
}

/// The parts of the snapshot document (docs/snapshot-format.md) drawn here.
#[derive(Deserialize)]
struct Document {
    stats: DocStats,
    #[serde(default)]
    segments: Vec<DocSegment>,
}

#[derive(Deserialize)]
struct DocStats {
    reserved_bytes: u64,
}

#[derive(Deserialize)]
struct DocSegment {
    address: u64,
    size: u64,
    /// The address range (older snapshots: only `size`).
    address_space_bytes: Option<u64>,
    mapped_bytes: Option<u64>,
    pool: Option<String>,
    #[serde(default)]
    expandable: bool,
    #[serde(default)]
    blocks: Vec<DocBlock>,
}

#[derive(Deserialize)]
struct DocBlock {
    address: u64,
    size: u64,
    #[serde(default)]
    state: String,
}

/// Reads a snapshot document.
pub fn parse(text: &str, step: usize) -> Result<SegmentMap, String> {
    let doc: Document = serde_json::from_str(text).map_err(|e| format!("snapshot: {e}"))?;
    let segments = doc
        .segments
        .into_iter()
        .map(|seg| {
            let size = seg.address_space_bytes.unwrap_or(seg.size);
            let blocks: Vec<BlockView> = seg
                .blocks
                .iter()
                .map(|b| BlockView {
                    offset: b.address.saturating_sub(seg.address),
                    size: b.size,
                    kind: match b.state.as_str() {
                        "active" => BlockKind::Active,
                        "pending-free" => BlockKind::PendingFree,
                        _ => BlockKind::Cached,
                    },
                })
                .collect();
            let mapped = seg.mapped_bytes.unwrap_or(size);
            // Blocks are memory (an expandable range's unmapped pages are not listed).
            let in_use_end = blocks.iter().map(|b| b.offset + b.size).max().unwrap_or(0);
            SegmentView {
                size,
                mapped,
                pool: seg.pool.unwrap_or_else(|| "?".to_string()),
                expandable: seg.expandable,
                extent: if seg.expandable { mapped.max(in_use_end).min(size) } else { size },
                blocks,
            }
        })
        .collect();
    Ok(SegmentMap { step, reserved: doc.stats.reserved_bytes, segments })
}

/// One counter from the snapshot's `stats` object (0 when this build lacks it).
pub fn stat(text: &str, key: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|doc| doc.get("stats")?.get(key)?.as_u64())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_segments_blocks_and_counters() {
        let doc = r#"{"device":0,"stats":{"reserved_bytes":8192,"num_maps":3},"segments":[
            {"address":4096,"size":4096,"address_space_bytes":65536,"mapped_bytes":4096,"pool":"large",
             "stream":0,"expandable":true,"blocks":[
                {"address":4096,"size":1024,"requested":1000,"state":"active","stream":0},
                {"address":5120,"size":3072,"requested":0,"state":"cached","stream":0}]},
            {"address":1048576,"size":4096,"pool":"small","blocks":[
                {"address":1048576,"size":4096,"requested":10,"state":"pending-free","stream":0}]}]}"#;
        let map = parse(doc, 7).unwrap();
        assert_eq!((map.step, map.reserved, map.segments.len()), (7, 8192, 2));
        let (a, b) = (&map.segments[0], &map.segments[1]);
        assert_eq!((a.size, a.mapped, a.extent, a.expandable, a.pool.as_str()), (65536, 4096, 4096, true, "large"));
        assert_eq!(a.blocks[1], BlockView { offset: 1024, size: 3072, kind: BlockKind::Cached });
        // An older snapshot: no address_space_bytes, mapped_bytes or expandable.
        assert_eq!((b.size, b.mapped, b.extent, b.expandable), (4096, 4096, 4096, false));
        assert_eq!(b.blocks[0].kind, BlockKind::PendingFree);
        assert_eq!(stat(doc, "num_maps"), 3);
        assert_eq!(stat(doc, "num_physical_mallocs"), 0);
        assert!(parse(r#"{"stats":{},"segments":[]}"#, 0).unwrap_err().contains("reserved_bytes"));
        assert!(parse(r#"{"stats":{"reserved_bytes":1},"segments":[{"size":1}]}"#, 0).unwrap_err().contains("address"));
    }
}
