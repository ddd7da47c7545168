//! Several threads on one allocator through the C API, on a device small
//! enough that allocations run out of memory:
//! - every thread allocates on its own stream, on a stream all threads
//!   share, and on the default stream;
//! - blocks are handed to the next thread (a ring of bounded channels) and
//!   freed there, or kept and used there;
//! - `npualloc_record_stream` marks blocks as used on other streams (other
//!   threads' streams too) before they are freed;
//! - each thread runs copy rounds on a stream it holds: it queues a
//!   device-to-device copy out of a block allocated on its own stream
//!   (recorded on the held stream, then freed at once, so the allocator must
//!   not reuse it before the held stream has read it), then a
//!   device-to-host copy of the result; after more work it releases the
//!   stream and checks that both destinations read back the source's data;
//! - half of the threads call `npualloc_empty_cache` now and then.
//!
//! Every block is filled with a pattern unique to it when it is handed out
//! and checked in full before it is freed (the emulator's device memory is
//! host memory): two live blocks that overlap, or a block reused while still
//! live or still read by a held stream, shows up as a corrupted pattern.
//!
//! Checked: no corruption, no status other than OK and out-of-memory, the
//! out-of-memory path taken, no violation seen by the emulator (memory a
//! queued copy still uses freed, unmapped or written by another stream),
//! after the threads end no block allocated and allocs = frees in the stats,
//! and after destroy nothing left in the emulator (memory, handles,
//! mappings, events). Event completion is reported a few queries late (as
//! the runtime's threaded mode does), so the allocator's polling sees
//! events that are done but not yet reported. A watchdog turns a deadlock
//! into a failure. Both fixed segments and expandable segments.
//! Run by scripts/test.sh in the optimised build (and by `cargo test` in the
//! debug build, with fewer operations).

mod common;

use common::{create, destroy, empty_cache, emu, emulator_path, free, malloc, record_stream, stats, Handle};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::memcpy::npualloc_memcpy2d_async;
use npualloc::ffi::npualloc_status::{self, NPUALLOC_ERR_OUT_OF_MEMORY, NPUALLOC_OK};
use npualloc::memcpy2d::{ACL_MEMCPY_DEVICE_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST};
use npualloc::runtime::Stream;
use std::ffi::{c_void, CStr, CString};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// This binary's own device.
const DEVICE: i32 = 5;
const THREADS: usize = 6;
/// Small against what the threads ask for (up to MAX_LIVE blocks each of up
/// to LARGEST bytes, about 14 MiB per thread on average, plus blocks in
/// channels and copy rounds), so out-of-memory and its recovery run often.
const CAPACITY: u64 = 64 << 20;
const ITERATIONS: usize = if cfg!(debug_assertions) { 800 } else { 6_000 };
const MAX_LIVE: usize = 16;
const SMALLEST: usize = 1;
const LARGEST: usize = 8 << 20;
/// A copy round starts every this many iterations and ends half-way to the next.
const COPY_EVERY: usize = 64;
/// Blocks waiting in each channel of the ring.
const CHANNEL: usize = 8;
const WATCHDOG: Duration = Duration::from_secs(if cfg!(debug_assertions) { 600 } else { 120 });

/// Queries of a completed event that still answer NOT_READY.
const EVENT_LAG: u32 = 3;

/// An emulator control by name, from the emulator `common::emu` loaded.
fn emulator_symbol(name: &CStr) -> *mut c_void {
    emu();
    let path = CString::new(emulator_path().to_str().expect("UTF-8 path")).unwrap();
    // SAFETY: a valid C string; RTLD_NOLOAD returns the loaded instance.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!handle.is_null(), "the emulator is not loaded");
    // SAFETY: a live handle and a valid C string.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!sym.is_null(), "the emulator lacks {name:?}");
    sym
}

/// `aclemu_violations`: misuse of memory under queued work seen so far.
fn violations() -> i64 {
    // SAFETY: the signature acl_emu.h declares.
    let f: unsafe extern "C" fn() -> i64 = unsafe { std::mem::transmute(emulator_symbol(c"aclemu_violations")) };
    // SAFETY: no arguments.
    unsafe { f() }
}

/// `aclemu_set_event_lag`.
fn set_event_lag(queries: u32) {
    // SAFETY: the signature acl_emu.h declares.
    let f: unsafe extern "C" fn(u32) -> i32 = unsafe { std::mem::transmute(emulator_symbol(c"aclemu_set_event_lag")) };
    // SAFETY: a plain value.
    assert_eq!(unsafe { f(queries) }, 0);
}

/// The handle, shared by the threads (the C API is thread-safe).
#[derive(Clone, Copy)]
struct Shared(Handle);
// SAFETY: npualloc's functions are thread-safe; the handle outlives the threads.
unsafe impl Send for Shared {}
// SAFETY: as for Send: every function the threads call through it is thread-safe.
unsafe impl Sync for Shared {}

/// xorshift64*: a fixed seed per thread keeps the operation mix reproducible
/// (the interleaving is up to the scheduler).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Log-uniform in [lo, hi].
    fn log_uniform(&mut self, lo: usize, hi: usize) -> usize {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((l + u * (h - l)).exp() as usize).clamp(lo, hi)
    }
}

/// A live block and the 64-bit tag its bytes repeat (unique per block).
#[derive(Debug, Clone, Copy)]
struct Block {
    ptr: usize,
    len: usize,
    tag: u64,
}

const CHUNK: usize = 4096;

/// CHUNK bytes of `tag` repeated; blocks are 512-byte aligned, so the
/// pattern lines up with the block start.
fn pattern(tag: u64) -> Vec<u8> {
    tag.to_le_bytes().iter().copied().cycle().take(CHUNK).collect()
}

fn fill(ptr: usize, len: usize, tag: u64) {
    let chunk = pattern(tag);
    for off in (0..len).step_by(CHUNK) {
        let n = CHUNK.min(len - off);
        // SAFETY: a live block (or host buffer) of at least len bytes.
        unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), (ptr + off) as *mut u8, n) };
    }
}

/// Every byte checked, a chunk at a time (memcmp: fast in debug builds too).
fn holds(ptr: usize, len: usize, tag: u64) -> bool {
    let chunk = pattern(tag);
    // SAFETY: as in `fill`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    bytes.chunks(CHUNK).all(|c| c == &chunk[..c.len()])
}

/// What went wrong, collected from every thread (the first few of each kind
/// are kept in full).
#[derive(Default)]
struct Problems {
    corruptions: u64,
    bad_statuses: u64,
    notes: Vec<String>,
}

impl Problems {
    fn note(&mut self, what: String) {
        if self.notes.len() < 20 {
            self.notes.push(what);
        }
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    mallocs: u64,
    ooms: u64,
    frees: u64,
    frees_of_received: u64,
    sent: u64,
    received_kept: u64,
    records: u64,
    empties: u64,
    copy_rounds: u64,
    copy_rounds_skipped: u64,
    bytes_checked: u64,
}

impl Counts {
    fn add(&mut self, c: &Counts) {
        self.mallocs += c.mallocs;
        self.ooms += c.ooms;
        self.frees += c.frees;
        self.frees_of_received += c.frees_of_received;
        self.sent += c.sent;
        self.received_kept += c.received_kept;
        self.records += c.records;
        self.empties += c.empties;
        self.copy_rounds += c.copy_rounds;
        self.copy_rounds_skipped += c.copy_rounds_skipped;
        self.bytes_checked += c.bytes_checked;
    }
}

/// A copy round in flight on a held stream.
struct CopyRound {
    src_tag: u64,
    /// Allocated on the held stream; receives the device-to-device copy.
    dst: Block,
    /// Receives the device-to-host copy of `dst`, queued after it.
    host: Vec<u8>,
    rows: usize,
}

struct Streams {
    own: Vec<Stream>,
    held: Vec<Stream>,
    shared: Stream,
}

impl Streams {
    /// Any stream of the test (for record_stream): own, held, shared or default.
    fn any(&self, rng: &mut Rng) -> Stream {
        match rng.below(10) {
            0..=3 => self.own[rng.below(THREADS as u64) as usize],
            4..=5 => self.held[rng.below(THREADS as u64) as usize],
            6..=8 => self.shared,
            _ => Stream::DEFAULT,
        }
    }
}

struct Worker<'a> {
    a: Handle,
    t: usize,
    rng: Rng,
    streams: &'a Streams,
    problems: &'a Mutex<Problems>,
    live: Vec<Block>,
    next_tag: u64,
    c: Counts,
}

impl Worker<'_> {
    fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        ((self.t as u64 + 1) << 56) | self.next_tag
    }

    fn problem(&self, corruption: bool, what: String) {
        let mut p = self.problems.lock().unwrap();
        if corruption {
            p.corruptions += 1;
        } else {
            p.bad_statuses += 1;
        }
        p.note(format!("thread {}: {what}", self.t));
    }

    /// A status that must be OK.
    fn ok(&self, st: npualloc_status, what: &str) -> bool {
        if st != NPUALLOC_OK {
            self.problem(false, format!("{what} returned {st:?}: {}", last_error_message()));
        }
        st == NPUALLOC_OK
    }

    /// malloc + fill; None on out of memory (counted) or a bad status (a problem).
    fn alloc(&mut self, len: usize, stream: Stream) -> Option<Block> {
        match malloc(self.a, len, stream) {
            Ok(ptr) => {
                if ptr % 512 != 0 {
                    self.problem(false, format!("malloc({len}) returned {ptr:#x}, not 512-byte aligned"));
                }
                let b = Block { ptr, len, tag: self.tag() };
                fill(b.ptr, b.len, b.tag);
                self.c.mallocs += 1;
                Some(b)
            }
            Err((NPUALLOC_ERR_OUT_OF_MEMORY, _)) => {
                self.c.ooms += 1;
                None
            }
            Err((st, msg)) => {
                self.problem(false, format!("malloc({len}) returned {st:?}: {msg}"));
                None
            }
        }
    }

    fn check(&mut self, b: &Block, what: &str) {
        if !holds(b.ptr, b.len, b.tag) {
            self.problem(
                true,
                format!("{what}: block {:#x} ({} bytes, tag {:#x}) was overwritten", b.ptr, b.len, b.tag),
            );
        }
        self.c.bytes_checked += b.len as u64;
    }

    fn check_and_free(&mut self, b: Block) {
        self.check(&b, "before free");
        if self.ok(free(self.a, b.ptr), "free") {
            self.c.frees += 1;
        }
    }

    /// Holds this thread's copy stream and queues the copies; None if memory
    /// ran out (nothing left queued or held).
    fn start_copy_round(&mut self) -> Option<CopyRound> {
        let own = self.streams.own[self.t];
        let held = self.streams.held[self.t];
        let rows = self.rng.log_uniform(1, 256);
        let len = rows * CHUNK;
        emu().hold(held);
        let src = self.alloc(len, own);
        let dst = src.and_then(|_| self.alloc(len, held));
        let (Some(src), Some(dst)) = (src, dst) else {
            if let Some(src) = src {
                self.check_and_free(src);
            }
            emu().release(held);
            self.c.copy_rounds_skipped += 1;
            return None;
        };
        let mut host = vec![0u8; len];
        // The source is read by the held stream: recorded there, then freed
        // while the copy is still queued. Its memory must not be handed out
        // again before the held stream has run the copy.
        let recorded = self.ok(record_stream(self.a, src.ptr, held), "record_stream(src, held)");
        // SAFETY: both blocks are live for the whole copy (src through its
        // recorded use, dst until the round ends); the host buffer is kept in
        // the round until then.
        let d2d = unsafe {
            npualloc_memcpy2d_async(
                self.a,
                dst.ptr as *mut c_void,
                CHUNK,
                src.ptr as *const c_void,
                CHUNK,
                CHUNK,
                rows,
                ACL_MEMCPY_DEVICE_TO_DEVICE,
                held.raw(),
            )
        };
        let d2d = self.ok(d2d, "memcpy2d_async(device to device)");
        // SAFETY: as above.
        let d2h = unsafe {
            npualloc_memcpy2d_async(
                self.a,
                host.as_mut_ptr() as *mut c_void,
                CHUNK,
                dst.ptr as *const c_void,
                CHUNK,
                CHUNK,
                rows,
                ACL_MEMCPY_DEVICE_TO_HOST,
                held.raw(),
            )
        };
        let d2h = self.ok(d2h, "memcpy2d_async(device to host)");
        if !(recorded && d2d && d2h) {
            // Already reported; finish the round without its data checks.
            emu().release(held);
            self.check_and_free(src);
            self.check_and_free(dst);
            return None;
        }
        self.check(&src, "source before the queued copy");
        if self.ok(free(self.a, src.ptr), "free(src with a queued use)") {
            self.c.frees += 1;
        }
        Some(CopyRound { src_tag: src.tag, dst, host, rows })
    }

    /// Releases the held stream, waits for it, and checks what the copies wrote.
    fn end_copy_round(&mut self, r: CopyRound) {
        let held = self.streams.held[self.t];
        let e = emu();
        e.release(held);
        if let Err(err) = e.rt.on_device(DEVICE, || e.rt.synchronize_stream(held)) {
            // 507000 here is a violation the emulator saw on this stream.
            self.problem(true, format!("copy round: synchronizing the held stream failed: {err}"));
        }
        let len = r.rows * CHUNK;
        if !holds(r.dst.ptr, len, r.src_tag) {
            self.problem(
                true,
                format!("copy round: the device copy ({len} bytes) did not read back the source's data"),
            );
        }
        if !holds(r.host.as_ptr() as usize, len, r.src_tag) {
            self.problem(true, format!("copy round: the host copy ({len} bytes) did not read back the source's data"));
        }
        self.c.bytes_checked += 2 * len as u64;
        if self.ok(free(self.a, r.dst.ptr), "free(dst)") {
            self.c.frees += 1;
        }
        self.c.copy_rounds += 1;
    }

    fn run(&mut self, next: &SyncSender<Block>, prev: &Receiver<Block>) {
        let mut round: Option<CopyRound> = None;
        for i in 0..ITERATIONS {
            // Blocks from the previous thread: check, then free or keep.
            match prev.try_recv() {
                Ok(b) => {
                    if self.live.len() < MAX_LIVE && self.rng.below(3) == 0 {
                        self.check(&b, "received");
                        self.live.push(b);
                        self.c.received_kept += 1;
                    } else {
                        self.check_and_free(b);
                        self.c.frees_of_received += 1;
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
            }
            if i % COPY_EVERY == 0 {
                if let Some(r) = round.take() {
                    self.end_copy_round(r);
                }
                round = self.start_copy_round();
            } else if i % COPY_EVERY == COPY_EVERY / 2 {
                if let Some(r) = round.take() {
                    self.end_copy_round(r);
                }
            }
            match self.rng.below(1000) {
                0..=429 if self.live.len() < MAX_LIVE => {
                    let len = self.rng.log_uniform(SMALLEST, LARGEST);
                    let stream = match self.rng.below(10) {
                        0..=5 => self.streams.own[self.t],
                        6..=8 => self.streams.shared,
                        _ => Stream::DEFAULT,
                    };
                    if let Some(b) = self.alloc(len, stream) {
                        self.live.push(b);
                    }
                }
                0..=799 if !self.live.is_empty() => {
                    let k = self.rng.below(self.live.len() as u64) as usize;
                    let b = self.live.swap_remove(k);
                    self.check_and_free(b);
                }
                800..=889 if !self.live.is_empty() => {
                    let k = self.rng.below(self.live.len() as u64) as usize;
                    let b = self.live.swap_remove(k);
                    self.check(&b, "before sending");
                    match next.try_send(b) {
                        Ok(()) => self.c.sent += 1,
                        Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) => self.check_and_free(b),
                    }
                }
                890..=979 if !self.live.is_empty() => {
                    let b = self.live[self.rng.below(self.live.len() as u64) as usize];
                    let s = self.streams.any(&mut self.rng);
                    if self.ok(record_stream(self.a, b.ptr, s), "record_stream") {
                        self.c.records += 1;
                    }
                }
                980..=989 if self.t % 2 == 0 => {
                    if self.ok(empty_cache(self.a), "empty_cache") {
                        self.c.empties += 1;
                    }
                }
                _ => {
                    let s = stats(self.a);
                    if !(s.reserved_bytes >= s.allocated_bytes && s.allocated_bytes >= s.requested_bytes) {
                        self.problem(false, format!("inconsistent stats {s:?}"));
                    }
                }
            }
        }
        if let Some(r) = round.take() {
            self.end_copy_round(r);
        }
        while let Some(b) = self.live.pop() {
            self.check_and_free(b);
        }
    }
}

fn stress(config: &str) {
    let e = emu();
    let violations_before = violations();
    let a = create(config, DEVICE).unwrap_or_else(|e| panic!("create({config}): {e:?}"));
    let streams = Streams {
        own: (0..THREADS).map(|_| e.create_stream(DEVICE)).collect(),
        held: (0..THREADS).map(|_| e.create_stream(DEVICE)).collect(),
        shared: e.create_stream(DEVICE),
    };
    let problems = Mutex::new(Problems::default());
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::sync_channel::<Block>(CHANNEL)).unzip();
    let started = Instant::now();
    let shared = Shared(a);
    let (counts, leftovers) = std::thread::scope(|scope| {
        let handles: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(t, prev)| {
                // Thread t receives on channel t and sends on channel t + 1.
                let next = senders[(t + 1) % THREADS].clone();
                let (streams, problems) = (&streams, &problems);
                scope.spawn(move || {
                    let a = shared;
                    let mut w = Worker {
                        a: a.0,
                        t,
                        rng: Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9)),
                        streams,
                        problems,
                        live: Vec::new(),
                        next_tag: 0,
                        c: Counts::default(),
                    };
                    w.run(&next, &prev);
                    (w.c, prev)
                })
            })
            .collect();
        let mut total = Counts::default();
        let mut leftovers = Vec::new();
        for h in handles {
            let (c, prev) = h.join().expect("a worker panicked");
            total.add(&c);
            leftovers.push(prev);
        }
        (total, leftovers)
    });
    drop(senders);
    // Blocks still in the channels when their receiver finished.
    let mut drained = 0u64;
    for prev in leftovers {
        for b in prev.try_iter() {
            assert!(holds(b.ptr, b.len, b.tag), "a block left in a channel was overwritten: {b:?}");
            assert_eq!(free(a, b.ptr), NPUALLOC_OK, "{}", last_error_message());
            drained += 1;
        }
    }
    let elapsed = started.elapsed();
    let p = problems.into_inner().unwrap();
    assert!(
        p.corruptions == 0 && p.bad_statuses == 0,
        "{config}: {} corruptions, {} unexpected statuses; first: {:#?}",
        p.corruptions,
        p.bad_statuses,
        p.notes
    );

    assert_eq!(
        violations(),
        violations_before,
        "{config}: the emulator saw memory misused under queued work (see stderr)"
    );

    let s = stats(a);
    assert_eq!((s.active_blocks, s.allocated_bytes, s.requested_bytes), (0, 0, 0), "{config}: {s:?}");
    assert_eq!(s.num_allocs, s.num_frees, "{config}: {s:?}");
    assert_eq!(s.num_allocs, counts.mallocs, "{config}: every successful malloc counted once: {s:?}");
    assert_eq!(counts.mallocs, counts.frees + drained, "{config}: {counts:?}, {drained} drained");
    // The scenario did what it is for.
    assert!(counts.copy_rounds > 0, "{config}: no copy round completed: {counts:?}");
    assert!(counts.frees_of_received > 0, "{config}: no block was freed by another thread: {counts:?}");
    assert!(counts.records > 0 && counts.empties > 0, "{config}: {counts:?}");
    assert!(
        counts.ooms > 0 || s.num_alloc_retries > 0,
        "{config}: the device never ran short (no out-of-memory, no retry): {counts:?} {s:?}"
    );

    // One request larger than the device: out of memory after every
    // recovery step, nothing changed.
    let before = stats(a);
    match malloc(a, 2 * CAPACITY as usize, streams.own[0]) {
        Err((NPUALLOC_ERR_OUT_OF_MEMORY, _)) => {}
        other => panic!("{config}: malloc of twice the device: {other:?}"),
    }
    let after = stats(a);
    assert_eq!(after.num_ooms, before.num_ooms + 1, "{config}: {after:?}");
    assert_eq!((after.active_blocks, after.allocated_bytes), (0, 0), "{config}: {after:?}");

    assert_eq!(empty_cache(a), NPUALLOC_OK, "{}", last_error_message());
    assert_eq!(stats(a).reserved_bytes, 0, "{config}: empty_cache with nothing live kept memory");
    assert_eq!(destroy(a), NPUALLOC_OK, "{}", last_error_message());
    for &st in streams.own.iter().chain(&streams.held).chain([&streams.shared]) {
        e.destroy_stream(DEVICE, st);
    }
    let u = e.usage(DEVICE);
    assert!(u.is_clean(), "{config}: the emulator still holds resources after destroy: {u:?}");
    assert_eq!(violations(), violations_before, "{config}: violations at teardown (see stderr)");
    eprintln!(
        "stress_threads ({config}): {THREADS} threads x {ITERATIONS} iterations in {:.1} s: {counts:?}; \
         {drained} blocks drained from channels; allocator: {} retries, {} ooms, {} syncs, {} device mallocs, {} maps",
        elapsed.as_secs_f64(),
        s.num_alloc_retries,
        s.num_ooms,
        s.num_syncs,
        s.num_device_mallocs,
        s.num_maps
    );
}

/// Runs `f`, ending the whole test process with a failure if it takes longer than `WATCHDOG`.
fn with_watchdog(what: &str, f: impl FnOnce()) {
    let (done, watch) = mpsc::channel::<()>();
    let what = what.to_string();
    let watchdog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(WATCHDOG) {
            eprintln!(
                "stress_threads: {what} did not finish within {WATCHDOG:?} (deadlock or livelock); failing the run"
            );
            std::process::exit(101);
        }
    });
    f();
    done.send(()).unwrap();
    watchdog.join().unwrap();
}

/// One test: the emulator's device state is process-wide, so the two
/// configurations run one after the other.
#[test]
fn threads_share_streams_pass_blocks_and_run_out_of_memory_without_corruption_or_leaks() {
    emu().set_capacity(DEVICE, CAPACITY);
    set_event_lag(EVENT_LAG);
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        with_watchdog(config, || stress(config));
    }
}
