//! The before-release hook (`hooks`): run before the synchronizations that
//! precede giving memory back, so a host can hand its queued work over first.

use super::support::{allocator, drop_stream, emu_lock, hold_stream, new_stream, release_stream, set_capacity};
use crate::core::*;
use std::ffi::c_void;

/// What the test hook sees: it releases `held` (the host's queue reaching
/// the runtime) and counts its calls.
struct Probe {
    held: Option<Stream>,
    calls: u32,
    devices: Vec<i32>,
}

unsafe extern "C" fn probe(user: *mut c_void, device: i32) {
    // SAFETY: every test passes a live, exclusive `Probe` as `user`.
    let p = unsafe { &mut *(user as *mut Probe) };
    p.calls += 1;
    p.devices.push(device);
    if let Some(s) = p.held.take() {
        release_stream(s);
    }
}

fn install(a: &DeviceAllocator, p: &mut Probe) {
    a.set_before_release(Some((probe, p as *mut Probe as *mut c_void)));
}

#[test]
fn empty_cache_runs_the_hook_before_it_looks_at_pending_frees() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8 << 20, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    let mut probe_state = Probe { held: Some(s1), calls: 0, devices: vec![] };
    install(&a, &mut probe_state);
    a.empty_cache().unwrap();
    // The hook let s1's work run before the pending free was polled, so the
    // block came back and its segment went to the device in the same call.
    assert_eq!(a.stats().unwrap().reserved_bytes, 0);
    assert_eq!(probe_state.calls, 1);
    assert_eq!(probe_state.devices, vec![a.device()]);
    a.set_before_release(None);
    a.teardown().unwrap();
    assert_eq!(probe_state.calls, 1, "a removed hook is not called");
    drop_stream(s1);
}

#[test]
fn without_the_hook_empty_cache_keeps_what_queued_work_may_use() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8 << 20, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    assert!(a.stats().unwrap().reserved_bytes > 0, "the pending block's segment stays");
    release_stream(s1);
    a.empty_cache().unwrap();
    assert_eq!(a.stats().unwrap().reserved_bytes, 0);
    a.teardown().unwrap();
    drop_stream(s1);
}

#[test]
fn the_out_of_memory_ladder_and_teardown_run_the_hook() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    let mut probe_state = Probe { held: Some(s1), calls: 0, devices: vec![] };
    install(&a, &mut probe_state);
    let q = a.malloc(50 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(probe_state.calls, 1, "the ladder ran the hook once");
    assert_eq!(a.stats().unwrap().num_device_frees, 1, "the released 40 MiB made room");
    let r = a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(probe_state.calls, 1, "an allocation that fits does not run it");
    a.free(r).unwrap();
    a.free(q).unwrap();
    a.teardown().unwrap();
    assert_eq!(probe_state.calls, 2, "teardown ran it");
    drop_stream(s1);
    set_capacity(1 << 30);
}

#[test]
fn the_release_threshold_runs_the_hook_before_it_gives_memory_back() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false,release_threshold_mb:0");
    let mut probe_state = Probe { held: None, calls: 0, devices: vec![] };
    install(&a, &mut probe_state);
    let p = a.malloc(8 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(probe_state.calls, 0, "a malloc that grows gives nothing back");
    a.free(p).unwrap();
    assert_eq!(probe_state.calls, 1, "the free passed the threshold: the hook ran before the release");
    assert_eq!(a.stats().unwrap().reserved_bytes, 0);
    a.set_before_release(None);
    a.teardown().unwrap();
}

struct Refusals {
    seen: Vec<(i32, usize, String)>,
}

unsafe extern "C" fn observe(user: *mut c_void, device: i32, requested: usize, report: *const std::ffi::c_char) {
    // SAFETY: the test passes a live, exclusive `Refusals`; `report` is a C
    // string valid during the call (the hook's contract).
    let (r, text) = unsafe { (&mut *(user as *mut Refusals), std::ffi::CStr::from_ptr(report)) };
    r.seen.push((device, requested, text.to_string_lossy().into_owned()));
}

#[test]
fn the_out_of_memory_observer_sees_each_refusal_once_with_its_report() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    let mut refusals = Refusals { seen: vec![] };
    a.set_out_of_memory_observer(Some((observe, &mut refusals as *mut Refusals as *mut c_void)));
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    assert!(refusals.seen.is_empty(), "a request that fits is not reported");
    let Err(Error::OutOfMemory(msg)) = a.malloc(30 << 20, Stream::DEFAULT) else { panic!("expected OOM") };
    assert_eq!(refusals.seen.len(), 1);
    let (device, requested, report) = &refusals.seen[0];
    assert_eq!((*device, *requested), (a.device(), 30 << 20));
    assert_eq!(report, &msg, "the observer gets the error's report");
    assert!(a.malloc(0, Stream::DEFAULT).is_err());
    assert_eq!(refusals.seen.len(), 1, "other refusals are not out-of-memory");
    a.set_out_of_memory_observer(None);
    assert!(a.malloc(30 << 20, Stream::DEFAULT).is_err());
    assert_eq!(refusals.seen.len(), 1, "a removed observer is not called");
    a.free(p).unwrap();
    a.teardown().unwrap();
    set_capacity(1 << 30);
}

unsafe extern "C" fn file_exists_at_observe(user: *mut c_void, _: i32, _: usize, _: *const std::ffi::c_char) {
    // SAFETY: the test passes a live, exclusive `(PathBuf, bool)`.
    let (path, seen) = unsafe { &mut *(user as *mut (std::path::PathBuf, bool)) };
    *seen = path.is_file();
}

/// `_memory_viz.py stats PATH` (whether it succeeded, and its output), with
/// PyTorch's `_memory_viz.py` from `$NPUALLOC_MEMORY_VIZ` or what
/// scripts/fetch-memory-viz.py finds; `None` when neither has it.
fn opened_in_memory_viz(path: &std::path::Path) -> Option<(bool, String)> {
    let viz = match std::env::var_os("NPUALLOC_MEMORY_VIZ").filter(|p| !p.is_empty()) {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fetch-memory-viz.py");
            let out = std::process::Command::new("python3").arg(script).output().ok()?;
            if !out.status.success() {
                eprintln!("PyTorch's _memory_viz.py is not available: the snapshot is not opened there");
                return None;
            }
            std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    let out = std::process::Command::new("python3").arg(viz).arg("stats").arg(path).output().ok()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), text))
}

/// `oom_snapshot:PATH`: a refused request writes a PyTorch-format snapshot
/// (a pickle Python and PyTorch's `_memory_viz.py` read, history included
/// while recording) before the observer runs; a request that fits writes
/// nothing.
#[test]
fn oom_snapshot_writes_a_pytorch_snapshot_when_a_request_is_refused() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let path = std::env::temp_dir().join(format!("npualloc-oom-{}.pickle", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let a = allocator(&format!("expandable_segments:false,oom_snapshot:{}", path.display()));
    a.record_history(100);
    let mut probe_state = (path.clone(), false);
    a.set_out_of_memory_observer(Some((file_exists_at_observe, &mut probe_state as *mut _ as *mut c_void)));
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    assert!(!path.exists(), "a request that fits writes no snapshot");
    assert!(matches!(a.malloc(30 << 20, Stream::DEFAULT), Err(Error::OutOfMemory(_))));
    assert!(probe_state.1, "the snapshot is written before the observer runs");
    let script = "import pickle,sys\n\
        d = pickle.load(open(sys.argv[1], 'rb'))\n\
        seg = [s for s in d['segments'] if any(b['state'] == 'active_allocated' for b in s['blocks'])]\n\
        assert len(seg) == 1 and seg[0]['segment_pool_id'] == (0, 0), d['segments']\n\
        acts = [e['action'] for e in d['device_traces'][int(sys.argv[2])]]\n\
        assert 'alloc' in acts and 'oom' in acts, acts\n\
        print(seg[0]['blocks'][0]['requested_size'])";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .arg(a.device().to_string())
        .output()
        .expect("python3 runs");
    let viz = opened_in_memory_viz(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "41943040", "{}", String::from_utf8_lossy(&out.stderr));
    if let Some((ok, text)) = viz {
        assert!(ok && text.contains("segments: 1\n"), "_memory_viz.py stats: {text}");
    }
    a.set_out_of_memory_observer(None);
    a.free(p).unwrap();
    a.teardown().unwrap();
    set_capacity(1 << 30);
}
