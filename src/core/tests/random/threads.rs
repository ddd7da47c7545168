//! Several threads sharing one allocator.
//!
//! Each thread runs its own seeded sequence, mostly on its own stream and
//! sometimes on one stream all threads share: mallocs of every pool's sizes,
//! frees, data checks, record_stream of its blocks on the shared stream,
//! device-to-host copies of those blocks queued on the shared stream, blocks
//! handed to another thread (which checks and frees them), empty_cache, and
//! (thread 0) holding and releasing the shared stream. The device is small,
//! so the out-of-memory ladder runs while other threads hit their caches.
//!
//! What the threads share is the model (`Board`): every live block of every
//! thread, added right after its malloc returned and removed right before its
//! free was called, so a block handed out that overlaps any of them is a
//! block handed out twice; and the copies queued on the shared stream, which
//! no new block may overlap until they ran and which must read the data the
//! block held when they were queued. The interleaving is the scheduler's, so
//! a failure may not replay; the seeds fix each thread's own operations.

use super::super::support::{
    allocator, assert_emulator_empty, check_fill, drop_stream, emu_lock, fill, new_stream, queue_copy_out,
    set_capacity, Rng, DEV,
};
use super::ops::{disarm_faults, overlaps, random_size, set_held, COPY_LEN, FILLED};
use crate::core::*;
use crate::runtime::Event;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

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
pub(super) const FIXED_CONFIGS: [&str; 4] = [
    "expandable_segments:false",
    "expandable_segments:false,release_threshold_mb:0",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:false,max_split_size_mb:24",
];
pub(super) const EXPANDABLE_CONFIGS: [&str; 5] = [
    "expandable_segments:true",
    "expandable_segments:true,reserved_headroom:0.1,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
    "expandable_segments:true,release_threshold_mb:0",
    "expandable_segments:true,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
];

pub(super) fn run_threads_over_configs(configs: &[&str]) {
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
