//! `pool_empty_cache` (Note [pools]): one pool's cached memory goes back on
//! request, as torch_npu's `emptyCache(mempool_id)` asks; a pool that served
//! a graph capture keeps its memory until `pool_destroy`.

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity, usage, Baseline, DEV, MIB};
use crate::core::pools::config::PoolConfig;
use crate::error::Error;
use crate::runtime::Stream;

fn capture_begin(s: Stream) {
    // SAFETY: a live stream handle; mode 2 is RELAXED.
    assert_eq!(unsafe { ascendcl::aclmdlRICaptureBegin(s.raw() as *mut _, 2) }, 0);
}

fn capture_end(s: Stream) -> *mut std::ffi::c_void {
    let mut model = std::ptr::null_mut();
    // SAFETY: a capturing stream; `model` is writable.
    assert_eq!(unsafe { ascendcl::aclmdlRICaptureEnd(s.raw() as *mut _, &mut model) }, 0);
    model
}

fn cache_of(a: &crate::core::DeviceAllocator, pool: u64) -> u64 {
    let s = a.pool_stats(pool).unwrap();
    s.reserved_bytes - s.allocated_bytes
}

#[test]
fn pool_empty_cache_gives_back_one_pools_cache_but_not_a_graphs() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let base = Baseline::take();
    let (s1, s2) = (new_stream(), new_stream());
    let (p, g) = (a.pool_create(PoolConfig::default()).unwrap(), a.pool_create(PoolConfig::default()).unwrap());
    // A private pool with 8 MiB cached and a live block; the default pool with some cached too.
    a.pool_begin(p, Some(s1)).unwrap();
    let live = a.malloc(4096, s1).unwrap();
    let x = a.malloc(8 * MIB, s1).unwrap();
    a.free(x).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    let d = a.malloc(8 * MIB, s1).unwrap();
    a.free(d).unwrap();
    // A graph's pool: routed on a capturing stream, a block freed during the capture.
    capture_begin(s2);
    a.pool_begin(g, Some(s2)).unwrap();
    let gx = a.malloc(8 * MIB, s2).unwrap();
    a.free(gx).unwrap();
    a.pool_end(g, Some(s2)).unwrap();
    let model = capture_end(s2);
    let (cached_p, cached_g) = (cache_of(&a, p), cache_of(&a, g));
    assert!(cached_p >= 8 * MIB as u64 && cached_g >= 8 * MIB as u64, "{cached_p} {cached_g}");
    // empty_cache leaves private pools' caches.
    a.empty_cache().unwrap();
    assert_eq!((cache_of(&a, p), cache_of(&a, g)), (cached_p, cached_g));
    assert_eq!(a.pool_stats(0).unwrap().reserved_bytes, 0, "empty_cache gave back the default pool's cache");
    let d = a.malloc(8 * MIB, s1).unwrap();
    a.free(d).unwrap();
    let default_cached = cache_of(&a, 0);
    let mapped = base.vmm().mapped_bytes;
    // The private pool's cache goes back; its live block and the other pools' caches stay.
    let before = a.pool_stats(p).unwrap();
    a.pool_empty_cache(p).unwrap();
    let sp = a.pool_stats(p).unwrap();
    // What stays is the page under the live block.
    assert!(sp.reserved_bytes + 8 * MIB as u64 <= before.reserved_bytes, "before {before:?}\nafter {sp:?}");
    assert_eq!(sp.segments, 1, "the emptied range stays reserved: {sp:?}");
    assert_eq!(sp.active_blocks, 1);
    assert!(base.vmm().mapped_bytes <= mapped - 8 * MIB as i64, "the device did not get the pool's cache back");
    assert_eq!((cache_of(&a, 0), cache_of(&a, g)), (default_cached, cached_g));
    // The graph's pool keeps its memory: the graph may replay.
    a.pool_empty_cache(g).unwrap();
    assert_eq!(cache_of(&a, g), cached_g, "a graph pool's cache went back while the graph lives");
    // The pool works on after it; the default pool's own call.
    a.pool_begin(p, Some(s1)).unwrap();
    let y = a.malloc(8 * MIB, s1).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    assert_eq!(a.pool_stats(p).unwrap().active_blocks, 2);
    a.pool_empty_cache(0).unwrap();
    assert_eq!(cache_of(&a, 0), 0);
    assert!(matches!(a.pool_empty_cache(99), Err(Error::InvalidArgument(_))));
    // Destroyed, the graph's pool gives its memory back.
    // SAFETY: the model came from aclmdlRICaptureEnd and is destroyed once.
    assert_eq!(unsafe { ascendcl::aclmdlRIDestroy(model) }, 0);
    a.pool_destroy(g).unwrap();
    assert_eq!(a.pool_stats(g).unwrap().reserved_bytes, 0);
    for b in [live, y] {
        a.free(b).unwrap();
    }
    a.pool_destroy(p).unwrap();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    drop_stream(s2);
    assert_eq!(usage(DEV).malloc_count, 0);
}
