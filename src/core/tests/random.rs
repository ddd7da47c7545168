//! Random operation sequences checked against a model, through the emulator.
//!
//! Each seed picks a device capacity and a config, then runs random mallocs,
//! frees, record_stream calls, stream holds and releases, device-to-host
//! copies queued on held streams and empty_cache calls over three streams,
//! with or without injected runtime faults. After every step the allocator's
//! invariants hold; a block handed out overlaps neither a live block nor a
//! copy another stream still has queued; data written into a block reads back
//! until its free. Seeds are fixed, so a failure replays.
//!
//! `model_based_random_sequences` runs shorter sequences of the same calls,
//! without held streams or copies, against a plainer model; the threads'
//! tests run further down, with their own section note.

use super::support::{
    allocator, assert_emulator_empty, check_fill, drop_stream, emu_lock, fail_nth, fill, hold_stream, new_stream,
    queue_copy_out, release_stream, set_capacity, usage, Rng, DEV,
};
use crate::core::*;
use crate::runtime::{AclCallError, Event};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

const STREAMS: usize = 3;
const STEPS: usize = 500;
const SEEDS: u64 = 64;
/// Bytes at the start of each block filled with its pattern.
const FILLED: usize = 4096;
/// Bytes each queued copy reads.
const COPY_LEN: usize = 512;
/// Tries of the test's own runtime calls: an armed fault fires once, so the
/// second try succeeds.
const TRIES: usize = 2;

const FAULTS: [&str; 13] = [
    "aclrtSynchronizeStream",
    "aclrtSynchronizeEvent",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtRecordEvent",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtCreateEventWithFlag",
    "aclrtFreePhysical",
    "aclrtQueryEventStatus",
];

const CONFIGS: [&str; 8] = [
    "expandable_segments:false",
    "expandable_segments:false,release_threshold_mb:0",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:false,max_split_size_mb:24",
    "expandable_segments:true",
    "expandable_segments:true,reserved_headroom:0",
    "expandable_segments:true,reserved_headroom:0.1,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
];

/// A request size from each pool: small, up to 1 MiB, mid-size, large.
fn random_size(rng: &mut Rng) -> usize {
    match rng.below(4) {
        0 => 1 + rng.below(4096) as usize,
        1 => 1 + rng.below(1 << 20) as usize,
        2 => (1 << 20) + rng.below(9 << 20) as usize,
        _ => (10 << 20) + rng.below(30 << 20) as usize,
    }
}

/// One time in `one_in`, arms a fault of a random runtime function one to
/// three calls ahead.
fn maybe_arm_fault(rng: &mut Rng, one_in: u64) {
    if rng.below(one_in) == 0 {
        let function = FAULTS[rng.index(FAULTS.len())];
        fail_nth(function, 1 + rng.below(3) as i32);
    }
}

fn disarm_faults() {
    for function in FAULTS {
        fail_nth(function, 0);
    }
}

/// A block the test holds.
struct Live {
    addr: usize,
    size: usize,
    /// The stream (index) it was allocated on.
    owner: usize,
    /// Streams whose work may read it: the owner and every stream recorded.
    users: Vec<usize>,
    /// The pattern its first bytes hold.
    byte: u8,
}

/// Two device-to-host copies of a block queued on a held stream, kept until
/// their event completes.
struct QueuedCopies {
    stream: usize,
    event: Event,
    /// The device ranges read (start, len): the block's head and its tail,
    /// which may lie in another segment page.
    reads: [(usize, usize); 2],
    /// Where the copies write; dropped only once they ran.
    _buffers: [Vec<u8>; 2],
}

fn overlaps(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a < b + b_len && b < a + a_len
}

/// Runs one of the test's own runtime calls, which an armed fault may hit.
fn retried<T>(what: &str, call: impl Fn() -> Result<T, AclCallError>) -> T {
    let mut result = call();
    for _ in 1..TRIES {
        result = result.or_else(|_| call());
    }
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Holds (or releases) a stream's later work in the emulator.
fn set_held(stream: Stream, held: bool) {
    if held {
        hold_stream(stream)
    } else {
        release_stream(stream)
    }
}

/// What the test expects of the allocator.
struct Model {
    streams: Vec<Stream>,
    held: [bool; STREAMS],
    live: Vec<Live>,
    queued: Vec<QueuedCopies>,
}

impl Model {
    fn new() -> Self {
        let streams = (0..STREAMS).map(|_| new_stream()).collect();
        Model { streams, held: [false; STREAMS], live: Vec::new(), queued: Vec::new() }
    }

    /// Forgets the copies that ran: their buffers go, their events too.
    fn forget_finished(&mut self, a: &DeviceAllocator) {
        let rt = a.runtime().clone();
        self.queued.retain(|q| {
            let done = retried("querying a test event", || rt.on_device(DEV, || rt.event_complete(q.event)));
            if done {
                rt.on_device(DEV, || rt.destroy_event(q.event)).unwrap();
            }
            !done
        });
    }

    /// A new block on stream `si` may overlap no live block, and no copy
    /// another stream has queued (that stream would read the new owner's data).
    fn check_new_block(&self, addr: usize, size: usize, si: usize, at: &str) {
        for b in &self.live {
            assert!(
                !overlaps(addr, size, b.addr, b.size),
                "{at}: {addr:#x}+{size} overlaps the live block {:#x}+{}",
                b.addr,
                b.size
            );
        }
        for q in self.queued.iter().filter(|q| q.stream != si) {
            for &(start, len) in &q.reads {
                assert!(
                    !overlaps(addr, size, start, len),
                    "{at}: {addr:#x}+{size} on stream {si} overlaps a copy of {start:#x}+{len} queued on stream {}",
                    q.stream
                );
            }
        }
    }

    /// Queues copies of live block `i`'s head and tail on held stream `t`.
    fn queue_copies(&mut self, a: &DeviceAllocator, i: usize, t: usize) {
        let (addr, size) = (self.live[i].addr, self.live[i].size);
        let len = size.min(COPY_LEN);
        let reads = [(addr, len), (addr + size - len, len)];
        let stream = self.streams[t];
        let rt = a.runtime().clone();
        let event = retried("creating a test event", || rt.on_device(DEV, || rt.create_event()));
        let mut buffers = [vec![0u8; len], vec![0u8; len]];
        for (buffer, &(src, _)) in buffers.iter_mut().zip(&reads) {
            queue_copy_out(a, buffer, src, stream);
        }
        retried("recording a test event", || rt.on_device(DEV, || rt.record_event(event, stream)));
        self.queued.push(QueuedCopies { stream: t, event, reads, _buffers: buffers });
    }
}

fn run_seed(seed: u64, faults: bool) {
    // A fault another test left armed would fire here.
    disarm_faults();
    let mut rng = Rng::new(seed);
    set_capacity([64u64 << 20, 128 << 20, 1 << 30][rng.index(3)]);
    let config = CONFIGS[rng.index(CONFIGS.len())];
    let a = allocator(config);
    let mut m = Model::new();
    for step in 0..STEPS {
        // Out of 14: malloc 5, free 2, record_stream 1, queued copies 2,
        // hold or release 2, empty_cache 1, nothing 1.
        let op = rng.below(14);
        let at = format!("seed {seed} ({config}) step {step} op {op}");
        match op {
            0..=4 => {
                let size = random_size(&mut rng);
                if faults {
                    maybe_arm_fault(&mut rng, 10);
                }
                let si = rng.index(STREAMS);
                let before = a.stats().unwrap();
                let device_before = usage(DEV);
                match a.malloc(size, m.streams[si]) {
                    Ok(addr) => {
                        // Only copies still queued constrain the placement.
                        m.forget_finished(&a);
                        m.check_new_block(addr, size, si, &at);
                        let byte = (step % 251) as u8;
                        fill(addr, size.min(FILLED), byte);
                        m.live.push(Live { addr, size, owner: si, users: vec![si], byte });
                    }
                    // Out of memory, or an injected failure: nothing was allocated.
                    Err(e @ (Error::OutOfMemory(_) | Error::Runtime { .. })) => {
                        assert!(faults || matches!(e, Error::OutOfMemory(_)), "{at}: {e}");
                        let after = a.stats().unwrap();
                        assert_eq!(after.allocated_bytes, before.allocated_bytes, "{at}");
                        assert_eq!(after.active_blocks, before.active_blocks, "{at}");
                        // Nothing the refused request obtained stays with the
                        // allocator (the ladder may have given memory back).
                        // An injected failure to free can keep a handle.
                        let u = usage(DEV);
                        let held = |u: &ascendcl::aclemu_usage| (u.malloc_bytes, u.physical_bytes, u.mapped_bytes);
                        let (was, now) = (held(&device_before), held(&u));
                        assert!(
                            faults || (now.0 <= was.0 && now.1 <= was.1 && now.2 <= was.2),
                            "{at}: a refused request kept device memory: (malloc, physical, mapped) {was:?} -> {now:?}"
                        );
                    }
                    Err(e) => panic!("{at}: unexpected {e}"),
                }
            }
            5 | 6 if !m.live.is_empty() => {
                let i = rng.index(m.live.len());
                let b = &m.live[i];
                assert!(check_fill(b.addr, b.size.min(FILLED), b.byte), "{at}: data of {:#x} corrupted", b.addr);
                match a.free(b.addr) {
                    Ok(()) => {
                        m.live.swap_remove(i);
                    }
                    // Another stream used the block and neither an event nor a
                    // wait was possible: it stays live, to be freed again later.
                    Err(e @ Error::Runtime { .. }) if faults && e.to_string().contains("stays allocated") => {
                        assert_ne!(b.users, [b.owner], "{at}: a block only its owner used failed to free: {e}");
                        assert_eq!(a.query(b.addr).unwrap().addr, b.addr, "{at}");
                    }
                    Err(e) => panic!("{at}: free of {:#x}: {e}", b.addr),
                }
            }
            7 if !m.live.is_empty() => {
                let i = rng.index(m.live.len());
                let j = rng.index(STREAMS);
                a.record_stream(m.live[i].addr, m.streams[j]).unwrap_or_else(|e| panic!("{at}: {e}"));
                if !m.live[i].users.contains(&j) {
                    m.live[i].users.push(j);
                }
            }
            8 | 9 if !m.live.is_empty() => {
                let i = rng.index(m.live.len());
                let t = m.live[i].users[rng.index(m.live[i].users.len())];
                // Work on a free-running stream runs at once; only held work stays queued.
                if m.held[t] {
                    m.queue_copies(&a, i, t);
                }
            }
            10 | 11 => {
                let t = rng.index(STREAMS);
                m.held[t] = !m.held[t];
                set_held(m.streams[t], m.held[t]);
            }
            12 => {
                if faults {
                    maybe_arm_fault(&mut rng, 4);
                }
                match a.empty_cache() {
                    Ok(_) => {}
                    Err(Error::Runtime { .. }) if faults => {}
                    Err(e) => panic!("{at}: empty_cache: {e}"),
                }
            }
            _ => {}
        }
        m.forget_finished(&a);
        a.check_invariants().unwrap_or_else(|e| panic!("{at}: {e}"));
        let s = a.stats().unwrap();
        assert_eq!(s.active_blocks, m.live.len() as u64, "{at}");
        assert_eq!(s.requested_bytes, m.live.iter().map(|b| b.size as u64).sum::<u64>(), "{at}");
    }

    // Wind down with the runtime answering again.
    disarm_faults();
    for t in 0..STREAMS {
        if m.held[t] {
            set_held(m.streams[t], false);
        }
    }
    m.forget_finished(&a);
    assert!(m.queued.is_empty(), "seed {seed}: copies still queued after every stream was released");
    for b in m.live.drain(..) {
        assert!(check_fill(b.addr, b.size.min(FILLED), b.byte), "seed {seed}: data of {:#x} corrupted", b.addr);
        a.free(b.addr).unwrap_or_else(|e| panic!("seed {seed}: final free of {:#x}: {e}", b.addr));
    }
    a.check_invariants().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let report = a.teardown().unwrap_or_else(|e| panic!("seed {seed}: teardown: {e}"));
    assert_eq!(report, TeardownReport::default(), "seed {seed}");
    for s in m.streams {
        drop_stream(s);
    }
    assert_emulator_empty(&format!("seed {seed} ({config})"));
}

#[test]
fn random_operations_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed(seed, false);
    }
    set_capacity(1 << 30);
}

#[test]
fn random_operations_with_injected_faults_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed(seed, true);
    }
    set_capacity(1 << 30);
}

/// What `model_based_random_sequences` draws from: fewer faults than
/// `run_seed` (those of getting and giving back memory, and event records)
/// and its own configs.
const MODEL_FAULTS: [&str; 6] =
    ["aclrtMalloc", "aclrtFree", "aclrtRecordEvent", "aclrtMallocPhysical", "aclrtMapMem", "aclrtUnmapMem"];

const MODEL_CONFIGS: [&str; 6] = [
    "expandable_segments:false",
    "expandable_segments:false,max_split_size_mb:24",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:true",
    "expandable_segments:true,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
];

/// Mallocs, frees, record_stream and empty_cache on up to three streams,
/// checked against a list of live blocks with their fill bytes.
#[test]
fn model_based_random_sequences() {
    let _g = emu_lock();
    for seed in 1..=36u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let capacity = [48u64 << 20, 96 << 20, 1 << 30][rng.below(3) as usize];
        set_capacity(capacity);
        let a = allocator(MODEL_CONFIGS[rng.below(MODEL_CONFIGS.len() as u64) as usize]);
        let streams: Vec<Stream> =
            std::iter::once(Stream::DEFAULT).chain((0..rng.below(3)).map(|_| new_stream())).collect();
        // Reference model: live blocks with their requested size and fill byte.
        let mut live: Vec<(usize, usize, u8)> = Vec::new();
        for step in 0..400 {
            match rng.below(10) {
                0..=4 => {
                    let size = match rng.below(4) {
                        0 => 1 + rng.below(4096) as usize,
                        1 => 1 + rng.below(1 << 20) as usize,
                        2 => (1 << 20) + rng.below(9 << 20) as usize,
                        _ => (10 << 20) + rng.below(30 << 20) as usize,
                    };
                    if rng.below(20) == 0 {
                        fail_nth(MODEL_FAULTS[rng.below(MODEL_FAULTS.len() as u64) as usize], 1 + rng.below(2) as i32);
                    }
                    let stream = streams[rng.below(streams.len() as u64) as usize];
                    let before = a.stats().unwrap();
                    match a.malloc(size, stream) {
                        Ok(p) => {
                            for &(q, qs, _) in &live {
                                assert!(p + size <= q || q + qs <= p, "seed {seed} step {step}: overlap");
                            }
                            let byte = (step % 251) as u8;
                            fill(p, size.min(4096), byte);
                            live.push((p, size, byte));
                        }
                        // An injected non-OOM runtime failure surfaces as a
                        // runtime error; either way nothing may have changed.
                        Err(Error::OutOfMemory(_) | Error::Runtime { .. }) => {
                            let after = a.stats().unwrap();
                            assert_eq!(after.allocated_bytes, before.allocated_bytes);
                            assert_eq!(after.active_blocks, before.active_blocks);
                        }
                        Err(e) => panic!("seed {seed} step {step}: unexpected {e}"),
                    }
                }
                5..=7 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let (p, size, byte) = live.swap_remove(i);
                    assert!(check_fill(p, size.min(4096), byte), "seed {seed} step {step}: data corrupted");
                    a.free(p).unwrap();
                }
                8 if !live.is_empty() => {
                    let (p, _, _) = live[rng.below(live.len() as u64) as usize];
                    a.record_stream(p, streams[rng.below(streams.len() as u64) as usize]).unwrap();
                }
                9 => {
                    let _ = a.empty_cache();
                }
                _ => {}
            }
            a.check_invariants().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            let s = a.stats().unwrap();
            assert_eq!(s.requested_bytes, live.iter().map(|l| l.1 as u64).sum::<u64>());
        }
        for f in MODEL_FAULTS {
            fail_nth(f, 0);
        }
        for (p, size, byte) in live.drain(..) {
            assert!(check_fill(p, size.min(4096), byte));
            a.free(p).unwrap();
        }
        a.teardown().unwrap();
        for s in streams.into_iter().skip(1) {
            drop_stream(s);
        }
        assert_emulator_empty(&format!("seed {seed}"));
    }
    set_capacity(1 << 30);
}

// ---------------------------------------------------------------------------
// Several threads sharing one allocator.
//
// Each thread runs its own seeded sequence, mostly on its own stream and
// sometimes on one stream all threads share: mallocs of every pool's sizes,
// frees, data checks, record_stream of its blocks on the shared stream,
// device-to-host copies of those blocks queued on the shared stream, blocks
// handed to another thread (which checks and frees them), empty_cache, and
// (thread 0) holding and releasing the shared stream. The device is small,
// so the out-of-memory ladder runs while other threads hit their caches.
//
// What the threads share is the model (`Board`): every live block of every
// thread, added right after its malloc returned and removed right before its
// free was called, so a block handed out that overlaps any of them is a
// block handed out twice; and the copies queued on the shared stream, which
// no new block may overlap until they ran and which must read the data the
// block held when they were queued. The interleaving is the scheduler's, so
// a failure may not replay; the seeds fix each thread's own operations.

const THREADS: usize = 4;
const MT_STEPS: usize = 1000;
/// Blocks a thread keeps at most; past it, it frees instead.
const MT_LIVE: usize = 6;
/// The largest request `random_size` makes.
const LARGEST_REQUEST: usize = 40 << 20;

/// A block a thread holds, or hands over.
#[derive(Debug)]
struct Held {
    addr: usize,
    size: usize,
    byte: u8,
    /// Allocated on the shared stream.
    on_shared: bool,
    /// Recorded on the shared stream (by its owner thread).
    recorded: bool,
}

/// The live blocks of every thread, keyed by address: (size, thread).
#[derive(Default)]
struct LiveSet {
    blocks: std::collections::BTreeMap<usize, (usize, usize)>,
    /// Bytes requested by the blocks in the set, and its highest value.
    requested: usize,
    peak: usize,
}

impl LiveSet {
    /// Adds a block just handed out; it must overlap no live block.
    fn add(&mut self, addr: usize, size: usize, thread: usize, at: &str) {
        if let Some((&start, &(len, owner))) = self.blocks.range(..addr + size).next_back() {
            assert!(start + len <= addr, "{at}: {addr:#x}+{size} overlaps {start:#x}+{len}, live in thread {owner}");
        }
        self.blocks.insert(addr, (size, thread));
        self.requested += size;
        self.peak = self.peak.max(self.requested);
    }

    /// Removes a block about to be freed.
    fn remove(&mut self, addr: usize, at: &str) {
        let (size, _) = self.blocks.remove(&addr).unwrap_or_else(|| panic!("{at}: {addr:#x} is not live"));
        self.requested -= size;
    }
}

/// A copy of a block's head queued on the shared stream.
struct SharedCopy {
    event: Event,
    addr: usize,
    /// What the block held when the copy was queued.
    byte: u8,
    /// Where the copy writes; dropped only once it ran.
    buffer: Vec<u8>,
}

/// What the threads share.
struct Board<'a> {
    a: &'a DeviceAllocator,
    config: &'a str,
    seed: u64,
    shared: Stream,
    live: Mutex<LiveSet>,
    copies: Mutex<Vec<SharedCopy>>,
    /// Whether thread 0 holds the shared stream.
    held: AtomicBool,
    /// Threads that will send no more blocks (finished or panicked).
    done: AtomicUsize,
    mallocs: AtomicU64,
    ooms: AtomicU64,
}

impl Board<'_> {
    /// Checks the copies that ran (each read what its block held) and
    /// forgets them; a new block [addr, addr + size) must overlap none of
    /// those still queued.
    fn check_copies(&self, new: Option<(usize, usize)>, at: &str) {
        let rt = self.a.runtime().clone();
        let mut copies = self.copies.lock().unwrap();
        copies.retain(|c| {
            let done = rt.on_device(DEV, || rt.event_complete(c.event)).unwrap_or_else(|e| panic!("{at}: {e}"));
            if done {
                assert!(
                    c.buffer.iter().all(|&b| b == c.byte),
                    "{at}: a copy of {:#x} queued on the shared stream read another block's data",
                    c.addr
                );
                rt.on_device(DEV, || rt.destroy_event(c.event)).unwrap();
            } else if let Some((addr, size)) = new {
                assert!(
                    !overlaps(addr, size, c.addr, c.buffer.len()),
                    "{at}: {addr:#x}+{size} overlaps a copy of {:#x}+{} still queued on the shared stream",
                    c.addr,
                    c.buffer.len()
                );
            }
            !done
        });
    }

    /// Queues a copy of `b`'s head on the shared stream (`b` was recorded
    /// there) and an event after it.
    fn queue_copy(&self, b: &Held) {
        let rt = self.a.runtime().clone();
        let mut buffer = vec![0u8; b.size.min(COPY_LEN)];
        let event = rt.on_device(DEV, || rt.create_event()).unwrap();
        queue_copy_out(self.a, &mut buffer, b.addr, self.shared);
        rt.on_device(DEV, || rt.record_event(event, self.shared)).unwrap();
        self.copies.lock().unwrap().push(SharedCopy { event, addr: b.addr, byte: b.byte, buffer });
    }

    /// Checks a block's data and frees it.
    fn free(&self, b: Held, at: &str) {
        assert!(check_fill(b.addr, b.size.min(FILLED), b.byte), "{at}: data of {:#x} corrupted", b.addr);
        self.live.lock().unwrap().remove(b.addr, at);
        self.a.free(b.addr).unwrap_or_else(|e| panic!("{at}: free of {:#x}: {e}", b.addr));
    }
}

/// Counts a thread as done sending when dropped, panicking or not, so that
/// the others stop waiting for its blocks.
struct Sending<'a>(&'a AtomicUsize);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn run_thread(board: &Board, t: usize, own: Stream, inbox: Receiver<Held>, outboxes: Vec<Sender<Held>>) {
    let sending = Sending(&board.done);
    let (a, seed) = (board.a, board.seed);
    let mut rng = Rng::new(seed * 1000 + t as u64 + 1);
    let mut mine: Vec<Held> = Vec::new();
    for step in 0..MT_STEPS {
        let at = format!("seed {seed} ({}) thread {t} step {step}", board.config);
        // Blocks other threads handed over: checked and freed here.
        while let Ok(b) = inbox.try_recv() {
            board.free(b, &at);
        }
        let mut op = rng.below(100);
        if op < 40 && mine.len() >= MT_LIVE {
            op = 40;
        }
        match op {
            // malloc, on the shared stream one time in five
            0..40 => {
                let size = random_size(&mut rng);
                let on_shared = rng.below(5) == 0;
                let stream = if on_shared { board.shared } else { own };
                match a.malloc(size, stream) {
                    Ok(addr) => {
                        board.mallocs.fetch_add(1, Ordering::Relaxed);
                        board.live.lock().unwrap().add(addr, size, t, &at);
                        board.check_copies(Some((addr, size)), &at);
                        let byte = (rng.below(255) + 1) as u8;
                        fill(addr, size.min(FILLED), byte);
                        mine.push(Held { addr, size, byte, on_shared, recorded: false });
                    }
                    Err(Error::OutOfMemory(_)) => {
                        board.ooms.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{at}: malloc of {size}: {e}"),
                }
            }
            40..55 if !mine.is_empty() => {
                let b = mine.swap_remove(rng.index(mine.len()));
                board.free(b, &at);
            }
            55..60 => {
                for b in &mine {
                    assert!(check_fill(b.addr, b.size.min(FILLED), b.byte), "{at}: data of {:#x} corrupted", b.addr);
                }
            }
            60..68 if !mine.is_empty() => {
                let i = rng.index(mine.len());
                let b = &mut mine[i];
                a.record_stream(b.addr, board.shared).unwrap_or_else(|e| panic!("{at}: record_stream: {e}"));
                b.recorded = !b.on_shared;
            }
            68..73 if !mine.is_empty() => {
                let i = rng.index(mine.len());
                if mine[i].recorded {
                    board.queue_copy(&mine[i]);
                }
            }
            73..83 if !mine.is_empty() => {
                let b = mine.swap_remove(rng.index(mine.len()));
                let to = (t + 1 + rng.index(THREADS - 1)) % THREADS;
                // A receiver that is gone (it panicked) leaves the block here.
                if let Err(std::sync::mpsc::SendError(b)) = outboxes[to].send(b) {
                    mine.push(b);
                }
            }
            83..85 => {
                a.empty_cache().unwrap_or_else(|e| panic!("{at}: empty_cache: {e}"));
            }
            85..90 if t == 0 => {
                let held = !board.held.load(Ordering::SeqCst);
                set_held(board.shared, held);
                board.held.store(held, Ordering::SeqCst);
            }
            _ => board.check_copies(None, &at),
        }
    }
    let at = format!("seed {seed} ({}) thread {t} winding down", board.config);
    for b in mine.drain(..) {
        board.free(b, &at);
    }
    drop(outboxes);
    drop(sending);
    // Blocks handed over until every thread is done sending.
    while board.done.load(Ordering::SeqCst) < THREADS {
        match inbox.try_recv() {
            Ok(b) => board.free(b, &at),
            Err(_) => std::thread::yield_now(),
        }
    }
    while let Ok(b) = inbox.try_recv() {
        board.free(b, &at);
    }
}

fn run_threads(seed: u64, config: &str) -> Stats {
    let mut rng = Rng::new(seed);
    set_capacity([96u64 << 20, 128 << 20, 256 << 20][rng.index(3)]);
    let a = allocator(config);
    let own: Vec<Stream> = (0..THREADS).map(|_| new_stream()).collect();
    let board = Board {
        a: &a,
        config,
        seed,
        shared: new_stream(),
        live: Mutex::default(),
        copies: Mutex::default(),
        held: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        mallocs: AtomicU64::new(0),
        ooms: AtomicU64::new(0),
    };
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| channel::<Held>()).unzip();
    std::thread::scope(|scope| {
        for (t, inbox) in receivers.into_iter().enumerate() {
            let outboxes = senders.clone();
            let (board, own) = (&board, own[t]);
            scope.spawn(move || run_thread(board, t, own, inbox, outboxes));
        }
        drop(senders);
    });

    let at = format!("seed {seed} ({config})");
    if board.held.load(Ordering::SeqCst) {
        set_held(board.shared, false);
    }
    let rt = a.runtime().clone();
    rt.on_device(DEV, || rt.synchronize_stream(board.shared)).unwrap();
    board.check_copies(None, &at);
    assert!(board.copies.lock().unwrap().is_empty(), "{at}: copies still queued after the stream was synchronized");
    let live = board.live.lock().unwrap();
    assert!(live.blocks.is_empty(), "{at}: blocks left live");
    a.check_invariants().unwrap_or_else(|e| panic!("{at}: {e}"));
    let s = a.stats().unwrap();
    let mallocs = board.mallocs.load(Ordering::Relaxed);
    assert_eq!((s.allocated_bytes, s.requested_bytes, s.active_blocks), (0, 0, 0), "{at}");
    assert_eq!((s.num_allocs, s.num_frees), (mallocs, mallocs), "{at}");
    assert_eq!(s.num_ooms, board.ooms.load(Ordering::Relaxed), "{at}: out-of-memory failures");
    // See Note [peaks without a shared counter]: with several threads the
    // peak may miss what the other threads were handing out at that instant.
    let slack = ((THREADS - 1) * LARGEST_REQUEST) as u64;
    assert!(
        s.requested_bytes_peak + slack >= live.peak as u64,
        "{at}: requested peak {} but {} were live at once",
        s.requested_bytes_peak,
        live.peak
    );
    drop(live);
    let report = a.teardown().unwrap_or_else(|e| panic!("{at}: teardown: {e}"));
    assert_eq!(report, TeardownReport::default(), "{at}");
    for s in own.into_iter().chain([board.shared]) {
        drop_stream(s);
    }
    assert_emulator_empty(&at);
    s
}

/// Configs of each backing, one per seed.
const FIXED_CONFIGS: [&str; 4] = [
    "expandable_segments:false",
    "expandable_segments:false,release_threshold_mb:0",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:false,max_split_size_mb:24",
];
const EXPANDABLE_CONFIGS: [&str; 4] = [
    "expandable_segments:true",
    "expandable_segments:true,reserved_headroom:0.1,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
    "expandable_segments:true,release_threshold_mb:0",
];

fn run_threads_over_configs(configs: &[&str]) {
    let _g = emu_lock();
    // A fault another test left armed would fire here.
    disarm_faults();
    let (mut retries, mut ooms) = (0, 0);
    for (seed, config) in (1..).zip(configs) {
        let s = run_threads(seed, config);
        retries += s.num_alloc_retries;
        ooms += s.num_ooms;
    }
    set_capacity(1 << 30);
    assert!(retries > 0, "the out-of-memory ladder never ran ({ooms} failures)");
}

#[test]
fn threads_sharing_fixed_segments_keep_the_model() {
    run_threads_over_configs(&FIXED_CONFIGS);
}

#[test]
fn threads_sharing_expandable_segments_keep_the_model() {
    run_threads_over_configs(&EXPANDABLE_CONFIGS);
}

/// Two threads, each on its own stream, malloc and free small and
/// mid-size blocks and check their data.
#[test]
fn two_threads_stress() {
    let _g = emu_lock();
    set_capacity(8 << 30);
    let a = std::sync::Arc::new(allocator("expandable_segments:false"));
    let streams = [new_stream(), new_stream()];
    let ops = 50_000; // per thread: 100k operations in all
    let handles: Vec<_> = (0..2u8)
        .map(|t| {
            let a = a.clone();
            let stream = streams[t as usize];
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t as u64);
                let mut live: Vec<(usize, usize)> = Vec::new();
                for _ in 0..ops {
                    if live.len() < 64 && (live.is_empty() || rng.below(2) == 0) {
                        let limit = if rng.below(8) == 0 { 4 << 20 } else { 64 << 10 };
                        let size = 1 + rng.below(limit) as usize;
                        let p = a.malloc(size, stream).unwrap();
                        fill(p, size, 0xA0 + t);
                        live.push((p, size));
                    } else {
                        let (p, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
                        assert!(check_fill(p, size, 0xA0 + t), "thread {t}: corruption");
                        a.free(p).unwrap();
                    }
                }
                for (p, _) in live {
                    a.free(p).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = a.stats().unwrap();
    assert_eq!(s.num_allocs, s.num_frees);
    assert_eq!((s.allocated_bytes, s.active_blocks), (0, 0));
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    for s in streams {
        drop_stream(s);
    }
    assert_eq!(usage(DEV).malloc_count, 0);
    set_capacity(1 << 30);
}
