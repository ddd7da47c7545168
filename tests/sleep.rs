//! `npualloc_sleep` / `npualloc_wake` through the C API on the ACL emulator
//! (built by `cargo build --workspace`): the default pool keeps its blocks,
//! so sleep gives back the cached memory and nothing else, every block
//! reads back after wake, repeated calls are OK, and bad handles are
//! refused with a message, changing nothing.

mod common;

use common::sleep_pools::*;
use common::*;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::runtime::Stream;

const DEVICE: i32 = 0;
const MIB: usize = 1 << 20;

#[test]
fn the_default_pool_keeps_its_blocks_and_gives_back_its_cache() {
    let _s = serial();
    let e = emu();
    let base = e.usage(DEVICE);
    for config in ["expandable_segments:true", "expandable_segments:false"] {
        let a = create(config, DEVICE).unwrap();
        let live = malloc(a, 3 * MIB, Stream::DEFAULT).unwrap();
        write(live, 3 * MIB, 0x42);
        let cached = malloc(a, 40 * MIB, Stream::DEFAULT).unwrap();
        assert_eq!(free(a, cached), NPUALLOC_OK);
        assert!(stats(a).reserved_bytes > stats(a).allocated_bytes, "{config}: some memory is cached");
        assert_eq!(wake(a), NPUALLOC_OK, "{config}: wake while awake");
        assert_eq!(sleep(a), NPUALLOC_OK, "{config}: {}", last_error_message());
        let s = stats(a);
        assert!(s.reserved_bytes >= s.allocated_bytes && s.reserved_bytes < 40 * MIB as u64, "{config}: {s:?}");
        assert_eq!(sleep(a), NPUALLOC_OK, "{config}: sleep while asleep");
        // The default pool keeps: it serves requests while asleep.
        let more = malloc(a, MIB, Stream::DEFAULT).unwrap();
        assert_eq!(free(a, more), NPUALLOC_OK);
        assert!(reads(live, 3 * MIB, 0x42), "{config}: a kept block is untouched");
        assert_eq!(wake(a), NPUALLOC_OK, "{config}: {}", last_error_message());
        assert!(reads(live, 3 * MIB, 0x42));
        assert_eq!(free(a, live), NPUALLOC_OK);
        assert_eq!(destroy(a), NPUALLOC_OK);
    }
    let u = e.usage(DEVICE);
    assert_eq!(
        (u.physical_count, u.malloc_count, u.reserved_ranges),
        (base.physical_count, base.malloc_count, base.reserved_ranges)
    );
}

#[test]
fn bad_handles_are_refused() {
    let _s = serial();
    let _e = emu();
    for (name, f) in [("npualloc_sleep", sleep as fn(Handle) -> npualloc_status), ("npualloc_wake", wake)] {
        assert_eq!(f(std::ptr::null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT, "{name}(NULL)");
        assert!(!last_error_message().is_empty(), "{name}(NULL) says why");
    }
    let a = create("", DEVICE).unwrap();
    assert_eq!(destroy(a), NPUALLOC_OK);
    // A destroyed handle is recognised (handles are checked, never read blindly).
    assert_eq!(sleep(a), NPUALLOC_ERR_INVALID_ARGUMENT);
    assert_eq!(wake(a), NPUALLOC_ERR_INVALID_ARGUMENT);
}

/// An offload pool through the C API: sleep leaves the device nothing of
/// it, allocating from it is INVALID_ARGUMENT naming sleep, freeing one of
/// its blocks is OK; a wake that does not fit is OUT_OF_MEMORY and changes
/// nothing; a wake that fits restores every byte.
#[test]
fn an_offload_pool_sleeps_and_wakes_through_the_c_api() {
    let _s = serial();
    let e = emu();
    let base = e.usage(DEVICE);
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let p = pool(a, "sleep:offload");
    route(a, p, true);
    let kept = malloc(a, 24 * MIB, Stream::DEFAULT).unwrap();
    let dropped = malloc(a, 8 * MIB, Stream::DEFAULT).unwrap();
    route(a, p, false);
    write(kept, 24 * MIB, 0x2d);
    assert_eq!(sleep(a), NPUALLOC_OK, "{}", last_error_message());
    let u = e.usage(DEVICE);
    assert_eq!(
        (u.physical_bytes, u.mapped_bytes),
        (base.physical_bytes, base.mapped_bytes),
        "nothing left on the device"
    );
    route(a, p, true);
    match malloc(a, 4096, Stream::DEFAULT) {
        Err((st, m)) => assert!(st == NPUALLOC_ERR_INVALID_ARGUMENT && m.contains("asleep"), "{st:?} {m}"),
        Ok(p) => panic!("allocated {p:#x} from a sleeping pool"),
    }
    route(a, p, false);
    assert_eq!(free(a, dropped), NPUALLOC_OK, "a sleeping block may be freed");
    // A device too small for the pool's blocks.
    let cap = u.malloc_bytes + u.physical_bytes + 4 * MIB as u64;
    e.set_capacity(DEVICE, cap);
    assert_eq!(wake(a), NPUALLOC_ERR_OUT_OF_MEMORY);
    assert!(last_error_message().contains("still asleep"), "{}", last_error_message());
    assert_eq!(e.usage(DEVICE).physical_bytes, u.physical_bytes, "the failed wake changed nothing");
    e.set_capacity(DEVICE, 64 << 30);
    assert_eq!(wake(a), NPUALLOC_OK, "{}", last_error_message());
    assert!(reads(kept, 24 * MIB, 0x2d), "the offloaded block reads back");
    assert_eq!(free(a, kept), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// Fixed segments: an offload pool with a live block makes sleep
/// UNSUPPORTED, and the allocator stays awake.
#[test]
fn fixed_segments_refuse_to_offload_live_blocks() {
    let _s = serial();
    let _e = emu();
    let a = create("expandable_segments:false", DEVICE).unwrap();
    let p = pool(a, "sleep:offload");
    route(a, p, true);
    let b = malloc(a, MIB, Stream::DEFAULT).unwrap();
    route(a, p, false);
    assert_eq!(sleep(a), NPUALLOC_ERR_UNSUPPORTED);
    assert!(last_error_message().contains("expandable"), "{}", last_error_message());
    route(a, p, true);
    let c = malloc(a, MIB, Stream::DEFAULT).expect("still awake");
    route(a, p, false);
    assert_eq!((free(a, b), free(a, c)), (NPUALLOC_OK, NPUALLOC_OK));
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// A thread allocating from an offload pool while another sleeps and
/// wakes: each allocation either succeeds while awake or is refused
/// (INVALID_ARGUMENT), never lands in a sleeping pool; no wake fails, the
/// offloaded block's bytes survive every round, and once the last wake is
/// done every block the worker still holds is mapped and its own. The
/// worker touches its blocks only then: a block it was just given may be
/// offloaded by a sleep before it could write, and a sleeping block's
/// addresses are not mapped. A stress test: which
/// interleavings it meets depends on timing. The ones that matter are
/// played in a fixed order with park points by the core's tests
/// (`core/tests/sleep_race.rs`, `core/tests/wake_race.rs`).
#[test]
fn allocations_racing_sleep_are_refused_or_awake_and_wake_never_fails() {
    let _s = serial();
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let p = pool(a, "sleep:offload");
    route(a, p, true);
    let kept = malloc(a, 4 * MIB, Stream::DEFAULT).unwrap();
    route(a, p, false);
    write(kept, 4 * MIB, 0x5a);
    let stop = std::sync::atomic::AtomicBool::new(false);
    // The rounds start once the worker has been served: they overlap its loop.
    let served = std::sync::atomic::AtomicUsize::new(0);
    let handle = a as usize;
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let a = handle as Handle;
            route(a, p, true);
            let mut held = Vec::new();
            let mut refused = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match malloc(a, 64 * 1024 + 512 * (held.len() % 7), Stream::DEFAULT) {
                    Ok(b) => {
                        served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        held.push(b);
                        if held.len() > 32 {
                            for b in held.drain(..16) {
                                assert_eq!(free(a, b), NPUALLOC_OK, "{}", last_error_message());
                            }
                        }
                    }
                    Err((st, msg)) => {
                        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "{msg}");
                        assert!(msg.contains("asleep"), "{msg}");
                        refused += 1;
                    }
                }
            }
            route(a, p, false);
            // `stop` is set after the last wake: every held block is mapped.
            for (k, &b) in held.iter().enumerate() {
                write(b, 64 * 1024, k as u8);
            }
            for (k, &b) in held.iter().enumerate() {
                assert!(reads(b, 64 * 1024, k as u8), "held block {k} at {b:#x} overlaps another");
                assert_eq!(free(a, b), NPUALLOC_OK);
            }
            refused
        });
        while served.load(std::sync::atomic::Ordering::Relaxed) == 0 && !worker.is_finished() {
            std::thread::yield_now();
        }
        for round in 0..40 {
            assert_eq!(sleep(a), NPUALLOC_OK, "round {round}: {}", last_error_message());
            std::thread::yield_now();
            assert_eq!(wake(a), NPUALLOC_OK, "round {round}: {}", last_error_message());
            assert!(reads(kept, 4 * MIB, 0x5a), "round {round}: the offloaded block changed");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = worker.join().unwrap();
    });
    assert_eq!(free(a, kept), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK, "{}", last_error_message());
}

/// A mapping that fails during wake with two pools' shards asleep: wake
/// reports the error, every handle it allocated for the runs left asleep is
/// freed with its own size, and a later wake restores every byte with the
/// emulator's physical memory back where it was before the sleep.
#[test]
fn a_failed_mapping_in_wake_leaves_the_other_shards_handles_their_own() {
    let _s = serial();
    let e = emu();
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let (p, q) = (pool(a, "sleep:offload"), pool(a, "sleep:offload"));
    route(a, p, true);
    let big = malloc(a, 6 * MIB, Stream::DEFAULT).unwrap();
    route(a, p, false);
    route(a, q, true);
    let other = malloc(a, 2 * MIB + 4096, Stream::DEFAULT).unwrap();
    let small = malloc(a, 4096, Stream::DEFAULT).unwrap();
    route(a, q, false);
    write(big, 6 * MIB, 0x61);
    write(other, 2 * MIB + 4096, 0x62);
    write(small, 4096, 0x63);
    let awake = e.usage(DEVICE);
    assert_eq!(sleep(a), NPUALLOC_OK, "{}", last_error_message());
    let asleep = e.usage(DEVICE);
    // The first mapping of the wake fails.
    e.fail_nth("aclrtMapMem", 1);
    assert_ne!(wake(a), NPUALLOC_OK, "a wake whose mapping failed");
    e.fail_nth("aclrtMapMem", 0);
    assert_eq!(wake(a), NPUALLOC_OK, "{}", last_error_message());
    assert!(reads(big, 6 * MIB, 0x61) && reads(other, 2 * MIB + 4096, 0x62) && reads(small, 4096, 0x63));
    let u = e.usage(DEVICE);
    assert_eq!((u.physical_bytes, u.mapped_bytes), (awake.physical_bytes, awake.mapped_bytes), "after wake");
    assert!(asleep.physical_bytes < awake.physical_bytes);
    for b in [big, other, small] {
        assert_eq!(free(a, b), NPUALLOC_OK);
    }
    assert_eq!(destroy(a), NPUALLOC_OK, "{}", last_error_message());
}
