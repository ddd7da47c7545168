//! `aclemu_fail_nth`: the armed call fails with its documented code and no
//! side effect, and the call after it succeeds. Arm counts are process-wide,
//! so this binary's tests run one at a time (and no other test binary shares
//! the process).

mod common;
use ascendcl::*;
use common::*;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn arm(name: &CStr, n: i32) {
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclemu_fail_nth(name.as_ptr(), n) }, 0);
}

#[test]
fn arming_rules() {
    let _s = serial();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_fail_nth(c"aclrtNoSuchThing".as_ptr(), 1), -1);
        assert_eq!(aclemu_fail_nth(c"aclemu_run_op".as_ptr(), 1), -1);
        assert_eq!(aclemu_fail_nth(null(), 1), -1);
        assert_eq!(aclemu_fail_nth(c"aclrtMalloc".as_ptr(), -1), -1);
        // Armed then disarmed: nothing fails.
        arm(c"aclrtGetDevice", 1);
        arm(c"aclrtGetDevice", 0);
    }
    let _dev = Dev::take();
    let mut id = -1;
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtGetDevice(&mut id) }, 0);
}

#[test]
fn malloc_fails_with_oom_and_no_side_effect() {
    let _s = serial();
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        arm(c"aclrtMalloc", 1);
        let mut p = null_mut();
        assert_eq!(aclrtMalloc(&mut p, 64, 0), RT_MEMORY_ALLOCATION);
        assert!(p.is_null());
        assert_eq!(dev.usage().malloc_count, 0);
        let p = malloc(64);
        // The n-th call: two succeed, the third fails.
        arm(c"aclrtMalloc", 3);
        let (a, b) = (malloc(64), malloc(64));
        let mut c = null_mut();
        assert_eq!(aclrtMalloc(&mut c, 64, 0), RT_MEMORY_ALLOCATION);
        assert_eq!(dev.usage().malloc_count, 3);
        let c = malloc(64);
        // A failed free leaves the block live.
        arm(c"aclrtFree", 1);
        assert_eq!(aclrtFree(p), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().malloc_count, 4);
        for q in [p, a, b, c] {
            assert_eq!(aclrtFree(q), 0);
        }
    }
    dev.assert_clean();
}

#[test]
fn host_and_physical_allocations_fail_with_oom() {
    let _s = serial();
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut h = null_mut();
        arm(c"aclrtMallocHost", 1);
        assert_eq!(aclrtMallocHost(&mut h, 64), RT_MEMORY_ALLOCATION);
        assert_eq!(aclrtMallocHost(&mut h, 64), 0);
        assert_eq!(aclrtFreeHost(h), 0);

        let prop = dev.prop(ACL_HBM_MEM_HUGE);
        arm(c"aclrtMallocPhysical", 1);
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &prop, 0), RT_MEMORY_ALLOCATION);
        assert_eq!(dev.usage().physical_count, 0);
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &prop, 0), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
    }
    dev.assert_clean();
}

#[test]
fn map_and_unmap_fail_with_internal_error() {
    let _s = serial();
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let base = reserve(2 * MIB);
        let h = physical(&dev, 2 * MIB);
        arm(c"aclrtMapMem", 1);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 0), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().mapped_bytes, 0);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 0), 0);
        arm(c"aclrtUnmapMem", 1);
        assert_eq!(aclrtUnmapMem(base), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().mapped_bytes, (2 * MIB) as u64);
        *base.cast::<u8>() = 1;
        assert_eq!(aclrtUnmapMem(base), 0);
        arm(c"aclrtReserveMemAddress", 1);
        let mut p = null_mut();
        assert_eq!(aclrtReserveMemAddress(&mut p, 2 * MIB, 0, null_mut(), 0), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().reserved_ranges, 1);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
    }
    dev.assert_clean();
}

#[test]
fn stream_and_event_calls_fail_with_internal_error() {
    let _s = serial();
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut x: *mut c_void = null_mut();
        arm(c"aclrtCreateStream", 1);
        assert_eq!(aclrtCreateStream(&mut x), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().streams, 0);
        let s = stream();
        let e = event();
        assert_eq!(aclemu_stream_hold(s), 0);
        // A failed record does not move the event: never recorded, it stays
        // NOT_READY (an old-mode event).
        arm(c"aclrtRecordEvent", 1);
        assert_eq!(aclrtRecordEvent(e, s), RT_INTERNAL_ERROR);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        arm(c"aclrtQueryEventStatus", 1);
        let mut st = 7u32;
        assert_eq!(aclrtQueryEventStatus(e, &mut st), RT_INTERNAL_ERROR);
        assert_eq!(st, 7);
        let before = dev.syncs();
        arm(c"aclrtSynchronizeStream", 1);
        assert_eq!(aclrtSynchronizeStream(s), RT_INTERNAL_ERROR);
        assert_eq!(dev.syncs(), before);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclemu_stream_release(s), 0);
        arm(c"aclrtDestroyEvent", 1);
        assert_eq!(aclrtDestroyEvent(e), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().events, 1);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn create_desc_returns_null_when_armed() {
    let _s = serial();
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        arm(c"aclrtAllocatorCreateDesc", 1);
        assert!(aclrtAllocatorCreateDesc().is_null());
        assert_eq!(dev.usage().descs, 0);
        let d = aclrtAllocatorCreateDesc();
        assert!(!d.is_null());
        arm(c"aclrtAllocatorRegister", 1);
        assert_eq!(aclrtAllocatorRegister(0x10usize as *mut c_void, d), RT_INTERNAL_ERROR);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
    }
    dev.assert_clean();
}
