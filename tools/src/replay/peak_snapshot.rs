//! A PyTorch-format snapshot of a trace at its peak of reserved memory,
//! with the memory history of every event before it (`--snapshot DIR`).

use super::emulator::{Emulator, DEFAULT_CAPACITY, DEVICE};
use super::engine::{self, Npu, Quiet, Series};
use super::prepared::Prepared;
use crate::config::Config;
use crate::core::report::pytorch_snapshot::Value;
use crate::core::DeviceAllocator;

/// The file name for `trace_name`'s snapshot: the trace's name without
/// `.trace.gz` (or `.trace`), then `.pickle`.
pub fn file_name(trace_name: &str) -> String {
    let stem = trace_name.strip_suffix(".trace.gz").or_else(|| trace_name.strip_suffix(".trace")).unwrap_or(trace_name);
    format!("{stem}.pickle")
}

/// Replays `trace` through an allocator made with `config` to find the
/// first step after which reserved memory is at its peak, then replays it
/// again up to that step with the memory history on (unbounded) and takes
/// the snapshot there. Also returns the reserved bytes at that step.
pub fn snapshot_at_peak(emu: &Emulator, trace: &Prepared, config: &str) -> Result<(Value, u64), String> {
    let config = Config::parse(config).map_err(|e| e.to_string())?;
    emu.set_capacity(DEFAULT_CAPACITY).map_err(|e| e.to_string())?;
    let streams = emu.create_streams(trace.streams).map_err(|e| e.to_string())?;
    let result = snapshot_on(emu, trace, &config, &streams);
    emu.destroy_streams(&streams);
    result
}

fn snapshot_on(
    emu: &Emulator,
    trace: &Prepared,
    config: &Config,
    streams: &[crate::runtime::Stream],
) -> Result<(Value, u64), String> {
    let new_allocator =
        || DeviceAllocator::with_runtime(config.clone(), DEVICE, emu.runtime().clone()).map_err(|e| e.to_string());
    let mut series = Series(Vec::with_capacity(trace.steps.len()));
    {
        let alloc = new_allocator()?;
        let mut addrs = vec![0usize; trace.slots];
        let run = engine::run(&mut Npu { alloc: &alloc }, &trace.steps, streams, &mut addrs, false, &mut series);
        let torn = alloc.teardown();
        run?;
        torn.map_err(|e| format!("teardown: {e}"))?;
    }
    let peak = series.0.iter().copied().max().unwrap_or(0);
    let step = series.0.iter().position(|&r| r == peak).unwrap_or(0);
    let alloc = new_allocator()?;
    alloc.record_history(usize::MAX);
    let mut addrs = vec![0usize; trace.slots];
    let upto = &trace.steps[..(step + 1).min(trace.steps.len())];
    let run = engine::run(&mut Npu { alloc: &alloc }, upto, streams, &mut addrs, false, &mut Quiet);
    let snapshot = run.and_then(|_| alloc.pytorch_snapshot().map_err(|e| e.to_string()));
    let reserved = alloc.stats().map(|s| s.reserved_bytes).unwrap_or(0);
    let torn = alloc.teardown();
    let snapshot = snapshot?;
    torn.map_err(|e| format!("teardown: {e}"))?;
    Ok((snapshot, reserved))
}

#[cfg(test)]
mod tests {
    use super::file_name;

    #[test]
    fn names_drop_the_trace_suffix() {
        assert_eq!(file_name("gpt2-generate.trace.gz"), "gpt2-generate.pickle");
        assert_eq!(file_name("small.trace"), "small.pickle");
        assert_eq!(file_name("other.bin"), "other.bin.pickle");
    }
}
