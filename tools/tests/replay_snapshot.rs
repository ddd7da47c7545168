//! `npualloc-replay --snapshot DIR` on a shipped trace (the emulator's
//! `libascendcl.so` built by `cargo build --workspace`): the pickle it
//! writes loads in Python and in PyTorch's `_memory_viz.py`, and agrees with
//! the tool's own peak and with its own history.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// Loads the pickle and prints `total_size_sum segments allocs frees live_blocks expandable`
/// after checking what holds for any snapshot in PyTorch's format.
const CHECK: &str = r#"
import pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
assert set(snap) == {"segments", "device_traces"}, list(snap)
segs = snap["segments"]
for s in segs:
    at = s["address"]
    for b in s["blocks"]:
        assert b["address"] == at, (s["address"], b)
        assert b["state"] in ("active_allocated", "active_pending_free", "inactive"), b
        at += b["size"]
    assert at == s["address"] + s["total_size"], s["address"]
    assert s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert s["segment_pool_id"] == (0, 0) and s["frames"] == []
trace = snap["device_traces"][0]
assert trace[-1]["action"] == "snapshot"
assert all(a["time_us"] <= b["time_us"] for a, b in zip(trace, trace[1:]))
count = lambda name: sum(1 for e in trace if e["action"] == name)
size = lambda name: sum(e["size"] for e in trace if e["action"] == name)
live = sum(1 for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
expandable = all(s["is_expandable"] for s in segs)
grown = size("segment_map") - size("segment_unmap") if expandable else size("segment_alloc") - size("segment_free")
total = sum(s["total_size"] for s in segs)
assert grown == total, (grown, total)
print(total, len(segs), count("alloc"), count("free_requested"), live, int(expandable))
"#;

fn snapshot_of(config: Option<&str>, dir: &Path) -> (Vec<u64>, u64) {
    let _ = std::fs::remove_dir_all(dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_npualloc-replay"));
    // The tool replays twice (to find the peak, then up to it) and compares
    // with the timed run: that needs the same layout each time, which
    // randomly aligned aclrtMalloc results (scripts/test.sh's second pass)
    // do not give.
    cmd.env_remove("ACLEMU_MALLOC_ALIGN");
    cmd.args(["--json", "--repeat", "1", "--no-min-capacity", "--snapshot"]).arg(dir);
    if let Some(c) = config {
        cmd.args(["--config", c]);
    }
    let out = cmd.arg(repo_file("traces/resnet-like-infer.trace.gz")).output().expect("run npualloc-replay");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let peak = json["reports"][0]["peak_reserved"].as_u64().expect("peak_reserved in the JSON");
    let pickle = dir.join("resnet-like-infer.pickle");
    assert!(pickle.is_file(), "{} was not written", pickle.display());
    let check = Command::new("python3").arg("-c").arg(CHECK).arg(&pickle).output().expect("python3 runs");
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let nums: Vec<u64> =
        String::from_utf8_lossy(&check.stdout).split_whitespace().map(|n| n.parse().unwrap()).collect();
    opens_in_memory_viz(&pickle, nums[1]);
    (nums, peak)
}

/// PyTorch's `_memory_viz.py`: `$NPUALLOC_MEMORY_VIZ`, else what
/// scripts/fetch-memory-viz.py finds (an installed torch, its cache, or
/// PyPI); `None` when neither has it.
fn memory_viz() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NPUALLOC_MEMORY_VIZ").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let out = Command::new("python3").arg(repo_file("scripts/fetch-memory-viz.py")).output().ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `_memory_viz.py stats` and `trace` read the pickle as PyTorch's own:
/// `stats` sums the blocks of every segment (and raises when they do not
/// tile it).
fn opens_in_memory_viz(pickle: &Path, segments: u64) {
    let Some(viz) = memory_viz() else {
        eprintln!("PyTorch's _memory_viz.py is not available (no torch, no cache, no network): not opened there");
        return;
    };
    for command in ["stats", "trace"] {
        let out = Command::new("python3").arg(&viz).arg(command).arg(pickle).output().expect("python3 runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "_memory_viz.py {command}: {}", String::from_utf8_lossy(&out.stderr));
        if command == "stats" {
            assert!(text.contains(&format!("segments: {segments}\n")), "{text}");
        } else {
            assert!(text.starts_with("Device 0 ----------------\n"), "{text}");
        }
    }
}

#[test]
fn snapshot_at_the_peak_loads_in_python_and_matches() {
    let dir = std::env::temp_dir().join(format!("npualloc-replay-snapshot-{}", std::process::id()));
    // Fixed segments: the snapshot's segments are the peak, up to the
    // alignment slack each aclrtMalloc result may carry (under 1 KiB).
    let (n, peak) = snapshot_of(Some("expandable_segments:false"), &dir);
    let [total, segments, allocs, frees, live, expandable] = n[..] else { panic!("{n:?}") };
    assert_eq!(expandable, 0);
    assert!(total <= peak && peak - total < segments * 1024, "segments {total} vs peak reserved {peak}");
    assert_eq!(allocs - frees, live, "the history starts with the trace");
    assert!(allocs > 0);
    // Expandable ranges (the default here): mapped memory at the peak, the
    // rest of the peak being physical pages cached unmapped.
    let (n, peak) = snapshot_of(None, &dir);
    let [total, _, allocs, frees, live, expandable] = n[..] else { panic!("{n:?}") };
    assert_eq!(expandable, 1);
    assert!(total > 0 && total <= peak, "mapped {total} vs peak reserved {peak}");
    assert_eq!(allocs - frees, live);
    let _ = std::fs::remove_dir_all(&dir);
}
