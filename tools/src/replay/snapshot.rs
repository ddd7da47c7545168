//! The allocator's segment layout, read from `snapshot_json()` for drawing.

use super::json::{self, Json};

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

/// Reads a snapshot document.
pub fn parse(text: &str, step: usize) -> Result<SegmentMap, String> {
    let doc = json::parse(text)?;
    let num = |v: &Json, k: &str| v.get(k).and_then(Json::as_u64);
    let reserved =
        doc.get("stats").and_then(|s| num(s, "reserved_bytes")).ok_or("snapshot lacks stats.reserved_bytes")?;
    let mut segments = Vec::new();
    for seg in doc.get("segments").map(Json::as_array).unwrap_or(&[]) {
        let base = num(seg, "address").ok_or("segment without address")?;
        // The address range (older snapshots: "size").
        let size = num(seg, "address_space_bytes").or_else(|| num(seg, "size")).ok_or("segment without size")?;
        let mut blocks = Vec::new();
        for b in seg.get("blocks").map(Json::as_array).unwrap_or(&[]) {
            let kind = match b.get("state").and_then(Json::as_str) {
                Some("active") => BlockKind::Active,
                Some("pending-free") => BlockKind::PendingFree,
                _ => BlockKind::Cached,
            };
            let addr = num(b, "address").ok_or("block without address")?;
            blocks.push(BlockView {
                offset: addr.saturating_sub(base),
                size: num(b, "size").ok_or("block without size")?,
                kind,
            });
        }
        let mapped = num(seg, "mapped_bytes").unwrap_or(size);
        let expandable = seg.get("expandable").and_then(Json::as_bool).unwrap_or(false);
        // Blocks are memory (an expandable range's unmapped pages are not listed).
        let in_use_end = blocks.iter().map(|b| b.offset + b.size).max().unwrap_or(0);
        segments.push(SegmentView {
            size,
            mapped,
            pool: seg.get("pool").and_then(Json::as_str).unwrap_or("?").to_string(),
            expandable,
            extent: if expandable { mapped.max(in_use_end).min(size) } else { size },
            blocks,
        });
    }
    Ok(SegmentMap { step, reserved, segments })
}

/// One counter from the snapshot's `stats` object (0 when this build lacks it).
pub fn stat(text: &str, key: &str) -> u64 {
    json::parse(text).ok().and_then(|d| d.get("stats").and_then(|s| s.get(key)).and_then(Json::as_u64)).unwrap_or(0)
}
