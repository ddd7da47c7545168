//! The `u` and `w` events of a trace reach the allocator and the runtime in
//! a replay (the traces of `traces/scale/` have both): a `w` is a stream
//! synchronize on the emulator, and a replay with `u` events on other
//! streams completes without errors or OOMs in every configuration.

use npualloc::trace::parse_str;
use npualloc_tools::replay::{replay_trace, Emulator, Options, Prepared, Target};
use std::path::{Path, PathBuf};

/// The replays of this file share one emulator, whose call counters (armed
/// and read back by each observed run) are process-wide: one replay at a
/// time, or a replay on another test thread resets the counts of this one.
static ONE_REPLAY_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn emulator() -> Emulator {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf();
    let path: PathBuf = dir.join("libascendcl.so");
    assert!(path.is_file(), "the ACL emulator {} is not built; run `cargo build --workspace`", path.display());
    Emulator::load(&path).expect("load the emulator")
}

fn quick() -> Options {
    Options { repeat: 1, min_capacity: false, series: false, segment_map: false, warm: false }
}

/// Emulator synchronizations made by replaying `text` through npualloc.
fn syncs_of(emu: &Emulator, text: &str) -> u64 {
    let trace = parse_str(text, "t").unwrap();
    let prepared = Prepared::new("t", &trace);
    let before = emu.usage().syncs;
    let reports = replay_trace(emu, &prepared, &[Target::npualloc(""), Target::Passthrough], &quick(), &mut |_, _| {});
    for r in &reports {
        let m = r.result.as_ref().unwrap_or_else(|e| panic!("{} failed: {e}", r.target.label()));
        assert_eq!(m.ooms, 0);
    }
    emu.usage().syncs - before
}

#[test]
fn waits_synchronize_and_uses_replay() {
    let _one = ONE_REPLAY_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let emu = emulator();
    // A batch made on the copy stream and used on the compute stream, a
    // bucket made on the compute stream and used on the communication
    // stream: each freed while the other stream may still use it.
    let body = "# acl-trace v1\na 0 4194304 1\nu 0 0\na 1 26214400 0\nu 1 2\nf 1\nf 0\na 2 26214400 0\n";
    let without = syncs_of(&emu, body);
    let with = syncs_of(&emu, &format!("{body}w 2\nw 0\nw 2\nf 2\n"));
    // Each replayed pass synchronizes three more times.
    assert!(with > without, "with waits {with}, without {without}");
    assert_eq!((with - without) % 3, 0, "with waits {with}, without {without}");
}

#[test]
fn the_observed_run_counts_event_records_and_queries() {
    let _one = ONE_REPLAY_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let emu = emulator();
    // Two blocks used on other streams and freed (two events recorded), one
    // used and never freed (no event), one never used elsewhere.
    let text =
        "# acl-trace v1\na 0 4194304 1\nu 0 0\na 1 26214400 0\nu 1 2\na 2 8192 0\nu 2 1\na 3 8192 0\nf 3\nf 1\nf 0\n";
    let trace = parse_str(text, "t").unwrap();
    let prepared = Prepared::new("t", &trace);
    let reports = replay_trace(&emu, &prepared, &[Target::npualloc(""), Target::Passthrough], &quick(), &mut |_, _| {});
    let m = reports[0].result.as_ref().unwrap();
    assert_eq!(m.event_records, 2, "one event per free that waits for another stream");
    // The emulator completes streams at once: each deferring free's own
    // poll finds its event done.
    assert_eq!(m.event_queries, 2);
    let p = reports[1].result.as_ref().unwrap();
    assert_eq!((p.event_records, p.event_queries), (0, 0), "the passthrough defers nothing");
}

#[test]
fn the_observed_run_counts_every_call_a_cost_table_charges() {
    let _one = ONE_REPLAY_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let emu = emulator();
    // Two blocks on two streams, freed, and three host waits of the trace.
    let text = "# acl-trace v1\na 0 4194304 1\na 1 26214400 0\nf 1\nw 0\nf 0\nw 1\nw 0\n";
    let trace = parse_str(text, "t").unwrap();
    let prepared = Prepared::new("t", &trace);
    let reports = replay_trace(&emu, &prepared, &[Target::npualloc("")], &quick(), &mut |_, _| {});
    let m = reports[0].result.as_ref().unwrap();
    let calls = |name: &str| m.acl_calls.iter().find(|(n, _)| *n == name).map(|&(_, c)| c);
    // The same counts the allocator's own statistics give...
    assert_eq!(calls("aclrtMallocPhysical"), Some(m.physical_mallocs));
    assert_eq!(calls("aclrtMapMem"), Some(m.maps));
    assert!(m.maps >= 2, "a handle for each stream's pool: {m:?}");
    assert_eq!(calls("aclrtUnmapMem"), Some(m.unmaps));
    assert_eq!(calls("aclrtMalloc"), Some(m.device_mallocs));
    // ...one address reservation per stream's large pool...
    assert_eq!(calls("aclrtReserveMemAddress"), Some(2));
    // ...and the trace's three waits, the allocator itself making none.
    assert_eq!(m.syncs, 0);
    assert_eq!(calls("aclrtSynchronizeStream"), Some(3));
    assert_eq!(calls("aclrtSynchronizeDevice"), Some(0));
}
