//! The device's allocators asking each other for their free cache before a
//! refusal (`peers`): a request served from another allocator's cache,
//! concurrent asks, leaving while being asked, and host hooks that call
//! into npualloc from inside an ask.

use super::support::{allocator, emu_lock, finish, set_capacity, MIB};
use crate::core::DeviceAllocator;
use crate::error::Error;
use crate::runtime::Stream;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Barrier, Mutex};

/// The refusal message's entry for the step.
const ASKED: &str = "asking the device's other npualloc allocators for their free cache";

/// An allocator among the peers: boxed, so it stays at its address until
/// `done` takes it out of them.
fn joined(config: &str) -> Box<DeviceAllocator> {
    let a = Box::new(allocator(config));
    // SAFETY: the box is not moved out of before `done` (or `teardown`)
    // has taken the allocator out of the peers.
    unsafe { a.join_peers() };
    a
}

/// Leaves the peers, then `finish` (invariants, teardown, nothing left).
fn done(a: Box<DeviceAllocator>) {
    a.leave_peers();
    finish(*a);
}

/// `done` for two allocators: both leave and are torn down before the
/// emulator is checked (it would find the other's memory after one).
fn done_both(pair: [Box<DeviceAllocator>; 2]) {
    for a in &pair {
        a.leave_peers();
        a.check_invariants().unwrap();
        a.teardown().unwrap();
    }
    drop(pair);
    super::support::assert_emulator_gave_back("after teardown");
}

/// On a 64 MiB device, two allocators among the peers: the first holding
/// 40 MiB of free cache, the second nothing.
fn holder_and_asker(config: &str) -> (Box<DeviceAllocator>, Box<DeviceAllocator>) {
    set_capacity(64 * MIB as u64);
    let (holder, asker) = (joined(config), joined(config));
    holder.free(holder.malloc(40 * MIB, Stream::DEFAULT).unwrap()).unwrap();
    (holder, asker)
}

fn reserved(a: &DeviceAllocator) -> u64 {
    a.stats().unwrap().reserved_bytes
}

/// On a 64 MiB device, one allocator's 40 MiB of free cache make room for
/// another's 50 MiB request, with fixed segments and with expandable ones
/// (whose release goes through unmapped handles); a request that no cache
/// can make room for is refused, saying the others were asked. An
/// allocator that never joined is not asked.
#[test]
fn a_request_is_served_from_another_allocators_free_cache() {
    let _g = emu_lock();
    for conf in ["expandable_segments:false", "expandable_segments:true,map_ahead:false"] {
        let (holder, asker) = holder_and_asker(conf);
        assert!(reserved(&holder) >= 40 * MIB as u64, "{conf}: the holder caches its block");
        let p = asker.malloc(50 * MIB, Stream::DEFAULT).unwrap_or_else(|e| panic!("{conf}: {e}"));
        assert_eq!(reserved(&holder), 0, "{conf}: the holder gave its cache back");
        let err = asker.malloc(30 * MIB, Stream::DEFAULT).unwrap_err();
        let Error::OutOfMemory(msg) = &err else { panic!("{conf}: expected a refusal, got {err:?}") };
        assert!(msg.contains(ASKED), "{conf}: the message says the others were asked: {msg}");
        asker.free(p).unwrap();
        asker.empty_cache().unwrap();
        done(holder);

        // The cache of an allocator outside the peers stays its own.
        let outsider = allocator(conf);
        outsider.free(outsider.malloc(40 * MIB, Stream::DEFAULT).unwrap()).unwrap();
        asker.empty_cache().unwrap();
        let err = asker.malloc(50 * MIB, Stream::DEFAULT).unwrap_err();
        let Error::OutOfMemory(msg) = &err else { panic!("{conf}: expected a refusal, got {err:?}") };
        assert!(!msg.contains(ASKED), "{conf}: no other allocator was asked: {msg}");
        assert!(reserved(&outsider) >= 40 * MIB as u64, "{conf}: the outsider kept its cache");
        finish(outsider);
        done(asker);
    }
    set_capacity(1 << 30);
}

/// Threads requesting at once from an allocator whose device is full of
/// the other allocator's free cache: every request must be served (their
/// sum is what the device holds), though only one of them finds the cache
/// still there when it asks; the others ask while it is being given back,
/// or after. The allocators trade roles every round: the takers' blocks,
/// freed, are the next round's cache. With fixed segments and expandable
/// ones.
#[test]
fn concurrent_requests_are_served_when_the_others_cache_makes_room() {
    const THREADS: usize = 6;
    const ROUNDS: usize = 40;
    const SIZE: usize = 12 * MIB;
    let _g = emu_lock();
    for conf in ["expandable_segments:false", "expandable_segments:true,map_ahead:false"] {
        // aclrtMalloc charges a little over the size: room for each block's
        // overhead, far less than one more block.
        set_capacity((THREADS * (SIZE + 4096)) as u64);
        let pair = [joined(conf), joined(conf)];
        // The first round's cache: the device's whole memory, free in pair[1].
        let blocks: Vec<usize> = (0..THREADS).map(|_| pair[1].malloc(SIZE, Stream::DEFAULT).unwrap()).collect();
        for b in blocks {
            pair[1].free(b).unwrap();
        }
        // Each round: every thread requests, then (all served or refused)
        // frees, then the round ends.
        let (start, taken, end) = (Barrier::new(THREADS + 1), Barrier::new(THREADS + 1), Barrier::new(THREADS + 1));
        let results: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
        let mut begun = Vec::new();
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for round in 0..ROUNDS {
                        let taker = &pair[round % 2];
                        start.wait();
                        let got = taker.malloc(SIZE, Stream::DEFAULT);
                        if let Err(e) = &got {
                            results.lock().unwrap().push((round, e.to_string()));
                        }
                        taken.wait();
                        if let Ok(p) = got {
                            taker.free(p).unwrap();
                        }
                        end.wait();
                    }
                });
            }
            // What each round began with, checked once every thread is
            // through (a failed check here would leave them at a barrier).
            for round in 0..ROUNDS {
                let (taker, giver) = (&pair[round % 2], &pair[1 - round % 2]);
                begun.push((reserved(taker), reserved(giver)));
                start.wait();
                taken.wait();
                end.wait();
            }
        });
        let refused = results.into_inner().unwrap();
        assert!(refused.is_empty(), "{conf}: {} request(s) refused, the first: {:?}", refused.len(), refused.first());
        for (round, &(taker, giver)) in begun.iter().enumerate() {
            assert_eq!(taker, 0, "{conf}: round {round} begins with the taker's cache given back");
            assert_eq!(giver, (THREADS * SIZE) as u64, "{conf}: round {round} begins with the giver's cache");
        }
        for a in &pair {
            assert_eq!(a.stats().unwrap().num_ooms, 0, "{conf}");
        }
        done_both(pair);
    }
    set_capacity(1 << 30);
}

/// What the gated release hook uses: it says it entered, then waits to be
/// let go. Armed once, so the allocator's own later calls pass.
struct Gate {
    armed: AtomicBool,
    entered: mpsc::SyncSender<()>,
    go: Mutex<mpsc::Receiver<()>>,
}

unsafe extern "C" fn gated(user: *mut c_void, _device: i32) {
    // SAFETY: the test passes a `Gate` that outlives every call.
    let g = unsafe { &*(user as *const Gate) };
    if g.armed.swap(false, Ordering::SeqCst) {
        g.entered.send(()).unwrap();
        g.go.lock().unwrap().recv().unwrap();
    }
}

/// An allocator leaving the peers while another thread is asking it (its
/// host hook running on the asker's thread): `leave` waits for the ask to
/// end, so when it returns the ask has given the cache back and the asker
/// will not touch the allocator again; then it is torn down and freed
/// while the asker's request goes on.
#[test]
fn leaving_waits_for_an_ask_in_progress() {
    let _g = emu_lock();
    let (holder, asker) = holder_and_asker("expandable_segments:false");
    let (entered_tx, entered) = mpsc::sync_channel(1);
    let (go, go_rx) = mpsc::channel();
    let gate = Gate { armed: AtomicBool::new(true), entered: entered_tx, go: Mutex::new(go_rx) };
    holder.set_before_release(Some((gated, &gate as *const Gate as *mut c_void)));
    let p = std::thread::scope(|s| {
        let request = s.spawn(|| asker.malloc(50 * MIB, Stream::DEFAULT));
        entered.recv().unwrap();
        let (waits_tx, waits) = mpsc::channel();
        let (leave_go, leave_go_rx) = mpsc::channel();
        let leaver = s.spawn(|| {
            crate::core::testpoint::arm("peers: leave waits", waits_tx, leave_go_rx);
            holder.leave_peers();
            reserved(&holder)
        });
        // The leaver reaches its wait (rather than returning) while the
        // asker is inside the holder's hook.
        waits.recv().expect("leave waits for the ask in progress");
        leave_go.send(()).unwrap();
        go.send(()).unwrap();
        let at_leave = leaver.join().unwrap();
        assert_eq!(at_leave, 0, "when leave returned, the ask had given the holder's cache back");
        request.join().unwrap()
    });
    holder.set_before_release(None);
    // The holder goes while the asker still serves blocks.
    holder.check_invariants().unwrap();
    holder.teardown().unwrap();
    drop(holder);
    let p = p.expect("the holder's cache made room");
    asker.free(p).unwrap();
    done(asker);
    set_capacity(1 << 30);
}

/// Allocators joining, caching and going away over and over while two
/// threads keep asking them: every request either succeeds or is refused
/// for lack of memory, and nothing is left behind (the emulator checks,
/// and aborts on any call over memory given back).
#[test]
fn allocators_come_and_go_while_others_ask() {
    const ROUNDS: usize = 150;
    let _g = emu_lock();
    set_capacity(64 * MIB as u64);
    let askers = [joined("expandable_segments:false"), joined("expandable_segments:true,map_ahead:false")];
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for a in &askers {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match a.malloc(30 * MIB, Stream::DEFAULT) {
                        Ok(p) => a.free(p).unwrap(),
                        Err(Error::OutOfMemory(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                    a.empty_cache().unwrap();
                }
            });
        }
        for round in 0..ROUNDS {
            let conf = ["expandable_segments:false", "expandable_segments:true,map_ahead:false"][round % 2];
            let peer = joined(conf);
            if let Ok(p) = peer.malloc(20 * MIB, Stream::DEFAULT) {
                peer.free(p).unwrap();
            }
            // Out of the peers by teardown (which leaves first), or by
            // leaving before it: either must end every ask of it first.
            if round % 2 == 1 {
                peer.leave_peers();
            }
            peer.teardown().unwrap();
            drop(peer);
        }
        stop.store(true, Ordering::SeqCst);
    });
    done_both(askers);
    set_capacity(1 << 30);
}

/// The asker and the results of what the hook did from inside the ask.
struct Reentry<'a> {
    asker: &'a DeviceAllocator,
    nested: Mutex<Vec<Result<usize, Error>>>,
    made: Mutex<Vec<bool>>,
}

/// A release hook that allocates from the allocator asking (on its
/// thread, from inside its ask), and makes and destroys an allocator of
/// the device among the peers.
unsafe extern "C" fn reenter(user: *mut c_void, _device: i32) {
    // SAFETY: the test passes a `Reentry` that outlives every call.
    let r = unsafe { &*(user as *const Reentry) };
    r.nested.lock().unwrap().push(r.asker.malloc(30 * MIB, Stream::DEFAULT));
    let other = joined("expandable_segments:false");
    let made = other.malloc(MIB, Stream::DEFAULT).map(|p| other.free(p)).is_ok();
    r.made.lock().unwrap().push(made);
    other.leave_peers();
    other.teardown().unwrap();
}

/// A host hook of an asked allocator that allocates again from the asker,
/// and makes and destroys an allocator among the peers: no deadlock, no
/// crash. The nested request, with the device still full of the asked
/// allocator's cache, is refused without asking again (the ask in
/// progress is this thread's own); the outer request is then served.
#[test]
fn a_release_hook_that_allocates_and_makes_allocators_inside_an_ask() {
    let _g = emu_lock();
    let (holder, asker) = holder_and_asker("expandable_segments:false");
    let r = Reentry { asker: &asker, nested: Mutex::new(Vec::new()), made: Mutex::new(Vec::new()) };
    holder.set_before_release(Some((reenter, &r as *const Reentry as *mut c_void)));
    let p = asker.malloc(50 * MIB, Stream::DEFAULT);
    holder.set_before_release(None);
    let nested = r.nested.into_inner().unwrap();
    assert_eq!(nested.len(), 1, "the hook ran once, inside the ask");
    match &nested[0] {
        Err(Error::OutOfMemory(msg)) => assert!(!msg.contains(ASKED), "the nested request asked again: {msg}"),
        other => panic!("the nested request should be refused, the device being full: {other:?}"),
    }
    // 24 MiB were free beside the holder's cache.
    assert_eq!(r.made.into_inner().unwrap(), [true], "the hook's own allocator served its request");
    let p = p.expect("the holder's cache made room for the outer request");
    asker.free(p).unwrap();
    done_both([holder, asker]);
    set_capacity(1 << 30);
}
