//! Two allocators on one emulated device, replaying two traces at once.
//!
//! ```sh
//! cargo build --workspace --release --examples
//! target/release/examples/two_tenants TRACE_A TRACE_B [ROOM] [CONFIG]
//! ```
//!
//! Two `DeviceAllocator`s of one process share emulated device 0, as two
//! libraries of one process (or two processes on one card) share a device's
//! memory: the emulator charges both against the one capacity, and
//! `aclrtGetMemInfo` reports what both leave free. (Two processes are not
//! modelled: each process has its own emulator state.) The traces advance
//! together, each in steps of a thousandth of its events, so both are live
//! throughout. The device holds the peak of the two traces' combined live
//! bytes times ROOM (default 1.10): each must fit where the other leaves
//! room. Printed per allocator: peak reserved, over its own peak of live
//! bytes and over what it reached alone on a 64 GiB device; handles; OOMs;
//! whether its trace completed. CONFIG (default: npualloc's defaults)
//! configures both.
//!
//! The PyTorch side of the comparison (`scripts/bench-two-tenants.sh`) runs
//! two processes on one shared fake device (`replay_torch --tenant`,
//! `tools/peer/tenants.h`) with this interleaving and this combined peak; the
//! first line's device size in bytes lets the script check that both sides
//! use the same device.
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
const PARTS: usize = 1000;

fn emulator_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NPUALLOC_ACL_LIBRARY").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().and_then(Path::parent).map(|d| d.join("libascendcl.so")))
        .unwrap_or_else(|| PathBuf::from("libascendcl.so"))
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Where part `k` of `PARTS` of a trace of `n` steps ends.
fn cut(n: usize, k: usize) -> usize {
    n * k / PARTS
}

/// The peak of the two traces' live requested bytes when they advance together.
fn combined_peak(a: &Prepared, b: &Prepared) -> u64 {
    let live = |p: &Prepared, end: usize| if end == 0 { 0 } else { p.requested[end - 1] };
    let mut peak = 0;
    for k in 1..=PARTS {
        let (a0, a1, b0, b1) =
            (cut(a.steps.len(), k - 1), cut(a.steps.len(), k), cut(b.steps.len(), k - 1), cut(b.steps.len(), k));
        // Within a part A runs first, then B: A's peak in it meets B's
        // state at the part's start, B's peak meets A's at its end.
        let a_max = a.requested[a0..a1].iter().copied().max().unwrap_or(live(a, a0));
        let b_max = b.requested[b0..b1].iter().copied().max().unwrap_or(live(b, b0));
        peak = peak.max(a_max + live(b, b0)).max(live(a, a1) + b_max);
    }
    peak
}

/// One tenant's outcome.
struct Tenant {
    peak_reserved: u64,
    handles: u64,
    ooms: u64,
}

fn alone(emu: &Emulator, p: &Prepared, config: &str) -> Result<u64, String> {
    emu.set_capacity(64 << 30).map_err(err)?;
    let a =
        DeviceAllocator::with_runtime(Config::parse(config).map_err(err)?, 0, emu.runtime().clone()).map_err(err)?;
    let streams = emu.create_streams(p.streams).map_err(err)?;
    let mut addrs = vec![0; p.slots];
    replay_steps(&a, &p.steps, &streams, &mut addrs).map_err(|e| format!("{} alone on 64 GiB: {e}", p.name))?;
    let peak = a.stats().map_err(err)?.reserved_bytes_peak;
    a.teardown().map_err(err)?;
    Ok(peak)
}

fn together(emu: &Emulator, a: &Prepared, b: &Prepared, capacity: u64, config: &str) -> Result<[Tenant; 2], String> {
    emu.set_capacity(capacity).map_err(err)?;
    let cfg = Config::parse(config).map_err(err)?;
    let alloc = [
        DeviceAllocator::with_runtime(cfg.clone(), 0, emu.runtime().clone()).map_err(err)?,
        DeviceAllocator::with_runtime(cfg, 0, emu.runtime().clone()).map_err(err)?,
    ];
    let traces = [a, b];
    let streams = [emu.create_streams(a.streams).map_err(err)?, emu.create_streams(b.streams).map_err(err)?];
    let mut addrs = [vec![0; a.slots], vec![0; b.slots]];
    let mut ooms = [0u64; 2];
    for k in 1..=PARTS {
        for t in 0..2 {
            let n = traces[t].steps.len();
            let part = &traces[t].steps[cut(n, k - 1)..cut(n, k)];
            ooms[t] += replay_steps(&alloc[t], part, &streams[t], &mut addrs[t])
                .map_err(|e| format!("tenant {t} ({}) failed in part {k} of {PARTS}: {e}", traces[t].name))?;
        }
    }
    let mut out = Vec::new();
    for (t, al) in alloc.into_iter().enumerate() {
        let s = al.stats().map_err(err)?;
        out.push(Tenant {
            peak_reserved: s.reserved_bytes_peak,
            handles: s.num_physical_mallocs + s.num_device_mallocs,
            ooms: ooms[t],
        });
        al.teardown().map_err(err)?;
    }
    let b = out.pop().expect("two tenants");
    let a = out.pop().expect("two tenants");
    Ok([a, b])
}

fn run(a: &Path, b: &Path, room: f64, config: &str) -> Result<(), String> {
    let emu = Emulator::load(&emulator_path()).map_err(err)?;
    let _ = emu.runtime().set_device(0);
    let pa = Prepared::new(&a.display().to_string(), &parse_file(a).map_err(err)?);
    let pb = Prepared::new(&b.display().to_string(), &parse_file(b).map_err(err)?);
    let peak = combined_peak(&pa, &pb);
    let capacity = (peak as f64 * room) as u64;
    let solo = [alone(&emu, &pa, config)?, alone(&emu, &pb, config)?];
    let tenants = together(&emu, &pa, &pb, capacity, config)?;
    emu.set_capacity(64 << 30).map_err(err)?;
    let label = if config.is_empty() { "npualloc" } else { config };
    println!(
        "config {label}: device {:.1} MiB = {room:.2} x the combined live peak {:.1} MiB ({capacity} B = {room} x {peak} B)",
        capacity as f64 / MIB,
        peak as f64 / MIB
    );
    println!("| trace | peak live MiB | peak rsv MiB | x live | alone on 64 GiB, MiB | handles | OOMs | fits |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for (t, p) in [&pa, &pb].into_iter().enumerate() {
        let x = &tenants[t];
        let name = Path::new(&p.name).file_name().map_or(p.name.clone(), |n| n.to_string_lossy().into_owned());
        println!(
            "| {name} | {:.1} | {:.1} | {:.3} | {:.1} | {} | {} | {} |",
            p.peak_requested as f64 / MIB,
            x.peak_reserved as f64 / MIB,
            x.peak_reserved as f64 / p.peak_requested as f64,
            solo[t] as f64 / MIB,
            x.handles,
            x.ooms,
            if x.ooms == 0 { "yes" } else { "no" }
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 || args.len() > 4 {
        eprintln!("usage: two_tenants TRACE_A TRACE_B [ROOM] [CONFIG]");
        return ExitCode::from(2);
    }
    let room = match args.get(2).map(|s| s.parse::<f64>()) {
        None => 1.10,
        Some(Ok(r)) if r > 0.0 && r.is_finite() => r,
        Some(_) => {
            eprintln!("ROOM must be a positive number (the device over the combined live peak)");
            return ExitCode::from(2);
        }
    };
    let config = args.get(3).map_or("", String::as_str);
    match run(Path::new(&args[0]), Path::new(&args[1]), room, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("two_tenants: {e}");
            ExitCode::FAILURE
        }
    }
}
