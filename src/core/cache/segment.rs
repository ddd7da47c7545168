//! Segments: contiguous device ranges obtained from the runtime in one call, each of one shard. Segments
//! never merge (each came from its own call), so free neighbours coalesce only inside one segment. The
//! backing keeps its own per-segment state (`backing::PerSegment`), keyed by id.

use super::block::BlockId;
pub(crate) use super::block::SegmentId;
use crate::runtime::Stream;
use std::collections::BTreeMap;

#[derive(Debug)]
pub(crate) struct Segment {
    pub base: usize,
    pub size: usize,
    /// Lowest-address block.
    pub first: BlockId,
    /// Other streams that used its blocks (record_stream); all are synchronized before it is released.
    pub other_streams: Vec<Stream>,
    /// Creation order over the device, for releasing the oldest cached segments first.
    pub serial: u64,
}

#[derive(Debug, Default)]
pub(crate) struct SegmentTable {
    slots: Vec<Option<Segment>>,
    free_slots: Vec<u32>,
    /// base address → segment id, for interior-pointer look-ups.
    by_base: BTreeMap<usize, SegmentId>,
}

impl SegmentTable {
    pub fn insert(&mut self, seg: Segment) -> SegmentId {
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(None);
            (self.slots.len() - 1) as u32
        });
        let id = SegmentId(slot);
        self.by_base.insert(seg.base, id);
        self.slots[slot as usize] = Some(seg);
        id
    }

    pub fn remove(&mut self, id: SegmentId) -> Segment {
        let seg = self.slots[id.0 as usize].take().expect("removing a live segment");
        self.by_base.remove(&seg.base);
        self.free_slots.push(id.0);
        seg
    }

    #[inline]
    pub fn get(&self, id: SegmentId) -> &Segment {
        self.slots[id.0 as usize].as_ref().expect("live segment")
    }

    #[inline]
    pub fn get_mut(&mut self, id: SegmentId) -> &mut Segment {
        self.slots[id.0 as usize].as_mut().expect("live segment")
    }

    pub fn containing(&self, addr: usize) -> Option<SegmentId> {
        let (_, &id) = self.by_base.range(..=addr).next_back()?;
        let seg = self.get(id);
        (addr < seg.base + seg.size).then_some(id)
    }

    pub fn ids(&self) -> impl Iterator<Item = SegmentId> + '_ {
        self.by_base.values().copied()
    }
}
