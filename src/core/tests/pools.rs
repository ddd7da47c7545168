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

/// Nesting: the innermost route wins; pool_end must name it, and a wrong
/// one is INVALID_ARGUMENT and changes nothing.
#[test]
fn routes_nest_and_pool_end_names_the_innermost() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let (p1, p2) = (a.pool_create(PoolConfig::default()).unwrap(), a.pool_create(PoolConfig::default()).unwrap());
    a.pool_begin(p1, Some(s1)).unwrap();
    a.pool_begin(p2, Some(s1)).unwrap();
    let before = a.stats().unwrap();
    let m = invalid(a.pool_end(p1, Some(s1)));
    assert!(m.contains(&format!("pool {p2}")), "{m}");
    assert!(invalid(a.pool_end(p1, None)).contains("no active route"));
    assert_eq!(a.stats().unwrap(), before, "a refused pool_end changes nothing");
    let in_p2 = a.malloc(1000, s1).unwrap();
    a.pool_end(p2, Some(s1)).unwrap();
    let in_p1 = a.malloc(1000, s1).unwrap();
    // A thread route begun later wins over the stream's.
    a.pool_begin(p2, None).unwrap();
    let in_p2_by_thread = a.malloc(1000, s1).unwrap();
    a.pool_end(p2, None).unwrap();
    a.pool_end(p1, Some(s1)).unwrap();
    let in_default = a.malloc(1000, s1).unwrap();
    let sizes = |p| a.pool_stats(p).unwrap().active_blocks;
    assert_eq!((sizes(0), sizes(p1), sizes(p2)), (1, 1, 2));
    for addr in [in_p2, in_p1, in_p2_by_thread, in_default] {
        a.free(addr).unwrap();
    }
    a.teardown().unwrap();
    drop_stream(s1);
}

/// Destroy: pool 0 never; not while routed; afterwards no routes, ids not
/// reused, cached memory back at once, live blocks valid until freed.
#[test]
fn destroy_rules_and_what_goes_back() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    assert!(invalid(a.pool_destroy(0)).contains("default pool"));
    let p = a.pool_create(PoolConfig::default()).unwrap();
    a.pool_begin(p, Some(s1)).unwrap();
    assert!(invalid(a.pool_destroy(p)).contains("active route"));
    let cached = a.malloc(4 * MIB, s1).unwrap();
    let live = a.malloc(30 * MIB, s1).unwrap();
    a.pool_end(p, Some(s1)).unwrap();
    a.free(cached).unwrap();
    // empty_cache leaves a live pool's cache.
    a.empty_cache().unwrap();
    let held = a.pool_stats(p).unwrap().reserved_bytes;
    assert!(held >= 34 * MIB as u64, "the pool's cache stayed: {held}");
    a.pool_destroy(p).unwrap();
    let after = a.pool_stats(p).unwrap();
    assert_eq!(after.reserved_bytes, 30 * MIB as u64, "only the live block's segment stays");
    assert_eq!(a.stats().unwrap().reserved_bytes, after.reserved_bytes);
    crate::core::tests::support::fill(live, 30 * MIB, 0x5a);
    assert!(crate::core::tests::support::check_fill(live, 30 * MIB, 0x5a), "the live block stays valid");
    assert!(invalid(a.pool_begin(p, Some(s1))).contains("destroyed"));
    assert!(invalid(a.pool_begin(p, None)).contains("destroyed"));
    assert!(invalid(a.pool_destroy(p)).contains("destroyed"));
    assert!(invalid(a.pool_begin(99, None)).contains("does not exist"));
    a.free(live).unwrap();
    assert_eq!(a.stats().unwrap().reserved_bytes, 0, "the last free gave the segment back");
    let q = a.pool_create(PoolConfig::default()).unwrap();
    assert!(q > p, "ids are never reused");
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
    assert_eq!(usage(DEV).malloc_count, 0);
}

/// A pool's cache serves no other pool's request: not by reuse, and not
/// through the out-of-memory ladder unless the pool has use_on_oom. With it,
/// a free block of the pool on the request's stream serves a request of the
/// default pool as the pool's block, with no device call (torch_npu's
/// `try_mempool_fallback`); on another stream, or too small, the pool's
/// cache is given back for the request instead.
#[test]
fn the_ladder_takes_a_pools_cache_only_with_use_on_oom() {
    for use_on_oom in [false, true] {
        let _g = emu_lock();
        set_capacity(1 << 30);
        let a = allocator("expandable_segments:false");
        let p = a.pool_create(PoolConfig { sleep: SleepMode::Keep, use_on_oom, ..Default::default() }).unwrap();
        a.pool_begin(p, None).unwrap();
        let big = a.malloc(600 * MIB, Stream::DEFAULT).unwrap();
        a.pool_end(p, None).unwrap();
        a.free(big).unwrap();
        // 600 MiB cached in the pool; 600 more do not fit the 1 GiB device.
        let calls = usage(DEV);
        let r = a.malloc(600 * MIB, Stream::DEFAULT);
        if use_on_oom {
            let addr = r.expect("use_on_oom serves the request from the pool's cache");
            assert_eq!(addr, big, "the pool's own block");
            let pool = a.pool_stats(p).unwrap();
            assert_eq!((pool.allocated_bytes, pool.reserved_bytes), (600 * MIB as u64, 600 * MIB as u64));
            let now = usage(DEV);
            assert_eq!((now.malloc_count, now.syncs), (calls.malloc_count, calls.syncs), "no device call");
            a.free(addr).unwrap();
            let pool = a.pool_stats(p).unwrap();
            assert_eq!((pool.allocated_bytes, pool.reserved_bytes), (0, 600 * MIB as u64), "freed into the pool");
            // On another stream the pool's block does not serve: its cache
            // is given back and the request grows its own pool.
            let s1 = new_stream();
            let addr = a.malloc(600 * MIB, s1).expect("the pool's cache is given back for it");
            assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, 0);
            a.free(addr).unwrap();
            a.teardown().unwrap();
            drop_stream(s1);
        } else {
            assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
            assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, 600 * MIB as u64, "the pool kept its cache");
            a.teardown().unwrap();
        }
        assert_eq!(usage(DEV).malloc_count, 0);
    }
}

/// use_on_oom changed after the pool served blocks: on, the ladder serves
/// the request from the pool's cache; off again, it does not (the change
/// reaches the pool's existing streams); pool 0 and unknown pools are
/// refused.
#[test]
fn use_on_oom_set_after_the_pool_served_takes_effect_both_ways() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    a.pool_begin(p, None).unwrap();
    let big = a.malloc(600 * MIB, Stream::DEFAULT).unwrap();
    a.pool_end(p, None).unwrap();
    a.free(big).unwrap();
    a.pool_set_use_on_oom(p, true).unwrap();
    let addr = a.malloc(600 * MIB, Stream::DEFAULT).expect("the pool's cache goes to the request");
    assert_eq!(a.pool_stats(p).unwrap().allocated_bytes, 600 * MIB as u64, "served as the pool's block");
    a.free(addr).unwrap();
    a.pool_set_use_on_oom(p, false).unwrap();
    let r = a.malloc(600 * MIB, Stream::DEFAULT);
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, 600 * MIB as u64, "the pool kept its cache");
    for bad in [0, p + 1] {
        let e = a.pool_set_use_on_oom(bad, true).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
    a.teardown().unwrap();
    assert_eq!(usage(DEV).malloc_count, 0);
}

/// The snapshots show each segment's pool: PyTorch's `segment_pool_id`.
#[test]
fn pytorch_snapshot_shows_each_segments_pool() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let outside = a.malloc(MIB, Stream::DEFAULT).unwrap();
    a.pool_begin(p, None).unwrap();
    let inside = a.malloc(5 * MIB, Stream::DEFAULT).unwrap();
    a.pool_end(p, None).unwrap();
    let doc = a.pytorch_snapshot().unwrap();
    let segments = doc.get("segments").and_then(|v| v.as_list()).unwrap();
    let mut seen = Vec::new();
    for seg in segments {
        let addr = seg.get("address").and_then(|v| v.as_int()).unwrap() as usize;
        let size = seg.get("total_size").and_then(|v| v.as_int()).unwrap() as usize;
        let id = match seg.get("segment_pool_id") {
            Some(crate::core::report::pytorch_snapshot::Value::Tuple(t)) => {
                (t[0].as_int().unwrap(), t[1].as_int().unwrap())
            }
            other => panic!("segment_pool_id: {other:?}"),
        };
        let holds = |b: usize| (addr..addr + size).contains(&b);
        if holds(outside) {
            seen.push(("outside", id));
        }
        if holds(inside) {
            seen.push(("inside", id));
        }
    }
    seen.sort();
    assert_eq!(seen, vec![("inside", (0, p as i64)), ("outside", (0, 0))]);
    a.free(outside).unwrap();
    a.free(inside).unwrap();
    // The sleep paths see every pool with its mode and shards.
    let listed = a.pool_listing();
    assert_eq!(listed, vec![(0, SleepMode::Keep, 2), (p, SleepMode::Keep, 2)]);
    a.teardown().unwrap();
}

/// The JSON snapshot tells a private pool's segment from the default
/// pool's on the same stream and of the same kind: `pool_id`.
#[test]
fn json_snapshot_shows_each_segments_pool_id() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let outside = a.malloc(5 * MIB, Stream::DEFAULT).unwrap();
    a.pool_begin(p, None).unwrap();
    let inside = a.malloc(5 * MIB, Stream::DEFAULT).unwrap();
    a.pool_end(p, None).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&a.snapshot_json().unwrap()).unwrap();
    let mut seen = Vec::new();
    for seg in doc["segments"].as_array().unwrap() {
        let addr = seg["address"].as_u64().unwrap() as usize;
        let size = seg["size"].as_u64().unwrap() as usize;
        let keys = (seg["pool"].as_str().unwrap(), seg["stream"].as_u64().unwrap(), seg["pool_id"].as_u64());
        let holds = |b: usize| (addr..addr + size).contains(&b);
        if holds(outside) {
            seen.push(("outside", keys));
        }
        if holds(inside) {
            seen.push(("inside", keys));
        }
    }
    seen.sort();
    assert_eq!(seen, vec![("inside", ("large", 0, Some(p))), ("outside", ("large", 0, Some(0)))]);
    // The struct carries it too.
    let ids: Vec<u64> = a.snapshot().unwrap().segments.iter().map(|s| s.pool_id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&0) && ids.contains(&p), "{ids:?}");
    a.free(outside).unwrap();
    a.free(inside).unwrap();
    a.teardown().unwrap();
}

/// Threads each routed to their own pool (thread routes), on one shared
/// stream, allocating and freeing at once, while another thread allocates
/// unrouted: every block lands in its thread's pool, and no block of one
/// pool is ever live at the same address as another pool's.
#[test]
fn concurrent_thread_routes_keep_pools_apart() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s = new_stream();
    let pools: Vec<u64> = (0..THREADS).map(|_| a.pool_create(PoolConfig::default()).unwrap()).collect();
    let live = std::sync::Mutex::new(std::collections::HashMap::<usize, usize>::new());
    std::thread::scope(|scope| {
        for t in 0..=THREADS {
            let (a, pools, live) = (&a, &pools, &live);
            scope.spawn(move || {
                let mut rng = super::support::Rng::new(t as u64 + 7);
                if t < THREADS {
                    a.pool_begin(pools[t], None).unwrap();
                }
                let mut mine = Vec::new();
                for _ in 0..ROUNDS {
                    if mine.len() < 8 && rng.below(3) != 0 {
                        let size = 512 << rng.below(12);
                        let addr = a.malloc(size as usize, s).unwrap();
                        let before = live.lock().unwrap().insert(addr, t);
                        assert!(before.is_none(), "thread {t}: {addr:#x} is live in another pool");
                        mine.push(addr);
                    } else if let Some(addr) = mine.pop() {
                        live.lock().unwrap().remove(&addr);
                        a.free(addr).unwrap();
                    }
                }
                let counted = if t < THREADS { a.pool_stats(pools[t]).unwrap().active_blocks } else { 0 };
                if t < THREADS {
                    assert_eq!(counted, mine.len() as u64, "thread {t}: its blocks are its pool's");
                    a.pool_end(pools[t], None).unwrap();
                }
                for addr in mine {
                    live.lock().unwrap().remove(&addr);
                    a.free(addr).unwrap();
                }
            });
        }
    });
    for &p in &pools {
        let st = a.pool_stats(p).unwrap();
        assert_eq!(st.active_blocks, 0);
        assert!(st.num_allocs > 0);
    }
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
    assert_eq!(usage(DEV).malloc_count, 0);
}

/// Destroying a pool whose blocks were all freed gives its reserved
/// address ranges back too, not only the pages in them.
#[test]
fn destroying_a_pool_whose_blocks_were_freed_releases_its_ranges() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let s = new_stream();
    let baseline = usage(DEV).reserved_ranges;
    let p = a.pool_create(PoolConfig::default()).unwrap();
    a.pool_begin(p, Some(s)).unwrap();
    let blocks: Vec<usize> = (0..4).map(|_| a.malloc(3 * MIB, s).unwrap()).collect();
    a.pool_end(p, Some(s)).unwrap();
    assert!(usage(DEV).reserved_ranges > baseline, "the pool reserved no range");
    for b in blocks {
        a.free(b).unwrap();
    }
    a.pool_destroy(p).unwrap();
    assert_eq!(usage(DEV).reserved_ranges, baseline, "the destroyed pool kept a reserved range");
    a.teardown().unwrap();
    drop_stream(s);
}

/// A malloc routed to a pool races the route's end and the pool's
/// destruction: whichever wins, once the block is freed `empty_cache`
/// leaves the pool no memory (an entry made after the destroy marked the
/// others would not be DESTROYED, so its segment would stay cached).
#[test]
fn a_malloc_racing_pool_destroy_leaves_no_memory_in_the_pool() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = DeviceAllocator::build(
        crate::config::Config::parse("expandable_segments:false").unwrap(),
        DEV,
        crate::runtime::Runtime::emulated(),
        1024,
    )
    .unwrap();
    let s = new_stream();
    for round in 0..300 {
        let p = a.pool_create(PoolConfig::default()).unwrap();
        a.pool_begin(p, Some(s)).unwrap();
        let got = std::thread::scope(|sc| {
            let m = sc.spawn(|| a.malloc(4096, s));
            a.pool_end(p, Some(s)).unwrap();
            a.pool_destroy(p).unwrap();
            m.join().unwrap()
        });
        match got {
            Ok(addr) => a.free(addr).unwrap(),
            Err(Error::InvalidArgument(m)) if m.contains("destroyed") => {}
            Err(e) => panic!("round {round}: {e}"),
        }
        a.empty_cache().unwrap();
        assert_eq!(a.pool_stats(p).unwrap().reserved_bytes, 0, "round {round}: the destroyed pool kept memory");
    }
    a.teardown().unwrap();
    drop_stream(s);
}
