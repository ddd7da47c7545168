//! Pairs: a fixed number of warm malloc/free pairs on one thread over the
//! size mix of `scaling` (the same sequence: same seed, same log-uniform
//! sizes from 512 B to 40 MiB), through `DeviceAllocator` on the ACL
//! emulator or through glibc. Made for instruction counts: the timed loop
//! is the function `timed_pairs`, so callgrind can count it alone.
//!
//! ```sh
//! cargo build --workspace --release --examples
//! target/release/examples/pairs --pairs 1000000                 # ns per pair, npualloc then glibc
//! valgrind --tool=callgrind --toggle-collect='*timed_pairs*' \
//!   target/release/examples/pairs --pairs 100000 --only npualloc --config expandable_segments:false
//! ```
//!
//! Under valgrind, expandable segments cannot reserve their address ranges,
//! hence `expandable_segments:false` there (the hit path is the same code).

mod mt_common;

use mt_common::{load_emulator, Flags, Rng};
use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use npualloc::runtime::Stream;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: pairs [--pairs N] [--only npualloc|glibc|glibc-capped] [--config CONFIG]
  --pairs   timed pairs per allocator (default 1000000)
  --only    run one allocator (default: all three, npualloc first)
  --config  npualloc config string (default: the defaults)";

/// `scaling`'s seed and size range: the same sequence.
const SEED: u64 = 0x5ca1_ab1e_d00d_f00d;
const SIZES: usize = 1000;
const GLIBC_CAP: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Npualloc,
    Glibc,
    GlibcCapped,
}

#[inline(always)]
fn pair(kind: Kind, a: &DeviceAllocator, stream: Stream, size: usize) {
    match kind {
        Kind::Npualloc => {
            let p = a.malloc(black_box(size), stream).expect("malloc");
            a.free(black_box(p)).expect("free");
        }
        Kind::Glibc | Kind::GlibcCapped => {
            let size = if kind == Kind::GlibcCapped { size.min(GLIBC_CAP) } else { size };
            // SAFETY: a fresh allocation freed once.
            unsafe {
                let p = libc::malloc(black_box(size));
                assert!(!p.is_null(), "glibc malloc({size}) failed");
                libc::free(black_box(p));
            }
        }
    }
}

/// The counted loop: `n` pairs walking `sizes` cyclically.
#[inline(never)]
fn timed_pairs(kind: Kind, a: &DeviceAllocator, stream: Stream, sizes: &[usize], n: u64) {
    let mut i = 0;
    for _ in 0..n {
        pair(kind, a, stream, sizes[i]);
        i += 1;
        if i == sizes.len() {
            i = 0;
        }
    }
}

fn run() -> Result<(), String> {
    let flags = Flags::parse(&["pairs", "only", "config"], USAGE);
    let n: u64 = flags.get("pairs", 1_000_000);
    let kinds = match flags.string("only", "").as_str() {
        "" => vec![Kind::Npualloc, Kind::Glibc, Kind::GlibcCapped],
        "npualloc" => vec![Kind::Npualloc],
        "glibc" => vec![Kind::Glibc],
        "glibc-capped" => vec![Kind::GlibcCapped],
        other => return Err(format!("--only: unknown allocator {other:?}\n{USAGE}")),
    };
    let mut rng = Rng(SEED);
    let sizes: Vec<usize> = (0..SIZES).map(|_| rng.log_uniform(512, 40 << 20)).collect();
    let emu = load_emulator()?;
    let config = Config::parse(&flags.string("config", "")).map_err(|e| e.to_string())?;
    let a = DeviceAllocator::with_runtime(config, npualloc_tools::replay::emulator::DEVICE, emu.runtime().clone())
        .map_err(|e| e.to_string())?;
    let stream = emu.create_streams(1).map_err(|e| e.to_string())?[0];
    for kind in kinds {
        for &size in &sizes {
            pair(kind, &a, stream, size); // warm, uncounted
        }
        let start = Instant::now();
        timed_pairs(kind, &a, stream, &sizes, n);
        let ns = start.elapsed().as_secs_f64() * 1e9 / n as f64;
        let name = match kind {
            Kind::Npualloc => "npualloc",
            Kind::Glibc => "glibc",
            Kind::GlibcCapped => "glibc <= 1 MiB",
        };
        println!("{name}: {n} pairs, {ns:.1} ns per pair");
    }
    let s = a.stats().map_err(|e| e.to_string())?;
    if s.allocated_bytes != 0 || s.active_blocks != 0 {
        return Err(format!("blocks still allocated at the end: {s:?}"));
    }
    a.teardown().map_err(|e| e.to_string())?;
    emu.destroy_streams(&[stream]);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pairs: {e}");
            ExitCode::FAILURE
        }
    }
}
