//! Whether a pool served a capture (`pool_captured`, asked by
//! pool_empty_cache and sleep) is asked of the runtime for the streams the
//! pool's entries serve now: a retired entry serves none, and is skipped.

use super::support::{allocator, drop_stream, emu_lock, fail_nth, fault_pending, finish, new_stream, set_capacity};
use crate::core::pools::config::PoolConfig;

/// Pool p's only entry retires with its stream forgotten; pool_empty_cache
/// of p makes no capture query (counted with an armed failure far away),
/// while one with a live entry makes some.
#[test]
fn pool_empty_cache_asks_no_capture_state_of_a_retired_entry() {
    const FAR: i32 = 1_000_000;
    let queries = || FAR - fault_pending("aclmdlRICaptureGetInfo");
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:true");
    let p = a.pool_create(PoolConfig::default()).unwrap();
    let s = new_stream();
    a.pool_begin(p, Some(s)).unwrap();
    let x = a.malloc(4096, s).unwrap();
    a.free(x).unwrap();
    a.pool_end(p, Some(s)).unwrap();
    fail_nth("aclmdlRICaptureGetInfo", FAR);
    a.pool_empty_cache(p).unwrap();
    let live = queries();
    a.forget_stream(s).unwrap();
    fail_nth("aclmdlRICaptureGetInfo", FAR);
    a.pool_empty_cache(p).unwrap();
    let retired = queries();
    fail_nth("aclmdlRICaptureGetInfo", 0);
    assert!(live > 0, "setup: a live entry's stream is not asked");
    assert_eq!(retired, 0, "the capture state of a retired entry's stream was asked");
    finish(a);
    drop_stream(s);
}
