//! The allocator's hot path: warm malloc+free of common sizes through
//! `DeviceAllocator` on the ACL emulator, next to glibc malloc/free of the
//! same sizes as a reference, on one thread and on two threads (one stream
//! each).
//!
//! The trace recorder's cost, on the same one-thread loop with `trace:` set to
//! a temporary file, in two variants:
//! - `npualloc+trace`: everything recording costs. The timed loop includes the
//!   recorder's conversions and writes each time its buffer fills, plus a
//!   final `flush_trace`, so every event timed is also converted and written.
//! - `npualloc+trace-append`: the hot path alone. The loop runs in chunks
//!   that fit the recorder's buffer, with a `flush_trace` between chunks
//!   outside the timing, so the timed part only appends events.
//!
//! After the criterion groups, `trace_overhead` measures the same three loops
//! interleaved in short rounds (recording off / append / everything) and
//! prints the median ratio to the untraced loop, which a machine shared with
//! other work distorts less than back-to-back criterion runs.
//!
//! `history_overhead` does the same for the memory history on one allocator:
//! rounds with the history off and on alternate. Turning it off clears the
//! ring; each on round records 60,000 events into a ring of 16,384, so most
//! of them also drop the oldest.
//!
//! Needs the release emulator: `cargo build --workspace --release` first.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use npualloc::runtime::Stream;
use npualloc::trace::record::EVENT_BOUND;
use npualloc_tools::replay::Emulator;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const SIZES: [(usize, &str); 4] = [(512, "512B"), (64 << 10, "64KiB"), (3 << 20, "3MiB"), (40 << 20, "40MiB")];

fn emulator() -> Emulator {
    // Benches run from target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    let lib: PathBuf = exe.parent().and_then(|d| d.parent()).expect("target dir").join("libascendcl.so");
    assert!(lib.is_file(), "{} is missing; run `cargo build --workspace --release` first", lib.display());
    Emulator::load(&lib).expect("load the emulator")
}

fn allocator(emu: &Emulator, config: &str) -> DeviceAllocator {
    DeviceAllocator::with_runtime(Config::parse(config).unwrap(), 0, emu.runtime().clone()).unwrap()
}

/// Warm: the first malloc of each size builds the cache outside the timing.
fn warm(a: &DeviceAllocator, size: usize, stream: Stream) {
    let p = a.malloc(size, stream).unwrap();
    a.free(p).unwrap();
}

/// A trace file in the temporary directory, removed on drop.
struct TempTrace(PathBuf);

impl TempTrace {
    fn new(name: &str) -> TempTrace {
        TempTrace(std::env::temp_dir().join(format!("npualloc-bench-{}-{name}.trace", std::process::id())))
    }

    fn config(&self) -> String {
        format!("trace:{}", self.0.display())
    }

    /// Drops the text written so far, so a long benchmark does not fill the
    /// disk. The recorder keeps writing at its offset (the file becomes
    /// sparse), which costs the same as writing at the end.
    fn truncate(&self) {
        std::fs::OpenOptions::new().write(true).open(&self.0).and_then(|f| f.set_len(0)).expect("truncate the trace");
    }
}

impl Drop for TempTrace {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn pairs(a: &DeviceAllocator, size: usize, stream: Stream, n: u64) {
    for _ in 0..n {
        let p = a.malloc(black_box(size), stream).unwrap();
        a.free(black_box(p)).unwrap();
    }
}

/// `n` pairs with recording on, counting the conversion and write of every
/// event they record.
fn traced_pairs_all(a: &DeviceAllocator, file: &TempTrace, size: usize, stream: Stream, n: u64) -> Duration {
    a.flush_trace().unwrap();
    file.truncate();
    let start = Instant::now();
    pairs(a, size, stream, n);
    a.flush_trace().unwrap();
    start.elapsed()
}

/// `n` pairs with recording on, timing only the appends: chunks that fit
/// the recorder's buffer, flushed outside the timing.
fn traced_pairs_append(a: &DeviceAllocator, file: &TempTrace, size: usize, stream: Stream, n: u64) -> Duration {
    const CHUNK: u64 = (EVENT_BOUND / 2 - 1) as u64; // two events per pair
    let mut total = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let k = left.min(CHUNK);
        a.flush_trace().unwrap();
        file.truncate();
        let start = Instant::now();
        pairs(a, size, stream, k);
        total += start.elapsed();
        left -= k;
    }
    total
}

fn one_thread(c: &mut Criterion) {
    let emu = emulator();
    let stream = emu.create_streams(1).unwrap()[0];
    let file = TempTrace::new("one-thread");
    let plain = allocator(&emu, "");
    let traced = allocator(&emu, &file.config());
    let mut g = c.benchmark_group("malloc_free_1_thread");
    for (size, name) in SIZES {
        warm(&plain, size, stream);
        warm(&traced, size, stream);
        g.bench_with_input(BenchmarkId::new("npualloc", name), &size, |b, &size| {
            b.iter(|| {
                let p = plain.malloc(black_box(size), stream).unwrap();
                plain.free(black_box(p)).unwrap();
            })
        });
        g.bench_with_input(BenchmarkId::new("npualloc+trace", name), &size, |b, &size| {
            b.iter_custom(|iters| traced_pairs_all(&traced, &file, size, stream, iters))
        });
        g.bench_with_input(BenchmarkId::new("npualloc+trace-append", name), &size, |b, &size| {
            b.iter_custom(|iters| traced_pairs_append(&traced, &file, size, stream, iters))
        });
        g.bench_with_input(BenchmarkId::new("glibc", name), &size, |b, &size| {
            b.iter(|| unsafe {
                // SAFETY: a fresh allocation freed once.
                let p = libc::malloc(black_box(size));
                libc::free(black_box(p));
            })
        });
    }
    g.finish();
    plain.teardown().unwrap();
    traced.teardown().unwrap();
}

/// Recording off, append only, and everything, interleaved in rounds of
/// `pairs` pairs each; prints the median per-round ratio to the untraced
/// loop. Two round lengths: 5 000 pairs (10 000 events, 240 KB of buffer:
/// stays in cache between flushes) and 200 000 pairs (400 000 events, 9.6 MB:
/// the appends stream through memory). Runs whatever criterion filter is given.
fn trace_overhead(_: &mut Criterion) {
    const ROUNDS: usize = 41;
    let emu = emulator();
    let stream = emu.create_streams(1).unwrap()[0];
    let file = TempTrace::new("overhead");
    let plain = allocator(&emu, "");
    let traced = allocator(&emu, &file.config());
    for pairs_per_round in [5_000u64, 200_000] {
        println!("trace_overhead: median of {ROUNDS} interleaved rounds of {pairs_per_round} warm malloc+free pairs");
        println!("{:>6} {:>9} {:>12} {:>8} {:>12} {:>8}", "size", "off ns", "append ns", "ratio", "all ns", "ratio");
        for (size, name) in SIZES {
            warm(&plain, size, stream);
            warm(&traced, size, stream);
            let (mut off, mut app, mut all) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let start = Instant::now();
                pairs(&plain, size, stream, pairs_per_round);
                let t_off = start.elapsed().as_secs_f64();
                let t_app = traced_pairs_append(&traced, &file, size, stream, pairs_per_round).as_secs_f64();
                let t_all = traced_pairs_all(&traced, &file, size, stream, pairs_per_round).as_secs_f64();
                off.push(t_off);
                app.push(t_app / t_off);
                all.push(t_all / t_off);
            }
            let off_ns = median(&mut off) * 1e9 / pairs_per_round as f64;
            let (r_app, r_all) = (median(&mut app), median(&mut all));
            println!(
                "{name:>6} {off_ns:>9.1} {:>12.1} {r_app:>8.3} {:>12.1} {r_all:>8.3}",
                off_ns * r_app,
                off_ns * r_all
            );
        }
    }
    plain.teardown().unwrap();
    traced.teardown().unwrap();
    check_trace(&file.0);
}

/// Memory history off and on, interleaved in rounds on one allocator;
/// prints the median per-round ratio on / off.
fn history_overhead(_: &mut Criterion) {
    const ROUNDS: usize = 41;
    const PAIRS: u64 = 20_000;
    let emu = emulator();
    let stream = emu.create_streams(1).unwrap()[0];
    let a = allocator(&emu, "");
    println!("history_overhead: median of {ROUNDS} interleaved rounds of {PAIRS} warm malloc+free pairs");
    println!("{:>6} {:>9} {:>9} {:>8}", "size", "off ns", "on ns", "ratio");
    for (size, name) in SIZES {
        warm(&a, size, stream);
        let (mut off, mut ratio) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            a.record_history(0);
            let start = Instant::now();
            pairs(&a, size, stream, PAIRS);
            let t_off = start.elapsed().as_secs_f64();
            a.record_history(1 << 14);
            let start = Instant::now();
            pairs(&a, size, stream, PAIRS);
            let t_on = start.elapsed().as_secs_f64();
            off.push(t_off);
            ratio.push(t_on / t_off);
        }
        // Each pair records alloc, free_requested and free_completed.
        assert_eq!(a.history().len(), 1 << 14, "the ring is full and bounded");
        let off_ns = median(&mut off) * 1e9 / PAIRS as f64;
        let r = median(&mut ratio);
        println!("{name:>6} {off_ns:>9.1} {:>9.1} {r:>8.3}", off_ns * r);
    }
    a.teardown().unwrap();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// What the recorder wrote last still parses (the file was truncated between
/// rounds, so only its tail is text).
fn check_trace(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let tail = text.trim_start_matches('\0');
    assert!(tail.lines().all(|l| l.starts_with("a ") || l.starts_with("f ")), "unexpected trace text");
}

/// Wall time for each of two threads to run `iters` malloc+free pairs.
fn two_threads(iters: u64, work: &(dyn Fn(usize) + Sync)) -> Duration {
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        for t in 0..2 {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    work(t);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn two_streams(c: &mut Criterion) {
    let emu = emulator();
    let streams = emu.create_streams(2).unwrap();
    let a = allocator(&emu, "");
    let mut g = c.benchmark_group("malloc_free_2_threads");
    for (size, name) in SIZES {
        for &s in &streams {
            warm(&a, size, s);
        }
        g.bench_with_input(BenchmarkId::new("npualloc", name), &size, |b, &size| {
            b.iter_custom(|iters| {
                two_threads(iters, &|t| {
                    let p = a.malloc(black_box(size), streams[t]).unwrap();
                    a.free(black_box(p)).unwrap();
                })
            })
        });
        g.bench_with_input(BenchmarkId::new("glibc", name), &size, |b, &size| {
            b.iter_custom(|iters| {
                two_threads(iters, &|_| unsafe {
                    // SAFETY: a fresh allocation freed once.
                    let p = libc::malloc(black_box(size));
                    libc::free(black_box(p));
                })
            })
        });
    }
    g.finish();
    a.teardown().unwrap();
}

fn config() -> Criterion {
    // Two shared cores: short, repeated measurements.
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = one_thread, two_streams, trace_overhead, history_overhead }
criterion_main!(benches);
