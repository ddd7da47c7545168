//! Segments: contiguous device ranges obtained from the runtime in one call.
//!
//! A segment belongs to one pool kind and one stream; its blocks tile it.
//! Segments never merge with each other (each came from its own
//! `aclrtMalloc`), so free neighbours coalesce only inside one segment.

use super::block::BlockId;
use super::policy::PoolKind;
use crate::runtime::Stream;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct Segment {
    pub base: usize,
    pub size: usize,
    pub kind: PoolKind,
    pub stream_slot: u16,
    /// Lowest-address block.
    pub first: BlockId,
    /// Streams other than the owner that used blocks of this segment
    /// (record_stream); all are synchronized before the segment is released.
    pub other_streams: Vec<Stream>,
    /// Creation order, for releasing the oldest cached segments first.
    pub serial: u64,
    /// Present for an expandable segment (a reserved range mapped page by page).
    pub vmm: Option<Box<super::expandable::VmmRange>>,
}

#[derive(Debug, Default)]
pub struct SegmentTable {
    slots: Vec<Option<Segment>>,
    free_slots: Vec<u32>,
    /// base address → segment id, for interior-pointer look-ups.
    by_base: BTreeMap<usize, u32>,
    next_serial: u64,
}

impl SegmentTable {
    pub fn insert(&mut self, mut seg: Segment) -> u32 {
        seg.serial = self.next_serial;
        self.next_serial += 1;
        let base = seg.base;
        let id = match self.free_slots.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(seg);
                id
            }
            None => {
                self.slots.push(Some(seg));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_base.insert(base, id);
        id
    }

    pub fn remove(&mut self, id: u32) -> Segment {
        let seg = self.slots[id as usize].take().expect("removing a live segment");
        self.by_base.remove(&seg.base);
        self.free_slots.push(id);
        seg
    }

    #[inline]
    pub fn get(&self, id: u32) -> &Segment {
        self.slots[id as usize].as_ref().expect("live segment")
    }

    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Segment {
        self.slots[id as usize].as_mut().expect("live segment")
    }

    /// The segment containing `addr`, if any.
    pub fn containing(&self, addr: usize) -> Option<u32> {
        let (_, &id) = self.by_base.range(..=addr).next_back()?;
        let seg = self.get(id);
        (addr < seg.base + seg.size).then_some(id)
    }

    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_base.values().copied()
    }

    pub fn len(&self) -> usize {
        self.by_base.len()
    }
}
