//! `pool_live_blocks` and `pool_restore` (Note [pool checkpoints]): a pool's
//! live blocks set back to a list taken earlier, as PyTorch's graph trees
//! set a private pool back before recording a new branch.

use super::support::{allocator, check_fill, drop_stream, emu_lock, fill, finish, new_stream, set_capacity, MIB};
use crate::core::pools::checkpoint::LiveBlock;
use crate::core::pools::config::PoolConfig;
use crate::core::DeviceAllocator;
use crate::error::Error;
use crate::runtime::Stream;

fn in_pool(a: &DeviceAllocator, p: u64, s: Stream, size: usize) -> usize {
    a.pool_begin(p, Some(s)).unwrap();
    let x = a.malloc(size, s).unwrap();
    a.pool_end(p, Some(s)).unwrap();
    x
}

fn refused(r: crate::error::Result<impl std::fmt::Debug>, words: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(words), "{m}"),
        other => panic!("expected a refusal saying {words:?}, got {other:?}"),
    }
}

fn checkpoint_and_restore(config: &str) {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(config);
    let s = new_stream();
    let p = a.pool_create(PoolConfig::default()).unwrap();
    // The state after a "recording": blocks of both pool kinds, one of them freed already.
    let x = in_pool(&a, p, s, 3 * MIB);
    let y = in_pool(&a, p, s, 200 << 10);
    let z = in_pool(&a, p, s, 5 * MIB);
    let gone = in_pool(&a, p, s, 2 * MIB);
    a.free(gone).unwrap();
    for (addr, byte) in [(x, 1), (y, 2), (z, 3)] {
        fill(addr, 4096, byte);
    }
    let point = a.pool_live_blocks(p).unwrap();
    assert_eq!(point.iter().map(|b| b.addr).collect::<Vec<_>>(), {
        let mut v = vec![x, y, z];
        v.sort();
        v
    });
    assert!(point.iter().all(|b| b.stream == s && b.size >= b.requested));
    assert_eq!(point.iter().find(|b| b.addr == y).unwrap().requested, 200 << 10);
    let stats = a.pool_stats(p).unwrap();

    // A later branch: x dies, new blocks come, the first in part of x's memory.
    a.free(x).unwrap();
    let later: Vec<usize> = [1536 << 10, 100 << 10, 7 * MIB].iter().map(|&n| in_pool(&a, p, s, n)).collect();
    let default_block = a.malloc(MIB, s).unwrap();
    let live_then = a.pool_live_blocks(p).unwrap().len();
    assert_eq!(live_then, 5);

    // Refusals change nothing.
    let mut overlapping = point.clone();
    overlapping.push(LiveBlock { addr: z + 4096, size: 4096, requested: 4096, stream: s });
    refused(a.pool_restore(p, &overlapping), "overlap");
    let foreign = LiveBlock { addr: default_block, size: MIB, requested: MIB, stream: s };
    refused(a.pool_restore(p, &[foreign]), "not in the pool's memory");
    let zero = LiveBlock { size: 0, ..point[0] };
    refused(a.pool_restore(p, &[zero]), "bytes for a request");
    refused(a.pool_restore(99, &point), "does not exist");
    refused(a.pool_restore(0, &[]), "pool 0");
    let off = LiveBlock { addr: point[0].addr + 256, ..point[0] };
    refused(a.pool_restore(p, &[off]), "512-byte units");
    let nothing = LiveBlock { requested: 0, ..point[0] };
    refused(a.pool_restore(p, &[nothing]), "request of 0");
    let elsewhere = LiveBlock { stream: Stream::DEFAULT, ..point[0] };
    refused(a.pool_restore(p, &[elsewhere]), "was listed on stream");
    // A live block another stream used, in the way of x: its free would wait.
    let s2 = new_stream();
    assert_eq!(later[0], x, "the first later block did not take x's memory");
    a.record_stream(later[0], s2).unwrap();
    refused(a.pool_restore(p, &point), "other streams");
    a.erase_stream(later[0], s2).unwrap();
    // One that would be freed, away from the checkpoint's blocks, too: its free would wait.
    a.record_stream(later[2], s2).unwrap();
    refused(a.pool_restore(p, &point), "would be freed, and other streams used it");
    a.erase_stream(later[2], s2).unwrap();
    assert_eq!(a.pool_live_blocks(p).unwrap().len(), live_then, "a refusal changed the pool");

    // The restore: the later blocks are freed, x is live again at its address, y and z stay.
    let r = a.pool_restore(p, &point).unwrap();
    let mut freed_expected = later.clone();
    freed_expected.sort();
    assert_eq!(r.freed, freed_expected);
    assert_eq!(r.made, vec![x]);
    assert_eq!(a.pool_live_blocks(p).unwrap(), point);
    let after = a.pool_stats(p).unwrap();
    assert_eq!(
        (after.active_blocks, after.allocated_bytes, after.requested_bytes),
        (stats.active_blocks, stats.allocated_bytes, stats.requested_bytes)
    );
    assert!(check_fill(y, 4096, 2) && check_fill(z, 4096, 3), "a kept block's data changed");
    fill(x, 3 * MIB, 9);
    // New blocks of the pool keep off the restored ones.
    let fresh: Vec<usize> = [3 * MIB, 100 << 10, 2 * MIB, 150 << 10].iter().map(|&n| in_pool(&a, p, s, n)).collect();
    let all = a.pool_live_blocks(p).unwrap();
    for w in all.windows(2) {
        assert!(w[0].addr + w[0].size <= w[1].addr, "blocks overlap: {w:?}");
    }
    assert!(check_fill(x, 3 * MIB, 9));
    // The restored blocks free as any other, and the pool's accounts balance.
    for b in fresh.into_iter().chain([x, y, z, default_block]) {
        a.free(b).unwrap();
    }
    let end = a.pool_stats(p).unwrap();
    assert_eq!((end.active_blocks, end.allocated_bytes, end.requested_bytes), (0, 0, 0));

    // Memory given back since: the checkpoint no longer applies.
    a.pool_empty_cache(p).unwrap();
    refused(a.pool_restore(p, &point), "given back");
    assert!(a.pool_live_blocks(p).unwrap().is_empty());
    a.pool_destroy(p).unwrap();
    finish(a);
    drop_stream(s);
    drop_stream(s2);
}

#[test]
fn a_pools_live_blocks_are_set_back_to_a_checkpoint_expandable() {
    checkpoint_and_restore("expandable_segments:true");
}

#[test]
fn a_pools_live_blocks_are_set_back_to_a_checkpoint_fixed() {
    checkpoint_and_restore("expandable_segments:false");
}

/// A no_split pool's blocks are whole handles (whole segments in fixed
/// mode): a restore that would cut a handle, or a segment, another block
/// may take the rest of, is refused; one of whole pieces goes through.
fn no_split_restore(config: &str) {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(config);
    let s = new_stream();
    let p = a.pool_create(PoolConfig { no_split: true, ..PoolConfig::default() }).unwrap();
    let keep = in_pool(&a, p, s, MIB);
    let x = in_pool(&a, p, s, MIB);
    let point = a.pool_live_blocks(p).unwrap();
    a.free(x).unwrap();
    // x's memory is given back; one 4 MiB piece (handle, or segment) comes
    // where x was, and is freed.
    a.pool_empty_cache(p).unwrap();
    let wide = in_pool(&a, p, s, 3 * MIB);
    a.free(wide).unwrap();
    // In a range it lands where x was; a fixed segment may land elsewhere.
    assert!(wide == x || config.contains("false"), "{wide:#x} {x:#x}");
    if wide == x {
        refused(a.pool_restore(p, &point), "no_split blocks are whole pieces");
        assert_eq!(a.pool_live_blocks(p).unwrap().len(), 1, "nothing changed");
    }
    // Whole pieces restore.
    let whole = LiveBlock { addr: wide, size: 4 * MIB, requested: 3 * MIB, stream: s };
    let mut at_wide = a.pool_live_blocks(p).unwrap();
    at_wide.push(whole);
    a.pool_restore(p, &at_wide).unwrap();
    for b in [keep, wide] {
        a.free(b).unwrap();
    }
    a.pool_destroy(p).unwrap();
    finish(a);
    drop_stream(s);
}

#[test]
fn a_no_split_pool_is_restored_only_in_whole_pieces() {
    no_split_restore("expandable_segments:true");
    no_split_restore("expandable_segments:false");
}
