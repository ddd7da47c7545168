//! Fault sweep: a realistic scenario replayed with one ACL call failing at a
//! time, for every ACL function the allocator calls and every (or, past the
//! first few hundred, evenly sampled) position of that call in the scenario.
//!
//! The scenario: the first 600 events of `traces/resnet-like-infer.trace.gz`
//! (frees and uses of ids allocated past the cut dropped), replayed through
//! the C API on two streams (allocation stream by id parity), every fifth
//! block also used on the other stream (`npualloc_record_stream`), the second
//! stream held so those frees stay pending, `npualloc_empty_cache` every 150
//! events; with fixed segments, with expandable segments, with expandable
//! segments and `reserved_headroom`, and with 20 MiB pages. Allocations go
//! through `npualloc_malloc`, or (every third id) through the desc's alloc
//! callback on a binding of their stream. Each run creates its allocator
//! with the fault already armed, so creation is swept too.
//!
//! Around every refused allocation, the emulator's usage is read before and
//! after: a refused request leaves malloc'd, physical and mapped bytes,
//! reserved ranges and events unchanged (nothing changes on failure), or
//! lower where it gave cached memory back first, each block and handle
//! that went counted as freed by the allocator (`changed_usage`), unless the fault hit a call that gives memory back (`aclrtFree`,
//! `aclrtFreePhysical`, `aclrtUnmapMem`) during that very request, when what
//! could not go back stays with the allocator. (The pluggable entry point, whose allocators
//! live for the process, is checked in `tests/refused_request.rs`.)
//!
//! After each run, with the fault disarmed: every refused call returned a
//! documented status (OUT_OF_MEMORY or RUNTIME, nothing else); the blocks the
//! scenario holds are intact (query reports each, none overlap) and the stats
//! agree with them; the allocator still serves fresh requests and frees; and
//! after destroy the emulator reports no live memory, physical handles,
//! mappings, reserved ranges or events.
//!
//! How many calls the scenario makes of each function is measured first, by
//! arming every function at a count never reached and reading back what is
//! left (`aclemu_fault_pending`); each sweep run then checks through the same
//! control whether its fault actually fired.
//!
//! The emulator's faults are process-wide: this binary holds this one test.

mod common;

use common::{create, destroy, empty_cache, emu, free, malloc, query, record_stream, stats, Emu, Handle, Usage};
use npualloc::ffi::desc::{npualloc_binding_create, npualloc_binding_destroy, npualloc_desc_alloc};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::stats::npualloc_stats;
use npualloc::runtime::Stream;
use npualloc_tools::trace::{parse_file, Op};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::path::Path;
use std::time::Instant;

/// This binary's own device, away from the ones other tests use.
const DEVICE: i32 = 5;
/// Trace events replayed.
const EVENTS: usize = 600;
/// Every call position up to this one is tried; past it, `SAMPLES` evenly
/// spaced ones. The optimised build (run by scripts/test.sh) covers every
/// position up to 200; the debug build checks the core's invariants after
/// every transition, so a run costs ~0.2 s there and it samples more thinly.
const DENSE: i32 = if cfg!(debug_assertions) { 12 } else { 200 };
const SAMPLES: i32 = if cfg!(debug_assertions) { 8 } else { 40 };

/// Every ACL function the allocator may call while it serves the scenario.
const FUNCTIONS: &[&str] = &[
    "aclrtMalloc",
    "aclrtFree",
    "aclrtMallocPhysical",
    "aclrtFreePhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtRecordEvent",
    "aclrtCreateEventWithFlag",
    "aclrtCreateEvent",
    "aclrtQueryEventStatus",
    "aclrtSynchronizeStream",
    "aclrtSynchronizeEvent",
    "aclrtDestroyEvent",
    "aclrtGetMemInfo",
    "aclrtSetDevice",
    "aclrtGetDevice",
    "aclrtMemGetAllocationGranularity",
    "aclrtStreamQuery",
    "aclrtResetDevice",
    "aclrtGetCurrentContext",
    "aclrtSetCurrentContext",
    "aclrtGetStreamOverflowSwitch",
];

/// The first `EVENTS` events, with frees and uses of ids allocated past the cut dropped.
fn scenario_ops() -> Vec<Op> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/resnet-like-infer.trace.gz");
    let trace = parse_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let head = &trace.ops[..EVENTS.min(trace.ops.len())];
    let allocated: HashSet<u64> = head
        .iter()
        .filter_map(|op| match *op {
            Op::Alloc { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    head.iter()
        .filter(|op| match **op {
            Op::Free { id } | Op::Use { id, .. } => allocated.contains(&id),
            _ => true,
        })
        .copied()
        .collect()
}

/// What one run saw.
#[derive(Default)]
struct Run {
    /// The armed fault was reached (or, for the counting run: never).
    fired: bool,
    /// Calls the allocator refused (all with a documented status, or a problem is recorded).
    refused: usize,
    problems: Vec<String>,
}

fn documented(st: npualloc_status) -> bool {
    matches!(st, NPUALLOC_ERR_OUT_OF_MEMORY | NPUALLOC_ERR_RUNTIME)
}

/// ACL functions that give memory back: when one of them is refused, what
/// it should have released stays held.
const GIVING_BACK: &[&str] = &["aclrtFree", "aclrtFreePhysical", "aclrtUnmapMem"];

/// Why a refused allocation changed what the device holds, if it did. A
/// refused request leaves malloc'd, physical and mapped bytes, reserved
/// ranges and events as it found them, with one exception: it may have
/// given cached memory back before it was refused (its out-of-memory
/// ladder, or `reserved_headroom` trimming handles no placement can use).
/// Then what the device holds may be lower, never higher, and every block
/// and handle that went is one the allocator counts as freed: the change of
/// the device's live aclrtMalloc blocks and physical handles equals the
/// change of the allocator's device mallocs less frees, and of its physical
/// mallocs less frees.
fn changed_usage(
    before: &Usage,
    after: &Usage,
    stats_before: &npualloc_stats,
    stats_after: &npualloc_stats,
) -> Option<String> {
    let key = |u: &Usage| [u.malloc_bytes, u.physical_bytes, u.mapped_bytes, u.reserved_ranges, u.events];
    let (b, a) = (key(before), key(after));
    let net = |s: &npualloc_stats| {
        [
            s.num_device_mallocs as i64 - s.num_device_frees as i64,
            s.num_physical_mallocs as i64 - s.num_physical_frees as i64,
        ]
    };
    let (nb, na) = (net(stats_before), net(stats_after));
    let device_change = [
        after.malloc_count as i64 - before.malloc_count as i64,
        after.physical_count as i64 - before.physical_count as i64,
    ];
    let counted = device_change == [na[0] - nb[0], na[1] - nb[1]];
    let fine = a == b || (a.iter().zip(&b).all(|(a, b)| a <= b) && a[3] == b[3] && counted);
    (!fine).then(|| {
        format!(
            "before {before:?}, after {after:?}; the allocator's net device mallocs and physical mallocs moved by \
             {:?}",
            [na[0] - nb[0], na[1] - nb[1]]
        )
    })
}

/// Bindings (the desc's `obj`) of an allocator's two streams.
struct Bindings([*mut c_void; 2]);

impl Bindings {
    fn new(a: Handle, streams: [Stream; 2]) -> Result<Self, (npualloc_status, String)> {
        let mut made = Bindings([std::ptr::null_mut(); 2]);
        for (b, s) in made.0.iter_mut().zip(streams) {
            // SAFETY: a live handle and a valid out-pointer.
            match unsafe { npualloc_binding_create(a, s.raw(), b) } {
                NPUALLOC_OK => {}
                // `made` destroys the one made (destroying NULL is a no-op).
                st => return Err((st, last_error_message())),
            }
        }
        Ok(made)
    }

    /// The desc's alloc callback on stream `i`'s binding; a refusal's
    /// status is read from its message (the callback returns only NULL).
    fn alloc(&self, i: usize, size: usize) -> Result<usize, (npualloc_status, String)> {
        // SAFETY: a live binding.
        let p = unsafe { npualloc_desc_alloc(self.0[i], size) };
        if !p.is_null() {
            return Ok(p as usize);
        }
        let msg = last_error_message();
        let st = if msg.starts_with("out of memory:") {
            NPUALLOC_ERR_OUT_OF_MEMORY
        } else if msg.contains(" failed with ") {
            NPUALLOC_ERR_RUNTIME
        } else {
            NPUALLOC_ERR_INTERNAL
        };
        Err((st, msg))
    }
}

impl Drop for Bindings {
    fn drop(&mut self) {
        for b in self.0 {
            // SAFETY: made by npualloc_binding_create, destroyed once, before the allocator.
            assert_eq!(unsafe { npualloc_binding_destroy(b) }, NPUALLOC_OK);
        }
    }
}

struct Sweep<'a> {
    emu: &'a Emu,
    ops: &'a [Op],
    config: &'a str,
    streams: [Stream; 2],
}

impl Sweep<'_> {
    /// One run with `arm` applied right before the allocator is created;
    /// `armed` names the function it arms ("" for none).
    fn run(&self, label: &str, armed: &str, arm: &dyn Fn(), disarm: &dyn Fn() -> bool) -> Run {
        let emu = self.emu;
        let [s0, s1] = self.streams;
        let mut run = Run::default();
        let problem = |run: &mut Run, what: String| run.problems.push(format!("{label}: {what}"));
        let before = emu.usage(DEVICE);
        assert!(
            before.malloc_count == 0 && before.physical_count == 0 && before.events == 0,
            "{label}: dirty start {before:?}"
        );
        emu.hold(s1);
        arm();
        let a = match create(self.config, DEVICE) {
            Ok(a) => Some(a),
            Err((st, msg)) => {
                run.refused += 1;
                if !documented(st) {
                    problem(&mut run, format!("create returned {st:?}: {msg}"));
                }
                None
            }
        };
        let mut live: HashMap<u64, (usize, u64)> = HashMap::new();
        let bindings = match a.map(|a| Bindings::new(a, self.streams)) {
            Some(Ok(b)) => Some(b),
            Some(Err((st, msg))) => {
                run.refused += 1;
                if !documented(st) {
                    problem(&mut run, format!("binding_create returned {st:?}: {msg}"));
                }
                None
            }
            None => None,
        };
        if let (Some(a), Some(bindings)) = (a, &bindings) {
            for (i, op) in self.ops.iter().enumerate() {
                match *op {
                    Op::Alloc { id, bytes, .. } => {
                        let (own, other) = if id % 2 == 0 { (s0, s1) } else { (s1, s0) };
                        let before = emu.usage(DEVICE);
                        let stats_before = stats(a);
                        let pending = if armed.is_empty() { 0 } else { emu.fault_pending(armed) };
                        let result = if id % 3 == 1 {
                            bindings.alloc((id % 2) as usize, bytes as usize)
                        } else {
                            malloc(a, bytes as usize, own)
                        };
                        if result.is_err() {
                            let fired_now = pending > 0 && emu.fault_pending(armed) == 0;
                            let exempt = fired_now && GIVING_BACK.contains(&armed);
                            let after = emu.usage(DEVICE);
                            if let Some(changed) =
                                changed_usage(&before, &after, &stats_before, &stats(a)).filter(|_| !exempt)
                            {
                                problem(
                                    &mut run,
                                    format!(
                                        "refused malloc({bytes}) for id {id} changed the device's usage: {changed}"
                                    ),
                                );
                            }
                        }
                        match result {
                            Ok(p) => {
                                live.insert(id, (p, bytes));
                                if id % 5 == 0 {
                                    let st = record_stream(a, p, other);
                                    if st != NPUALLOC_OK {
                                        run.refused += 1;
                                        if !documented(st) {
                                            problem(&mut run, format!("record_stream(id {id}) returned {st:?}"));
                                        }
                                    }
                                }
                            }
                            Err((st, msg)) => {
                                run.refused += 1;
                                if !documented(st) {
                                    problem(&mut run, format!("malloc({bytes}) for id {id} returned {st:?}: {msg}"));
                                }
                            }
                        }
                    }
                    Op::Free { id } => {
                        if let Some(&(p, _)) = live.get(&id) {
                            match free(a, p) {
                                NPUALLOC_OK => {
                                    live.remove(&id);
                                }
                                st => {
                                    run.refused += 1;
                                    if !documented(st) {
                                        problem(&mut run, format!("free(id {id}) returned {st:?}"));
                                    }
                                }
                            }
                        }
                    }
                    Op::Use { id, stream } => {
                        if let Some(&(p, _)) = live.get(&id) {
                            let st = record_stream(a, p, self.streams[stream as usize % 2]);
                            if st != NPUALLOC_OK {
                                run.refused += 1;
                                if !documented(st) {
                                    problem(&mut run, format!("record_stream(id {id}) returned {st:?}"));
                                }
                            }
                        }
                    }
                    Op::Wait { .. } => {}
                }
                if i % 150 == 149 {
                    let st = empty_cache(a);
                    if st != NPUALLOC_OK {
                        run.refused += 1;
                        if !documented(st) {
                            problem(&mut run, format!("empty_cache after event {i} returned {st:?}"));
                        }
                    }
                }
            }
        }
        run.fired = disarm();
        drop(bindings);
        emu.release(s1);

        // The fault is gone: whatever the allocator kept must be intact and usable.
        let a = match a {
            Some(a) => a,
            None => match create(self.config, DEVICE) {
                Ok(a) => a,
                Err((st, msg)) => {
                    problem(&mut run, format!("create after the fault cleared returned {st:?}: {msg}"));
                    return run;
                }
            },
        };
        let mut blocks: Vec<(usize, u64, u64)> = Vec::new();
        for (&id, &(p, bytes)) in &live {
            match query(a, p) {
                Ok(info) if info.addr == p as u64 && info.requested == bytes && info.size >= bytes => {
                    blocks.push((p, info.size, bytes))
                }
                Ok(info) => problem(&mut run, format!("id {id} at {p:#x} ({bytes} bytes) queries as {info:?}")),
                Err(st) => problem(&mut run, format!("id {id} at {p:#x} is live but query returned {st:?}")),
            }
        }
        blocks.sort_unstable();
        for w in blocks.windows(2) {
            if w[0].0 as u64 + w[0].1 > w[1].0 as u64 {
                problem(&mut run, format!("blocks overlap: {:#x}+{} and {:#x}", w[0].0, w[0].1, w[1].0));
            }
        }
        let s = stats(a);
        let (sizes, requested): (u64, u64) = blocks.iter().fold((0, 0), |(x, y), b| (x + b.1, y + b.2));
        if (s.active_blocks, s.allocated_bytes, s.requested_bytes) != (live.len() as u64, sizes, requested)
            || s.reserved_bytes < s.allocated_bytes
            || s.num_allocs - s.num_frees != live.len() as u64
        {
            problem(
                &mut run,
                format!(
                    "stats disagree with the {} live blocks ({sizes} bytes, {requested} requested): {s:?}",
                    live.len()
                ),
            );
        }
        for (size, stream) in [(4usize << 20, s0), (1000, s1), (24 << 20, s0)] {
            match malloc(a, size, stream) {
                Ok(p) => {
                    if free(a, p) != NPUALLOC_OK {
                        problem(&mut run, format!("free of a fresh {size}-byte block failed"));
                    }
                }
                Err((st, msg)) => {
                    problem(&mut run, format!("fresh malloc({size}) after the fault returned {st:?}: {msg}"))
                }
            }
        }
        for (_, (p, _)) in live.drain() {
            if free(a, p) != NPUALLOC_OK {
                problem(&mut run, format!("free of {p:#x} after the fault failed"));
            }
        }
        if empty_cache(a) != NPUALLOC_OK {
            problem(&mut run, "empty_cache after the fault failed".into());
        }
        let s = stats(a);
        if (s.active_blocks, s.allocated_bytes, s.reserved_bytes) != (0, 0, 0) {
            problem(&mut run, format!("after freeing everything and emptying the cache: {s:?}"));
        }
        let st = destroy(a);
        if st != NPUALLOC_OK {
            problem(&mut run, format!("destroy returned {st:?}"));
        }
        let u = emu.usage(DEVICE);
        let kept =
            (u.malloc_bytes, u.malloc_count, u.physical_count, u.mapped_bytes, u.reserved_ranges, u.events, u.descs);
        if kept != (0, 0, 0, 0, 0, 0, 0) || u.streams != 2 {
            problem(&mut run, format!("emulator still holds resources after destroy: {u:?}"));
        }
        run
    }
}

/// The call positions tried for a function the scenario calls `n` times:
/// every one up to `DENSE`, evenly spaced ones past it, and `n + 1` (which
/// must not fire: it checks the count).
fn positions(n: i32) -> Vec<i32> {
    let mut ks: Vec<i32> = (1..=n.min(DENSE)).collect();
    if n > DENSE {
        let span = n - DENSE;
        for i in 1..=SAMPLES {
            let k = DENSE + (span as i64 * i as i64 / SAMPLES as i64) as i32;
            if ks.last() != Some(&k) {
                ks.push(k);
            }
        }
    }
    ks.push(n + 1);
    ks
}

#[test]
fn every_injected_fault_is_refused_cleanly_and_leaves_nothing_behind() {
    let started = Instant::now();
    let emu = emu();
    emu.set_capacity(DEVICE, 1 << 30);
    let ops = scenario_ops();
    assert!(ops.len() > 500, "the trace is shorter than expected: {} events", ops.len());
    emu.rt.set_device(DEVICE).expect("select the sweep's device");
    let streams = [emu.create_stream(DEVICE), emu.create_stream(DEVICE)];

    let mut problems: Vec<String> = Vec::new();
    let (mut runs, mut injected, mut refused) = (0usize, 0usize, 0usize);
    let mut table = Vec::new();
    for config in [
        "expandable_segments:false",
        "expandable_segments:true",
        "expandable_segments:true,reserved_headroom:0.05",
        "expandable_segments:true,page_size:20m",
    ] {
        let sweep = Sweep { emu, ops: &ops, config, streams };

        // The counting run: every function armed at a call it never reaches,
        // read back (and disarmed) when the scenario ends.
        const FAR: i32 = i32::MAX;
        let counts = std::cell::RefCell::new(Vec::new());
        let counting = sweep.run(
            &format!("{config}, counting run"),
            "",
            &|| FUNCTIONS.iter().for_each(|f| emu.fail_nth(f, FAR)),
            &|| {
                let left: Vec<i32> = FUNCTIONS.iter().map(|f| emu.fault_pending(f)).collect();
                FUNCTIONS.iter().for_each(|f| emu.fail_nth(f, 0));
                *counts.borrow_mut() = left.iter().map(|&n| FAR - n).collect();
                left.contains(&0)
            },
        );
        let counts = counts.into_inner();
        runs += 1;
        assert!(!counting.fired, "{config}: a count of {FAR} calls was reached");
        assert_eq!(counting.refused, 0, "{config}: the scenario fails without faults: {:?}", counting.problems);
        assert!(counting.problems.is_empty(), "{config}: {:#?}", counting.problems);

        for (f, &n) in FUNCTIONS.iter().zip(&counts) {
            let mut fired_here = 0;
            let mut tried = 0;
            for k in positions(n) {
                let label = format!("{config}, {f} failing at call {k} of {n}");
                let run = sweep.run(&label, f, &|| emu.fail_nth(f, k), &|| {
                    let fired = emu.fault_pending(f) == 0;
                    emu.fail_nth(f, 0);
                    fired
                });
                runs += 1;
                tried += 1;
                refused += run.refused;
                if run.fired {
                    fired_here += 1;
                    injected += 1;
                }
                if run.fired != (k <= n) {
                    problems.push(format!("{label}: the fault {} fire", if run.fired { "did" } else { "did not" }));
                }
                problems.extend(run.problems);
                if !run.fired {
                    break;
                }
            }
            table.push(format!("  {config:<48} {f:<34} calls {n:>5}  runs {tried:>4}  fired {fired_here:>4}"));
        }
    }
    for s in streams {
        emu.destroy_stream(DEVICE, s);
    }
    assert!(emu.usage(DEVICE).is_clean(), "{:?}", emu.usage(DEVICE));

    eprintln!("fault sweep over {} trace events:", ops.len());
    for line in &table {
        eprintln!("{line}");
    }
    eprintln!(
        "fault sweep: {runs} runs, {injected} faults injected, {refused} calls refused, {} problems, {:.1} s",
        problems.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}
