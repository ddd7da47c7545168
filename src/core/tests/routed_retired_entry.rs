//! A routed malloc that found its private pool's entry just before
//! `forget_stream` retired it never lands in the default pool, which the
//! same stream's next malloc makes an entry for.

use super::support::{allocator, drop_stream, emu_lock, finish, new_stream, set_capacity};
use crate::core::pools::config::PoolConfig;
use crate::core::testpoint;
use std::sync::mpsc;

/// The worker, routed to pool p, stops between its look-up and the shard
/// lock; meanwhile the stream is forgotten (p's entry retires) and
/// allocated on outside any route (pool 0 needs an entry): each request
/// ends in its own pool.
#[test]
fn a_routed_malloc_across_forget_stream_stays_in_its_pool() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let s = new_stream();
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    std::thread::scope(|t| {
        // Owned here, so that a panic below drops it and the worker, waiting
        // at the testpoint, is let go instead of holding the scope open.
        let go = go;
        let worker = t.spawn(|| {
            a.pool_begin(p, None).unwrap();
            testpoint::arm("malloc: before the shard lock", arrived_tx, go_rx);
            let x = a.malloc(4096, s).unwrap();
            a.pool_end(p, None).unwrap();
            x
        });
        arrived.recv().unwrap();
        a.forget_stream(s).unwrap();
        let mine = a.malloc(4096, s).unwrap();
        go.send(()).unwrap();
        let x = worker.join().unwrap();
        let (sp, s0) = (a.pool_stats(p).unwrap(), a.pool_stats(0).unwrap());
        a.free(x).unwrap();
        a.free(mine).unwrap();
        assert_eq!(
            (sp.active_blocks, s0.active_blocks),
            (1, 1),
            "a request routed to p was served by the default pool"
        );
    });
    finish(a);
    drop_stream(s);
}
