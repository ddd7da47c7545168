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

#[path = "stress_threads/blocks.rs"]
mod blocks;
#[path = "stress_threads/emulator.rs"]
mod emulator;
#[path = "stress_threads/report.rs"]
mod report;
#[path = "stress_threads/worker.rs"]
mod worker;

use common::{create, destroy, empty_cache, emu, free, malloc, stats};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{NPUALLOC_ERR_OUT_OF_MEMORY, NPUALLOC_OK};
use std::sync::mpsc;
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

use blocks::{holds, Block, Rng};
use emulator::{set_event_lag, violations};
use report::{Counts, Problems};
use worker::{Shared, Streams, Worker};

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
