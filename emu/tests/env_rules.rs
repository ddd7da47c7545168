//! Rules switched by environment variables, read once per process: this
//! binary sets them before its first emulator call.
//! - `ACLEMU_ADDRESS_SPACE=64g`: a small address window, shared by every
//!   device of the process (its tests take `WINDOW` so that none holds
//!   address space while another counts it);
//! - `ACLEMU_HUGE1G=0`: a device without 1 GiB pages;
//! - `ACLEMU_MALLOC_ALIGN=random:42`: aclrtMalloc results only 64-byte aligned;
//! - `ACLEMU_PAGEABLE_COPY=sync`: async copies with pageable memory run at once.

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Once;

/// Held by every test of this binary: the address window is the process's.
static WINDOW: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn window() -> std::sync::MutexGuard<'static, ()> {
    WINDOW.lock().unwrap_or_else(|e| e.into_inner())
}

fn setup() -> Dev {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::set_var("ACLEMU_ADDRESS_SPACE", "64g");
        std::env::set_var("ACLEMU_HUGE1G", "0");
        std::env::set_var("ACLEMU_MALLOC_ALIGN", "random:42");
        std::env::set_var("ACLEMU_PAGEABLE_COPY", "sync");
    });
    Dev::take()
}

#[test]
fn reservations_and_malloc_share_a_finite_address_window() {
    let _window = window();
    let dev = setup();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let big = reserve(40 * GIB);
        let mut p = null_mut();
        assert_eq!(aclrtReserveMemAddress(&mut p, 30 * GIB, 0, null_mut(), 0), RT_MEMORY_ALLOCATION);
        let rest = reserve(24 * GIB - 4 * MIB);
        // Memory is there, address space is not.
        assert_eq!(aclrtMalloc(&mut p, 8 * MIB, 0), RT_MEMORY_ALLOCATION);
        assert_eq!(dev.usage().malloc_count, 0);
        assert_eq!(aclrtReleaseMemAddress(rest), 0);
        let q = malloc(8 * MIB);
        assert_eq!(aclrtFree(q), 0);
        assert_eq!(aclrtReleaseMemAddress(big), 0);
    }
    dev.assert_clean();
}

/// The window is the process's, not a device's: what one device reserves,
/// another cannot (`svm_define.h`: one SVM range for every device).
#[test]
fn every_device_shares_one_address_window() {
    let _window = window();
    let first = setup();
    let second = Dev::take_besides(&first);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtSetDevice(first.id), 0);
        let big = reserve(40 * GIB);
        assert_eq!(aclrtSetDevice(second.id), 0);
        let mut p = null_mut();
        assert_eq!(aclrtReserveMemAddress(&mut p, 30 * GIB, 0, null_mut(), 0), RT_MEMORY_ALLOCATION);
        assert_eq!(second.usage().reserved_ranges, 0);
        let fits = reserve(20 * GIB);
        assert_eq!(aclrtReleaseMemAddress(fits), 0);
        assert_eq!(aclrtSetDevice(first.id), 0);
        assert_eq!(aclrtReleaseMemAddress(big), 0);
        assert_eq!(aclrtSetDevice(second.id), 0);
        let whole = reserve(60 * GIB);
        assert_eq!(aclrtReleaseMemAddress(whole), 0);
    }
    second.assert_clean();
    first.assert_clean();
}

/// A range reserved with no context current still takes the process's
/// window, and releasing it (with or without one) gives the space back.
#[test]
fn reservations_without_a_context_take_the_window_too() {
    let _window = window();
    let dev = setup();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let big = on_fresh_thread(|| {
            let big = reserve(40 * GIB) as usize;
            let mut p = null_mut();
            assert_eq!(aclrtReserveMemAddress(&mut p, 30 * GIB, 0, null_mut(), 0), RT_MEMORY_ALLOCATION);
            big
        });
        let mut p = null_mut();
        assert_eq!(aclrtReserveMemAddress(&mut p, 30 * GIB, 0, null_mut(), 0), RT_MEMORY_ALLOCATION);
        assert_eq!(dev.usage().reserved_ranges, 0);
        assert_eq!(on_fresh_thread(|| aclrtReleaseMemAddress(big as *mut c_void)), 0);
        let whole = reserve(60 * GIB);
        assert_eq!(aclrtReleaseMemAddress(whole), 0);
    }
    dev.assert_clean();
}

#[test]
fn without_huge1g_support_only_the_allocation_fails() {
    let _window = window();
    let dev = setup();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut prop = dev.prop(ACL_HBM_MEM_HUGE1G);
        let mut g = 0usize;
        assert_eq!(aclrtMemGetAllocationGranularity(&mut prop, 0, &mut g), 0);
        assert_eq!(g, GIB);
        let mut h = null_mut();
        assert_eq!(aclrtMallocPhysical(&mut h, GIB, &prop, 0), RT_FEATURE_NOT_SUPPORT);
        // 2 MiB pages still work.
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtFreePhysical(h), 0);
    }
    dev.assert_clean();
}

#[test]
fn malloc_results_are_only_64_byte_aligned() {
    let _window = window();
    let dev = setup();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let blocks: Vec<*mut c_void> = (0..64).map(|i| malloc(1 + i * 1000)).collect();
        for (i, &p) in blocks.iter().enumerate() {
            assert_eq!(p as usize % 64, 0);
            assert_ne!(p as usize % 4096, 0, "block {i} is page aligned");
            // Every requested byte is usable.
            std::ptr::write_bytes(p.cast::<u8>(), 0xAB, 1 + i * 1000);
        }
        assert_eq!(dev.usage().malloc_count, 64);
        for p in blocks {
            assert_eq!(aclrtFree(p), 0);
        }
    }
    dev.assert_clean();
}

#[test]
fn async_copies_with_pageable_memory_run_at_once() {
    let _window = window();
    let dev = setup();
    let (s, e) = (stream(), event());
    const H2D: u32 = 1;
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = malloc(64);
        let src = [5u8; 64];
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        // The runtime synchronizes the stream, then copies.
        assert_eq!(aclrtMemcpy2dAsync(d, 64, src.as_ptr().cast(), 64, 64, 1, H2D, s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(*d.cast::<u8>().add(63), 5);
        // Pinned memory keeps the copy queued.
        let mut pinned = null_mut();
        assert_eq!(aclrtMallocHost(&mut pinned, 64), 0);
        std::ptr::write_bytes(pinned.cast::<u8>(), 9, 64);
        assert_eq!(aclrtMemcpy2dAsync(d, 64, pinned, 64, 64, 1, H2D, s), 0);
        assert_eq!(*d.cast::<u8>(), 5);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(*d.cast::<u8>(), 9);
        // The 1D copy follows the same rule.
        assert_eq!(aclemu_stream_hold(s), 0);
        let other = [6u8; 64];
        assert_eq!(aclrtMemcpyAsync(d, 64, other.as_ptr().cast(), 64, H2D, s), 0);
        assert_eq!(*d.cast::<u8>(), 6, "a 1D async copy from pageable memory waited");
        assert_eq!(aclrtMemcpyAsync(d, 64, pinned, 64, H2D, s), 0);
        assert_eq!(*d.cast::<u8>(), 6, "a 1D async copy from pinned memory ran early");
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(*d.cast::<u8>(), 9);
        assert_eq!(aclrtFreeHost(pinned), 0);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}
