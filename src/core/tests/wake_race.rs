//! Requests racing sleep and wake, made deterministic with the test-only
//! park points (`testpoint`): a wake parked once it holds every handle it
//! needs, before it maps anything, and a malloc parked after its first
//! sleep check, before its shard lock. Each interleaving the timed stress
//! test of `tests/sleep.rs` (`allocations_racing_sleep_...`) could only
//! hope to hit is played here in a fixed order.

use super::support::{check_fill, drop_stream, emu_lock, fill, new_stream, set_capacity};
use crate::core::pools::config::{PoolConfig, SleepMode};
use crate::core::testpoint;
use crate::core::*;
use crate::error::Error;
use std::sync::mpsc;

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

/// An allocator with an offload pool routed on `s`, holding a 4 MiB block
/// filled with 0x5a and a cached 64 KiB block (so a request is a hit).
fn setup() -> (DeviceAllocator, Stream, u64, usize) {
    set_capacity(1 << 30);
    let a = super::support::allocator("expandable_segments:true");
    let s = new_stream();
    let p = a.pool_create(PoolConfig { sleep: SleepMode::Offload, ..Default::default() }).unwrap();
    a.pool_begin(p, Some(s)).unwrap();
    let kept = a.malloc(4 * MIB, s).unwrap();
    let warm = a.malloc(64 * KIB, s).unwrap();
    a.free(warm).unwrap();
    fill(kept, 4 * MIB, 0x5a);
    (a, s, p, kept)
}

fn refused_as_asleep(got: crate::error::Result<usize>, what: &str) {
    match got {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("asleep"), "{what}: {m}"),
        other => panic!("{what}: {other:?}"),
    }
}

fn finish(a: DeviceAllocator, s: Stream, p: u64, blocks: &[usize]) {
    a.pool_end(p, Some(s)).unwrap();
    for &b in blocks {
        a.free(b).unwrap();
    }
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s);
}

/// While a wake holds its handles and has mapped nothing, the pool it
/// wakes still refuses requests (its blocks are not back yet), the
/// default pool, awake, serves them; the wake then completes. The request
/// in the pool being woken runs on a thread parked at its shard lock, had
/// it passed the sleep check: either it returns (refused) or it parks,
/// and the test tells which without timing.
#[test]
fn a_pool_being_woken_refuses_requests_until_its_wake_ends() {
    let _g = emu_lock();
    let (a, s, p, kept) = setup();
    let idle = a.malloc(64 * KIB, Stream::DEFAULT).unwrap();
    a.free(idle).unwrap();
    a.sleep_pools().unwrap();
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let (signal_tx, signal) = mpsc::channel();
    let (m_go, m_go_rx) = mpsc::channel();
    let (result_tx, result) = mpsc::channel();
    let other = std::thread::scope(|t| {
        let waker = t.spawn(|| {
            testpoint::arm("wake: handles taken", arrived_tx, go_rx);
            a.wake()
        });
        arrived.recv().unwrap();
        // (is_asleep would wait for the wake: it holds the sleep state.)
        let done_tx = signal_tx.clone();
        let asker = &a;
        t.spawn(move || {
            testpoint::arm("malloc: before the shard lock", signal_tx, m_go_rx);
            let got = asker.malloc(64 * KIB, s);
            result_tx.send(got).unwrap();
            let _ = done_tx.send(());
        });
        // Returned (refused at its first check) or parked past it.
        signal.recv().unwrap();
        let first = result.try_recv();
        let other = a.malloc(64 * KIB, Stream::DEFAULT).expect("the default pool is awake");
        // Let everything go before judging, so no thread stays parked.
        let _ = m_go.send(());
        go.send(()).unwrap();
        waker.join().unwrap().expect("the wake completes");
        match first {
            Ok(got) => refused_as_asleep(got, "the pool being woken"),
            Err(_) => panic!("a request in the pool being woken passed the sleep check before the wake ended"),
        }
        other
    });
    assert!(!a.is_asleep());
    assert!(check_fill(kept, 4 * MIB, 0x5a), "the offloaded block is back");
    let again = a.malloc(64 * KIB, s).expect("awake again");
    finish(a, s, p, &[kept, other, again]);
}

/// A malloc that passed the sleep check while awake and then waited while
/// a sleep and a wake both ran: awake again when it takes its shard lock,
/// it is served, and the offloaded block is intact.
#[test]
fn a_malloc_parked_across_a_sleep_and_a_wake_is_served() {
    let _g = emu_lock();
    let (a, s, p, kept) = setup();
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let got = std::thread::scope(|t| {
        let worker = t.spawn(|| {
            testpoint::arm("malloc: before the shard lock", arrived_tx, go_rx);
            a.malloc(64 * KIB, s)
        });
        arrived.recv().unwrap();
        a.sleep_pools().unwrap();
        a.wake().unwrap();
        go.send(()).unwrap();
        worker.join().unwrap()
    });
    let got = got.expect("awake when it took its shard lock");
    fill(got, 64 * KIB, 0x33);
    assert!(check_fill(kept, 4 * MIB, 0x5a), "the offloaded block survived");
    assert!(check_fill(got, 64 * KIB, 0x33));
    finish(a, s, p, &[kept, got]);
}

/// A malloc that passed the sleep check while awake, parked, then resumed
/// while a wake is parked holding its handles: its check under the shard
/// lock finds the pool still asleep and refuses it; the wake then
/// completes and the next request is served.
#[test]
fn a_malloc_resumed_while_a_wake_holds_its_handles_is_refused() {
    let _g = emu_lock();
    let (a, s, p, kept) = setup();
    let (m_arrived_tx, m_arrived) = mpsc::channel();
    let (m_go, m_go_rx) = mpsc::channel();
    let (w_arrived_tx, w_arrived) = mpsc::channel();
    let (w_go, w_go_rx) = mpsc::channel();
    std::thread::scope(|t| {
        let worker = t.spawn(|| {
            testpoint::arm("malloc: before the shard lock", m_arrived_tx, m_go_rx);
            a.malloc(64 * KIB, s)
        });
        m_arrived.recv().unwrap();
        a.sleep_pools().unwrap();
        let waker = t.spawn(|| {
            testpoint::arm("wake: handles taken", w_arrived_tx, w_go_rx);
            a.wake()
        });
        w_arrived.recv().unwrap();
        m_go.send(()).unwrap();
        let got = worker.join().unwrap();
        // The wake goes on before judging, so no thread stays parked.
        w_go.send(()).unwrap();
        waker.join().unwrap().expect("the wake completes");
        refused_as_asleep(got, "resumed while the wake maps nothing yet");
    });
    assert!(check_fill(kept, 4 * MIB, 0x5a), "the offloaded block is back");
    let again = a.malloc(64 * KIB, s).expect("awake again");
    finish(a, s, p, &[kept, again]);
}
