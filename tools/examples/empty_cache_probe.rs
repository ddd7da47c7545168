//! What `empty_cache` gives back in the middle and at the end of a trace.
//!
//! Replays an acl-trace on the emulator through one allocator, calls
//! `empty_cache` after half of the events and again after the last, and
//! prints allocated and reserved MiB before and after each call: the memory
//! a host can hand to another process between phases.
//!
//! ```sh
//! cargo build --workspace --release
//! cargo run --release --example empty_cache_probe -- TRACE [CONFIG]
//! ```
//!
//! The emulator is `$NPUALLOC_ACL_LIBRARY`, else `libascendcl.so` in the
//! build directory the example was built into (`target/release/`).

use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use npualloc_tools::replay::{replay_steps, Emulator, Prepared};
use npualloc_tools::trace::parse_file;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const MIB: f64 = (1u64 << 20) as f64;

fn emulator_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NPUALLOC_ACL_LIBRARY").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    // target/<profile>/examples/<this> -> target/<profile>/libascendcl.so
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().and_then(Path::parent).map(|d| d.join("libascendcl.so")))
        .unwrap_or_else(|| PathBuf::from("libascendcl.so"))
}

fn report(a: &DeviceAllocator, when: &str) -> Result<(), String> {
    let before = a.stats().map_err(|e| e.to_string())?;
    a.empty_cache().map_err(|e| e.to_string())?;
    let after = a.stats().map_err(|e| e.to_string())?;
    println!(
        "{when:>6}: allocated {:8.1} MiB, reserved {:8.1} MiB, after empty_cache {:8.1} MiB",
        after.allocated_bytes as f64 / MIB,
        before.reserved_bytes as f64 / MIB,
        after.reserved_bytes as f64 / MIB
    );
    Ok(())
}

fn run(trace: &Path, config: &str) -> Result<(), String> {
    let emu = Emulator::load(&emulator_path()).map_err(|e| e.to_string())?;
    let parsed = parse_file(trace).map_err(|e| e.to_string())?;
    let p = Prepared::new(&trace.display().to_string(), &parsed);
    let config = Config::parse(config).map_err(|e| e.to_string())?;
    let a = DeviceAllocator::with_runtime(config, 0, emu.runtime().clone()).map_err(|e| e.to_string())?;
    let streams = emu.create_streams(p.streams).map_err(|e| e.to_string())?;
    let mut addrs = vec![0usize; p.slots];
    let (first, second) = p.steps.split_at(p.steps.len() / 2);
    let mut ooms = replay_steps(&a, first, &streams, &mut addrs)?;
    report(&a, "middle")?;
    ooms += replay_steps(&a, second, &streams, &mut addrs)?;
    report(&a, "end")?;
    if ooms > 0 {
        println!("({ooms} allocations failed with out of memory)");
    }
    a.teardown().map_err(|e| e.to_string())?;
    emu.destroy_streams(&streams);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(trace) = args.first() else {
        eprintln!("usage: empty_cache_probe TRACE [CONFIG]");
        return ExitCode::from(2);
    };
    match run(Path::new(trace), args.get(1).map_or("", String::as_str)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("empty_cache_probe: {e}");
            ExitCode::from(1)
        }
    }
}
