//! The streams an allocator has served, each with its two shards (small and
//! large pool), found without a lock.
//!
//! Entries are appended once and never move or go away (a stream keeps its
//! shards for the allocator's life), so a look-up is a scan of published
//! entries: the stream a call names is almost always among the first few.
//! Adding a stream takes `adding`, a lock no look-up needs.

use super::backing::Backing;
use super::directory::MAX_SHARDS;
use super::shard::Shard;
use crate::runtime::Stream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

const CHUNK_BITS: u32 = 5;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Streams one allocator serves at most.
pub(crate) const MAX_STREAMS: usize = 1 << 16;
const _: () = assert!(2 * MAX_STREAMS <= MAX_SHARDS);

/// One stream and its shards, indexed by `PoolKind`.
pub(crate) struct StreamEntry<B: Backing> {
    pub stream: Stream,
    pub shards: [Shard<B>; 2],
}

type Chunk<B> = [OnceLock<StreamEntry<B>>; CHUNK];

pub(crate) struct StreamTable<B: Backing> {
    chunks: Box<[OnceLock<Box<Chunk<B>>>]>,
    /// Entries published (each below is set).
    len: AtomicUsize,
    /// Streams this table takes at most.
    cap: usize,
    adding: Mutex<()>,
}

impl<B: Backing> StreamTable<B> {
    pub fn with_capacity(cap: usize) -> Self {
        let cap = cap.min(MAX_STREAMS);
        StreamTable {
            chunks: (0..cap.div_ceil(CHUNK)).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            cap,
            adding: Mutex::new(()),
        }
    }

    #[inline]
    fn entry(&self, slot: usize) -> &StreamEntry<B> {
        let chunk = self.chunks[slot >> CHUNK_BITS].get().expect("published chunk");
        chunk[slot & (CHUNK - 1)].get().expect("published entry")
    }

    /// The entry of `stream`, if it has one.
    #[inline]
    pub fn find(&self, stream: Stream) -> Option<&StreamEntry<B>> {
        let len = self.len.load(Ordering::Acquire);
        (0..len).map(|i| self.entry(i)).find(|e| e.stream == stream)
    }

    /// The entry of `stream`, made with `make(slot)` if the stream is new;
    /// None once the table is full.
    pub fn get_or_add(&self, stream: Stream, make: impl FnOnce(usize) -> [Shard<B>; 2]) -> Option<&StreamEntry<B>> {
        if let Some(e) = self.find(stream) {
            return Some(e);
        }
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = self.find(stream) {
            return Some(e);
        }
        let slot = self.len.load(Ordering::Relaxed);
        if slot >= self.cap {
            return None;
        }
        let chunk = self.chunks[slot >> CHUNK_BITS].get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())));
        if chunk[slot & (CHUNK - 1)].set(StreamEntry { stream, shards: make(slot) }).is_err() {
            unreachable!("slot {slot} set twice under the adding lock");
        }
        self.len.store(slot + 1, Ordering::Release);
        Some(self.entry(slot))
    }

    /// Every entry, in the order streams were met.
    pub fn iter(&self) -> impl Iterator<Item = &StreamEntry<B>> + Clone + '_ {
        let len = self.len.load(Ordering::Acquire);
        (0..len).map(|i| self.entry(i))
    }

    /// Every shard, by id (`2 * slot + kind`).
    pub fn shards(&self) -> impl Iterator<Item = &Shard<B>> + Clone + '_ {
        self.iter().flat_map(|e| e.shards.iter())
    }

    /// The shard with id `id`.
    #[inline]
    pub fn by_id(&self, id: u32) -> Option<&Shard<B>> {
        let slot = id as usize / 2;
        (slot < self.len.load(Ordering::Acquire)).then(|| &self.entry(slot).shards[id as usize % 2])
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
}
