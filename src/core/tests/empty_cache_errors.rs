//! `empty_cache` finishes its work when the runtime refuses a call: every
//! pass, the cached handles' free and the retirement of destroyed pools'
//! entries run, and the first error is the answer.

use super::support::{allocator, emu_lock, fail_nth, fault_pending, new_stream, set_capacity, Baseline, MIB};
use crate::core::pools::config::PoolConfig;
use crate::runtime::Stream;

const UNMAP: &str = "aclrtUnmapMem";

/// Puts the emulator back when the test ends, even by a panic.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        fail_nth(UNMAP, 0);
        set_capacity(1 << 30);
    }
}

/// A destroyed pool's entry left holding an empty range (pool_destroy's
/// first unmap refused), and two free 8 MiB handles of the default pool;
/// empty_cache's first unmap refused: the rest still goes back, the pool's
/// entry retires, and the refusal is reported.
#[test]
fn empty_cache_finishes_after_a_refused_unmap() {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(8 << 30);
    let base = Baseline::take();
    let a = allocator("expandable_segments:true,map_ahead:false");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let s = new_stream();
    a.pool_begin(p, Some(s)).unwrap();
    let x = a.malloc(8 * MIB, s).unwrap();
    a.pool_end(p, Some(s)).unwrap();
    a.free(x).unwrap();
    let mine: Vec<usize> = (0..2).map(|_| a.malloc(8 * MIB, Stream::DEFAULT).unwrap()).collect();
    for q in mine {
        a.free(q).unwrap();
    }
    // pool_destroy's second pass unmaps what its first could not; the range
    // it emptied stays, and so does the pool's entry.
    fail_nth(UNMAP, 1);
    a.pool_destroy(p).unwrap();
    assert_eq!(fault_pending(UNMAP), 0, "setup: pool_destroy made no unmap");
    let served = a.streams_served();
    assert_eq!(base.vmm().reserved_ranges, 2, "setup: the destroyed pool's range was released");
    assert_eq!(a.stats().unwrap().reserved_bytes, 16 * MIB as u64);
    fail_nth(UNMAP, 1);
    let e = a.empty_cache().expect_err("the refused unmap is not reported");
    assert_eq!(fault_pending(UNMAP), 0);
    assert!(e.to_string().contains("unmapping"), "not the refusal: {e}");
    let st = a.stats().unwrap();
    assert_eq!((st.reserved_bytes, st.cached_handle_bytes), (0, 0), "memory stayed after the refusal");
    assert_eq!(base.vmm().physical_count, 0, "the emulator still holds handles");
    assert_eq!(base.vmm().reserved_ranges, 0, "a range that held nothing stayed");
    // The destroyed pool's entry retired: the next new (pool, stream)
    // pair takes its slot.
    let q = a.pool_create(PoolConfig::default()).unwrap();
    let t = new_stream();
    a.pool_begin(q, Some(t)).unwrap();
    let y = a.malloc(4096, t).unwrap();
    a.pool_end(q, Some(t)).unwrap();
    assert_eq!(a.streams_served(), served, "the destroyed pool's entry did not retire");
    a.free(y).unwrap();
    a.pool_destroy(q).unwrap();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    super::support::drop_stream(s);
    super::support::drop_stream(t);
}
