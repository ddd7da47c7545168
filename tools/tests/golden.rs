//! Golden figures: every bundled trace (`traces/**/*.trace.gz`) replayed
//! through npualloc's defaults, its fixed-segment mode and PyTorch's policy
//! on the emulator, and the figures a replay decides alone (peak reserved,
//! min capacity, device and physical calls, maps, syncs, event calls, OOMs)
//! compared exactly with `golden/traces.txt`. Each trace is replayed twice
//! and must give the same figures both times.
//!
//! A change that moves a figure on purpose rewrites the file with
//! `scripts/bless-golden.sh` (`NPUALLOC_BLESS=1`, optimised build), in a
//! commit that says why. A debug build replays only the traces of fewer
//! than `DEBUG_OPS` steps; `scripts/test.sh` runs this test optimised too,
//! where every trace is replayed. The figures hold for the emulator's
//! default alignment (`ACLEMU_MALLOC_ALIGN` unset).

mod common;

use common::{load_emulator, repo_file};
use npualloc_tools::replay::{replay_trace, Measured, Options, Prepared, Report, Target};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const GOLDEN: &str = "tools/tests/golden/traces.txt";

/// Traces of more steps are replayed only by an optimised build.
const DEBUG_OPS: usize = 5_000;

fn targets() -> Vec<Target> {
    vec![Target::npualloc(""), Target::npualloc("expandable_segments:false"), Target::pytorch_policy()]
}

/// Every `.trace.gz` under `dir`, as paths relative to `traces/`.
fn bundled(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            bundled(root, &path, out);
        } else if path.to_string_lossy().ends_with(".trace.gz") {
            out.push(path.strip_prefix(root).expect("under traces/").to_string_lossy().into_owned());
        }
    }
}

/// One row of the golden file: `trace label key=value...`.
fn row(trace: &str, report: &Report) -> String {
    let m: &Measured = report.result.as_ref().unwrap_or_else(|e| panic!("{trace} | {}: {e}", report.target.label()));
    let min_capacity = match &m.min_capacity {
        Some(Ok(bytes)) => bytes.to_string(),
        Some(Err(_)) => "none".to_string(),
        None => unreachable!("min capacity is asked for"),
    };
    format!(
        "{trace} {} ops={} peak_requested={} peak_reserved={} min_capacity={min_capacity} \
         device_mallocs={} device_frees={} physical_mallocs={} physical_frees={} maps={} unmaps={} \
         syncs={} event_records={} event_queries={} ooms={}",
        report.target.label(),
        report.ops,
        report.peak_requested,
        m.peak_reserved,
        m.device_mallocs,
        m.device_frees,
        m.physical_mallocs,
        m.physical_frees,
        m.maps,
        m.unmaps,
        m.syncs,
        m.event_records,
        m.event_queries,
        m.ooms,
    )
}

/// The golden rows by (trace, label).
fn read_golden(path: &Path) -> BTreeMap<(String, String), String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e} (scripts/bless-golden.sh writes it)", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace();
            let key = (words.next().unwrap_or_default().to_string(), words.next().unwrap_or_default().to_string());
            (key, l.to_string())
        })
        .collect()
}

fn blessing() -> bool {
    std::env::var("NPUALLOC_BLESS").is_ok_and(|v| v == "1")
}

#[test]
fn every_bundled_trace_replays_to_its_golden_figures() {
    if let Ok(align) = std::env::var("ACLEMU_MALLOC_ALIGN") {
        panic!("ACLEMU_MALLOC_ALIGN={align}: the golden figures hold for the emulator's default alignment; unset it");
    }
    assert!(
        !(blessing() && cfg!(debug_assertions)),
        "bless with an optimised build (scripts/bless-golden.sh), which replays every trace"
    );
    let root = repo_file("traces");
    let mut names = Vec::new();
    bundled(&root, &root, &mut names);
    names.sort();
    assert!(names.len() >= 8, "expected the bundled traces under {}, found {names:?}", root.display());

    let emu = load_emulator();
    let opts = Options { repeat: 1, min_capacity: true, series: false, segment_map: false, warm: false };
    let mut rows = BTreeMap::new();
    let mut replayed = Vec::new();
    for name in &names {
        let trace = npualloc_tools::trace::parse_file(&root.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let prepared = Prepared::new(name, &trace);
        if cfg!(debug_assertions) && prepared.steps.len() >= DEBUG_OPS {
            continue;
        }
        let run = || -> Vec<String> {
            replay_trace(&emu, &prepared, &targets(), &opts, &mut |_, _| {}).iter().map(|r| row(name, r)).collect()
        };
        let (first, second) = (run(), run());
        assert_eq!(first, second, "{name}: two replays of the same trace gave different figures");
        for (target, line) in targets().iter().zip(first) {
            rows.insert((name.clone(), target.label().to_string()), line);
        }
        replayed.push(name.clone());
    }

    let path: PathBuf = repo_file(GOLDEN);
    if blessing() {
        let mut text = String::from(
            "# Golden figures of every bundled trace (tools/tests/golden.rs); sizes in bytes.\n\
             # Rewritten only by scripts/bless-golden.sh, in a commit that says why they moved.\n",
        );
        for line in rows.values() {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        eprintln!("golden: wrote {} rows to {}", rows.len(), path.display());
        return;
    }

    let golden = read_golden(&path);
    let golden_traces: std::collections::BTreeSet<&String> = golden.keys().map(|(t, _)| t).collect();
    let bundled_traces: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(
        golden_traces, bundled_traces,
        "{GOLDEN} and traces/ name different traces; a trace added or removed is blessed on purpose"
    );
    let mut differ = Vec::new();
    for (key, line) in &rows {
        match golden.get(key) {
            Some(want) if want == line => {}
            Some(want) => differ.push(format!("  golden: {want}\n  now:    {line}")),
            None => differ.push(format!("  golden: (no row)\n  now:    {line}")),
        }
    }
    for key in golden.keys().filter(|(t, _)| replayed.contains(t)) {
        if !rows.contains_key(key) {
            differ.push(format!("  golden row {key:?} was not replayed (a configuration removed?)"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} replayed rows moved from {GOLDEN}; if on purpose, run scripts/bless-golden.sh and say why \
         in the commit:\n{}",
        differ.len(),
        rows.len(),
        differ.join("\n")
    );
}
