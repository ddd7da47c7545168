//! A malloc that passed the sleep check and then waited while a sleep ran
//! is refused by the check again under the shard lock (Note [sleep]); made
//! deterministic with a test-only park point (`testpoint`).

use super::support::{allocator, drop_stream, emu_lock, new_stream, set_capacity};
use crate::core::pools::config::{PoolConfig, SleepMode};
use crate::core::testpoint;
use crate::error::Error;
use std::sync::mpsc;

#[test]
fn a_malloc_parked_before_its_shard_lock_while_a_sleep_runs_is_refused() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let s = new_stream();
    let p = a.pool_create(PoolConfig { sleep: SleepMode::Offload, ..Default::default() }).unwrap();
    // A cached block in the pool, so the parked request would be a hit.
    a.pool_begin(p, Some(s)).unwrap();
    let warm = a.malloc(64 * 1024, s).unwrap();
    let live = a.malloc(64 * 1024, s).unwrap();
    a.free(warm).unwrap();
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    std::thread::scope(|t| {
        let worker = t.spawn(|| {
            testpoint::arm("malloc: before the shard lock", arrived_tx, go_rx);
            a.malloc(64 * 1024, s)
        });
        // The request passed the first check (awake) and holds no lock.
        arrived.recv().unwrap();
        a.sleep_pools().unwrap();
        go.send(()).unwrap();
        match worker.join().unwrap() {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("asleep"), "{m}"),
            other => panic!("a request that waited out a sleep got {other:?} from a sleeping pool"),
        }
    });
    a.wake().unwrap();
    let again = a.malloc(64 * 1024, s).unwrap();
    a.pool_end(p, Some(s)).unwrap();
    for b in [live, again] {
        a.free(b).unwrap();
    }
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
}
