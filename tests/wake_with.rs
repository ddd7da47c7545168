//! `npualloc_wake_with` and the all-or-nothing wake through the C API on
//! the ACL emulator (built by `cargo build --workspace`): vllm-ascend's
//! order (the weights, then the KV cache), a map refused part-way through
//! a wake (OUT_OF_MEMORY, nothing changed, a later wake succeeds), and bad
//! lists refused with a message, waking nothing.

mod common;

use common::sleep_pools::*;
use common::*;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::sleep::{npualloc_wake, npualloc_wake_with};

const DEVICE: i32 = 0;
const MIB: usize = 1 << 20;
const CONFIG: &str = "expandable_segments:true,page_size:2m,map_ahead:false";

/// vllm-ascend wakes `weights` first, then `kv_cache`: after the first
/// wake the weights read back and serve while the KV cache pool still
/// refuses allocations and holds nothing; after the second, everything is
/// awake at the same addresses.
#[test]
fn weights_wake_before_the_kv_cache() {
    let _s = serial();
    let e = emu();
    let base = e.usage(DEVICE);
    let a = create(CONFIG, DEVICE).unwrap();
    let (weights, kv) = (pool(a, "sleep:offload"), pool(a, "sleep:discard"));
    let w = malloc_in(a, weights, 6 * MIB).unwrap();
    let k = malloc_in(a, kv, 10 * MIB).unwrap();
    write(w, 6 * MIB, 0x4b);
    assert_eq!(sleep(a), NPUALLOC_OK, "{}", last_error_message());
    assert_eq!(e.usage(DEVICE).physical_bytes, base.physical_bytes);
    assert_eq!(wake_with(a, &[weights]), NPUALLOC_OK, "{}", last_error_message());
    assert!(reads(w, 6 * MIB, 0x4b), "the weights read back");
    assert_eq!(e.usage(DEVICE).physical_bytes, base.physical_bytes + 6 * MIB as u64, "the weights' pages only");
    assert!(asleep(a, kv), "the KV cache pool still sleeps");
    assert!(!asleep(a, weights), "the weights pool serves");
    assert_eq!(wake_with(a, &[kv]), NPUALLOC_OK, "{}", last_error_message());
    assert!(!asleep(a, kv));
    write(k, 10 * MIB, 0x01);
    assert!(reads(k, 10 * MIB, 0x01) && reads(w, 6 * MIB, 0x4b));
    assert_eq!((free(a, w), free(a, k)), (NPUALLOC_OK, NPUALLOC_OK));
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// A map refused in the middle of a wake of several runs: OUT_OF_MEMORY
/// saying nothing changed; the device holds what it held asleep; a later
/// wake restores every byte.
#[test]
fn a_map_refused_mid_wake_changes_nothing() {
    let _s = serial();
    let e = emu();
    let base = e.usage(DEVICE);
    let a = create(CONFIG, DEVICE).unwrap();
    let weights = pool(a, "sleep:offload");
    let blocks: Vec<usize> = (0..6).map(|i| malloc_in(a, weights, (i + 2) * MIB).unwrap()).collect();
    // Holes between the blocks: several runs.
    for &b in blocks.iter().skip(1).step_by(2) {
        assert_eq!(free(a, b), NPUALLOC_OK);
    }
    let kept: Vec<(usize, usize)> = blocks.iter().enumerate().step_by(2).map(|(i, &b)| (b, (i + 2) * MIB)).collect();
    for (n, &(b, size)) in kept.iter().enumerate() {
        write(b, size, 0x60 + n as u8);
    }
    assert_eq!(sleep(a), NPUALLOC_OK, "{}", last_error_message());
    let slept = e.usage(DEVICE);
    e.fail_nth("aclrtMapMem", 3);
    // SAFETY: a live handle.
    let st = unsafe { npualloc_wake(a) };
    let fired = e.fault_pending("aclrtMapMem") == 0;
    e.fail_nth("aclrtMapMem", 0);
    assert!(fired, "the third map was reached");
    assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY);
    assert!(last_error_message().contains("nothing changed"), "{}", last_error_message());
    let u = e.usage(DEVICE);
    assert_eq!((u.physical_bytes, u.mapped_bytes), (slept.physical_bytes, slept.mapped_bytes), "nothing changed");
    assert_eq!(u.physical_bytes, base.physical_bytes);
    assert!(asleep(a, weights));
    // SAFETY: a live handle.
    assert_eq!(unsafe { npualloc_wake(a) }, NPUALLOC_OK, "{}", last_error_message());
    for (n, &(b, size)) in kept.iter().enumerate() {
        assert!(reads(b, size, 0x60 + n as u8), "block {n} reads back");
        assert_eq!(free(a, b), NPUALLOC_OK);
    }
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// Bad lists are INVALID_ARGUMENT naming what is wrong, and wake nothing;
/// awake already, the list is still checked.
#[test]
fn bad_lists_are_refused_and_wake_nothing() {
    let _s = serial();
    let e = emu();
    let a = create(CONFIG, DEVICE).unwrap();
    let p = pool(a, "sleep:offload");
    let b = malloc_in(a, p, 4 * MIB).unwrap();
    let ids = [p, p];
    let misaligned = (ids.as_ptr() as usize + 1) as *const u64;
    let null = std::ptr::null::<u64>();
    let check = |what: &str, st: npualloc_status, says: &str| {
        assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "{what}");
        let m = last_error_message();
        assert!(m.contains(says), "{what}: {m}");
    };
    check("awake, unknown pool", wake_with(a, &[p, 4242]), "4242");
    assert_eq!(sleep(a), NPUALLOC_OK);
    let slept = e.usage(DEVICE);
    // SAFETY: each call is refused by the checks before a list is read beyond them.
    unsafe {
        check("NULL list, count 1", npualloc_wake_with(a, null, 1), "pools");
        check("misaligned list", npualloc_wake_with(a, misaligned, 1), "aligned");
        check("count too large", npualloc_wake_with(a, ids.as_ptr(), usize::MAX), "memory");
        check("NULL handle", npualloc_wake_with(std::ptr::null_mut(), null, 0), "NULL");
    }
    check("unknown pool", wake_with(a, &[p, 4242]), "4242");
    assert_eq!(e.usage(DEVICE).physical_bytes, slept.physical_bytes, "nothing woken");
    assert!(asleep(a, p));
    // An empty list wakes nothing while a pool sleeps; listed twice is fine.
    assert_eq!(wake_with(a, &[]), NPUALLOC_OK);
    assert!(asleep(a, p));
    assert_eq!(wake_with(a, &[p, p]), NPUALLOC_OK, "{}", last_error_message());
    assert!(!asleep(a, p));
    assert_eq!(free(a, b), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}
