//! Replays allocation traces through allocator configurations on the ACL
//! emulator, and reports what each needed (shared by `npualloc-replay` and
//! the benchmarks).
//!
//! Per (trace, configuration):
//! - one observed run at the default capacity: peak reserved, device calls,
//!   syncs, OOMs, and with `series` the reserved bytes after every step;
//! - with `segment_map` (first configuration only), a second run stopped at
//!   the step where reserved first reached its peak, for a snapshot;
//! - `repeat` timed runs: only the loop of allocator calls is timed, the best
//!   run is kept (the emulator's streams and the allocator are set up before);
//! - with `min_capacity`, a bisection over the emulator's device capacity,
//!   each probe stopping at its first OOM.
//!
//! Runs are sequential: the emulator's devices are process-wide.

mod capacity;
pub mod emulator;
mod engine;
pub mod peak_snapshot;
pub mod prepared;
pub mod snapshot;
pub mod svg;
pub mod table;

pub use emulator::{Emulator, EmulatorError};
pub use prepared::{Prepared, Step};
pub use snapshot::SegmentMap;

use crate::config::Config;
use crate::core::DeviceAllocator;
use emulator::{DEFAULT_CAPACITY, DEVICE};
use engine::{Npu, Outcome, Passthrough, Quiet, Series};
use std::time::Duration;

/// What to replay a trace through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// npualloc with a config string (empty: the defaults).
    Npualloc { label: String, config: String },
    /// `aclrtMalloc`/`aclrtFree` for every request, no cache.
    Passthrough,
}

/// The config that gives PyTorch's policy.
pub const PYTORCH_POLICY: &str = "expandable_segments:false,reuse_cache_mb:0";

impl Target {
    /// npualloc as configured by `config`.
    pub fn npualloc(config: &str) -> Target {
        let label = if config.trim().is_empty() { "npualloc".to_string() } else { format!("npualloc[{config}]") };
        Target::Npualloc { label, config: config.to_string() }
    }

    /// npualloc with PyTorch's published policy: fixed segments, PyTorch's
    /// rounding and split rules, no exact-size reuse lists (PyTorch has none).
    pub fn pytorch_policy() -> Target {
        Target::Npualloc { label: "pytorch-policy".into(), config: PYTORCH_POLICY.into() }
    }

    pub fn label(&self) -> &str {
        match self {
            Target::Npualloc { label, .. } => label,
            Target::Passthrough => "passthrough",
        }
    }

    /// The config string, or a word for the passthrough.
    pub fn config_text(&self) -> &str {
        match self {
            Target::Npualloc { config, .. } => config,
            Target::Passthrough => "(no cache)",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Timed runs per configuration (the best is kept); at least 1.
    pub repeat: usize,
    pub min_capacity: bool,
    /// Keep reserved bytes after every step (for pictures).
    pub series: bool,
    /// Snapshot the first configuration's segments at its peak.
    pub segment_map: bool,
    /// Time a second pass over the trace on the same allocator, after a
    /// first pass and freeing what it left live: the steady state, with
    /// segments and pages already there.
    pub warm: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { repeat: 3, min_capacity: true, series: false, segment_map: false, warm: false }
    }
}

/// Counters of one configuration on one trace.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub peak_reserved: u64,
    pub device_mallocs: u64,
    pub device_frees: u64,
    pub maps: u64,
    pub unmaps: u64,
    pub physical_mallocs: u64,
    pub physical_frees: u64,
    /// Host syncs the allocator made (not the trace's `w` events).
    pub syncs: u64,
    /// aclrtRecordEvent and aclrtQueryEventStatus calls (the emulator counts
    /// them; 0 with one that cannot).
    pub event_records: u64,
    pub event_queries: u64,
    /// Calls of each ACL function a cost table may charge (`CHARGED`), as
    /// the emulator counted them in the observed run: the allocator's and
    /// the trace's own waits (`aclrtSynchronizeStream`). Empty with an
    /// emulator that cannot count.
    pub acl_calls: Vec<(&'static str, u64)>,
    /// Allocations that failed with out of memory at the default capacity.
    pub ooms: u64,
    /// Best timed run / steps.
    pub ns_per_op: f64,
    /// `None` when not asked for.
    pub min_capacity: Option<Result<u64, String>>,
    /// Reserved bytes after each step (with `Options::series`).
    pub reserved_series: Vec<u64>,
    pub segment_map: Option<SegmentMap>,
}

/// One row: a trace replayed through one configuration.
#[derive(Debug, Clone)]
pub struct Report {
    pub trace: String,
    pub target: Target,
    pub ops: usize,
    pub peak_requested: u64,
    /// An error when the configuration could not run the trace at all.
    pub result: Result<Measured, String>,
}

impl Report {
    /// peak reserved / peak requested.
    pub fn ratio(&self) -> Option<f64> {
        let m = self.result.as_ref().ok()?;
        (self.peak_requested > 0).then(|| m.peak_reserved as f64 / self.peak_requested as f64)
    }
}

/// Checks, before anything is replayed, that `target` can run at all: its
/// config parses and an allocator can be created with it on the emulator
/// (and is torn down at once). A `trace:PATH` key creates the file. Returns
/// the reason it cannot run.
pub fn check_target(emu: &Emulator, target: &Target) -> Result<(), String> {
    let Target::Npualloc { config, .. } = target else { return Ok(()) };
    let config = Config::parse(config).map_err(|e| e.to_string())?;
    let _ = emu.runtime().set_device(DEVICE);
    let alloc = DeviceAllocator::with_runtime(config, DEVICE, emu.runtime().clone()).map_err(|e| e.to_string())?;
    alloc.teardown().map(|_| ()).map_err(|e| format!("teardown: {e}"))
}

/// Replays `trace` through every target; `progress` hears which target (its
/// index in `targets`) is running and what it is doing.
pub fn replay_trace(
    emu: &Emulator,
    trace: &Prepared,
    targets: &[Target],
    opts: &Options,
    progress: &mut dyn FnMut(usize, &str),
) -> Vec<Report> {
    let _ = emu.runtime().set_device(DEVICE);
    let reports = targets
        .iter()
        .enumerate()
        .map(|(k, target)| {
            let mut say = |what: &str| progress(k, &format!("{} | {} | {what}", trace.name, target.label()));
            let result = measure(emu, trace, target, opts, opts.segment_map && k == 0, &mut say);
            Report {
                trace: trace.name.clone(),
                target: target.clone(),
                ops: trace.steps.len(),
                peak_requested: trace.peak_requested,
                result,
            }
        })
        .collect();
    let _ = emu.set_capacity(DEFAULT_CAPACITY);
    reports
}

/// Replays `steps` through `alloc` once, untimed (trace stream i is
/// `streams[i]`). `addrs[slot]` holds each slot's live address across calls,
/// so a trace can be replayed in parts with other work in between. Returns
/// the allocations that failed with out of memory (their frees are skipped).
pub fn replay_steps(
    alloc: &DeviceAllocator,
    steps: &[Step],
    streams: &[crate::runtime::Stream],
    addrs: &mut [usize],
) -> Result<u64, String> {
    engine::run(&mut Npu { alloc }, steps, streams, addrs, false, &mut Quiet).map(|o| o.ooms)
}

fn measure(
    emu: &Emulator,
    trace: &Prepared,
    target: &Target,
    opts: &Options,
    want_map: bool,
    say: &mut dyn FnMut(&str),
) -> Result<Measured, String> {
    let runner = Runner::new(emu, trace, target)?;
    say("observed run");
    let observed = runner.run(&Spec { series: opts.series || want_map, finish: true, ..Spec::default() })?;
    let mut m = observed.counters;
    m.ooms = observed.outcome.ooms;
    m.reserved_series = observed.series;
    if want_map && matches!(target, Target::Npualloc { .. }) {
        if let Some(peak) = m.reserved_series.iter().copied().max() {
            let step = m.reserved_series.iter().position(|&r| r == peak).unwrap_or(0);
            say("snapshot at peak");
            let snap = runner.run(&Spec { limit: Some(step + 1), snapshot: true, ..Spec::default() })?;
            m.segment_map = snap.snapshot.map(|s| snapshot::parse(&s, step)).transpose()?;
        }
    }
    if !opts.series {
        m.reserved_series = Vec::new();
    }
    let mut best = Duration::MAX;
    let mut executed = 0;
    for i in 0..opts.repeat.max(1) {
        say(&format!("timing {}/{}", i + 1, opts.repeat.max(1)));
        let r = runner.run(&Spec { warm: opts.warm, ..Spec::default() })?;
        if r.outcome.elapsed < best {
            best = r.outcome.elapsed;
            executed = r.outcome.executed;
        }
    }
    m.ns_per_op = if executed > 0 { best.as_nanos() as f64 / executed as f64 } else { 0.0 };
    if opts.min_capacity {
        m.min_capacity = Some(capacity::bisect(&runner, m.peak_reserved, say));
    }
    Ok(m)
}

/// One run's settings.
#[derive(Debug, Clone)]
struct Spec {
    capacity: u64,
    stop_on_oom: bool,
    /// Run only the first this-many steps.
    limit: Option<usize>,
    series: bool,
    snapshot: bool,
    /// Read the counters afterwards.
    finish: bool,
    /// Run the steps twice on one allocator (freeing what the first pass
    /// left live in between); report the second pass.
    warm: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            capacity: DEFAULT_CAPACITY,
            stop_on_oom: false,
            limit: None,
            series: false,
            snapshot: false,
            finish: false,
            warm: false,
        }
    }
}

struct RunResult {
    outcome: Outcome,
    series: Vec<u64>,
    counters: Measured,
    snapshot: Option<String>,
}

/// The event calls an observed run counts: records, then queries.
const COUNTED: [&std::ffi::CStr; 2] = [c"aclrtRecordEvent", c"aclrtQueryEventStatus"];

/// The calls an observed run counts for `Measured::acl_calls`: every one
/// the emulator's cost model (`ACLEMU_COST`) may charge in a replay, so a
/// cost table times these counts is what the run was charged.
const CHARGED: [&std::ffi::CStr; 12] = [
    c"aclrtMalloc",
    c"aclrtFree",
    c"aclrtMallocPhysical",
    c"aclrtFreePhysical",
    c"aclrtMapMem",
    c"aclrtUnmapMem",
    c"aclrtReserveMemAddress",
    c"aclrtReleaseMemAddress",
    c"aclrtGetMemInfo",
    c"aclrtSynchronizeStream",
    c"aclrtSynchronizeEvent",
    c"aclrtSynchronizeDevice",
];

/// A target bound to a trace, ready to run again and again.
struct Runner<'a> {
    emu: &'a Emulator,
    trace: &'a Prepared,
    config: Option<Config>,
}

impl<'a> Runner<'a> {
    fn new(emu: &'a Emulator, trace: &'a Prepared, target: &Target) -> Result<Self, String> {
        let config = match target {
            Target::Npualloc { config, .. } => Some(Config::parse(config).map_err(|e| e.to_string())?),
            Target::Passthrough => None,
        };
        Ok(Runner { emu, trace, config })
    }

    fn run(&self, spec: &Spec) -> Result<RunResult, String> {
        let emu = self.emu;
        emu.set_capacity(spec.capacity).map_err(|e| e.to_string())?;
        let streams = emu.create_streams(self.trace.streams).map_err(|e| e.to_string())?;
        let result = self.run_on(spec, &streams);
        emu.destroy_streams(&streams);
        result
    }

    fn run_on(&self, spec: &Spec, streams: &[crate::runtime::Stream]) -> Result<RunResult, String> {
        let steps = &self.trace.steps[..spec.limit.unwrap_or(self.trace.steps.len()).min(self.trace.steps.len())];
        let mut addrs = vec![0usize; self.trace.slots];
        let mut series = Series(Vec::new());
        if spec.series {
            series.0.reserve_exact(steps.len());
        }
        let rt = self.emu.runtime();
        match &self.config {
            Some(config) => {
                let alloc =
                    DeviceAllocator::with_runtime(config.clone(), DEVICE, rt.clone()).map_err(|e| e.to_string())?;
                let mut b = Npu { alloc: &alloc };
                // The allocator calls the runtime on this thread only.
                let calls_before = COUNTED.map(|name| self.emu.thread_calls(name));
                let charged_before = CHARGED.map(|name| self.emu.thread_calls(name));
                if spec.warm {
                    engine::run(&mut b, steps, streams, &mut addrs, spec.stop_on_oom, &mut Quiet)?;
                    for a in addrs.iter_mut().filter(|a| **a != 0) {
                        alloc.free(std::mem::take(a)).map_err(|e| e.to_string())?;
                    }
                }
                let outcome = if spec.series {
                    engine::run(&mut b, steps, streams, &mut addrs, spec.stop_on_oom, &mut series)
                } else {
                    engine::run(&mut b, steps, streams, &mut addrs, spec.stop_on_oom, &mut Quiet)
                };
                let calls_after = COUNTED.map(|name| self.emu.thread_calls(name));
                let [records, queries] = [0, 1].map(|i| match (calls_before[i], calls_after[i]) {
                    (Some(before), Some(after)) if spec.finish => Some(after - before),
                    _ => None,
                });
                let mut acl_calls = Vec::new();
                for (name, before) in CHARGED.into_iter().zip(charged_before) {
                    if let (true, Some(before), Some(after), Ok(name)) =
                        (spec.finish, before, self.emu.thread_calls(name), name.to_str())
                    {
                        acl_calls.push((name, after - before));
                    }
                }
                let mut counters = Measured::default();
                let mut snapshot = None;
                if outcome.is_ok() && (spec.finish || spec.snapshot) {
                    let s = alloc.stats().map_err(|e| e.to_string())?;
                    let json = alloc.snapshot_json().map_err(|e| e.to_string())?;
                    counters = Measured {
                        peak_reserved: s.reserved_bytes_peak,
                        device_mallocs: s.num_device_mallocs,
                        device_frees: s.num_device_frees,
                        maps: s.num_maps,
                        unmaps: s.num_unmaps,
                        // Read by name: builds without physical pages lack them.
                        physical_mallocs: snapshot::stat(&json, "num_physical_mallocs"),
                        physical_frees: snapshot::stat(&json, "num_physical_frees"),
                        syncs: s.num_syncs,
                        event_records: records.unwrap_or(0),
                        event_queries: queries.unwrap_or(0),
                        acl_calls,
                        ..Measured::default()
                    };
                    if spec.snapshot {
                        snapshot = Some(json);
                    }
                }
                let torn = alloc.teardown();
                let outcome = outcome?;
                torn.map_err(|e| format!("teardown: {e}"))?;
                Ok(RunResult { outcome, series: series.0, counters, snapshot })
            }
            None => {
                let mut b = Passthrough { rt, emu: self.emu, track_peak: spec.finish, peak: 0, mallocs: 0, frees: 0 };
                if spec.warm {
                    engine::run(&mut b, steps, streams, &mut addrs, spec.stop_on_oom, &mut Quiet)?;
                    for a in addrs.iter_mut().filter(|a| **a != 0) {
                        let _ = rt.free(std::mem::take(a));
                    }
                }
                let outcome = if spec.series {
                    engine::run(&mut b, steps, streams, &mut addrs, spec.stop_on_oom, &mut series)
                } else {
                    engine::run(&mut b, steps, streams, &mut addrs, spec.stop_on_oom, &mut Quiet)
                };
                let counters = Measured {
                    peak_reserved: b.peak,
                    device_mallocs: b.mallocs,
                    device_frees: b.frees,
                    ..Measured::default()
                };
                // What the trace leaves live, returned outside the timed loop.
                for &a in addrs.iter().filter(|&&a| a != 0) {
                    let _ = rt.free(a);
                }
                Ok(RunResult { outcome: outcome?, series: series.0, counters, snapshot: None })
            }
        }
    }
}
