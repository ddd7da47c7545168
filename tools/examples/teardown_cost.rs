//! What giving ranges back costs: `empty_cache` releasing a device-sized
//! expandable range whose first few hundred MiB were ever mapped, and
//! `teardown` of an allocator holding such ranges.
//!
//! Each round makes an allocator on the emulated device, allocates a
//! 256 MiB and a 4 KiB block on one stream and frees them, then times
//! `empty_cache` (which releases both ranges); allocates and frees the same
//! again, and times `teardown`. Prints the median and the best of ROUNDS
//! rounds, in microseconds. A plain timing to compare builds, not a test.
//!
//! ```sh
//! cargo build --release -p acl-emu
//! ACLEMU_DEVICE_MEMORY=64G cargo run --release -p npualloc-tools --example teardown_cost -- [ROUNDS]
//! ```
//!
//! The emulator is `$NPUALLOC_ACL_LIBRARY`, else `libascendcl.so` in the
//! build directory the example was built into (`target/release/`).

mod mt_common;

use mt_common::load_emulator;
use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// (median, best) of `times`, in microseconds.
fn summary(times: &mut [Duration]) -> (f64, f64) {
    times.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(times[times.len() / 2]), us(times[0]))
}

fn run(rounds: usize) -> Result<(), String> {
    let emu = load_emulator()?;
    let streams = emu.create_streams(1).map_err(|e| e.to_string())?;
    let s = streams[0];
    let (mut empties, mut teardowns) = (Vec::new(), Vec::new());
    let mut device = 0;
    for _ in 0..rounds {
        let config = Config::parse("").map_err(|e| e.to_string())?;
        let a = DeviceAllocator::with_runtime(config, 0, emu.runtime().clone()).map_err(|e| e.to_string())?;
        let use_and_free = || -> Result<(), String> {
            let big = a.malloc(256 * MIB, s).map_err(|e| e.to_string())?;
            let small = a.malloc(4096, s).map_err(|e| e.to_string())?;
            a.free(big).map_err(|e| e.to_string())?;
            a.free(small).map_err(|e| e.to_string())
        };
        use_and_free()?;
        let t = Instant::now();
        a.empty_cache().map_err(|e| e.to_string())?;
        empties.push(t.elapsed());
        use_and_free()?;
        device = a.stats().map_err(|e| e.to_string())?.address_space_bytes;
        let t = Instant::now();
        a.teardown().map_err(|e| e.to_string())?;
        teardowns.push(t.elapsed());
    }
    emu.destroy_streams(&streams);
    println!("{rounds} rounds, {} GiB of address space in ranges", device >> 30);
    for (what, times) in [("empty_cache", &mut empties), ("teardown", &mut teardowns)] {
        let (median, best) = summary(times);
        println!("{what:>12}: median {median:9.1} us, best {best:9.1} us");
    }
    Ok(())
}

fn main() -> ExitCode {
    let rounds = match std::env::args().nth(1).map(|r| r.parse::<usize>()) {
        None => 200,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: teardown_cost [ROUNDS] (a positive number of rounds)");
            return ExitCode::from(2);
        }
    };
    match run(rounds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("teardown_cost: {e}");
            ExitCode::from(1)
        }
    }
}
