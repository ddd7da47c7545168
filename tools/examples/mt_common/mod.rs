//! Shared by the multi-thread benchmarks (`scaling`, `stall`): finding and
//! loading the emulator, a tiny flag parser, a fixed pseudo-random sequence,
//! a latency histogram and number formatting. Only public APIs of npualloc
//! are used, so the benchmarks run unchanged on any core behind
//! `npualloc::core::DeviceAllocator`.
#![allow(dead_code)]

use npualloc_tools::replay::Emulator;
use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// The emulator: `$NPUALLOC_ACL_LIBRARY`, else `libascendcl.so` next to the
/// build directory the example was built into (`target/release/`).
pub fn emulator_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NPUALLOC_ACL_LIBRARY").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    // target/<profile>/examples/<this> -> target/<profile>/libascendcl.so
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().and_then(Path::parent).map(|d| d.join("libascendcl.so")))
        .unwrap_or_else(|| PathBuf::from("libascendcl.so"))
}

pub fn load_emulator() -> Result<Emulator, String> {
    let path = emulator_path();
    Emulator::load(&path)
        .map_err(|e| format!("{} ({}; run `cargo build --workspace --release` first)", e, path.display()))
}

/// Whether the loaded emulator has the cost model: its control
/// `aclemu_set_cost` is exported. Older emulators lack it and ignore
/// `ACLEMU_COST`; device calls then take only the host time they take.
pub fn has_cost_model() -> bool {
    let Ok(path) = CString::new(emulator_path().to_string_lossy().into_owned()) else {
        return false;
    };
    // SAFETY: a valid C string; RTLD_NOLOAD only returns an already loaded library.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    // SAFETY: a live handle and a valid C string.
    !handle.is_null() && !unsafe { libc::dlsym(handle, c"aclemu_set_cost".as_ptr()) }.is_null()
}

/// `--key value` flags; `--help` prints `usage`.
pub struct Flags {
    values: HashMap<String, String>,
}

impl Flags {
    /// Parses the command line; exits with a message on anything unknown.
    pub fn parse(known: &[&str], usage: &str) -> Flags {
        let mut values = HashMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                println!("{usage}");
                std::process::exit(0);
            }
            let Some(key) = arg.strip_prefix("--").filter(|k| known.contains(k)) else {
                eprintln!("unknown argument {arg:?}\n{usage}");
                std::process::exit(2);
            };
            let Some(value) = args.next() else {
                eprintln!("{arg} needs a value\n{usage}");
                std::process::exit(2);
            };
            values.insert(key.to_string(), value);
        }
        Flags { values }
    }

    pub fn get<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        match self.values.get(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("--{key}: cannot parse {v:?}");
                std::process::exit(2);
            }),
        }
    }

    pub fn string(&self, key: &str, default: &str) -> String {
        self.values.get(key).cloned().unwrap_or_else(|| default.to_string())
    }
}

/// xorshift64*: the same seed gives the same sequence on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-uniform in [lo, hi]: every factor of two is equally likely.
    pub fn log_uniform(&mut self, lo: usize, hi: usize) -> usize {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        ((l + self.unit() * (h - l)).exp().round() as usize).clamp(lo, hi)
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Latencies in nanoseconds, bucketed with about 1.6% relative precision
/// (exact below 128 ns): constant memory however many samples are taken.
pub struct Histogram {
    counts: Vec<u64>,
    pub samples: u64,
    pub max: u64,
}

const SUB_BITS: u32 = 6; // 64 sub-buckets per power of two
const LINEAR: u64 = 2 << SUB_BITS; // exact below this

impl Histogram {
    pub fn new() -> Histogram {
        Histogram { counts: vec![0; Self::index(u64::MAX) + 1], samples: 0, max: 0 }
    }

    fn index(v: u64) -> usize {
        if v < LINEAR {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // >= SUB_BITS + 1
        let sub = (v >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1);
        (LINEAR + (e as u64 - SUB_BITS as u64 - 1) * (1 << SUB_BITS) + sub) as usize
    }

    /// The largest value that falls in bucket `i` (quantiles err high, not low).
    fn upper(i: usize) -> u64 {
        let i = i as u64;
        if i < LINEAR {
            return i;
        }
        let k = i - LINEAR;
        let e = k / (1 << SUB_BITS) + SUB_BITS as u64 + 1;
        let sub = k % (1 << SUB_BITS);
        let low = (1u64 << e) | (sub << (e - SUB_BITS as u64));
        low.saturating_add((1u64 << (e - SUB_BITS as u64)) - 1)
    }

    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.samples += 1;
        self.max = self.max.max(ns);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.samples += other.samples;
        self.max = self.max.max(other.max);
    }

    /// The q-quantile (0 <= q <= 1), capped at the exact maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        let rank = ((q * self.samples as f64).ceil() as u64).clamp(1, self.samples);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).min(self.max);
            }
        }
        self.max
    }
}

/// 1234567.8 -> "1.23 M"
pub fn si(v: f64) -> String {
    let (scaled, unit) = if v >= 1e9 {
        (v / 1e9, " G")
    } else if v >= 1e6 {
        (v / 1e6, " M")
    } else if v >= 1e3 {
        (v / 1e3, " k")
    } else {
        (v, "")
    };
    format!("{scaled:.3}{unit}")
}

/// Nanoseconds as "850 ns", "12.3 us", "4.56 ms".
pub fn duration_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

pub fn bytes(n: usize) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
