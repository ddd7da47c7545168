//! Two threads share one allocator and two streams for 200,000 operations
//! each: malloc, free, record_stream, empty_cache, stats and snapshots in a
//! random mix. Every block is filled with its own byte when it is handed out
//! and every byte of it is checked before it is freed (the emulator's device
//! memory is host memory), so two live blocks sharing a byte, or a block
//! reused while still live, shows up as a corrupted pattern. A watchdog fails
//! the run if it takes longer than its bound (a deadlock). Run in debug and
//! with --release (scripts/test.sh does both).

mod common;

use common::{create, destroy, empty_cache, emu, free, malloc, query, record_stream, stats, Handle};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::NPUALLOC_OK;
use npualloc::ffi::stats::npualloc_snapshot_json;
use npualloc::ffi::stats::npualloc_string_free;
use npualloc::runtime::Stream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEVICE: i32 = 4;
const THREADS: usize = 2;
const OPS_PER_THREAD: usize = 200_000;
const MAX_LIVE: usize = 48;
/// Far above a normal run (about 45 s per mode in a debug build on a loaded
/// 2-core machine): the watchdog is there to catch deadlocks, not slowness.
const WATCHDOG: Duration = Duration::from_secs(if cfg!(debug_assertions) { 600 } else { 120 });

/// The handle, shared by the threads (the C API is thread-safe).
#[derive(Clone, Copy)]
struct Shared(Handle);
// SAFETY: npualloc's functions are thread-safe; the handle outlives the threads.
unsafe impl Send for Shared {}
// SAFETY: as for Send: every function the threads call through it is thread-safe.
unsafe impl Sync for Shared {}

/// xorshift64*: a fixed seed per thread keeps runs reproducible.
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
}

/// Sizes from 1 byte to 1 MiB, mostly small (small and large pools both).
fn size(rng: &mut Rng) -> usize {
    match rng.below(1000) {
        0..=699 => 1 + rng.below(4096) as usize,
        700..=969 => 4096 + rng.below(60 << 10) as usize,
        970..=997 => (64 << 10) + rng.below(192 << 10) as usize,
        _ => (256 << 10) + rng.below(768 << 10) as usize,
    }
}

fn fill(addr: usize, len: usize, byte: u8) {
    // SAFETY: a live block of at least len bytes in host memory.
    unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) }
}

/// Checks every byte with memcmp-sized chunks (fast in debug builds too).
fn holds(addr: usize, len: usize, byte: u8) -> bool {
    static CHUNK: usize = 4096;
    let expected = [byte; CHUNK];
    // SAFETY: as in `fill`.
    let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    bytes.chunks(CHUNK).all(|c| c == &expected[..c.len()])
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    mallocs: u64,
    frees: u64,
    records: u64,
    empties: u64,
    stats: u64,
    snapshots: u64,
    bytes_checked: u64,
}

fn worker(a: Shared, t: usize, streams: [Stream; 2]) -> Counts {
    let a = a.0;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    let mut live: Vec<(usize, usize, u8)> = Vec::new();
    let mut c = Counts::default();
    let mut next_byte: u8 = (t as u8) << 7;
    let check_and_free = |(p, len, byte): (usize, usize, u8), c: &mut Counts| {
        assert!(holds(p, len, byte), "thread {t}: block {p:#x} ({len} bytes, byte {byte:#x}) was overwritten");
        c.bytes_checked += len as u64;
        assert_eq!(free(a, p), NPUALLOC_OK, "thread {t}: free: {}", last_error_message());
        c.frees += 1;
    };
    for _ in 0..OPS_PER_THREAD {
        match rng.below(1000) {
            0..=449 if live.len() < MAX_LIVE => {
                let len = size(&mut rng);
                let s = streams[rng.below(2) as usize];
                let p = malloc(a, len, s).unwrap_or_else(|e| panic!("thread {t}: malloc({len}): {e:?}"));
                assert_eq!(p % 512, 0);
                next_byte = ((next_byte.wrapping_add(1)) & 0x7f) | ((t as u8) << 7);
                fill(p, len, next_byte);
                live.push((p, len, next_byte));
                c.mallocs += 1;
            }
            0..=899 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                check_and_free(live.swap_remove(i), &mut c);
            }
            900..=979 if !live.is_empty() => {
                let (p, len, _) = live[rng.below(live.len() as u64) as usize];
                assert_eq!(
                    record_stream(a, p, streams[rng.below(2) as usize]),
                    NPUALLOC_OK,
                    "{}",
                    last_error_message()
                );
                let info = query(a, p + rng.below(len as u64) as usize).expect("query of a live block");
                assert_eq!((info.addr as usize, info.requested as usize), (p, len));
                c.records += 1;
            }
            980 => {
                assert_eq!(empty_cache(a), NPUALLOC_OK, "{}", last_error_message());
                c.empties += 1;
            }
            981..=997 => {
                let s = stats(a);
                assert!(s.reserved_bytes >= s.allocated_bytes && s.allocated_bytes >= s.requested_bytes, "{s:?}");
                assert!(s.active_blocks >= live.len() as u64, "{s:?}");
                c.stats += 1;
            }
            998..=999 if rng.below(20) == 0 => {
                let mut json = std::ptr::null_mut();
                // SAFETY: a live handle and a valid out-pointer; the string is freed once.
                unsafe {
                    assert_eq!(npualloc_snapshot_json(a, &mut json), NPUALLOC_OK);
                    npualloc_string_free(json);
                }
                c.snapshots += 1;
            }
            _ => {}
        }
    }
    for b in live.drain(..) {
        check_and_free(b, &mut c);
    }
    c
}

fn stress(config: &str) {
    let e = emu();
    let a = create(config, DEVICE).unwrap_or_else(|e| panic!("create({config}): {e:?}"));
    let streams = [e.create_stream(DEVICE), e.create_stream(DEVICE)];
    let started = Instant::now();
    let shared = Shared(a);
    let totals = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS).map(|t| scope.spawn(move || worker(shared, t, streams))).collect();
        handles.into_iter().map(|h| h.join().expect("a worker panicked")).collect::<Vec<_>>()
    });
    let s = stats(a);
    assert_eq!((s.active_blocks, s.allocated_bytes, s.requested_bytes), (0, 0, 0), "{s:?}");
    let allocs: u64 = totals.iter().map(|c| c.mallocs).sum();
    assert_eq!((s.num_allocs, s.num_frees), (allocs, allocs), "{s:?}");
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK, "{}", last_error_message());
    for st in streams {
        e.destroy_stream(DEVICE, st);
    }
    assert!(e.usage(DEVICE).is_clean(), "{:?}", e.usage(DEVICE));
    let sum = totals.iter().fold(Counts::default(), |x, c| Counts {
        mallocs: x.mallocs + c.mallocs,
        frees: x.frees + c.frees,
        records: x.records + c.records,
        empties: x.empties + c.empties,
        stats: x.stats + c.stats,
        snapshots: x.snapshots + c.snapshots,
        bytes_checked: x.bytes_checked + c.bytes_checked,
    });
    eprintln!(
        "concurrency ({config}): {THREADS} threads x {OPS_PER_THREAD} operations in {:.1} s: {sum:?}",
        started.elapsed().as_secs_f64()
    );
}

/// Runs `f`, ending the whole test process with a failure if it takes longer than `WATCHDOG`.
fn with_watchdog(what: &str, f: impl FnOnce()) {
    let (done, watch) = mpsc::channel::<()>();
    let what = what.to_string();
    let watchdog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(WATCHDOG) {
            eprintln!("concurrency: {what} did not finish within {WATCHDOG:?} (deadlock or livelock); failing the run");
            std::process::exit(101);
        }
    });
    f();
    done.send(()).unwrap();
    watchdog.join().unwrap();
}

#[test]
fn two_threads_two_streams_keep_every_block_intact() {
    emu().set_capacity(DEVICE, 4 << 30);
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        with_watchdog(config, || stress(config));
    }
}
