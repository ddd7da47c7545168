//! Sleep and wake on the emulator: copy throughput, and a serving trace put
//! to sleep at its peak while a colocated trainer runs.
//!
//! ```sh
//! cargo build --workspace --release
//! cargo run --release --example sleep_bench -- throughput [MIB]
//! cargo run --release --example sleep_bench -- trace SERVING_TRACE TRAINER_TRACE
//! ```
//!
//! `throughput`: MIB (default 1024) of live blocks of 1 to 16 MiB in a
//! `sleep=offload` pool; each of five cycles times `sleep_pools` and `wake`
//! and checks every block's bytes afterwards. Prints bytes per second.
//!
//! `trace`: replays SERVING_TRACE (every allocation routed to a
//! `sleep=offload` pool) up to its peak of live bytes; sleeps; replays all
//! of TRAINER_TRACE through a second allocator on the same device (a
//! colocated trainer, torn down at its end); wakes; finishes the serving
//! trace. The device is sized to the larger of the two traces' peaks plus a
//! sixteenth, so the trainer fits only if sleep gave the memory back (a run
//! without sleep is shown too). Beside it, what PyTorch's policy keeps after
//! `empty_cache` at the same point. Times are wall-clock on the emulator.
//!
//! The emulator is `$NPUALLOC_ACL_LIBRARY`, else `libascendcl.so` in the
//! build directory the example was built into (`target/release/`).

use npualloc::config::Config;
use npualloc::core::pools::config::{PoolConfig, SleepMode};
use npualloc::core::DeviceAllocator;
use npualloc::runtime::Stream;
use npualloc_tools::replay::{replay_steps, Emulator, Prepared, PYTORCH_POLICY};
use npualloc_tools::trace::parse_file;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

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

fn allocator(emu: &Emulator, config: &str) -> Result<DeviceAllocator, String> {
    DeviceAllocator::with_runtime(Config::parse(config).map_err(err)?, 0, emu.runtime().clone()).map_err(err)
}

fn offload_pool(a: &DeviceAllocator) -> Result<u64, String> {
    a.pool_create(PoolConfig { sleep: SleepMode::Offload, ..PoolConfig::default() }).map_err(err)
}

/// Device bytes the emulator has handed out (aclrtMalloc + physical).
fn device_bytes(emu: &Emulator) -> u64 {
    let u = emu.usage();
    u.malloc_bytes + u.physical_bytes
}

fn host_bytes(emu: &Emulator) -> u64 {
    emu.host_usage().map_or(0, |h| h.0)
}

fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn ms(t: Duration) -> f64 {
    t.as_secs_f64() * 1e3
}

fn throughput(total_mib: u64) -> Result<(), String> {
    let emu = Emulator::load(&emulator_path()).map_err(err)?;
    let a = allocator(&emu, "expandable_segments:true")?;
    let pool = offload_pool(&a)?;
    a.pool_begin(pool, None).map_err(err)?;
    let mut blocks = Vec::new();
    let (mut bytes, mut i) = (0u64, 0u64);
    while bytes < total_mib * MIB {
        let size = ((i * 7 % 16) + 1) * MIB;
        let addr = a.malloc(size as usize, Stream::DEFAULT).map_err(err)?;
        // SAFETY: the emulator's device memory is host memory; the block is live and size bytes long.
        unsafe { std::ptr::write_bytes(addr as *mut u8, i as u8, size as usize) };
        blocks.push((addr, size, i as u8));
        bytes += size;
        i += 1;
    }
    a.pool_end(pool, None).map_err(err)?;
    println!("{} blocks, {} MiB live in an offload pool", blocks.len(), bytes / MIB);
    let (mut sleeps, mut wakes) = (Vec::new(), Vec::new());
    for cycle in 0..5 {
        let held = device_bytes(&emu);
        let t = Instant::now();
        a.sleep_pools().map_err(err)?;
        let slept = t.elapsed();
        let host = host_bytes(&emu);
        let runs = emu.host_usage().map_or(0, |h| h.1);
        let t = Instant::now();
        a.wake().map_err(err)?;
        let woke = t.elapsed();
        for &(addr, size, byte) in &blocks {
            // SAFETY: as above.
            let s = unsafe { std::slice::from_raw_parts(addr as *const u8, size as usize) };
            if s.iter().any(|&b| b != byte) {
                return Err(format!("cycle {cycle}: block {addr:#x} changed across sleep"));
            }
        }
        println!(
            "cycle {cycle}: {:.0} MiB device before sleep, {:.0} MiB host in {runs} buffers (one copy each) while asleep; \
             sleep {:.1} ms ({:.2} GB/s), wake {:.1} ms ({:.2} GB/s)",
            held as f64 / MIB as f64,
            host as f64 / MIB as f64,
            ms(slept),
            gbps(host, slept),
            ms(woke),
            gbps(host, woke)
        );
        sleeps.push((host, slept));
        wakes.push((host, woke));
    }
    let best = |v: &[(u64, Duration)]| v.iter().map(|&(b, t)| gbps(b, t)).fold(0.0, f64::max);
    println!("best: sleep {:.2} GB/s, wake {:.2} GB/s", best(&sleeps), best(&wakes));
    a.teardown().map_err(err)?;
    Ok(())
}

/// The step after which live requested bytes peak.
fn peak_step(p: &Prepared) -> usize {
    p.requested.iter().enumerate().max_by_key(|&(i, &r)| (r, usize::MAX - i)).map_or(0, |(i, _)| i + 1)
}

/// Peak reserved bytes of `p` replayed alone (up to `steps`) with `config`.
fn peak_reserved(emu: &Emulator, p: &Prepared, steps: usize, config: &str) -> Result<u64, String> {
    let a = allocator(emu, config)?;
    let streams = emu.create_streams(p.streams).map_err(err)?;
    let mut addrs = vec![0usize; p.slots];
    let mut peak = 0;
    for chunk in p.steps[..steps].chunks(64) {
        replay_steps(&a, chunk, &streams, &mut addrs)?;
        peak = peak.max(a.stats().map_err(err)?.reserved_bytes);
    }
    a.teardown().map_err(err)?;
    emu.destroy_streams(&streams);
    Ok(peak)
}

/// Replays all of the trainer through its own allocator; returns (out of
/// memory count, peak reserved, time).
fn trainer(emu: &Emulator, t: &Prepared) -> Result<(u64, u64, Duration), String> {
    let start = Instant::now();
    let a = allocator(emu, "")?;
    let streams = emu.create_streams(t.streams).map_err(err)?;
    let mut addrs = vec![0usize; t.slots];
    let mut ooms = 0;
    let mut peak = 0;
    for chunk in t.steps.chunks(256) {
        ooms += replay_steps(&a, chunk, &streams, &mut addrs)?;
        peak = peak.max(a.stats().map_err(err)?.reserved_bytes);
    }
    a.teardown().map_err(err)?;
    emu.destroy_streams(&streams);
    Ok((ooms, peak, start.elapsed()))
}

fn trace(serving: &Path, training: &Path) -> Result<(), String> {
    let emu = Emulator::load(&emulator_path()).map_err(err)?;
    let s = Prepared::new(&serving.display().to_string(), &parse_file(serving).map_err(err)?);
    let t = Prepared::new(&training.display().to_string(), &parse_file(training).map_err(err)?);
    let at = peak_step(&s);
    let s_peak = peak_reserved(&emu, &s, at, "expandable_segments:true")?;
    let t_peak = peak_reserved(&emu, &t, t.steps.len(), "")?;
    let capacity = s_peak.max(t_peak) + s_peak.max(t_peak) / 16;
    println!(
        "serving {} to step {at} of {} ({:.1} MiB live requested), trainer {}",
        s.name,
        s.steps.len(),
        s.requested[at - 1] as f64 / MIB as f64,
        t.name
    );
    println!(
        "alone: serving reserves {:.1} MiB at its peak, trainer {:.1} MiB; device sized to {:.1} MiB",
        s_peak as f64 / MIB as f64,
        t_peak as f64 / MIB as f64,
        capacity as f64 / MIB as f64
    );

    // PyTorch's policy at the same point: what empty_cache leaves.
    {
        let a = allocator(&emu, PYTORCH_POLICY)?;
        let streams = emu.create_streams(s.streams).map_err(err)?;
        let mut addrs = vec![0usize; s.slots];
        replay_steps(&a, &s.steps[..at], &streams, &mut addrs)?;
        let before = a.stats().map_err(err)?.reserved_bytes;
        a.empty_cache().map_err(err)?;
        let st = a.stats().map_err(err)?;
        println!(
            "pytorch-policy at that point: reserved {:.1} MiB, after empty_cache {:.1} MiB (allocated {:.1} MiB)",
            before as f64 / MIB as f64,
            st.reserved_bytes as f64 / MIB as f64,
            st.allocated_bytes as f64 / MIB as f64
        );
        a.teardown().map_err(err)?;
        emu.destroy_streams(&streams);
    }

    emu.set_capacity(capacity).map_err(err)?;
    for with_sleep in [false, true] {
        let base_device = device_bytes(&emu);
        let a = allocator(&emu, "expandable_segments:true")?;
        let pool = offload_pool(&a)?;
        let streams = emu.create_streams(s.streams).map_err(err)?;
        let mut addrs = vec![0usize; s.slots];
        a.pool_begin(pool, None).map_err(err)?;
        let t0 = Instant::now();
        let mut ooms = replay_steps(&a, &s.steps[..at], &streams, &mut addrs)?;
        let first = t0.elapsed();
        a.pool_end(pool, None).map_err(err)?;
        let before = a.stats().map_err(err)?;
        let (mut slept, mut host) = (Duration::ZERO, 0);
        if with_sleep {
            let t1 = Instant::now();
            a.sleep_pools().map_err(err)?;
            slept = t1.elapsed();
            host = host_bytes(&emu);
        }
        let asleep_device = device_bytes(&emu) - base_device;
        let (t_ooms, t_peak_now, t_time) = trainer(&emu, &t)?;
        let mut woke = Duration::ZERO;
        if with_sleep {
            let t2 = Instant::now();
            a.wake().map_err(err)?;
            woke = t2.elapsed();
        }
        a.pool_begin(pool, None).map_err(err)?;
        let t3 = Instant::now();
        ooms += replay_steps(&a, &s.steps[at..], &streams, &mut addrs)?;
        let rest = t3.elapsed();
        a.pool_end(pool, None).map_err(err)?;
        println!("{}:", if with_sleep { "with sleep" } else { "without sleep" });
        println!(
            "  serving to peak {:.1} ms: allocated {:.1} MiB, reserved {:.1} MiB",
            ms(first),
            before.allocated_bytes as f64 / MIB as f64,
            before.reserved_bytes as f64 / MIB as f64
        );
        if with_sleep {
            println!(
                "  sleep {:.1} ms: device held {:.1} MiB after it, host {:.1} MiB ({:.2} GB/s)",
                ms(slept),
                asleep_device as f64 / MIB as f64,
                host as f64 / MIB as f64,
                gbps(host, slept)
            );
        }
        println!(
            "  trainer {:.1} ms: peak reserved {:.1} MiB, {t_ooms} allocations out of memory",
            ms(t_time),
            t_peak_now as f64 / MIB as f64
        );
        if with_sleep {
            println!("  wake {:.1} ms ({:.2} GB/s)", ms(woke), gbps(host, woke));
        }
        println!("  serving to the end {:.1} ms: {ooms} allocations out of memory", ms(rest));
        a.teardown().map_err(err)?;
        emu.destroy_streams(&streams);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("throughput") => match args.get(1).map(|s| s.parse::<u64>()) {
            None => throughput(1024),
            Some(Ok(n)) if n > 0 => throughput(n),
            Some(_) => Err("MIB must be a positive integer".into()),
        },
        Some("trace") if args.len() == 3 => trace(Path::new(&args[1]), Path::new(&args[2])),
        _ => {
            eprintln!("usage: sleep_bench throughput [MIB] | sleep_bench trace SERVING_TRACE TRAINER_TRACE");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sleep_bench: {e}");
            ExitCode::from(1)
        }
    }
}
