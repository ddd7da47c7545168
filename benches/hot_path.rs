//! The allocator's hot path: warm malloc+free of common sizes through
//! `DeviceAllocator` on the ACL emulator, next to glibc malloc/free of the
//! same sizes as a reference, on one thread and on two threads (one stream
//! each). `npualloc+trace` is the same loop with the trace recorder on
//! (writing to /dev/null), to measure its overhead.
//!
//! Needs the release emulator: `cargo build --workspace --release` first.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use npualloc::replay::Emulator;
use npualloc::runtime::Stream;
use std::hint::black_box;
use std::path::PathBuf;
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

fn one_thread(c: &mut Criterion) {
    let emu = emulator();
    let stream = emu.create_streams(1).unwrap()[0];
    let plain = allocator(&emu, "");
    let traced = allocator(&emu, "trace:/dev/null");
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
            b.iter(|| {
                let p = traced.malloc(black_box(size), stream).unwrap();
                traced.free(black_box(p)).unwrap();
            })
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
    Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500)).sample_size(50)
}

criterion_group! { name = benches; config = config(); targets = one_thread, two_streams }
criterion_main!(benches);
