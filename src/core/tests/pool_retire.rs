//! Pool entries retire (Note [pools], `forget`): a destroyed pool's entries
//! once nothing is left in them, and a forgotten stream's private-pool
//! entries, give their table slots and address ranges back.

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity, Baseline, MIB};
use crate::core::pools::config::PoolConfig;

/// 500 pools created, routed on fresh streams, used and destroyed over time
/// (in turn: destroyed after their blocks are freed, before, and with a
/// block freed only after the next pools came and went): the stream table
/// and the reserved address ranges stay as large as what is in use at once.
#[test]
fn five_hundred_pools_come_and_go_in_a_bounded_table() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let base = Baseline::take();
    let s = new_stream();
    let mut late: Option<usize> = None;
    let mut most_entries = 0;
    for i in 0..500 {
        let p = a.pool_create(PoolConfig::default()).unwrap();
        a.pool_begin(p, Some(s)).unwrap();
        let small = a.malloc(4096, s).unwrap();
        let big = a.malloc(8 * MIB, s).unwrap();
        a.pool_end(p, Some(s)).unwrap();
        match i % 3 {
            0 => {
                a.free(small).unwrap();
                a.free(big).unwrap();
                a.pool_destroy(p).unwrap();
            }
            1 => {
                a.pool_destroy(p).unwrap();
                a.free(small).unwrap();
                a.free(big).unwrap();
            }
            _ => {
                a.free(small).unwrap();
                a.pool_destroy(p).unwrap();
                if let Some(prev) = late.replace(big) {
                    a.free(prev).unwrap();
                }
            }
        }
        most_entries = most_entries.max(a.streams_served());
        let v = base.vmm();
        assert!(v.reserved_ranges <= 4, "pool {i}: {} ranges of destroyed pools stay reserved", v.reserved_ranges);
    }
    a.free(late.take().unwrap()).unwrap();
    assert!(most_entries <= 3, "the stream table grew to {most_entries} entries for pools used one at a time");
    let st = a.stats().unwrap();
    assert_eq!((st.segments, st.address_space_bytes, st.allocated_bytes), (0, 0, 0), "{st:?}");
    assert_eq!(base.vmm().reserved_ranges, 0);
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
}

/// forget_stream gives back a live private pool's cache on that stream and
/// retires its entry, not only the default pool's; a
/// later use starts afresh, and the slot serves the next new pair. (A pool
/// that served a graph capture keeps its entry and memory: `pool_capture`.)
#[test]
fn forget_stream_retires_private_pool_entries() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let base = Baseline::take();
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let s1 = new_stream();
    a.pool_begin(p, Some(s1)).unwrap();
    let x = a.malloc(8 * MIB, s1).unwrap();
    a.free(x).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    assert!(a.pool_stats(p).unwrap().reserved_bytes > 0);
    let released = a.forget_stream(s1).unwrap();
    assert!(released >= 8 * MIB, "forget_stream gave back {released} bytes of the pool's cache");
    let sp = a.pool_stats(p).unwrap();
    assert_eq!((sp.reserved_bytes, sp.segments), (0, 0), "{sp:?}");
    assert_eq!(base.vmm().reserved_ranges, 0, "the pool's range on the forgotten stream stays reserved");
    drop_stream(s1);
    // The retired slot is taken over by the next new pair.
    let served = a.streams_served();
    let s2 = new_stream();
    a.pool_begin(p, Some(s2)).unwrap();
    let y = a.malloc(4096, s2).unwrap();
    a.pool_end(p, Some(s2)).unwrap();
    assert_eq!(a.streams_served(), served, "a new (pool, stream) pair took a fresh slot");
    a.free(y).unwrap();
    a.pool_destroy(p).unwrap();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s2);
}

/// A thread that exits inside a thread route (`pool_begin(pool, None)`)
/// takes its route with it: the pool can be destroyed afterwards (it used
/// to be refused for good, the route still counted), and allocations of
/// other threads go to the default pool again.
#[test]
fn a_thread_exiting_inside_a_route_does_not_keep_its_pool() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s = new_stream();
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let q = a.pool_create(PoolConfig::default()).unwrap();
    let in_pool = std::thread::scope(|t| {
        t.spawn(|| {
            a.pool_begin(p, None).unwrap();
            a.pool_begin(q, None).unwrap();
            a.pool_end(q, None).unwrap();
            a.malloc(4096, s).unwrap()
        })
        .join()
        .unwrap()
    });
    assert_eq!(a.pool_stats(p).unwrap().active_blocks, 1);
    let outside = a.malloc(4096, s).unwrap();
    assert_eq!(a.pool_stats(0).unwrap().active_blocks, 1, "a request of this thread went to the exited thread's pool");
    a.pool_destroy(p).unwrap();
    a.pool_destroy(q).unwrap();
    a.free(in_pool).unwrap();
    a.free(outside).unwrap();
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
}

/// A default-pool entry retired by forget_stream is not taken over by the
/// same stream in a private pool (a malloc that found it before it retired
/// could not tell the two apart); another stream's pair takes it.
#[test]
fn a_forgotten_default_entry_does_not_go_to_its_stream_in_a_pool() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let (s, t) = (new_stream(), new_stream());
    let x = a.malloc(4096, s).unwrap();
    a.free(x).unwrap();
    a.forget_stream(s).unwrap();
    let served = a.streams_served();
    let p = a.pool_create(PoolConfig::default()).unwrap();
    a.pool_begin(p, None).unwrap();
    let in_s = a.malloc(4096, s).unwrap();
    assert_eq!(a.streams_served(), served + 1, "(pool, s) took the slot (0, s) retired from");
    let in_t = a.malloc(4096, t).unwrap();
    assert_eq!(a.streams_served(), served + 1, "(pool, t) did not take the retired slot");
    a.pool_end(p, None).unwrap();
    for b in [in_s, in_t] {
        a.free(b).unwrap();
    }
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
    drop_stream(t);
}
