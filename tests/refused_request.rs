//! A refused request gives back what it took, and its message says who
//! holds the memory, on a 64 MiB device of the ACL emulator (built by
//! `cargo build --workspace`):
//! - allocator A holds 30 MiB; its 40 MiB request is refused, leaving the
//!   emulator's malloc'd, physical and mapped bytes no higher than before;
//!   allocator B on the same device then gets 8 MiB. Through
//!   `npualloc_malloc`, the desc's alloc callback and the pluggable malloc;
//!   fixed and expandable, with `reserved_headroom`, with 20 MiB pages;
//! - from an empty allocator, a refused 100 MiB request leaves nothing held;
//! - the same through the pluggable malloc when a mapping fails (an
//!   injected `aclrtMapMem` fault, expandable modes);
//! - the message counts what the allocator holds after giving back what the
//!   request took, and names the memory held outside it.

mod common;

use common::*;
use npualloc::ffi::desc::{npualloc_binding_create, npualloc_binding_destroy, npualloc_desc_alloc, npualloc_desc_free};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::*;
use npualloc::ffi::pluggable::{npualloc_pluggable_empty_cache, npualloc_pluggable_free, npualloc_pluggable_malloc};
use npualloc::ffi::stats::npualloc_stats;
use npualloc::runtime::Stream;
use std::ffi::c_void;

const MIB: usize = 1 << 20;
/// The direct and desc tests' device; the pluggable allocators (one per
/// device, for the process's life) get their own.
const DEVICE: i32 = 2;
/// The first of the pluggable test's devices (one per configuration).
const PLUGGABLE_DEVICES: i32 = 4;

const CONFIGS: &[&str] = &[
    "expandable_segments:false",
    "expandable_segments:true",
    "expandable_segments:true,reserved_headroom:0.05",
    "expandable_segments:true,page_size:20m",
];

/// The emulator's usage counters are per device: one test at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `after` holds no more device memory than `before`.
fn no_more_memory(before: &Usage, after: &Usage, label: &str) {
    assert!(
        after.malloc_bytes <= before.malloc_bytes
            && after.physical_bytes <= before.physical_bytes
            && after.mapped_bytes <= before.mapped_bytes,
        "{label}: the refused request kept memory:\n before {before:?}\n after  {after:?}"
    );
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / MIB as f64)
}

/// Another allocator on the same device gets 8 MiB.
fn second_allocator_gets_8_mib(device: i32, label: &str) {
    let b = create("expandable_segments:false", device).unwrap();
    let p = malloc(b, 8 * MIB, Stream::DEFAULT).unwrap_or_else(|(st, m)| panic!("{label}: B's 8 MiB: {st:?}: {m}"));
    assert_eq!(free(b, p), NPUALLOC_OK);
    assert_eq!(destroy(b), NPUALLOC_OK);
}

/// The message of A's refused 40 MiB request, given A's stats before and after it.
fn check_message(msg: &str, before: &npualloc_stats, s: &npualloc_stats, label: &str) {
    for part in [
        "cannot allocate 40.00 MiB (41943040 bytes, rounded to 41943040)".to_string(),
        " free of 64.00 MiB.".to_string(),
        format!("This allocator holds {}: {} allocated,", mib(s.reserved_bytes), mib(s.allocated_bytes)),
        "Tried: releasing cached memory".to_string(),
    ] {
        assert!(msg.contains(&part), "{label}: the message lacks {part:?}: {msg}");
    }
    assert!(
        s.reserved_bytes <= before.reserved_bytes,
        "{label}: the failed request's handles are counted as held:\n before {before:?}\n after  {s:?}"
    );
}

#[test]
fn a_refused_request_through_npualloc_malloc_gives_back_what_it_took() {
    let _g = serial();
    let e = emu();
    e.set_capacity(DEVICE, 64 * MIB as u64);
    for config in CONFIGS {
        let a = create(config, DEVICE).unwrap();
        let p = malloc(a, 30 * MIB, Stream::DEFAULT).unwrap();
        let (before, held) = (e.usage(DEVICE), stats(a));
        let (st, msg) = malloc(a, 40 * MIB, Stream::DEFAULT).unwrap_err();
        assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY, "{config}: {msg}");
        no_more_memory(&before, &e.usage(DEVICE), config);
        check_message(&msg, &held, &stats(a), config);
        second_allocator_gets_8_mib(DEVICE, config);
        assert_eq!(free(a, p), NPUALLOC_OK);
        assert_eq!(destroy(a), NPUALLOC_OK);
        assert!(e.usage(DEVICE).is_clean(), "{config}: {:?}", e.usage(DEVICE));
    }
    e.set_capacity(DEVICE, 1 << 30);
}

#[test]
fn a_refused_request_through_the_desc_gives_back_what_it_took() {
    let _g = serial();
    let e = emu();
    e.set_capacity(DEVICE, 64 * MIB as u64);
    for config in CONFIGS {
        let a = create(config, DEVICE).unwrap();
        let mut binding: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live handle and a valid out-pointer.
        assert_eq!(unsafe { npualloc_binding_create(a, std::ptr::null_mut(), &mut binding) }, NPUALLOC_OK);
        // SAFETY: a live binding.
        let p = unsafe { npualloc_desc_alloc(binding, 30 * MIB) };
        assert!(!p.is_null(), "{config}: {}", last_error_message());
        let (before, held) = (e.usage(DEVICE), stats(a));
        // SAFETY: as above.
        let q = unsafe { npualloc_desc_alloc(binding, 40 * MIB) };
        assert!(q.is_null(), "{config}: 40 MiB fit beside 30 MiB on 64 MiB");
        let msg = last_error_message();
        assert!(msg.contains("out of memory"), "{config}: {msg}");
        no_more_memory(&before, &e.usage(DEVICE), config);
        check_message(&msg, &held, &stats(a), config);
        second_allocator_gets_8_mib(DEVICE, config);
        // SAFETY: a live binding and the block it returned.
        unsafe { npualloc_desc_free(binding, p) };
        // SAFETY: made above; destroyed before its allocator.
        assert_eq!(unsafe { npualloc_binding_destroy(binding) }, NPUALLOC_OK);
        assert_eq!(destroy(a), NPUALLOC_OK);
        assert!(e.usage(DEVICE).is_clean(), "{config}: {:?}", e.usage(DEVICE));
    }
    e.set_capacity(DEVICE, 1 << 30);
}

#[test]
fn a_refused_request_through_the_pluggable_malloc_gives_back_what_it_took() {
    let _g = serial();
    let e = emu();
    // One process-wide allocator per device, made from NPUALLOC_CONF on
    // first use: each configuration gets a device of its own.
    for (i, config) in CONFIGS.iter().enumerate() {
        let device = PLUGGABLE_DEVICES + i as i32;
        e.set_capacity(device, 64 * MIB as u64);
        std::env::set_var("NPUALLOC_CONF", config);
        // SAFETY: plain values; the default stream.
        let p = unsafe { npualloc_pluggable_malloc(30 * MIB, device, std::ptr::null_mut()) };
        std::env::remove_var("NPUALLOC_CONF");
        assert!(!p.is_null(), "{config}: {}", last_error_message());
        let before = e.usage(device);
        // SAFETY: as above.
        let q = unsafe { npualloc_pluggable_malloc(40 * MIB, device, std::ptr::null_mut()) };
        assert!(q.is_null(), "{config}: 40 MiB fit beside 30 MiB on 64 MiB");
        let msg = last_error_message();
        assert!(
            msg.contains("cannot allocate 40.00 MiB") && msg.contains("Tried: releasing cached memory"),
            "{config}: {msg}"
        );
        no_more_memory(&before, &e.usage(device), config);
        second_allocator_gets_8_mib(device, config);
        if config.contains("expandable_segments:true") {
            // A growth whose mapping fails (not a shortage) is refused too,
            // giving back the handle it obtained.
            let before = e.usage(device);
            e.fail_nth("aclrtMapMem", 1);
            // SAFETY: as above.
            let r = unsafe { npualloc_pluggable_malloc(12 * MIB, device, std::ptr::null_mut()) };
            let fired = e.fault_pending("aclrtMapMem") == 0;
            e.fail_nth("aclrtMapMem", 0);
            assert!(fired && r.is_null(), "{config}: the mapping fault did not refuse the request");
            assert!(last_error_message().contains("aclrtMapMem failed with"), "{config}: {}", last_error_message());
            no_more_memory(&before, &e.usage(device), &format!("{config}, aclrtMapMem failing"));
        }
        // SAFETY: p came from npualloc_pluggable_malloc on this device.
        unsafe { npualloc_pluggable_free(p, 30 * MIB, device, std::ptr::null_mut()) };
    }
    npualloc_pluggable_empty_cache(true);
    for i in 0..CONFIGS.len() as i32 {
        let u = e.usage(PLUGGABLE_DEVICES + i);
        assert_eq!(
            (u.malloc_bytes, u.physical_bytes, u.mapped_bytes),
            (0, 0, 0),
            "device {}: {u:?}",
            PLUGGABLE_DEVICES + i
        );
    }
}

#[test]
fn a_refused_request_on_an_empty_allocator_leaves_nothing_held() {
    let _g = serial();
    let e = emu();
    e.set_capacity(DEVICE, 64 * MIB as u64);
    for config in CONFIGS {
        let a = create(config, DEVICE).unwrap();
        let (st, msg) = malloc(a, 100 * MIB, Stream::DEFAULT).unwrap_err();
        assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY, "{config}: {msg}");
        let u = e.usage(DEVICE);
        assert_eq!((u.malloc_bytes, u.physical_bytes, u.mapped_bytes), (0, 0, 0), "{config}: {u:?}");
        let s = stats(a);
        assert_eq!((s.reserved_bytes, s.segment_bytes, s.cached_handle_bytes), (0, 0, 0), "{config}: {s:?}");
        assert!(msg.contains("This allocator holds 0.00 MiB: 0.00 MiB allocated"), "{config}: {msg}");
        second_allocator_gets_8_mib(DEVICE, config);
        assert_eq!(destroy(a), NPUALLOC_OK);
    }
    e.set_capacity(DEVICE, 1 << 30);
}

#[test]
fn the_message_names_memory_held_outside_the_allocator() {
    let _g = serial();
    let e = emu();
    e.set_capacity(DEVICE, 64 * MIB as u64);
    for config in CONFIGS {
        let a = create(config, DEVICE).unwrap();
        let p = malloc(a, 30 * MIB, Stream::DEFAULT).unwrap();
        let held_by_a = stats(a).reserved_bytes;
        let b = create(config, DEVICE).unwrap();
        let (st, msg) = malloc(b, 40 * MIB, Stream::DEFAULT).unwrap_err();
        assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY, "{config}: {msg}");
        let part = format!(
            "This allocator holds 0.00 MiB: 0.00 MiB allocated, 0.00 MiB cached in free blocks, \
             0.00 MiB cached as unmapped physical handles, 0.00 MiB freed but waiting for other streams' work. \
             The largest free block this request could use was 0.00 MiB at its last attempt. The device has {} in use that this allocator does not hold: \
             it may be held by another allocator in this process or by another process on the device.",
            mib(held_by_a)
        );
        assert!(msg.contains(&part), "{config}: the message lacks {part:?}: {msg}");
        assert!(
            msg.contains("Last failure: aclrt") && msg.contains("ACL_ERROR_RT_MEMORY_ALLOCATION (207001)"),
            "{config}: {msg}"
        );
        assert_eq!(destroy(b), NPUALLOC_OK);
        assert_eq!(free(a, p), NPUALLOC_OK);
        assert_eq!(destroy(a), NPUALLOC_OK);
    }
    e.set_capacity(DEVICE, 1 << 30);
}
