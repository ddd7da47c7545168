//! aclrtMalloc / aclrtFree / aclrtMallocHost / aclrtFreeHost
//! (docs/acl-api.md §5), capacity exhaustion and recovery.

mod common;
use ascendcl::*;
use common::*;
use std::ptr::null_mut;

#[test]
fn malloc_argument_checks() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut p = null_mut();
        assert_eq!(aclrtMalloc(&mut p, 0, 0), INVALID_PARAM);
        assert_eq!(aclrtMalloc(null_mut(), 64, 0), INVALID_PARAM);
        assert_eq!(aclrtFree(null_mut()), INVALID_PARAM);
        // Not from aclrtMalloc.
        let mut local = 0u64;
        assert_eq!(aclrtFree((&mut local as *mut u64).cast()), RT_PARAM_INVALID);
    }
    dev.assert_clean();
}

#[test]
fn malloc_is_aligned_writable_and_charged_with_acl_padding() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let p = malloc(100);
        assert_eq!(p as usize % 64, 0);
        std::ptr::write_bytes(p.cast::<u8>(), 0xab, 100);
        // round_up(100, 32) + 32
        assert_eq!((dev.usage().malloc_bytes, dev.usage().malloc_count), (160, 1));
        let mut q = null_mut();
        // HUGE1G_ONLY: no padding.
        assert_eq!(aclrtMalloc(&mut q, 100, 6), 0);
        assert_eq!(dev.usage().malloc_bytes, 160 + 128);
        // A policy outside the enum is accepted.
        let mut r = null_mut();
        assert_eq!(aclrtMalloc(&mut r, 1, 0x4242), 0);
        assert_eq!(dev.usage().malloc_count, 3);
        assert_eq!(aclrtFree(p), 0);
        // Double free: the pointer is no longer known.
        assert_eq!(aclrtFree(p), RT_PARAM_INVALID);
        assert_eq!(aclrtFree(q), 0);
        assert_eq!(aclrtFree(r), 0);
    }
    dev.assert_clean();
}

#[test]
fn malloc_align32_rounds_to_32_without_the_padding() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut p = null_mut();
        assert_eq!(aclrtMallocAlign32(null_mut(), 64, 0), INVALID_PARAM);
        assert_eq!(aclrtMallocAlign32(&mut p, 0, 0), INVALID_PARAM);
        assert_eq!(aclrtMallocAlign32(&mut p, 100, 0), 0);
        assert_eq!(p as usize % 64, 0);
        std::ptr::write_bytes(p.cast::<u8>(), 0xcd, 128);
        // round_up(100, 32), where aclrtMalloc charges 160.
        assert_eq!((dev.usage().malloc_bytes, dev.usage().malloc_count), (128, 1));
        // A block like any other: copied into, freed by aclrtFree.
        let src = [1u8; 100];
        assert_eq!(aclrtMemcpy(p, 100, src.as_ptr().cast(), 100, 1), 0);
        assert_eq!(aclrtFree(p), 0);
        // Out of memory is its code, also under an injected fault.
        assert_eq!(aclemu_fail_nth(c"aclrtMallocAlign32".as_ptr(), 1), 0);
        assert_eq!(aclrtMallocAlign32(&mut p, 100, 0), RT_MEMORY_ALLOCATION);
    }
    dev.assert_clean();
}

#[test]
fn capacity_exhaustion_then_recovery() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_set_device_memory(dev.id, MIB as u64), 0);
        let a = malloc(MIB / 2);
        let mut b = null_mut();
        assert_eq!(aclrtMalloc(&mut b, MIB / 2, 0), RT_MEMORY_ALLOCATION);
        assert!(b.is_null());
        assert_eq!(dev.usage().malloc_count, 1);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtMalloc(&mut b, MIB / 2, 0), 0);
        assert_eq!(aclrtFree(b), 0);
        // A size whose padding overflows is simply out of memory.
        assert_eq!(aclrtMalloc(&mut b, usize::MAX, 0), RT_MEMORY_ALLOCATION);
    }
    dev.assert_clean();
}

#[test]
fn multi_gib_allocations_cost_only_touched_pages() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let p = malloc(6 * GIB).cast::<u8>();
        *p = 1;
        *p.add(6 * GIB - 1) = 2;
        assert_eq!(*p + *p.add(6 * GIB - 1), 3);
        let mut q = null_mut();
        // 6 GiB + 3 GiB > 8 GiB.
        assert_eq!(aclrtMalloc(&mut q, 3 * GIB, 0), RT_MEMORY_ALLOCATION);
        assert_eq!(aclrtFree(p.cast()), 0);
    }
    dev.assert_clean();
}

#[test]
fn host_memory_rules() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut h = null_mut();
        assert_eq!(aclrtMallocHost(&mut h, 0), INVALID_PARAM);
        assert_eq!(aclrtMallocHost(null_mut(), 64), INVALID_PARAM);
        assert_eq!(aclrtFreeHost(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtMallocHost(&mut h, 1000), 0);
        assert_eq!(h as usize % 64, 0);
        std::ptr::write_bytes(h.cast::<u8>(), 1, 1000);
        // Host memory is not device memory and is not charged.
        assert_eq!(dev.usage().malloc_count, 0);
        assert_eq!(aclrtFree(h), RT_PARAM_INVALID);
        let d = malloc(64);
        assert_eq!(aclrtFreeHost(d), RT_PARAM_INVALID);
        assert_eq!(aclrtFreeHost(h), 0);
        assert_eq!(aclrtFreeHost(h), RT_PARAM_INVALID);
        assert_eq!(aclrtFree(d), 0);
    }
    dev.assert_clean();
}
