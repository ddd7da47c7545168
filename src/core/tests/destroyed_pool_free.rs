//! The free of a destroyed pool's last block (`free_flagged`) forgets that
//! pool's entry only: when the before-release hook runs, the entry may
//! retire and be taken over by another (pool, stream), whose cache, even a
//! captured graph pool's, must stay.

use super::support::{
    allocator, drop_stream, emu_lock, fail_nth, fault_pending, finish, hold_stream, new_stream, release_stream,
    set_capacity, MIB,
};
use crate::core::pools::config::PoolConfig;
use crate::core::DeviceAllocator;
use crate::runtime::Stream;
use std::ffi::c_void;

/// What the hook needs, and what it saw.
struct Ctx {
    a: *const DeviceAllocator,
    p: u64,
    q: u64,
    s2: Stream,
    other: Stream,
    capture: bool,
    armed: bool,
    q_reserved_in_hook: u64,
    model: usize,
}

/// The before-release hook: ends the recorded use of the destroyed pool's
/// block, empties that pool (its entry retires), then allocates on live
/// pool q's stream (q takes the retired entry over), once.
unsafe extern "C" fn hook(user: *mut c_void, _device: i32) {
    // SAFETY: the test's Ctx outlives the hook, which runs on the test's thread.
    let c = unsafe { &mut *(user as *mut Ctx) };
    if !c.armed {
        return;
    }
    c.armed = false;
    // SAFETY: as above; the allocator outlives the hook.
    let a = unsafe { &*c.a };
    release_stream(c.other);
    a.pool_empty_cache(c.p).unwrap();
    if c.capture {
        // SAFETY: emulator capture of a live stream of this test.
        assert_eq!(unsafe { ascendcl::aclmdlRICaptureBegin(c.s2.raw() as *mut _, 2) }, 0);
    }
    let y = a.malloc(8 * MIB, c.s2).unwrap();
    a.free(y).unwrap();
    if c.capture {
        let mut model = std::ptr::null_mut();
        // SAFETY: as above; `model` is writable, destroyed at the end of the test.
        assert_eq!(unsafe { ascendcl::aclmdlRICaptureEnd(c.s2.raw() as *mut _, &mut model) }, 0);
        c.model = model as usize;
    }
    c.q_reserved_in_hook = a.pool_stats(c.q).unwrap().reserved_bytes;
}

/// Pool p's block, used on another stream, is freed after p is destroyed
/// while q serves its own stream; returns q's reserved bytes as the hook
/// saw them and after the free.
fn free_last_block_of_destroyed_pool(capture: bool) -> (u64, u64) {
    let a = allocator("expandable_segments:true");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let q = a.pool_create(PoolConfig::default()).unwrap();
    let (s1, s2, other) = (new_stream(), new_stream(), new_stream());
    a.pool_begin(p, Some(s1)).unwrap();
    let x = a.malloc(8 * MIB, s1).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    a.record_stream(x, other).unwrap();
    hold_stream(other);
    a.pool_begin(q, Some(s2)).unwrap();
    a.pool_destroy(p).unwrap();
    let mut c = Ctx { a: &a, p, q, s2, other, capture, armed: true, q_reserved_in_hook: 0, model: 0 };
    a.set_before_release(Some((hook, &mut c as *mut Ctx as *mut c_void)));
    a.free(x).unwrap();
    a.set_before_release(None);
    let after = a.pool_stats(q).unwrap().reserved_bytes;
    a.pool_end(q, Some(s2)).unwrap();
    assert!(!c.armed, "setup: the hook did not run");
    if c.model != 0 {
        // SAFETY: the model the capture made, destroyed once.
        assert_eq!(unsafe { ascendcl::aclmdlRIDestroy(c.model as *mut _) }, 0);
    }
    a.pool_destroy(q).unwrap();
    finish(a);
    for s in [s1, s2, other] {
        drop_stream(s);
    }
    (c.q_reserved_in_hook, after)
}

/// A live pool that took the destroyed pool's retired entry over keeps its
/// cache through the rest of that free.
#[test]
fn free_of_a_destroyed_pools_last_block_keeps_the_pool_that_took_its_entry() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let (in_hook, after) = free_last_block_of_destroyed_pool(false);
    assert!(in_hook > 0, "setup: q cached nothing");
    assert_eq!(after, in_hook, "the free of a destroyed pool's block emptied live pool q's cache");
}

/// The same with q capturing: a live graph pool's memory stays until its
/// pool_destroy.
#[test]
fn free_of_a_destroyed_pools_last_block_keeps_a_graph_pools_memory() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let (in_hook, after) = free_last_block_of_destroyed_pool(true);
    assert!(in_hook > 0, "setup: q cached nothing");
    assert_eq!(after, in_hook, "a live graph pool's memory went back at another pool's free");
}

/// What the refusing hook needs, and what it saw.
struct Refuse {
    a: *const DeviceAllocator,
    p: u64,
    r: u64,
    s2: Stream,
    armed: bool,
    y: usize,
    r_reserved_in_hook: u64,
}

/// The before-release hook of a fixed-segment free in destroyed pool p,
/// while p's whole segment is out of its cache: empties p (which retires
/// its entries that hold nothing), lets a new pool r allocate on its own
/// stream (a new (pool, stream) takes a retired entry over), and makes
/// the segment's aclrtFree fail.
unsafe extern "C" fn refusing_hook(user: *mut c_void, _device: i32) {
    // SAFETY: the test's Refuse outlives the hook, which runs on the test's thread.
    let c = unsafe { &mut *(user as *mut Refuse) };
    if !c.armed {
        return;
    }
    c.armed = false;
    // SAFETY: as above; the allocator outlives the hook.
    let a = unsafe { &*c.a };
    a.pool_empty_cache(c.p).unwrap();
    a.pool_begin(c.r, Some(c.s2)).unwrap();
    c.y = a.malloc(8 * MIB, c.s2).unwrap();
    a.pool_end(c.r, Some(c.s2)).unwrap();
    c.r_reserved_in_hook = a.pool_stats(c.r).unwrap().reserved_bytes;
    fail_nth("aclrtFree", 1);
}

/// A destroyed pool's segment whose aclrtFree is refused at the free of its
/// last block goes back to that pool's entry: never into the cache of a
/// pool that took the entry over while the segment was out.
#[test]
fn a_refused_segment_of_a_destroyed_pool_stays_out_of_the_pool_that_took_its_entry() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let r = a.pool_create(PoolConfig::default()).unwrap();
    let (s1, s2) = (new_stream(), new_stream());
    a.pool_begin(p, Some(s1)).unwrap();
    let x = a.malloc(8 * MIB, s1).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    a.pool_destroy(p).unwrap();
    let mut c = Refuse { a: &a, p, r, s2, armed: true, y: 0, r_reserved_in_hook: 0 };
    a.set_before_release(Some((refusing_hook, &mut c as *mut Refuse as *mut c_void)));
    a.free(x).unwrap();
    a.set_before_release(None);
    let refused = fault_pending("aclrtFree") == 0;
    fail_nth("aclrtFree", 0);
    assert!(!c.armed, "setup: the hook did not run");
    assert!(refused, "setup: the segment's aclrtFree was not called");
    let r_reserved = a.pool_stats(r).unwrap().reserved_bytes;
    a.check_invariants().unwrap();
    a.free(c.y).unwrap();
    a.pool_destroy(r).unwrap();
    assert_eq!(
        r_reserved, c.r_reserved_in_hook,
        "pool r's cache took in the destroyed pool's segment whose give-back was refused"
    );
    // What p's entry kept is given back by the next empty_cache at the latest.
    a.empty_cache().unwrap();
    assert_eq!(a.stats().unwrap().reserved_bytes, 0, "the refused segment was not given back later");
    finish(a);
    for s in [s1, s2] {
        drop_stream(s);
    }
}
