//! Private pools (Note [pools]): routes, isolation, destroy, statistics,
//! snapshots.

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity, usage, DEV, MIB};
use crate::core::pools::config::{PoolConfig, SleepMode};
use crate::core::*;
use crate::error::Error;

fn invalid(r: crate::error::Result<()>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

/// Routes send a stream's (and a thread's) allocations to the pool; frees
/// go to the block's own pool, whose blocks serve only that pool again.
#[test]
fn routed_allocations_come_from_the_pool_and_its_blocks_serve_only_it() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let (s1, s2) = (new_stream(), new_stream());
    let p = a.pool_create(PoolConfig::default()).unwrap();
    assert_ne!(p, 0);
    a.pool_begin(p, Some(s1)).unwrap();
    let in_pool = a.malloc(4096, s1).unwrap();
    let outside = a.malloc(4096, s2).unwrap();
    assert_eq!(a.pool_stats(p).unwrap().allocated_bytes, a.query(in_pool).unwrap().size as u64);
    assert_eq!(a.pool_stats(0).unwrap().allocated_bytes, a.query(outside).unwrap().size as u64);
    a.pool_end(p, Some(s1)).unwrap();
    a.free(in_pool).unwrap();
    // The default pool on s1 does not get the pool's block...
    let default_s1 = a.malloc(4096, s1).unwrap();
    assert_ne!(default_s1, in_pool, "a pool's block served a default-pool request");
    // ...a thread route to the pool does.
    a.pool_begin(p, None).unwrap();
    let again = a.malloc(4096, s1).unwrap();
    assert_eq!(again, in_pool, "the pool's cached block is reused by the pool");
    a.pool_end(p, None).unwrap();
    for addr in [again, outside, default_s1] {
        a.free(addr).unwrap();
    }
    let totals = a.stats().unwrap();
    let (s0, sp) = (a.pool_stats(0).unwrap(), a.pool_stats(p).unwrap());
    assert_eq!(totals.reserved_bytes, s0.reserved_bytes + sp.reserved_bytes, "totals are over every pool");
    assert_eq!(totals.num_allocs, s0.num_allocs + sp.num_allocs);
    assert_eq!((sp.num_allocs, sp.num_frees, sp.allocated_bytes), (2, 2, 0));
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    drop_stream(s2);
    assert_eq!(usage(DEV).malloc_count, 0);
}
