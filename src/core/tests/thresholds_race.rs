//! The release threshold against sleep, and garbage collection against the
//! range a growth just reserved (Note [unused memory of expandable ranges]).

use super::support::{
    allocator, check_accounting, drop_stream, emu_lock, fail_nth, new_stream, set_capacity, usage, Baseline, DEV, GIB,
    MIB,
};
use crate::core::SleepMode;
use crate::runtime::Stream;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

struct Gate {
    armed: AtomicBool,
    barrier: Barrier,
}

/// The before-release hook: holds the first thread that calls it until the
/// test has run between its two waits (as a slow drain of the host's queue
/// would).
unsafe extern "C" fn pause(user: *mut c_void, _device: i32) {
    // SAFETY: the test's Gate outlives the hook.
    let g = unsafe { &*(user as *const Gate) };
    if g.armed.swap(false, Ordering::SeqCst) {
        g.barrier.wait();
        g.barrier.wait();
    }
}

/// A free over `release_threshold_mb:0` whose block lies on a moved handle
/// gives back its old address and the handle; while the free waits in the
/// hook, another thread sleeps, wakes and maps a new block at the old
/// address. The free must then give back only what is still free: the
/// emulator maps exactly what the allocator's ranges say, before and after.
#[test]
fn a_threshold_release_waiting_in_the_hook_does_not_unmap_what_sleep_handed_out() {
    let _g = emu_lock();
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,map_ahead:false,release_threshold_mb:0");
    let other = new_stream();
    let (_, spacer, grown) = super::thresholds::moved_past_a_waiting_free(&a, other);
    check_accounting(&a, &base, None, "setup");
    let gate = Gate { armed: AtomicBool::new(true), barrier: Barrier::new(2) };
    a.set_before_release(Some((pause, &gate as *const Gate as *mut c_void)));
    let (g33, p30) = std::thread::scope(|t| {
        let freer = t.spawn(|| a.free(grown).unwrap());
        gate.barrier.wait();
        a.sleep(SleepMode::Discard).unwrap();
        a.wake().unwrap();
        let g33 = a.malloc(33 * MIB, Stream::DEFAULT).unwrap();
        let p30 = a.malloc(30 * MIB, Stream::DEFAULT).unwrap();
        check_accounting(&a, &base, None, "while the free waits in the hook");
        gate.barrier.wait();
        freer.join().unwrap();
        (g33, p30)
    });
    a.set_before_release(None);
    check_accounting(&a, &base, None, "after the waiting free went on");
    a.check_invariants().unwrap();
    for p in [g33, p30, spacer] {
        a.free(p).unwrap();
    }
    a.teardown().unwrap();
    drop_stream(other);
    set_capacity(1 << 30);
}

/// A growth past the collection threshold that needs a new range: the
/// collection keeps the empty range the growth just reserved, so the
/// ranges made and released are those without garbage collection.
#[test]
fn garbage_collection_keeps_the_range_a_growth_just_reserved() {
    let _g = emu_lock();
    set_capacity(GIB as u64);
    let mut seen = Vec::new();
    for conf in ["garbage_collection_threshold:0.1,", ""] {
        let a = allocator(&format!("expandable_segments:true,per_process_memory_fraction:0.5,{conf}"));
        let s0 = a.stats().unwrap();
        let x = a.malloc(60 * MIB, Stream::DEFAULT).unwrap();
        let y = a.malloc(4096, Stream::DEFAULT).unwrap();
        let s1 = a.stats().unwrap();
        seen.push((
            s1.num_segments_created - s0.num_segments_created,
            s1.num_segments_released - s0.num_segments_released,
        ));
        a.free(x).unwrap();
        a.free(y).unwrap();
        a.teardown().unwrap();
    }
    assert_eq!(seen[0], (2, 0), "with garbage collection: ranges (made, released)");
    assert_eq!(seen[0], seen[1], "garbage collection made or released ranges of its own");
    set_capacity(1 << 30);
}

/// The same growth, refused after the collection (its first map fails on
/// the retry): the range made on the first try and kept through the
/// collection goes back, so the refused request leaves the reserved ranges
/// as it found them; the next request makes its own.
#[test]
fn a_request_refused_after_garbage_collection_gives_back_the_range_it_made() {
    let _g = emu_lock();
    set_capacity(GIB as u64);
    let a = allocator("expandable_segments:true,per_process_memory_fraction:0.5,garbage_collection_threshold:0.1");
    let x = a.malloc(60 * MIB, Stream::DEFAULT).unwrap();
    let before = (usage(DEV).reserved_ranges, a.stats().unwrap());
    fail_nth("aclrtMapMem", 1);
    let refused = a.malloc(4096, Stream::DEFAULT);
    fail_nth("aclrtMapMem", 0);
    assert!(refused.is_err(), "the retry's map was made to fail");
    let after = a.stats().unwrap();
    assert_eq!(usage(DEV).reserved_ranges, before.0, "the refused request's range went back");
    assert_eq!(
        after.num_segments_created - after.num_segments_released,
        before.1.num_segments_created - before.1.num_segments_released,
        "segments held"
    );
    let y = a.malloc(4096, Stream::DEFAULT).unwrap();
    assert_eq!(usage(DEV).reserved_ranges, before.0 + 1);
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.teardown().unwrap();
    set_capacity(1 << 30);
}
