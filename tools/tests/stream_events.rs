//! The `u` and `w` events of a trace reach the allocator and the runtime in
//! a replay (the traces of `traces/scale/` have both): a `w` is a stream
//! synchronize on the emulator, and a replay with `u` events on other
//! streams completes without errors or OOMs in every configuration.

mod common;

use npualloc_tools::replay::{replay_trace, Emulator, Options, Prepared, Target};
use npualloc_tools::trace::parse_str;
use std::sync::atomic::{AtomicBool, Ordering};

fn emulator() -> Emulator {
    common::load_emulator()
}

fn quick() -> Options {
    Options { repeat: 1, min_capacity: false, series: false, segment_map: false, warm: false }
}

/// Stream, event and device synchronizations this thread made so far.
fn thread_syncs(emu: &Emulator) -> u64 {
    [c"aclrtSynchronizeStream", c"aclrtSynchronizeEvent", c"aclrtSynchronizeDevice"]
        .map(|name| emu.thread_calls(name).expect("the emulator counts calls"))
        .iter()
        .sum()
}

/// Emulator synchronizations made by replaying `text` through npualloc
/// (replays run on the calling thread).
fn syncs_of(emu: &Emulator, text: &str) -> u64 {
    let trace = parse_str(text, "t").unwrap();
    let prepared = Prepared::new("t", &trace);
    let before = thread_syncs(emu);
    let reports = replay_trace(emu, &prepared, &[Target::npualloc(""), Target::Passthrough], &quick(), &mut |_, _| {});
    for r in &reports {
        let m = r.result.as_ref().unwrap_or_else(|e| panic!("{} failed: {e}", r.target.label()));
        assert_eq!(m.ooms, 0);
    }
    thread_syncs(emu) - before
}

#[test]
fn waits_synchronize_and_uses_replay() {
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

/// Two blocks used on other streams and freed (two events recorded), one
/// used and never freed (no event), one never used elsewhere.
const RECORDED: &str =
    "# acl-trace v1\na 0 4194304 1\nu 0 0\na 1 26214400 0\nu 1 2\na 2 8192 0\nu 2 1\na 3 8192 0\nf 3\nf 1\nf 0\n";

/// (event records, event queries) of npualloc's and the passthrough's
/// observed runs of `RECORDED`.
fn counted_events(emu: &Emulator) -> [(u64, u64); 2] {
    let trace = parse_str(RECORDED, "t").unwrap();
    let prepared = Prepared::new("t", &trace);
    let reports = replay_trace(emu, &prepared, &[Target::npualloc(""), Target::Passthrough], &quick(), &mut |_, _| {});
    [0, 1].map(|i| {
        let m = reports[i].result.as_ref().unwrap();
        (m.event_records, m.event_queries)
    })
}

#[test]
fn the_observed_run_counts_event_records_and_queries() {
    let emu = emulator();
    let [npualloc, passthrough] = counted_events(&emu);
    // One event per free that waits for another stream. The emulator
    // completes streams at once: each deferring free's own poll finds its
    // event done.
    assert_eq!(npualloc, (2, 2));
    assert_eq!(passthrough, (0, 0), "the passthrough defers nothing");
}

#[test]
fn replays_on_two_threads_at_once_count_only_their_own_events() {
    // Another thread replays (and records and queries events) all along
    // while this one replays: each observed run counts its own calls.
    /// Stops the other thread however this one ends (a failed assertion too).
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = Stop(&done);
        let other = s.spawn(|| {
            let emu = emulator();
            let mut runs = 0;
            while !done.load(Ordering::Acquire) || runs == 0 {
                assert_eq!(counted_events(&emu), [(2, 2), (0, 0)], "the other thread's run {runs}");
                runs += 1;
            }
        });
        let emu = emulator();
        for run in 0..20 {
            assert_eq!(counted_events(&emu), [(2, 2), (0, 0)], "run {run}");
        }
        drop(stop);
        other.join().unwrap();
    });
}

#[test]
fn the_syncs_column_leaves_out_the_traces_own_waits() {
    // The trace of tools/peer/test.sh's u/w checks: its one `w` is replayed
    // as a stream synchronize, which is the workload's, not the allocator's;
    // the peer's syncs leave it out as well.
    let text = "# acl-trace v1\na 0 4194304 0\nu 0 1\nf 0\na 1 4194304 0\nw 1\nf 1\na 2 1000 1\nu 2 0\nf 2\n";
    let emu = emulator();
    let trace = parse_str(text, "t").unwrap();
    let prepared = Prepared::new("t", &trace);
    let before = thread_syncs(&emu);
    let reports = replay_trace(&emu, &prepared, &[Target::npualloc(""), Target::Passthrough], &quick(), &mut |_, _| {});
    let replayed = thread_syncs(&emu) - before;
    let [npualloc, passthrough] = [0, 1].map(|i| reports[i].result.as_ref().unwrap().syncs);
    assert!(replayed >= 2, "each target's runs replayed the wait: {replayed} synchronizations");
    assert_eq!((npualloc, passthrough), (0, 0), "neither allocator synchronizes on this trace");
}

#[test]
fn the_observed_run_counts_every_call_a_cost_table_charges() {
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
