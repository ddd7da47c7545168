//! When a free that waits for other streams' work (record_stream) comes
//! back: at the next free once that work is done, before a request takes
//! other memory, and with ever fewer event queries while it is not done
//! (Note [stream-ordered reuse] in `stream_order`).

use super::support::{
    allocator, drop_stream, emu_lock, fail_nth, fault_pending, hold_stream, new_stream, release_stream, set_capacity,
    usage, DEV,
};
use crate::core::cache::stream_order::MAX_POLL_GAP;
use crate::core::*;

const MIB: usize = 1 << 20;

#[test]
fn a_deferred_free_whose_work_is_done_comes_back_at_the_next_free() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    // One 20 MiB segment: [p 8][q 8][4 free].
    let p = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let q = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().segments, 1);
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    assert_eq!(a.stats().unwrap().pending_free_bytes, (8 * MIB) as u64, "s1's work is not done");
    release_stream(s1);
    // One ordinary free later, p's block is back and merged with q's.
    a.free(q).unwrap();
    assert_eq!(a.stats().unwrap().pending_free_bytes, 0, "the completed free came back");
    let reserved = a.stats().unwrap().reserved_bytes;
    // The best fit is now the whole segment from p; with p still waiting it
    // would be q's block (a cache hit elsewhere, leaving p's memory idle).
    let r = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(r, p, "the request takes the returned block");
    assert_eq!(a.stats().unwrap().reserved_bytes, reserved, "no growth");
    a.free(r).unwrap();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn a_free_waiting_on_unfinished_work_is_queried_ever_less_often() {
    // aclrtQueryEventStatus calls counted with an armed failure far away.
    const FAR: i32 = 1_000_000;
    const FREES: usize = 1000;
    let queries = || (FAR - fault_pending("aclrtQueryEventStatus")) as usize;
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    fail_nth("aclrtQueryEventStatus", FAR);
    a.free(p).unwrap();
    for _ in 0..FREES {
        let x = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
        a.free(x).unwrap();
    }
    let asked = queries();
    // Polled at the deferring free and the next, then after 2, 4, ... frees,
    // at most every MAX_POLL_GAP: about 20 queries, not one per free.
    let most = FREES / MAX_POLL_GAP as usize + 2 * MAX_POLL_GAP.ilog2() as usize;
    assert!((2..=most).contains(&asked), "{asked} queries over {FREES} frees (at most {most})");
    assert_eq!(a.stats().unwrap().pending_free_bytes, (8 * MIB) as u64, "s1 is still held");
    release_stream(s1);
    // Back within one gap of frees once the work is done.
    for _ in 0..MAX_POLL_GAP {
        let x = a.malloc(4 * MIB, Stream::DEFAULT).unwrap();
        a.free(x).unwrap();
    }
    assert_eq!(a.stats().unwrap().pending_free_bytes, 0, "the free came back");
    assert!(queries() - asked <= 2, "one poll found it done");
    fail_nth("aclrtQueryEventStatus", 0);
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    assert_eq!(usage(DEV).malloc_count, 0);
}
