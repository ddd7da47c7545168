//! Traces and their replay, end to end on the emulator's `libascendcl.so`
//! (built by `cargo build --workspace`): a live allocator records a trace
//! that parses back to what it served, the parser rejects malformed lines,
//! a small trace replays to hand-computed answers, the SVG is well-formed,
//! and the `npualloc-replay` tool fails clearly on bad input.

mod common;

use common::{emulator_path, repo_file};
use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use npualloc_tools::replay::svg::{self, Figure};
use npualloc_tools::replay::{replay_trace, Emulator, Options, Prepared, Report, Target};
use npualloc_tools::trace::{parse_file, LineError, Op};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// The emulator is process-wide (capacity, devices): one test at a time.
fn emulator() -> (MutexGuard<'static, ()>, Emulator) {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let emu = common::load_emulator();
    (guard, emu)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npualloc-trace-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The emulator's charge for an aclrtMalloc (docs/acl-api.md §5):
/// round up to 32, then add 32.
fn padded(bytes: u64) -> u64 {
    bytes.div_ceil(32) * 32 + 32
}

fn quick() -> Options {
    Options { repeat: 1, min_capacity: false, series: false, segment_map: false, warm: false }
}

fn measured(r: &Report) -> &npualloc_tools::replay::Measured {
    r.result.as_ref().unwrap_or_else(|e| panic!("{} failed: {e}", r.target.label()))
}

#[test]
fn recorded_trace_parses_back_and_replays_to_the_same_peak() {
    let (_g, emu) = emulator();
    let path = scratch("recorded.trace");
    let config = Config::parse(&format!("trace:{}", path.display())).unwrap();
    let a = DeviceAllocator::with_runtime(config, 0, emu.runtime().clone()).unwrap();
    let s = emu.create_streams(2).unwrap();
    let (s1, s2) = (s[0], s[1]);

    let a0 = a.malloc(1000, s1).unwrap();
    let a1 = a.malloc(3 << 20, s2).unwrap();
    let a2 = a.malloc(512, s1).unwrap();
    a.record_stream(a1, s1).unwrap();
    a.free(a0).unwrap();
    // Failed calls are not recorded.
    assert!(a.free(a0).is_err());
    assert!(a.malloc(0, s1).is_err());
    let _a3 = a.malloc(20 << 20, s2).unwrap();
    a.free(a2).unwrap();
    let _a4 = a.malloc(1000, s1).unwrap(); // may reuse a0's address: a new id all the same
    a.free(a1).unwrap();
    a.flush_trace().unwrap();
    let peak_in_allocator = a.stats().unwrap().requested_bytes_peak;
    a.teardown().unwrap();
    emu.destroy_streams(&s);

    let trace = parse_file(&path).unwrap();
    assert!(trace.source().unwrap().starts_with("npualloc "), "{:?}", trace.source());
    assert_eq!(
        trace.ops,
        vec![
            Op::Alloc { id: 0, bytes: 1000, stream: 0 },
            Op::Alloc { id: 1, bytes: 3 << 20, stream: 1 },
            Op::Alloc { id: 2, bytes: 512, stream: 0 },
            Op::Use { id: 1, stream: 0 },
            Op::Free { id: 0 },
            Op::Alloc { id: 3, bytes: 20 << 20, stream: 1 },
            Op::Free { id: 2 },
            Op::Alloc { id: 4, bytes: 1000, stream: 0 },
            Op::Free { id: 1 },
        ]
    );
    let expected_peak = (3 << 20) + (20 << 20) + 1000;
    assert_eq!(trace.peak_requested(), expected_peak);
    // The allocator's peak over two streams is the highest total seen when
    // a stream set a new high of its own: stream 1's 23 MiB next to stream
    // 0's 512 B; a4 (1000 B) did not raise stream 0's high (1512 B), so
    // the peak it made with stream 1 is not seen (Note [peaks without a
    // shared counter]).
    assert_eq!(peak_in_allocator, (3 << 20) + (20 << 20) + 512);

    let prepared = Prepared::new("recorded.trace", &trace);
    let reports = replay_trace(&emu, &prepared, &[Target::npualloc(""), Target::Passthrough], &quick(), &mut |_, _| {});
    for r in &reports {
        assert_eq!(r.peak_requested, expected_peak);
        assert_eq!(measured(r).ooms, 0);
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn uncreatable_trace_file_is_a_config_error() {
    let (_g, emu) = emulator();
    let config = Config::parse("trace:/nonexistent-dir/x.trace").unwrap();
    let e = DeviceAllocator::with_runtime(config, 0, emu.runtime().clone()).unwrap_err();
    assert!(matches!(&e, npualloc::error::Error::BadConfig { key, .. } if key == "trace"), "{e}");
}

#[test]
fn parser_rejects_malformed_lines_with_the_line_number() {
    let cases: [(&str, usize, LineError); 6] = [
        ("a 0 10 0\nz 1\n", 3, LineError::UnknownOp("z".into())),
        ("a 0 10 0\nf 9\n", 3, LineError::UnknownId { op: 'f', id: 9 }),
        ("a 0 10 0\nf 0\na 0 10 0\n", 4, LineError::ReusedId(0)),
        ("a 0 10 0\na 1 0 0\n", 3, LineError::ZeroSize(1)),
        ("a 0 10 0\nu 0\n", 3, LineError::FieldCount { op: 'u', expected: 2, found: 1 }),
        ("a 0 ten 0\n", 2, LineError::NotANumber { field: "size", value: "ten".into() }),
    ];
    for (i, (body, line, error)) in cases.into_iter().enumerate() {
        let path = scratch(&format!("bad{i}.trace"));
        std::fs::write(&path, format!("# acl-trace v1\n{body}")).unwrap();
        let e = parse_file(&path).unwrap_err();
        assert_eq!((e.line(), e.line_error()), (Some(line), Some(&error)), "case {i}: {e}");
        assert!(e.to_string().contains(&format!("bad{i}.trace:{line}: ")), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}

/// Ten steps on two streams; the answers are worked out by hand below.
const SYNTHETIC: &str = "# acl-trace v1
# source: hand-written test
a 0 1000 0
a 1 4096 0
a 2 100 1
f 0
a 3 3000000 0
u 3 1
f 2
w 1
a 4 50 1
f 1
";

fn synthetic() -> Prepared {
    let path = scratch("synthetic.trace");
    std::fs::write(&path, SYNTHETIC).unwrap();
    let t = parse_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    Prepared::new("synthetic.trace", &t)
}

#[test]
fn synthetic_trace_replays_to_known_answers() {
    let (_g, emu) = emulator();
    let p = synthetic();
    assert_eq!(p.steps.len(), 10);
    // Live after a 3: 4096 + 100 + 3000000 (1000 was freed just before).
    assert_eq!(p.peak_requested, 4096 + 100 + 3_000_000);
    let opts = Options { repeat: 2, min_capacity: true, series: true, segment_map: false, warm: false };
    let reports = replay_trace(&emu, &p, &[Target::npualloc(""), Target::Passthrough], &opts, &mut |_, _| {});
    assert_eq!(reports.len(), 2);

    // The passthrough holds exactly the padded live sizes; its peak is at the same step.
    let pass = measured(&reports[1]);
    let pass_peak = padded(4096) + padded(100) + padded(3_000_000);
    assert_eq!(pass.peak_reserved, pass_peak);
    assert_eq!((pass.device_mallocs, pass.device_frees, pass.ooms), (5, 3, 0));
    assert_eq!(pass.reserved_series.len(), 10);
    assert_eq!(pass.reserved_series.iter().copied().max(), Some(pass_peak));
    let cap = pass.min_capacity.clone().unwrap().unwrap();
    assert!((pass_peak..=pass_peak + (1 << 20)).contains(&cap), "min capacity {cap} vs {pass_peak}");

    let npu = measured(&reports[0]);
    assert!(npu.peak_reserved >= p.peak_requested);
    assert_eq!(npu.ooms, 0);
    assert!(npu.ns_per_op > 0.0);
    let cap = npu.min_capacity.clone().unwrap().unwrap();
    assert!(cap > p.peak_requested, "min capacity {cap}");
    assert!(reports[0].ratio().unwrap() >= 1.0);
}

#[test]
fn a_warm_pass_frees_what_the_first_left_live_and_leaks_nothing() {
    let (_g, emu) = emulator();
    let p = synthetic();
    let before = emu.usage();
    let opts = Options { repeat: 2, warm: true, ..quick() };
    let targets = [Target::npualloc(""), Target::npualloc("expandable_segments:false"), Target::Passthrough];
    let reports = replay_trace(&emu, &p, &targets, &opts, &mut |_, _| {});
    for r in &reports {
        let m = measured(r);
        assert!(m.ns_per_op > 0.0, "{}", r.target.label());
        assert_eq!(m.ooms, 0);
    }
    // The trace leaves two blocks live; each timed run frees its first
    // pass's before the second, or the passthrough would leak them.
    let after = emu.usage();
    let held = |u: &npualloc_tools::replay::emulator::Usage| {
        (u.malloc_count, u.physical_count, u.mapped_bytes, u.reserved_ranges)
    };
    assert_eq!(held(&after), held(&before));
}

#[test]
fn a_configuration_that_cannot_run_is_an_error_row() {
    let (_g, emu) = emulator();
    let p = synthetic();
    let targets = [Target::npualloc("no_such_key:1"), Target::npualloc("")];
    let reports = replay_trace(&emu, &p, &targets, &quick(), &mut |_, _| {});
    let e = reports[0].result.as_ref().unwrap_err();
    assert!(e.contains("no_such_key"), "{e}");
    measured(&reports[1]);
    let table = npualloc_tools::replay::table::text_table(&reports);
    assert!(table.contains("error: "), "{table}");
    let json = npualloc_tools::replay::table::json_document(&reports);
    let doc: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let rows = doc["reports"].as_array().expect("a reports array");
    assert!(rows[0]["error"].as_str().is_some_and(|e| e.contains("no_such_key")), "{json}");
    assert!(rows[0].get("peak_reserved").is_none() && rows[1]["error"].is_null(), "{json}");
}

#[test]
fn svg_is_well_formed_with_one_line_per_configuration() {
    let (_g, emu) = emulator();
    let p = synthetic();
    let targets = [Target::npualloc(""), Target::pytorch_policy(), Target::Passthrough];
    let opts = Options { repeat: 1, min_capacity: false, series: true, segment_map: true, warm: false };
    let reports = replay_trace(&emu, &p, &targets, &opts, &mut |_, _| {});
    let doc = svg::render(&[Figure { trace: &p, reports: &reports }]);
    let xml = roxmltree::Document::parse(&doc).expect("well-formed SVG");

    let series: Vec<&str> = xml
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("class") == Some("series"))
        .filter_map(|n| n.attribute("data-series"))
        .collect();
    assert_eq!(series, ["npualloc", "pytorch-policy", "passthrough", "requested"]);
    for n in xml.descendants().filter(|n| n.attribute("class") == Some("series")) {
        let points = n.attribute("points").unwrap().split(' ').count();
        assert_eq!(points, 10, "one point per step in {:?}", n.attribute("data-series"));
    }
    let texts: Vec<String> =
        xml.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text().map(str::to_string)).collect();
    for label in [
        "requested",
        "npualloc reserved",
        "pytorch-policy reserved",
        "passthrough reserved",
        "active",
        "cached",
        "pending-free",
    ] {
        assert!(texts.iter().any(|t| t.contains(label)), "no legend entry '{label}' in {texts:?}");
    }
    let map = xml
        .descendants()
        .find(|n| n.attribute("class") == Some("segment-map"))
        .expect("a segment map for the first configuration");
    assert_eq!(map.attribute("data-config"), Some("npualloc"));
    assert!(map.descendants().any(|n| n.attribute("class") == Some("block active")));
}

#[test]
fn shipped_traces_replay_without_ooms() {
    let (_g, emu) = emulator();
    for (name, peak_mib) in [("resnet-like-infer.trace.gz", 434.6), ("bert-encode-varbatch.trace.gz", 801.6)] {
        let t = parse_file(&repo_file(&format!("traces/{name}"))).unwrap();
        let p = Prepared::new(name, &t);
        assert!((p.peak_requested as f64 / (1 << 20) as f64 - peak_mib).abs() < 0.1, "{name}");
        let reports = replay_trace(&emu, &p, &[Target::npualloc("")], &quick(), &mut |_, _| {});
        let m = measured(&reports[0]);
        assert_eq!(m.ooms, 0, "{name}");
        assert!(m.peak_reserved >= p.peak_requested, "{name}");
    }
}

fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_npualloc-replay"))
}

#[test]
fn tool_reports_malformed_traces_and_missing_libraries() {
    let bad = scratch("tool-bad.trace");
    std::fs::write(&bad, "# acl-trace v1\na 0 10 0\nf 5\n").unwrap();
    let out = tool().arg("--acl-library").arg(emulator_path()).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tool-bad.trace:3:") && err.contains("not live"), "{err}");

    let out = tool().args(["--acl-library", "/nonexistent/libascendcl.so"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/libascendcl.so") && err.contains("cargo build --workspace"), "{err}");

    let out = tool().arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_file(&bad).unwrap();
}

#[test]
fn tool_prints_a_table_and_json() {
    let good = scratch("tool-good.trace");
    std::fs::write(&good, SYNTHETIC).unwrap();
    let lib = emulator_path();
    let out = tool()
        .arg("--acl-library")
        .arg(&lib)
        .args(["--repeat", "1", "--baseline", "passthrough", "--config", "", "--config", "expandable_segments:false"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("trace") && lines[0].contains("min cap MiB"), "{table}");
    assert!(lines[1].contains(" npualloc ") && lines[3].contains("passthrough"), "{table}");

    let out = tool()
        .arg("--acl-library")
        .arg(&lib)
        .args(["--json", "--no-min-capacity", "--repeat", "1"])
        .arg(&good)
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let rows = doc["reports"].as_array().expect("a reports array");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["peak_requested"].as_u64(), Some(4096 + 100 + 3_000_000));
    assert!(rows[0]["error"].is_null() && rows[0]["min_capacity"].is_null(), "{json}");
    std::fs::remove_file(&good).unwrap();
}

#[test]
fn a_trace_larger_than_any_device_gets_no_min_capacity_and_no_crash() {
    let (_g, emu) = emulator();
    // 128 GiB at once: past the emulated device's 64 GiB.
    let t = npualloc_tools::trace::parse_str("# acl-trace v1\na 0 137438953472 0\nf 0\n", "huge.trace").unwrap();
    let p = Prepared::new("huge.trace", &t);
    let opts = Options { repeat: 1, min_capacity: true, series: false, segment_map: false, warm: false };
    let reports = replay_trace(&emu, &p, &[Target::Passthrough], &opts, &mut |_, _| {});
    let m = measured(&reports[0]);
    assert_eq!(m.ooms, 1);
    let cap = m.min_capacity.as_ref().expect("bisection ran");
    assert!(cap.as_ref().is_err_and(|e| e.contains("more than")), "{cap:?}");
}

#[test]
fn svg_stays_well_formed_for_names_with_control_characters() {
    let (_g, emu) = emulator();
    let t = npualloc_tools::trace::parse_str("a 0 4096 0\nf 0\n", "t").unwrap();
    let p = Prepared::new("odd\u{1}name\u{1b}.trace", &t);
    let opts = Options { repeat: 1, min_capacity: false, series: true, segment_map: true, warm: false };
    let reports = replay_trace(&emu, &p, &[Target::npualloc("")], &opts, &mut |_, _| {});
    let doc = svg::render(&[Figure { trace: &p, reports: &reports }]);
    let xml = roxmltree::Document::parse(&doc).expect("well-formed SVG");
    assert!(xml.descendants().any(|n| n.text().is_some_and(|t| t.contains("odd\u{FFFD}name\u{FFFD}.trace"))));
}

/// Runs the tool on the synthetic trace with `args` (the emulator passed
/// explicitly); returns (exit code, stdout, stderr).
fn run_tool(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = tool()
        .arg("--acl-library")
        .arg(emulator_path())
        .args(["--repeat", "1", "--no-min-capacity"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn tool_refuses_a_bad_config_before_replaying_anything() {
    let good = scratch("tool-config.trace");
    std::fs::write(&good, SYNTHETIC).unwrap();
    // An unknown key: refused by the parser, with a non-zero exit and no table.
    let (code, stdout, stderr) = run_tool(&[os("--config"), os("foo:1"), good.as_os_str()]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(stdout, "", "nothing is replayed");
    assert!(stderr.contains("bad --config 'foo:1'") && stderr.contains("foo"), "{stderr}");

    // A bad config after a good one: still nothing runs, not even the good one.
    let (code, stdout, stderr) =
        run_tool(&[os("--config"), os(""), os("--config"), os("page_size:3m"), good.as_os_str()]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("page_size"), "{stderr}");

    // A config that parses but cannot create an allocator (its trace file
    // cannot be created) is found before the replays too.
    let (code, stdout, stderr) = run_tool(&[os("--config"), os("trace:/nonexistent-dir/x.trace"), good.as_os_str()]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("trace"), "{stderr}");
    std::fs::remove_file(&good).unwrap();
}

#[test]
fn tool_says_cannot_open_for_a_missing_trace() {
    let good = scratch("tool-missing.trace");
    std::fs::write(&good, SYNTHETIC).unwrap();
    let missing = scratch("no-such-file.trace");
    let (code, stdout, stderr) = run_tool(&[good.as_os_str(), missing.as_os_str()]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert_eq!(stdout, "", "nothing is replayed, not even the good trace");
    assert!(stderr.contains(&format!("cannot open {}", missing.display())), "{stderr}");
    assert!(!stderr.contains("malformed"), "a missing file is not a malformed trace: {stderr}");

    // A directory is not a trace either.
    let dir = scratch("a-directory.trace");
    std::fs::create_dir_all(&dir).unwrap();
    let (code, _, stderr) = run_tool(&[dir.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot open") && stderr.contains("directory"), "{stderr}");
    std::fs::remove_dir(&dir).unwrap();
    std::fs::remove_file(&good).unwrap();
}

#[test]
fn tool_checks_the_svg_path_before_replaying() {
    let good = scratch("tool-svg.trace");
    std::fs::write(&good, SYNTHETIC).unwrap();
    // A directory that does not exist, and a path that is a directory.
    let dir = scratch("svg-dir");
    std::fs::create_dir_all(&dir).unwrap();
    for bad in [PathBuf::from("/nonexistent-dir/x.svg"), dir.clone()] {
        let (code, stdout, stderr) = run_tool(&[os("--svg"), bad.as_os_str(), good.as_os_str()]);
        assert_eq!(code, Some(1), "{stdout}{stderr}");
        assert_eq!(stdout, "", "nothing is replayed for {}", bad.display());
        assert!(stderr.contains("--svg") && stderr.contains(&format!("cannot write '{}'", bad.display())), "{stderr}");
    }
    std::fs::remove_dir(&dir).unwrap();

    // A usable path is not left behind when the run stops early (here: a
    // missing trace), and an existing file keeps its contents.
    let svg_path = scratch("early-stop.svg");
    let missing = scratch("missing-for-svg.trace");
    let (code, _, _) = run_tool(&[os("--svg"), svg_path.as_os_str(), missing.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(!svg_path.exists(), "the --svg file created for the check is removed again");
    std::fs::write(&svg_path, "old").unwrap();
    let (code, _, _) = run_tool(&[os("--svg"), svg_path.as_os_str(), missing.as_os_str()]);
    assert_eq!(code, Some(1));
    assert_eq!(std::fs::read_to_string(&svg_path).unwrap(), "old");

    // And a good run replaces it with a well-formed SVG.
    let (code, stdout, stderr) = run_tool(&[os("--svg"), svg_path.as_os_str(), good.as_os_str()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let doc = std::fs::read_to_string(&svg_path).unwrap();
    roxmltree::Document::parse(&doc).expect("well-formed SVG");
    std::fs::remove_file(&svg_path).unwrap();
    std::fs::remove_file(&good).unwrap();
}

#[test]
fn tool_help_explains_every_column() {
    let out = tool().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let columns: Vec<&str> = help.lines().skip_while(|l| !l.starts_with("columns")).skip(1).collect();
    assert!(!columns.is_empty(), "no columns section in:\n{help}");
    for header in npualloc_tools::replay::table::HEADERS {
        // Each column is a line "  <header>  <explanation>".
        let line = columns.iter().find(|l| {
            l.strip_prefix("  ").and_then(|r| r.strip_prefix(header)).is_some_and(|rest| rest.starts_with("  "))
        });
        let line = line.unwrap_or_else(|| panic!("--help does not explain the column '{header}':\n{help}"));
        assert!(line.trim_start()[header.len()..].trim().len() > 10, "too short an explanation: {line}");
    }
    assert!(help.contains("exit status"), "{help}");
}
