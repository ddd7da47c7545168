//! The streams an allocator has served, each with its two shards (small and large pool), found without a lock.
//!
//! Entries are appended once and never move or go away, so a look-up is a lock-free scan of published entries.
//! Adding a stream takes `adding`, a lock no look-up needs. A stream forgotten with nothing left in its shards
//! retires its entry (its stream becomes `RETIRED`, which no look-up matches) and the next new (pool, stream) pair
//! takes it over, so the table stays as long as the most streams at once. A private pool's entry (Note [pools])
//! also retires when its pool is destroyed with nothing left in it.

use super::directory::MAX_SHARDS;
use super::policy::Shape;
use super::shard::Shard;
use crate::core::backing::Memory;
use crate::core::report::stats::HighWater;
use crate::runtime::Stream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// The stream value of a retired entry: no stream handle is all ones.
const RETIRED: usize = usize::MAX;
use std::sync::{Mutex, OnceLock};

const CHUNK_BITS: u32 = 5;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Streams one allocator serves at most.
pub(crate) const MAX_STREAMS: usize = 1 << 16;
const _: () = assert!(2 * MAX_STREAMS <= MAX_SHARDS);

/// `StreamEntry::flags`: the stream was seen capturing (Note [capture]).
pub(crate) const GRAPH: u8 = 1;
/// `StreamEntry::flags`: the entry's pool was destroyed (Note [pools]).
pub(crate) const DESTROYED: u8 = 2;

/// One stream's shards in one pool (0: the default pool), indexed by `PoolKind`.
pub(crate) struct StreamEntry<B: Memory> {
    pub shards: [Shard<B>; 2],
    /// High-water marks for the device's peaks.
    pub high: HighWater,
    /// The stream's handle, `RETIRED` while the entry waits for another.
    stream: AtomicUsize,
    /// The pool these shards serve; changed only while the entry is retired, under the pools' records lock.
    pool: AtomicU64,
    /// GRAPH and DESTROYED. A free reads them once.
    flags: AtomicU8,
    /// The pool's `use_on_oom`: other requests' ladder may release its cache.
    use_on_oom: AtomicBool,
    /// The pool's `Shape`; changed with `pool`, read on routed requests only.
    shape_shift: AtomicU8,
    no_split: AtomicBool,
    /// A routed request came while the stream captured: a graph pool (Note [capture]).
    saw_capture: AtomicBool,
    pub slot: usize,
    /// The stream the entry served when it retired (see `get_or_add`).
    retired_from: AtomicUsize,
    /// Each shard's held bytes, published on the slow paths for its pool's reserved peak.
    held: [AtomicU64; 2],
}

impl<B: Memory> StreamEntry<B> {
    #[inline(always)]
    pub fn pool(&self) -> u64 {
        self.pool.load(Ordering::Relaxed)
    }

    pub fn use_on_oom(&self) -> bool {
        self.use_on_oom.load(Ordering::Relaxed)
    }

    pub fn shape(&self) -> Shape {
        Shape { shift: self.shape_shift.load(Ordering::Relaxed), no_split: self.no_split.load(Ordering::Relaxed) }
    }

    /// Its pool's `use_on_oom` changed (under the pools' records lock).
    pub fn set_use_on_oom(&self, on: bool) {
        self.use_on_oom.store(on, Ordering::Relaxed);
    }

    /// The stream the entry serves now (`RETIRED`'s value while retired).
    pub fn stream_now(&self) -> Stream {
        Stream(self.stream.load(Ordering::Acquire))
    }

    pub fn is_retired(&self) -> bool {
        self.stream.load(Ordering::Acquire) == RETIRED
    }

    /// True once the stream was seen capturing (Note [capture]).
    #[inline(always)]
    pub fn is_graph(&self) -> bool {
        self.flags() & GRAPH != 0
    }

    #[inline(always)]
    pub fn flags(&self) -> u8 {
        self.flags.load(Ordering::Relaxed)
    }

    /// True once a routed request met the stream capturing.
    pub fn saw_capture(&self) -> bool {
        self.saw_capture.load(Ordering::Relaxed)
    }

    pub fn note_capture(&self) {
        self.saw_capture.store(true, Ordering::Relaxed);
    }

    pub fn publish_held(&self, kind: usize, bytes: usize) {
        self.held[kind].store(bytes as u64, Ordering::Relaxed);
    }

    /// The held bytes both shards published.
    pub fn held(&self) -> u64 {
        self.held.iter().map(|h| h.load(Ordering::Relaxed)).sum()
    }

    /// Makes the stream a graph stream for good.
    pub fn mark_graph(&self) {
        self.flags.fetch_or(GRAPH, Ordering::Relaxed);
    }

    pub fn mark_destroyed(&self) {
        self.flags.fetch_or(DESTROYED, Ordering::Relaxed);
    }

    /// Whether its free memory may be given back: a default-pool stream not seen capturing, or a destroyed pool's.
    pub fn reclaimable(&self) -> bool {
        let flags = self.flags();
        (self.pool() == 0 && flags & GRAPH == 0) || flags & DESTROYED != 0
    }
}

type Chunk<B> = [OnceLock<StreamEntry<B>>; CHUNK];

pub(crate) struct StreamTable<B: Memory> {
    /// The first `CHUNK` entries, allocated with the table: a look-up among them reads no chunk pointer.
    first: Box<Chunk<B>>,
    /// The chunks of the later entries (`chunks[0]` stays unset).
    chunks: Box<[OnceLock<Box<Chunk<B>>>]>,
    /// Entries published (each below is set).
    len: AtomicUsize,
    /// Streams this table takes at most.
    cap: usize,
    /// Held to add a stream; the slots of retired entries.
    adding: Mutex<Vec<usize>>,
}

impl<B: Memory> StreamTable<B> {
    pub fn with_capacity(cap: usize) -> Self {
        let cap = cap.min(MAX_STREAMS);
        StreamTable {
            first: Box::new(std::array::from_fn(|_| OnceLock::new())),
            chunks: (0..cap.div_ceil(CHUNK)).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            cap,
            adding: Mutex::new(Vec::new()),
        }
    }

    /// The published entry in `slot` (below `len`).
    #[inline(always)]
    fn entry(&self, slot: usize) -> &StreamEntry<B> {
        self.cell(slot).get().expect("published entry")
    }

    /// The cell of `slot` (a later chunk is made under the adding lock).
    #[inline(always)]
    fn cell(&self, slot: usize) -> &OnceLock<StreamEntry<B>> {
        if slot < CHUNK {
            return &self.first[slot];
        }
        &self.later_chunk(slot)[slot & (CHUNK - 1)]
    }

    #[inline]
    fn later_chunk(&self, slot: usize) -> &Chunk<B> {
        self.chunks[slot >> CHUNK_BITS].get().expect("published chunk")
    }

    /// The default pool's entry of `stream`, if it has one.
    #[inline]
    pub fn find(&self, stream: Stream) -> Option<&StreamEntry<B>> {
        let len = self.len.load(Ordering::Acquire);
        (0..len).map(|i| self.entry(i)).find(|e| e.stream.load(Ordering::Acquire) == stream.0 && e.pool() == 0)
    }

    /// The entry of `stream` in `pool`, if it has one.
    pub fn find_in(&self, pool: u64, stream: Stream) -> Option<&StreamEntry<B>> {
        self.iter().find(|e| e.stream.load(Ordering::Acquire) == stream.0 && e.pool() == pool)
    }

    /// Every entry of `stream`, whatever its pool.
    pub fn all_of(&self, stream: Stream) -> impl Iterator<Item = &StreamEntry<B>> + '_ {
        self.iter().filter(move |e| e.stream.load(Ordering::Acquire) == stream.0)
    }

    /// The entry of `stream` in `pool`: a retired one taken over (handed to `revive` first), else one made with
    /// `make(slot)`; None once the table is full. The caller holds the pools' records lock (so a `pool_destroy`
    /// marking its entries never meets one changing pools).
    pub fn get_or_add(
        &self,
        (stream, pool, use_on_oom, shape): (Stream, u64, bool, Shape),
        make: impl FnOnce(usize) -> [Shard<B>; 2],
        revive: impl FnOnce(&StreamEntry<B>),
    ) -> Option<&StreamEntry<B>> {
        if let Some(e) = self.find_in(pool, stream) {
            return Some(e);
        }
        let mut retired = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = self.find_in(pool, stream) {
            return Some(e);
        }
        // A malloc that found the entry before it retired compares the shard's stream with its own under the shard
        // lock, which cannot tell pools apart: so a live pool's entry never goes to the stream it served in another
        // pool. A destroyed pool's entry may (no route leads there, and the table stays bounded). Only into a pool
        // of the entry's shape: a malloc that rounded by it may still take the shard's lock.
        let reusable = retired.iter().rposition(|&slot| {
            let e = self.entry(slot);
            e.shape() == shape
                && (e.retired_from.load(Ordering::Relaxed) != stream.0
                    || e.pool() == pool
                    || e.flags() & DESTROYED != 0)
        });
        if let Some(slot) = reusable.map(|i| retired.swap_remove(i)) {
            let e = self.entry(slot);
            revive(e);
            e.high.clear();
            // It starts as a plain entry of its new pool (quarantined blocks keep a graph stream's entry from
            // retiring; a destroyed pool's entry retires holding nothing).
            e.flags.store(0, Ordering::Relaxed);
            e.saw_capture.store(false, Ordering::Relaxed);
            e.pool.store(pool, Ordering::Relaxed);
            e.use_on_oom.store(use_on_oom, Ordering::Relaxed);
            e.shape_shift.store(shape.shift, Ordering::Relaxed);
            e.no_split.store(shape.no_split, Ordering::Relaxed);
            e.stream.store(stream.0, Ordering::Release);
            return Some(e);
        }
        let slot = self.len.load(Ordering::Relaxed);
        if slot >= self.cap {
            return None;
        }
        if slot >= CHUNK {
            self.chunks[slot >> CHUNK_BITS].get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())));
        }
        if self
            .cell(slot)
            .set(StreamEntry {
                stream: AtomicUsize::new(stream.0),
                slot,
                pool: AtomicU64::new(pool),
                use_on_oom: AtomicBool::new(use_on_oom),
                shape_shift: AtomicU8::new(shape.shift),
                no_split: AtomicBool::new(shape.no_split),
                shards: make(slot),
                high: HighWater::default(),
                flags: AtomicU8::new(0),
                saw_capture: AtomicBool::new(false),
                retired_from: AtomicUsize::new(RETIRED),
                held: Default::default(),
            })
            .is_err()
        {
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

    /// The entry of the stream whose shard has id `id`.
    #[inline]
    pub fn entry_of(&self, id: u32) -> &StreamEntry<B> {
        self.entry(id as usize / 2)
    }

    /// The entry and pool kind of the shard with id `id`.
    #[inline]
    pub fn entry_by_id(&self, id: u32) -> Option<(&StreamEntry<B>, usize)> {
        let slot = id as usize / 2;
        (slot < self.len.load(Ordering::Acquire)).then(|| (self.entry(slot), id as usize % 2))
    }

    /// The shard with id `id`.
    #[inline]
    pub fn by_id(&self, id: u32) -> Option<&Shard<B>> {
        self.entry_by_id(id).map(|(e, kind)| &e.shards[kind])
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Retires `entry` if it still serves `stream` and its shards hold nothing; returns whether it did. Takes
    /// `adding`, then the shard locks (as `get_or_add` revives), so no malloc on the entry runs between check and
    /// retirement, and a later one sees the shards' stream `RETIRED` and looks up again. The caller holds the ladder
    /// lock, so a ladder that checked its shard's stream under it never grows a retired one.
    pub fn retire(&self, entry: &StreamEntry<B>, stream: Stream) -> bool {
        if stream.0 == RETIRED {
            return false;
        }
        let mut retired = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let mut pools: Vec<_> = entry.shards.iter().map(|s| s.lock_anyway()).collect();
        if !pools.iter().all(|p| p.holds_nothing() && p.stream() == stream)
            || entry.stream.compare_exchange(stream.0, RETIRED, Ordering::AcqRel, Ordering::Acquire).is_err()
        {
            return false;
        }
        for p in &mut pools {
            let pool = p.pool_id();
            p.set_owner(Stream(RETIRED), pool);
        }
        entry.retired_from.store(stream.0, Ordering::Relaxed);
        retired.push(entry.slot);
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::core::tests::support::{emu_lock, set_capacity, usage, Rng, DEV};
    use crate::core::DeviceAllocator;
    use crate::error::Error;
    use crate::runtime::{Runtime, Stream};

    /// Threads meet the same new streams at once, each in its own order, on
    /// an allocator that takes fewer streams than they use (past one chunk):
    /// a stream gets an entry for every thread or for none, the table fills
    /// exactly, and every block maps back (directory, then shard id) to the
    /// stream it was allocated on, while look-ups run during the appends.
    #[test]
    fn threads_meeting_new_streams_at_once_agree_on_their_entries() {
        const THREADS: usize = 4;
        const STREAMS: usize = 40;
        const CAP: usize = 34;
        const ROUNDS: u64 = 20;
        let _g = emu_lock();
        set_capacity(1 << 30);
        let rt = Runtime::emulated();
        let streams: Vec<Stream> = (0..STREAMS).map(|_| crate::core::tests::support::new_stream()).collect();
        for round in 0..ROUNDS {
            let config = Config::parse("expandable_segments:false").unwrap();
            let a = DeviceAllocator::build(config, DEV, rt.clone(), CAP).unwrap();
            // Per thread, per stream: the blocks it got (two passes).
            let got: Vec<Vec<Vec<usize>>> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let (a, streams) = (&a, &streams);
                        s.spawn(move || {
                            let mut rng = Rng::new(round * 100 + t as u64 + 1);
                            let mut order: Vec<usize> = (0..STREAMS).collect();
                            for i in (1..STREAMS).rev() {
                                order.swap(i, rng.index(i + 1));
                            }
                            let mut got = vec![Vec::new(); STREAMS];
                            for _pass in 0..2 {
                                for &i in &order {
                                    match a.malloc(512, streams[i]) {
                                        Ok(addr) => got[i].push(addr),
                                        Err(Error::Unsupported(m)) if m.contains("its most") => {}
                                        Err(e) => panic!("round {round} thread {t} stream {i}: {e}"),
                                    }
                                }
                            }
                            got
                        })
                    })
                    .collect();
                threads.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut served = 0;
            for i in 0..STREAMS {
                let counts: Vec<usize> = got.iter().map(|g| g[i].len()).collect();
                assert!(
                    counts.iter().all(|&n| n == 2) || counts.iter().all(|&n| n == 0),
                    "round {round}: stream {i} got blocks for some threads and not others: {counts:?}"
                );
                served += (counts[0] == 2) as usize;
                for &addr in got.iter().flat_map(|g| &g[i]) {
                    assert_eq!(a.query(addr).unwrap().stream, streams[i], "round {round}: block {addr:#x}");
                }
            }
            assert_eq!((served, a.streams_served()), (CAP, CAP), "round {round}");
            for addr in got.iter().flatten().flatten() {
                a.free(*addr).unwrap();
            }
            a.check_invariants().unwrap();
            a.teardown().unwrap();
        }
        for s in streams {
            rt.on_device(DEV, || rt.destroy_stream(s)).unwrap();
        }
        let u = usage(DEV);
        assert_eq!((u.malloc_count, u.events), (0, 0), "the emulator reports leaks");
    }

    /// Streams past the first chunk (whose entries a look-up reaches
    /// without reading a chunk pointer) and in it are found alike: each
    /// stream's blocks map back (directory, then shard id) to it, a
    /// forgotten stream's entry on either side of the boundary is taken
    /// over by the next new stream, and the table grows no longer for it.
    #[test]
    fn entries_either_side_of_the_first_chunk_are_found_and_taken_over() {
        const STREAMS: usize = 2 * super::CHUNK + 6;
        let _g = emu_lock();
        set_capacity(1 << 30);
        let rt = Runtime::emulated();
        let new_stream = crate::core::tests::support::new_stream;
        let mut streams: Vec<Stream> = (0..STREAMS).map(|_| new_stream()).collect();
        let config = Config::parse("expandable_segments:false").unwrap();
        let a = DeviceAllocator::build(config, DEV, rt.clone(), STREAMS).unwrap();
        let check_all = |a: &DeviceAllocator, streams: &[Stream], what: &str| {
            for (i, &s) in streams.iter().enumerate() {
                let small = a.malloc(4096, s).unwrap();
                let large = a.malloc(4 << 20, s).unwrap();
                for p in [small, large] {
                    assert_eq!(a.query(p).unwrap().stream, s, "{what}: stream {i}, block {p:#x}");
                    a.free(p).unwrap();
                }
            }
        };
        check_all(&a, &streams, "first pass");
        assert_eq!(a.streams_served(), STREAMS);
        // A slot in the first chunk, the first past it, and one in the third.
        for slot in [3, super::CHUNK, 2 * super::CHUNK + 1] {
            a.empty_cache().unwrap();
            a.forget_stream(streams[slot]).unwrap();
            rt.on_device(DEV, || rt.destroy_stream(streams[slot])).unwrap();
            streams[slot] = new_stream();
            check_all(&a, &streams, &format!("after slot {slot} was taken over"));
            assert_eq!(a.streams_served(), STREAMS, "slot {slot}: the retired entry was reused");
        }
        // The table is full: one stream more is refused, changing nothing.
        let extra = new_stream();
        assert!(matches!(a.malloc(512, extra), Err(Error::Unsupported(m)) if m.contains("its most")));
        a.check_invariants().unwrap();
        a.teardown().unwrap();
        for s in streams.into_iter().chain([extra]) {
            rt.on_device(DEV, || rt.destroy_stream(s)).unwrap();
        }
        let u = usage(DEV);
        assert_eq!((u.malloc_count, u.events), (0, 0), "the emulator reports leaks");
    }

    /// Threads allocate, free and forget the same few streams at once (two
    /// forgets of one stream may overlap, and a forget may overlap a malloc
    /// on the stream or on one that takes its retired entry over): every
    /// block belongs to the stream it was asked for while it lives, and the
    /// allocator's invariants hold at the end.
    #[test]
    fn forgets_racing_mallocs_never_hand_an_entry_to_another_stream() {
        const THREADS: usize = 4;
        const STREAMS: usize = 3;
        const STEPS: usize = 3000;
        let _g = emu_lock();
        set_capacity(1 << 30);
        let rt = Runtime::emulated();
        let streams: Vec<Stream> = (0..STREAMS).map(|_| crate::core::tests::support::new_stream()).collect();
        let config = Config::parse("expandable_segments:false").unwrap();
        let a = DeviceAllocator::build(config, DEV, rt.clone(), 64).unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (a, streams) = (&a, &streams);
                s.spawn(move || {
                    let mut rng = Rng::new(t as u64 + 7);
                    for step in 0..STEPS {
                        let stream = streams[rng.index(STREAMS)];
                        if rng.index(3) == 0 {
                            a.forget_stream(stream).unwrap();
                            continue;
                        }
                        let addr = a.malloc(512 + rng.index(4096), stream).unwrap();
                        let got = a.query(addr).unwrap().stream;
                        assert_eq!(got, stream, "thread {t} step {step}: block {addr:#x} of another stream");
                        a.free(addr).unwrap();
                    }
                });
            }
        });
        a.check_invariants().unwrap();
        a.teardown().unwrap();
        for s in streams {
            rt.on_device(DEV, || rt.destroy_stream(s)).unwrap();
        }
        let u = usage(DEV);
        assert_eq!((u.malloc_count, u.events), (0, 0), "the emulator reports leaks");
    }
}
