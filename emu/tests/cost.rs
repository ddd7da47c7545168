//! The cost model: `aclemu_set_cost`, `ACLEMU_COST` and its `device`
//! profile, and calls that sleep their cost without holding the emulator's
//! locks. No test checks that a call was fast: only that a call took at
//! least its cost, and that calls overlap, which is shown by keeping one
//! call inside its cost until others have finished.

mod common;
use ascendcl::*;
use common::*;
use std::ffi::{c_char, c_void};
use std::process::Command;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Costs are process-wide: the tests of this file take turns.
static COSTS: Mutex<()> = Mutex::new(());

/// Long enough that a call sleeping it is still asleep when the test
/// lowers it again: the tests never wait for it to pass.
const FOREVER: u64 = 3600 * 1_000_000_000;

fn set_cost(name: &std::ffi::CStr, ns: u64) {
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclemu_set_cost(name.as_ptr(), ns) }, 0);
}

/// Waits (without a deadline) until `cond` holds.
fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn unknown_names_are_refused() {
    let _turn = COSTS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_set_cost(std::ptr::null::<c_char>(), 1), -1);
        assert_eq!(aclemu_set_cost(c"aclrtMaloc".as_ptr(), 1), -1);
        assert_eq!(aclemu_set_cost(c"aclemu_run_op".as_ptr(), 1), -1);
        assert_eq!(aclemu_set_cost(c"aclrtGetMemInfo".as_ptr(), 0), 0);
    }
}

#[test]
fn a_call_takes_at_least_its_cost() {
    let _turn = COSTS.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Dev::take();
    set_cost(c"aclrtMalloc", 30_000_000);
    let start = Instant::now();
    let p = malloc(4096);
    assert!(start.elapsed() >= Duration::from_millis(30));
    set_cost(c"aclrtMalloc", 0);
    // A failing call costs as much: the time is the driver's either way.
    set_cost(c"aclrtFree", 20_000_000);
    let start = Instant::now();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtFree(0x10 as *mut c_void) }, RT_PARAM_INVALID);
    assert!(start.elapsed() >= Duration::from_millis(20));
    set_cost(c"aclrtFree", 0);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtFree(p) }, 0);
    dev.assert_clean();
}

#[test]
fn synchronize_finishes_queued_work_then_spends_its_cost() {
    let _turn = COSTS.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Dev::take();
    let (s, e) = (stream(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        set_cost(c"aclrtSynchronizeStream", 25_000_000);
        let start = Instant::now();
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert!(start.elapsed() >= Duration::from_millis(25));
        set_cost(c"aclrtSynchronizeStream", 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_sleeping_call_holds_no_emulator_lock() {
    let _turn = COSTS.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Dev::take();
    let first = malloc(4096);
    let dev_id = dev.id;
    let returned = AtomicBool::new(false);
    set_cost(c"aclrtMalloc", FOREVER);
    std::thread::scope(|scope| {
        let sleeper = scope.spawn(|| {
            // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
            assert_eq!(unsafe { aclrtSetDevice(dev_id) }, 0);
            let p = malloc(4096);
            returned.store(true, Ordering::SeqCst);
            p as usize
        });
        // The sleeper's work is done (its block counts) and it now sleeps.
        wait_until(|| dev.usage().malloc_count == 2);
        // Every lock the sleeper's call took is free: these calls take the
        // block registry, the stream engine and the VMM lock.
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        unsafe {
            assert_eq!(aclrtFree(first), 0);
            let mut host = null_mut();
            assert_eq!(aclrtMallocHost(&mut host, 64), 0);
            assert_eq!(aclrtFreeHost(host), 0);
            assert_eq!(aclrtSynchronizeDevice(), 0);
            let h = physical(&dev, 2 * MIB);
            assert_eq!(aclrtFreePhysical(h), 0);
        }
        assert!(!returned.load(Ordering::SeqCst));
        // Lowering the cost wakes the sleeper.
        set_cost(c"aclrtMalloc", 0);
        let p = sleeper.join().unwrap() as *mut c_void;
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        assert_eq!(unsafe { aclrtFree(p) }, 0);
    });
    dev.assert_clean();
}

#[test]
fn calls_on_two_threads_sleep_at_the_same_time() {
    let _turn = COSTS.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Dev::take();
    let (a, b) = (stream() as usize, stream() as usize);
    let before = dev.syncs();
    let dev_id = dev.id;
    set_cost(c"aclrtSynchronizeStream", FOREVER);
    std::thread::scope(|scope| {
        let threads: Vec<_> = [a, b]
            .into_iter()
            .map(|s| {
                scope.spawn(move || {
                    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
                    assert_eq!(unsafe { aclrtSetDevice(dev_id) }, 0);
                    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
                    unsafe { aclrtSynchronizeStream(s as *mut c_void) }
                })
            })
            .collect();
        // Both synchronizations did their work while neither has returned:
        // they sleep side by side.
        wait_until(|| dev.syncs() == before + 2);
        assert!(threads.iter().all(|t| !t.is_finished()));
        set_cost(c"aclrtSynchronizeStream", 0);
        for t in threads {
            assert_eq!(t.join().unwrap(), 0);
        }
    });
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtDestroyStream(a as *mut c_void), 0);
        assert_eq!(aclrtDestroyStream(b as *mut c_void), 0);
    }
    dev.assert_clean();
}

/// Runs `child` of this test binary in a new process with `ACLEMU_COST`.
fn run_child(child: &str, cost: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env("ACLEMU_COST", cost)
        .env("ACLEMU_COST_CHILD", "1")
        .output()
        .unwrap()
}

fn in_child() -> bool {
    std::env::var_os("ACLEMU_COST_CHILD").is_some()
}

/// Under `device,aclrtMalloc=30ms`: the profile's 1 ms device sync, and
/// the override of its 100 us malloc.
#[test]
fn child_profile_and_override() {
    if !in_child() {
        return;
    }
    let _dev = Dev::take();
    let start = Instant::now();
    let p = malloc(64);
    assert!(start.elapsed() >= Duration::from_millis(30));
    let start = Instant::now();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtSynchronizeDevice() }, 0);
    assert!(start.elapsed() >= Duration::from_millis(1));
    let start = Instant::now();
    let s = stream();
    assert!(start.elapsed() >= Duration::from_micros(100));
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtFree(p), 0);
    }
}

#[test]
fn environment_selects_the_device_profile_and_overrides() {
    if in_child() {
        return;
    }
    let out = run_child("child_profile_and_override", "device,aclrtMalloc=30ms");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

/// Any ACL call reads the variable.
#[test]
fn child_first_call() {
    if !in_child() {
        return;
    }
    let _dev = Dev::take();
}

#[test]
fn a_bad_environment_value_stops_the_process_naming_the_item() {
    if in_child() {
        return;
    }
    for (value, named) in [("aclrtMaloc=1us", "`aclrtMaloc` names no"), ("aclrtFree=5", "`5` is not a duration")] {
        let out = run_child("child_first_call", value);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ACLEMU_COST") && stderr.contains(named), "{stderr}");
    }
}
