//! Init, devices, the thread-local current device, aclrtGetMemInfo,
//! capacity control and usage reporting (docs/acl-api.md §5).

mod common;
use ascendcl::*;
use common::*;
use std::ptr::null_mut;

#[test]
fn init_repeat_and_finalize_codes() {
    // The only test in this binary that touches init state.
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclInit(std::ptr::null()), 0);
        assert_eq!(aclInit(std::ptr::null()), REPEAT_INITIALIZE);
        assert_eq!(aclFinalize(), 0);
        assert_eq!(aclFinalize(), REPEAT_FINALIZE);
        assert_eq!(aclInit(c"/nonexistent.json".as_ptr()), 0);
        assert_eq!(aclFinalize(), 0);
    }
}

#[test]
fn set_get_reset_device() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut id = -1;
        assert_eq!(aclrtGetDevice(&mut id), 0);
        assert_eq!(id, dev.id);
        assert_eq!(aclrtGetDevice(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtSetDevice(-1), RT_INVALID_DEVICEID);
        assert_eq!(aclrtSetDevice(DEVICES as i32), RT_INVALID_DEVICEID);
        assert_eq!(aclrtResetDevice(DEVICES as i32), RT_INVALID_DEVICEID);
        // A failed set leaves the current device alone.
        assert_eq!(aclrtGetDevice(&mut id), 0);
        assert_eq!(id, dev.id);
        // Resets pair with sets (earlier tests on this device left some):
        // the device stays current until the last reference goes.
        assert!(aclemu_device_refs(dev.id) >= 1);
        while aclemu_device_refs(dev.id) > 1 {
            assert_eq!(aclrtResetDevice(dev.id), 0);
            assert_eq!(aclrtGetDevice(&mut id), 0);
        }
        assert_eq!(aclrtResetDevice(dev.id), 0);
        assert_eq!(aclrtGetDevice(&mut id), RT_CONTEXT_NULL);
        assert_eq!(aclrtSetDevice(dev.id), 0);
    }
    dev.assert_clean();
}

#[test]
fn current_device_is_thread_local() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    on_fresh_thread(|| unsafe {
        let mut id = -1;
        assert_eq!(aclrtGetDevice(&mut id), RT_CONTEXT_NULL);
    });
    let mut id = -1;
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtGetDevice(&mut id) }, 0);
    assert_eq!(id, dev.id);
}

#[test]
fn calls_that_need_a_device_fail_without_one() {
    let dev = Dev::take();
    let prop = dev.prop(ACL_HBM_MEM_HUGE);
    let e = event() as usize;
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    on_fresh_thread(|| unsafe {
        let mut p = null_mut();
        let (mut free, mut total) = (0, 0);
        assert_eq!(aclrtMalloc(&mut p, 64, 0), RT_CONTEXT_NULL);
        assert_eq!(aclrtCreateStream(&mut p), RT_CONTEXT_NULL);
        assert_eq!(aclrtCreateEvent(&mut p), RT_CONTEXT_NULL);
        assert_eq!(aclrtCreateEventWithFlag(&mut p, 1), RT_CONTEXT_NULL);
        assert_eq!(aclrtMallocPhysical(&mut p, 2 * MIB, &prop, 0), RT_CONTEXT_NULL);
        assert_eq!(aclrtGetMemInfo(1, &mut free, &mut total), RT_CONTEXT_NULL);
        assert_eq!(aclrtSynchronizeDevice(), RT_CONTEXT_NULL);
        // NULL stream = the current device's default stream: none here.
        assert_eq!(aclrtRecordEvent(e as *mut _, null_mut()), RT_CONTEXT_NULL);
        assert_eq!(aclrtSynchronizeStream(null_mut()), RT_CONTEXT_NULL);
        // Reserving address space needs none (RB VMM, "what reserving and
        // releasing need"; vmm.rs tests it).
        assert_eq!(aclrtReserveMemAddress(&mut p, 2 * MIB, 0, null_mut(), 0), 0);
        assert_eq!(aclrtReleaseMemAddress(p), 0);
    });
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtDestroyEvent(e as *mut _) }, 0);
    dev.assert_clean();
}

#[test]
fn mem_info_reports_capacity_and_use() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!(aclrtGetMemInfo(1, &mut free, &mut total), 0);
        assert_eq!(total as u64, DEFAULT_TEST_CAPACITY);
        assert_eq!(free, total);
        // Up to 1 MiB, HUGE_FIRST takes normal pages; above, huge pages.
        let p = malloc(1000);
        assert_eq!(aclrtGetMemInfo(ACL_HBM_MEM_NORMAL, &mut free, &mut total), 0);
        assert_eq!(total - free, 1024 + 32);
        assert_eq!(aclrtGetMemInfo(ACL_HBM_MEM_HUGE, &mut free, &mut total), 0);
        assert_eq!(total, free);
        let q = malloc(2 * MIB);
        assert_eq!(aclrtGetMemInfo(ACL_HBM_MEM_HUGE, &mut free, &mut total), 0);
        assert_eq!(total - free, 2 * MIB + 32);
        // ACL_HBM_MEM: both pools.
        assert_eq!(aclrtGetMemInfo(1, &mut free, &mut total), 0);
        assert_eq!(total - free, 1024 + 32 + 2 * MIB + 32);
        assert_eq!(total as u64, DEFAULT_TEST_CAPACITY);
        // 1 GiB pages count in their own pool only.
        let h = {
            let mut h = null_mut();
            let prop = dev.prop(ACL_HBM_MEM_HUGE1G);
            assert_eq!(aclrtMallocPhysical(&mut h, GIB, &prop, 0), 0);
            h
        };
        assert_eq!(aclrtGetMemInfo(ACL_HBM_MEM_HUGE1G, &mut free, &mut total), 0);
        assert_eq!(total - free, GIB);
        assert_eq!(aclrtGetMemInfo(1, &mut free, &mut total), 0);
        assert_eq!(total as u64, DEFAULT_TEST_CAPACITY - GIB as u64);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtFree(q), 0);
        assert_eq!(aclrtGetMemInfo(1, null_mut(), &mut total), INVALID_PARAM);
        assert_eq!(aclrtGetMemInfo(1, &mut free, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtGetMemInfo(99, &mut free, &mut total), INVALID_PARAM);
        // The emulated device has no DDR: 0/0, as for any missing attr.
        assert_eq!(aclrtGetMemInfo(0, &mut free, &mut total), 0);
        assert_eq!((free, total), (0, 0));
        assert_eq!(aclrtFree(p), 0);
    }
    dev.assert_clean();
}

#[test]
fn set_device_memory_limits_later_allocations() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_set_device_memory(-1, 1), RT_INVALID_DEVICEID);
        assert_eq!(aclemu_set_device_memory(DEVICES as i32, 1), RT_INVALID_DEVICEID);
        let p = malloc(MIB);
        // Below current use is allowed; allocations then fail.
        assert_eq!(aclemu_set_device_memory(dev.id, 4096), 0);
        let mut q = null_mut();
        assert_eq!(aclrtMalloc(&mut q, 64, 0), RT_MEMORY_ALLOCATION);
        let (mut free, mut total) = (1usize, 0usize);
        assert_eq!(aclrtGetMemInfo(1, &mut free, &mut total), 0);
        assert_eq!((free, total), (0, 4096));
        assert_eq!(aclrtFree(p), 0);
        assert_eq!(aclrtMalloc(&mut q, 64, 0), 0);
        assert_eq!(aclrtFree(q), 0);
    }
    dev.assert_clean();
}

#[test]
fn usage_rejects_bad_arguments() {
    let mut u = aclemu_usage::default();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_get_usage(-1, &mut u), RT_INVALID_DEVICEID);
        assert_eq!(aclemu_get_usage(DEVICES as i32, &mut u), RT_INVALID_DEVICEID);
        assert_eq!(aclemu_get_usage(0, null_mut()), INVALID_PARAM);
    }
}
