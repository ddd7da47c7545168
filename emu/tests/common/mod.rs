//! Helpers shared by the conformance tests.
//!
//! Emulator state is process-global and cargo runs tests on parallel
//! threads, so each test takes a device of its own (`Dev::take`): device ids
//! are handed out round-robin and each one is locked for the test's
//! lifetime, so per-device usage counters are exact.
#![allow(dead_code)]

use ascendcl::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub const DEVICES: usize = 8;
pub const MIB: usize = 1 << 20;
pub const GIB: usize = 1 << 30;
pub const DEFAULT_TEST_CAPACITY: u64 = 8 << 30;

pub const INVALID_PARAM: i32 = 100_000;
pub const REPEAT_INITIALIZE: i32 = 100_002;
pub const REPEAT_FINALIZE: i32 = 100_037;
pub const RT_PARAM_INVALID: i32 = 107_000;
pub const RT_INVALID_DEVICEID: i32 = 107_001;
pub const RT_CONTEXT_NULL: i32 = 107_002;
pub const RT_INVALID_HANDLE: i32 = 107_017;
pub const RT_FEATURE_NOT_SUPPORT: i32 = 207_000;
pub const RT_MEMORY_ALLOCATION: i32 = 207_001;
pub const RT_INTERNAL_ERROR: i32 = 507_000;
pub const RT_DRV_INTERNAL: i32 = 507_899;
pub const RT_NO_EVENT_RESOURCE: i32 = 207_007;

pub const NOT_READY: u32 = 0;
pub const COMPLETE: u32 = 1;

/// For the tests of the violation check itself, which make violations on
/// purpose and count them: violations are only counted from now on in this
/// process, whatever `ACLEMU_VIOLATIONS` says (the suites set it to abort).
pub fn counting_violations() {
    // SAFETY: plain value.
    unsafe { aclemu_set_violation_abort(0) };
}

static LOCKS: [Mutex<()>; DEVICES] = [const { Mutex::new(()) }; DEVICES];
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A device owned by the current test and set current on its thread.
pub struct Dev {
    pub id: i32,
    _lock: MutexGuard<'static, ()>,
}

impl Dev {
    pub fn take() -> Dev {
        Self::take_unless(usize::MAX)
    }

    /// A second device for a test that already owns `first`.
    pub fn take_besides(first: &Dev) -> Dev {
        Self::take_unless(first.id as usize)
    }

    fn take_unless(busy: usize) -> Dev {
        let id = loop {
            let id = NEXT.fetch_add(1, Ordering::Relaxed) % DEVICES;
            if id != busy {
                break id;
            }
        };
        let lock = LOCKS[id].lock().unwrap_or_else(|e| e.into_inner());
        let id = id as i32;
        assert_eq!(
            // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
            unsafe { aclemu_set_device_memory(id, DEFAULT_TEST_CAPACITY) },
            0
        );
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        assert_eq!(unsafe { aclrtSetDevice(id) }, 0);
        Dev { id, _lock: lock }
    }

    pub fn usage(&self) -> aclemu_usage {
        let mut u = aclemu_usage::default();
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        assert_eq!(unsafe { aclemu_get_usage(self.id, &mut u) }, 0);
        u
    }

    pub fn syncs(&self) -> u64 {
        self.usage().syncs
    }

    /// Everything created on the device was released (syncs aside).
    pub fn assert_clean(&self) {
        let u = self.usage();
        assert_eq!(u, aclemu_usage { syncs: u.syncs, ..Default::default() }, "leak on device {}", self.id);
    }

    /// A valid physical-memory prop for this device.
    pub fn prop(&self, mem_attr: u32) -> aclrtPhysicalMemProp {
        aclrtPhysicalMemProp {
            handleType: 0,
            allocationType: 0,
            memAttr: mem_attr,
            location: aclrtMemLocation { id: self.id as u32, type_: 1 },
            reserve: 0,
        }
    }
}

pub const ACL_HBM_MEM_HUGE: u32 = 4;
pub const ACL_HBM_MEM_NORMAL: u32 = 5;
pub const ACL_HBM_MEM_HUGE1G: u32 = 10;

pub fn stream() -> *mut c_void {
    let mut s = null_mut();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtCreateStream(&mut s) }, 0);
    s
}

pub fn event() -> *mut c_void {
    let mut e = null_mut();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtCreateEvent(&mut e) }, 0);
    e
}

pub fn status(e: *mut c_void) -> u32 {
    let mut s = 99;
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtQueryEventStatus(e, &mut s) }, 0);
    s
}

pub fn malloc(size: usize) -> *mut c_void {
    let mut p = null_mut();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtMalloc(&mut p, size, 0) }, 0);
    p
}

pub fn reserve(size: usize) -> *mut c_void {
    let mut p = null_mut();
    assert_eq!(
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        unsafe { aclrtReserveMemAddress(&mut p, size, 0, null_mut(), 0) },
        0
    );
    p
}

pub fn physical(dev: &Dev, size: usize) -> *mut c_void {
    let mut h = null_mut();
    let prop = dev.prop(ACL_HBM_MEM_HUGE);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtMallocPhysical(&mut h, size, &prop, 0) }, 0);
    h
}

/// Runs `f` on a fresh thread, which has no current device.
pub fn on_fresh_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}
