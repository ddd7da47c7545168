//! A retired entry taken over by another pool brings none of its counts
//! along: the old pool keeps its allocs, frees and bytes handed out, each
//! under its pool kind, the new one starts at zero, and the allocator's
//! totals, whole and per kind, stay the sum.

use super::support::{allocator, drop_stream, emu_lock, finish, new_stream, set_capacity};
use crate::core::pools::config::PoolConfig;
use crate::core::PoolKind;

const MIB: usize = 1 << 20;

/// Pool p makes three allocs and frees on a stream, which is forgotten (p's
/// entry retires); pool q on a new stream takes the entry over and makes
/// one alloc.
#[test]
fn pool_counts_stay_with_their_pool_when_its_entry_is_reused() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let total_before = a.stats().unwrap().num_allocs;
    let kinds = || [PoolKind::Small, PoolKind::Large].map(|k| a.kind_stats(k).unwrap());
    let kinds_before = kinds();
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let s1 = new_stream();
    a.pool_begin(p, Some(s1)).unwrap();
    for _ in 0..3 {
        let x = a.malloc(4096, s1).unwrap();
        a.free(x).unwrap();
    }
    let big = a.malloc(3 * MIB, s1).unwrap();
    a.free(big).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    a.forget_stream(s1).unwrap();
    let before = a.pool_stats(p).unwrap();
    let q = a.pool_create(PoolConfig::default()).unwrap();
    let s2 = new_stream();
    a.pool_begin(q, Some(s2)).unwrap();
    let y = a.malloc(4096, s2).unwrap();
    let (sp, sq) = (a.pool_stats(p).unwrap(), a.pool_stats(q).unwrap());
    let total = a.stats().unwrap().num_allocs;
    let (whole, kinds_after) = (a.stats().unwrap(), kinds());
    a.free(y).unwrap();
    a.pool_end(q, Some(s2)).unwrap();
    assert_eq!(a.streams_served(), 1, "setup: q did not take p's entry over");
    assert_eq!((before.num_allocs, before.num_frees), (4, 4));
    assert_eq!((sp.num_allocs, sp.num_frees, sq.num_allocs, sq.num_frees), (4, 4, 1, 0));
    assert_eq!(total - total_before, 5, "the allocator's total lost or doubled a count");
    let small_bytes = 4 * 4096;
    assert_eq!((sp.allocated_bytes_total, sq.allocated_bytes_total), ((3 * 4096 + 3 * MIB) as u64, 4096));
    assert_eq!(whole.allocated_bytes_total, (small_bytes + 3 * MIB) as u64, "bytes lost or doubled");
    let rise = |k: usize, f: fn(&crate::core::Stats) -> u64| f(&kinds_after[k]) - f(&kinds_before[k]);
    assert_eq!((rise(0, |s| s.num_allocs), rise(1, |s| s.num_allocs)), (4, 1), "each kind keeps its own");
    assert_eq!(
        (rise(0, |s| s.allocated_bytes_total), rise(1, |s| s.allocated_bytes_total)),
        (small_bytes as u64, 3 * MIB as u64)
    );
    finish(a);
    drop_stream(s1);
    drop_stream(s2);
}
