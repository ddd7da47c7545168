//! `npualloc_sleep_with` through the C API on the ACL emulator (built by
//! `cargo build --workspace`): pools created with the default `sleep=keep`
//! offload or discard because the call lists them, every address holds
//! after wake, the offloaded bytes read back, a second cycle holds the same
//! memory, unlisted pools keep their own mode, and every bad argument is
//! refused with a message, changing nothing.

mod common;

use common::sleep_pools::*;
use common::*;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::pools::npualloc_pool_destroy;
use npualloc::ffi::sleep::npualloc_sleep_with;

const DEVICE: i32 = 0;
const MIB: usize = 1 << 20;

/// vLLM's `sleep(offload_tags=("weights",))`: two keep pools, one listed to
/// offload and one to discard. Sleep leaves the device nothing of either,
/// both refuse allocations while asleep, wake brings every block back at
/// its address with the weights' bytes, and a second cycle holds the same
/// memory. Old code: no `npualloc_sleep_with`, and `npualloc_sleep` leaves
/// keep pools on the device.
#[test]
fn listed_pools_offload_or_discard_whatever_their_config() {
    let _s = serial();
    let e = emu();
    let base = e.usage(DEVICE);
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let (weights, kv) = (pool(a, ""), pool(a, ""));
    let w = malloc_in(a, weights, 24 * MIB).unwrap();
    let k = malloc_in(a, kv, 40 * MIB).unwrap();
    write(w, 24 * MIB, 0x5a);
    let awake = e.usage(DEVICE);
    assert!(awake.physical_bytes >= base.physical_bytes + 64 * MIB as u64);
    for cycle in 0..2 {
        assert_eq!(sleep_with(a, &[weights], &[kv]), NPUALLOC_OK, "{}", last_error_message());
        let u = e.usage(DEVICE);
        assert_eq!(
            (u.physical_bytes, u.mapped_bytes),
            (base.physical_bytes, base.mapped_bytes),
            "cycle {cycle}: nothing of either pool left on the device"
        );
        // Asleep already: the lists are still checked, and a good call changes nothing.
        assert_eq!(sleep_with(a, &[weights, 999], &[]), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(sleep_with(a, &[], &[weights]), NPUALLOC_OK, "{}", last_error_message());
        assert_eq!(e.usage(DEVICE).physical_bytes, u.physical_bytes);
        for p in [weights, kv] {
            match malloc_in(a, p, 4096) {
                Err((st, m)) => assert!(st == NPUALLOC_ERR_INVALID_ARGUMENT && m.contains("asleep"), "{st:?} {m}"),
                Ok(b) => panic!("allocated {b:#x} from sleeping pool {p}"),
            }
        }
        assert_eq!(wake(a), NPUALLOC_OK, "{}", last_error_message());
        assert!(reads(w, 24 * MIB, 0x5a), "cycle {cycle}: the offloaded weights read back");
        for (b, size) in [(w, 24 * MIB), (k, 40 * MIB)] {
            let info = query(a, b).expect("the block is live at its address again");
            assert_eq!(info.size, size as u64);
        }
        write(k, 40 * MIB, 0x11); // the discarded block is usable memory again
        assert_eq!(e.usage(DEVICE).physical_bytes, awake.physical_bytes, "cycle {cycle}: the same memory");
    }
    assert_eq!((free(a, w), free(a, k)), (NPUALLOC_OK, NPUALLOC_OK));
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// Pools not listed sleep in their own mode: a keep pool stays on the
/// device (and serves while asleep), an offload pool still offloads.
#[test]
fn unlisted_pools_sleep_in_their_own_mode() {
    let _s = serial();
    let e = emu();
    let base = e.usage(DEVICE);
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let (kept, own) = (pool(a, ""), pool(a, "sleep:offload"));
    let k = malloc_in(a, kept, 8 * MIB).unwrap();
    let o = malloc_in(a, own, 8 * MIB).unwrap();
    write(k, 8 * MIB, 0x01);
    write(o, 8 * MIB, 0x02);
    let awake = e.usage(DEVICE);
    assert_eq!(sleep_with(a, &[], &[]), NPUALLOC_OK, "{}", last_error_message());
    let u = e.usage(DEVICE);
    let held = u.physical_bytes - base.physical_bytes;
    assert!(held >= 8 * MIB as u64, "the keep pool's block stays on the device: {u:?}");
    assert!(u.physical_bytes + 8 * MIB as u64 <= awake.physical_bytes, "the offload pool's block went: {u:?}");
    let more = malloc_in(a, kept, MIB).expect("a keep pool serves while asleep");
    assert_eq!(free(a, more), NPUALLOC_OK);
    assert_eq!(wake(a), NPUALLOC_OK, "{}", last_error_message());
    assert!(reads(k, 8 * MIB, 0x01) && reads(o, 8 * MIB, 0x02));
    assert_eq!((free(a, k), free(a, o)), (NPUALLOC_OK, NPUALLOC_OK));
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// Each bad argument is INVALID_ARGUMENT with a message naming it, and the
/// allocator stays awake with its memory where it was.
#[test]
fn bad_lists_are_refused_and_change_nothing() {
    let _s = serial();
    let e = emu();
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let (p, gone) = (pool(a, ""), pool(a, ""));
    // SAFETY: a live handle and a pool it made.
    assert_eq!(unsafe { npualloc_pool_destroy(a, gone) }, NPUALLOC_OK);
    let b = malloc_in(a, p, 8 * MIB).unwrap();
    let before = e.usage(DEVICE);
    let ids = [p, p];
    let misaligned = (ids.as_ptr() as usize + 1) as *const u64;
    let null = std::ptr::null::<u64>();
    // SAFETY: every call below is refused before a list is read past its checks.
    let check = |what: &str, st: npualloc_status, says: &str| {
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "{what}");
        let m = last_error_message();
        assert!(m.contains(says), "{what}: {m}");
    };
    // SAFETY: each call is refused by the checks before a list is read beyond them.
    unsafe {
        check("NULL offload list, count 1", npualloc_sleep_with(a, null, 1, null, 0), "offload_pools");
        check("NULL discard list, count 2", npualloc_sleep_with(a, null, 0, null, 2), "discard_pools");
        check("misaligned list", npualloc_sleep_with(a, misaligned, 1, null, 0), "aligned");
        check("count too large", npualloc_sleep_with(a, ids.as_ptr(), usize::MAX, null, 0), "memory");
        check("NULL handle", npualloc_sleep_with(std::ptr::null_mut(), null, 0, null, 0), "NULL");
    }
    check("unknown pool", sleep_with(a, &[p, 999], &[]), "999");
    check("destroyed pool", sleep_with(a, &[], &[gone]), "destroyed");
    check("pool in both lists", sleep_with(a, &[p], &[p]), "both");
    // Nothing changed: awake, the pool serves, the block is on the device.
    let after = e.usage(DEVICE);
    assert_eq!((after.physical_bytes, after.mapped_bytes), (before.physical_bytes, before.mapped_bytes));
    let c = malloc_in(a, p, MIB).expect("still awake");
    assert_eq!((free(a, b), free(a, c)), (NPUALLOC_OK, NPUALLOC_OK));
    // A pool listed twice in one list is fine.
    assert_eq!(sleep_with(a, &[p, p], &[]), NPUALLOC_OK, "{}", last_error_message());
    assert_eq!(wake(a), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}
