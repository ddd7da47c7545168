//! A pool routed before a capture begins (torch_npu's order: NPUGraph's
//! capture_begin calls beginAllocateToPool before aclmdlRICaptureBegin),
//! whose entry and cached blocks predate the capture, so that every capture
//! allocation is a cache hit: the pool still becomes a graph pool, and
//! sleep and pool_empty_cache keep the memory the graph uses (Note
//! [capture]), and so does forget_stream of the capture's stream.

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity, MIB};
use crate::core::pools::config::PoolConfig;
use crate::runtime::Stream;

fn capture_begin(s: Stream) {
    // SAFETY: a live stream handle; mode 2 is RELAXED.
    assert_eq!(unsafe { ascendcl::aclmdlRICaptureBegin(s.raw() as *mut _, 2) }, 0);
}

fn capture_end(s: Stream) {
    let mut model = std::ptr::null_mut();
    // SAFETY: a capturing stream; `model` is writable.
    assert_eq!(unsafe { ascendcl::aclmdlRICaptureEnd(s.raw() as *mut _, &mut model) }, 0);
    // SAFETY: the model came from aclmdlRICaptureEnd and is destroyed once.
    assert_eq!(unsafe { ascendcl::aclmdlRIDestroy(model) }, 0);
}

fn graph_pool_keeps_what_its_capture_used(by_thread: bool) {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let s = new_stream();
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let route = if by_thread { None } else { Some(s) };
    a.pool_begin(p, route).unwrap();
    // Warm-up before the capture: the entry and the cached block exist.
    let w = a.malloc(8 * MIB, s).unwrap();
    a.free(w).unwrap();
    capture_begin(s);
    let x = a.malloc(8 * MIB, s).unwrap();
    assert_eq!(x, w, "the capture's allocation is the warm-up's cached block");
    a.free(x).unwrap();
    capture_end(s);
    a.pool_end(p, route).unwrap();
    let kept = a.pool_stats(p).unwrap().reserved_bytes;
    assert!(kept >= 8 * MIB as u64);
    a.pool_empty_cache(p).unwrap();
    assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, kept, "pool_empty_cache gave back a graph's memory");
    a.sleep_pools().unwrap();
    assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, kept, "sleep gave back the memory the graph uses");
    a.wake().unwrap();
    a.forget_stream(s).unwrap();
    assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, kept, "forget_stream gave back a graph pool's memory");
    a.pool_destroy(p).unwrap();
    assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, 0);
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
}

#[test]
fn a_stream_routed_capture_of_cache_hits_makes_a_graph_pool() {
    graph_pool_keeps_what_its_capture_used(false);
}

#[test]
fn a_thread_routed_capture_of_cache_hits_makes_a_graph_pool() {
    graph_pool_keeps_what_its_capture_used(true);
}
