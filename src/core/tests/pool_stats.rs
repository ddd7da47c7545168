//! `pool_stats` reports a pool's own figures (Note [pools]): the device
//! calls made for its memory, and its peaks as a whole rather than the sum
//! of its streams' peaks.

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity, usage, DEV, MIB};
use crate::core::pools::config::PoolConfig;

/// A pool used on two streams one after the other: its allocated peak is
/// the most it held at once (not the two streams' peaks added), the device
/// calls made for its memory are its own and, with the default pool's,
/// add up to the allocator's; after destroy its reserved peak is what it
/// held at most.
fn pool_figures_are_its_own(config: &str) {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator(config);
    let (s1, s2) = (new_stream(), new_stream());
    let p = a.pool_create(PoolConfig::default()).unwrap();
    // Some default-pool traffic, so the allocator's counters are not the pool's.
    let outside = a.malloc(3 * MIB, s1).unwrap();
    a.pool_begin(p, None).unwrap();
    let first = a.malloc(8 * MIB, s1).unwrap();
    let size = a.query(first).unwrap().size as u64;
    a.free(first).unwrap();
    let second = a.malloc(8 * MIB, s2).unwrap();
    a.pool_end(p, None).unwrap();
    let sp = a.pool_stats(p).unwrap();
    assert_eq!(sp.allocated_bytes, size);
    assert_eq!(sp.allocated_bytes_peak, size, "the pool never held more than one 8 MiB block at once: {sp:?}");
    assert!(sp.requested_bytes_peak <= size && sp.requested_bytes_peak >= 8 * MIB as u64, "{sp:?}");
    let all = a.stats().unwrap();
    let s0 = a.pool_stats(0).unwrap();
    let grown = |s: &crate::core::Stats| s.num_device_mallocs + s.num_maps;
    assert!(grown(&sp) >= 2, "two streams' shards grew for the pool: {sp:?}");
    assert!(grown(&s0) >= 1, "the default pool grew once: {s0:?}");
    assert_eq!(grown(&sp) + grown(&s0), grown(&all), "pool {sp:?}\ndefault {s0:?}\nall {all:?}");
    assert_eq!(sp.num_physical_mallocs + s0.num_physical_mallocs, all.num_physical_mallocs);
    assert!(sp.reserved_bytes_peak >= sp.reserved_bytes && sp.reserved_bytes > 0, "{sp:?}");
    a.free(second).unwrap();
    a.pool_destroy(p).unwrap();
    let sp = a.pool_stats(p).unwrap();
    assert_eq!(sp.reserved_bytes, 0, "{sp:?}");
    assert!(sp.reserved_bytes_peak >= 2 * size, "both streams' memory was the pool's at once: {sp:?}");
    assert!(sp.num_syncs >= 1, "destroy synchronized the pool's streams: {sp:?}");
    assert!(sp.num_device_frees + sp.num_unmaps >= 2, "destroy gave the pool's memory back: {sp:?}");
    assert_eq!(s0.num_device_frees + s0.num_unmaps, 0, "the default pool gave nothing back");
    // A reset makes the peaks the current figures.
    a.reset_peak_stats().unwrap();
    let sp = a.pool_stats(p).unwrap();
    assert_eq!((sp.allocated_bytes_peak, sp.reserved_bytes_peak), (0, 0), "{sp:?}");
    a.free(outside).unwrap();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    drop_stream(s2);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn pool_figures_are_its_own_fixed() {
    pool_figures_are_its_own("expandable_segments:false");
}

#[test]
fn pool_figures_are_its_own_expandable() {
    pool_figures_are_its_own("expandable_segments:true");
}
