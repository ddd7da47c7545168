//! Running out of memory: the recovery ladder and its report, retried
//! runtime failures, and the memory fraction.

use super::support::{allocator, drop_stream, emu_lock, fail_nth, finish, new_stream, set_capacity, DEV};
use crate::core::*;

#[test]
fn oom_ladder_releases_cache_then_fails_cleanly() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(50 << 20, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_device_frees, 1, "the cached 40 MiB segment was released to make room");
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    let Error::OutOfMemory(msg) = &err else { panic!("expected OOM, got {err:?}") };
    for needle in [
        "cannot allocate 30.00 MiB (31457280 bytes, rounded to 31457280) on device",
        "reports ",
        " free of 64.00 MiB.",
        "This allocator holds 50.00 MiB: 50.00 MiB allocated, 0.00 MiB cached in free blocks, \
         0.00 MiB cached as unmapped physical handles, 0.00 MiB freed but waiting for other streams' work",
        "Tried: releasing cached memory.",
        "Last failure: aclrtMalloc failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001).",
    ] {
        assert!(msg.contains(needle), "OOM message lacks '{needle}': {msg}");
    }
    assert!(!msg.contains("does not hold"), "nothing else holds memory on this device: {msg}");
    assert_eq!(a.stats().unwrap().num_ooms, 1);
    a.check_invariants().unwrap();
    a.free(q).unwrap();
    let r = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    a.free(r).unwrap();
    finish(a);
    set_capacity(1 << 30);
}

/// A free block in another stream's pool is not one this request could
/// use: the report gives the figure the failing request saw, and names the
/// larger one for what it is, instead of "its largest free block is 18 MiB"
/// under "cannot allocate 12 MiB".
#[test]
fn oom_report_separates_the_requests_pool_from_other_streams() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    // 2 MiB takes a 20 MiB segment: 18 MiB stay free in the default
    // stream's pool, and the segment cannot be released while p lives.
    let p = a.malloc(2 << 20, Stream::DEFAULT).unwrap();
    let q = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().largest_free_block, 18 << 20);
    let other = new_stream();
    let err = a.malloc(12 << 20, other).unwrap_err();
    let Error::OutOfMemory(msg) = &err else { panic!("expected OOM, got {err:?}") };
    assert!(msg.contains("cannot allocate 12.00 MiB"), "{msg}");
    assert!(msg.contains("The largest free block this request could use was 0.00 MiB at its last attempt."), "{msg}");
    let said = format!(
        "The largest free block of this allocator, 18.00 MiB, is in the pool of stream {:#x}: a stream reuses only \
         its own free blocks.",
        Stream::DEFAULT.0
    );
    assert!(msg.contains(&said), "{msg}");
    assert!(!msg.contains("another thread") && !msg.contains("retry"), "no thread freed anything: {msg}");
    a.free(p).unwrap();
    a.free(q).unwrap();
    finish(a);
    drop_stream(other);
    set_capacity(1 << 30);
}

/// One allocator, one stream, one thread: the larger free block is the
/// stream's own small pool's, and the message says so, not that another
/// stream or thread may hold it.
#[test]
fn oom_report_names_the_streams_other_pool_and_no_cause_that_does_not_hold() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in ["", "expandable_segments:false"] {
        let a = allocator(config);
        let p = a.malloc(1 << 20, Stream::DEFAULT).unwrap();
        let err = a.malloc(2 << 30, Stream::DEFAULT).unwrap_err();
        let Error::OutOfMemory(msg) = &err else { panic!("{config}: expected OOM, got {err:?}") };
        assert!(
            msg.contains("is in this stream's small pool, which serves only requests of 1.00 MiB or less."),
            "{config}: {msg}"
        );
        for cause in ["another stream", "another thread", "retry"] {
            assert!(!msg.contains(cause), "{config}: {cause:?} does not hold here: {msg}");
        }
        a.free(p).unwrap();
        finish(a);
    }
}

/// The fraction's refusal gives the figures that decided it: the limit and
/// what was counted against it when the request asked for more, this
/// request's own new memory included (given back before the message counts
/// what is held), not a segment size that would seem to fit.
#[test]
fn a_fraction_refusal_states_the_limit_and_what_counted_against_it() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in ["", "expandable_segments:false"] {
        let a = allocator(config);
        a.set_memory_fraction(0.1).unwrap();
        let live = a.malloc(50 << 20, Stream::DEFAULT).unwrap();
        let err = a.malloc(200 << 20, Stream::DEFAULT).unwrap_err();
        let Error::OutOfMemory(msg) = &err else { panic!("{config}: expected OOM, got {err:?}") };
        assert!(msg.contains("Last failure: the memory fraction limit is 102.40 MiB: "), "{config}: {msg}");
        // The figures: what was counted plus what was asked passes the limit.
        let tail = msg.split("the memory fraction limit is 102.40 MiB: ").nth(1).unwrap();
        let mib = |s: &str| s.trim().trim_end_matches(" MiB").parse::<f64>().unwrap();
        let counted = mib(tail.split(" was counted against it").next().unwrap());
        let asked = mib(tail.split("when ").nth(1).unwrap().split(" more were asked for").next().unwrap());
        assert!(counted + asked > 102.40 && counted <= 102.40, "{config}: {counted} + {asked}: {msg}");
        assert!(!msg.contains("segment would exceed"), "{config}: {msg}");
        a.free(live).unwrap();
        a.set_memory_fraction(1.0).unwrap();
        finish(a);
    }
}

/// The history's oom event records the free memory the message states
/// (one reading, after the request gave back what it obtained).
#[test]
fn the_oom_event_and_the_message_state_the_same_free_memory() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in ["", "expandable_segments:false"] {
        let a = allocator(config);
        a.record_history(16);
        let err = a.malloc(2 << 30, Stream::DEFAULT).unwrap_err();
        let Error::OutOfMemory(msg) = &err else { panic!("{config}: expected OOM, got {err:?}") };
        let last = *a.history().last().unwrap();
        assert_eq!(last.action, crate::core::report::history::Action::Oom, "{config}");
        let said = format!("Device {DEV} reports {} free of", crate::core::report::oom::Mib(last.device_free));
        assert!(msg.contains(&said), "{config}: the event says {} bytes free: {msg}", last.device_free);
        assert!(last.device_free > 0, "{config}: {msg}");
        a.record_history(0);
        finish(a);
    }
}

#[test]
fn injected_device_failure_is_retried() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    fail_nth("aclrtMalloc", 1);
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().num_alloc_retries, 1);
    fail_nth("aclrtMalloc", 1);
    fail_nth("aclrtMalloc", 0);
    a.free(p).unwrap();
    finish(a);
}

#[test]
fn memory_fraction_caps_reserved_memory() {
    let _g = emu_lock();
    set_capacity(100 << 20);
    let unlimited = allocator("");
    assert_eq!(unlimited.stats().unwrap().memory_limit, u64::MAX, "no limit set");
    finish(unlimited);
    let a = allocator("per_process_memory_fraction:0.5");
    assert_eq!(a.stats().unwrap().memory_limit, 50 << 20, "the config's limit, in bytes");
    let p = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    assert!(matches!(&err, Error::OutOfMemory(m) if m.contains("memory fraction")), "{err}");
    a.set_memory_fraction(0.25).unwrap();
    assert_eq!(a.stats().unwrap().memory_limit, 25 << 20);
    a.set_memory_fraction(1.0).unwrap();
    assert_eq!(a.stats().unwrap().memory_limit, u64::MAX, "the whole device is no limit (torch_npu's rule)");
    let q = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    a.set_memory_fraction(0.75).unwrap();
    assert!(a.set_memory_fraction(-0.1).is_err());
    assert_eq!(a.stats().unwrap().memory_limit, 75 << 20, "a refused fraction changes nothing");
    a.free(p).unwrap();
    a.free(q).unwrap();
    finish(a);
    set_capacity(1 << 30);
}

/// A request larger than any address reservation (expandable segments) is
/// refused with no recovery to try, and it counts as a refusal like any
/// other: in `num_ooms`, in its pool's figures, and in the history, not only
/// in the error and the `oom_snapshot` file.
#[test]
fn a_request_no_reservation_can_hold_counts_as_an_oom() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    a.record_history(16);
    let err = a.malloc(1 << 40, Stream::DEFAULT).unwrap_err();
    let Error::OutOfMemory(msg) = &err else { panic!("expected OOM, got {err:?}") };
    assert!(msg.contains("more than one reservation of address space holds"), "{msg}");
    let s = a.stats().unwrap();
    assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 0), "refused once, no step retried: {s:?}");
    let pool = a.pool_stats(0).unwrap();
    assert_eq!(pool.num_ooms, 1, "the default pool's own figures count it too: {pool:?}");
    let last = a.history().last().map(|e| (e.action, e.size));
    assert_eq!(last, Some((crate::core::report::history::Action::Oom, 1 << 40)));
    // Nothing was taken: a request that fits is served as before.
    let p = a.malloc(4 << 20, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    a.check_invariants().unwrap();
    finish(a);
}
