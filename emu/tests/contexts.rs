//! Device references and contexts (docs/runtime-behaviour.md
//! "Devices and contexts"): aclrtSetDevice / aclrtResetDevice count, reaching 0
//! releases the device's primary context, its streams and (once no created
//! context holds the device) its memory; created contexts; the current
//! context decides the current device; streams of another context are
//! refused where the runtime checks them.

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;

const RT_STREAM_CONTEXT: i32 = 107_003;
const RT_CONTEXT_RELEASE_ERROR: i32 = 507_007;

fn refs(device: i32) -> i64 {
    aclemu_device_refs(device)
}

/// Drops every reference `Dev::take` and earlier tests left on the device.
fn drain(dev: &Dev) {
    while refs(dev.id) > 0 {
        // SAFETY: no pointer arguments.
        assert_eq!(unsafe { aclrtResetDevice(dev.id) }, 0);
    }
}

fn current_context() -> *mut c_void {
    let mut ctx = null_mut();
    // SAFETY: a live local out-pointer.
    assert_eq!(unsafe { aclrtGetCurrentContext(&mut ctx) }, 0);
    ctx
}

fn current_device() -> Result<i32, i32> {
    let mut id = -1;
    // SAFETY: a live local out-pointer.
    match unsafe { aclrtGetDevice(&mut id) } {
        0 => Ok(id),
        code => Err(code),
    }
}

#[test]
fn set_and_reset_count_references() {
    let dev = Dev::take();
    drain(&dev);
    assert_eq!(refs(dev.id), 0);
    assert_eq!(refs(-1), -1);
    assert_eq!(refs(DEVICES as i32), -1);
    // SAFETY: no pointer arguments.
    unsafe {
        assert_eq!(aclrtResetDevice(dev.id), RT_CONTEXT_RELEASE_ERROR, "nothing to release");
        assert_eq!(aclrtSetDevice(dev.id), 0);
        assert_eq!(aclrtSetDevice(dev.id), 0);
        assert_eq!(refs(dev.id), 2);
        assert_eq!(aclrtResetDevice(dev.id), 0);
        assert_eq!(refs(dev.id), 1);
        // One reference left: the device stays current.
        assert_eq!(current_device(), Ok(dev.id));
        assert_eq!(aclrtResetDevice(dev.id), 0);
        assert_eq!(refs(dev.id), 0);
        assert_eq!(current_device(), Err(RT_CONTEXT_NULL));
        assert_eq!(aclrtSetDevice(dev.id), 0);
    }
    dev.assert_clean();
}

#[test]
fn reaching_zero_releases_streams_and_memory() {
    let dev = Dev::take();
    drain(&dev);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtSetDevice(dev.id), 0);
        let primary = current_context();
        let (s, p) = (stream(), malloc(MIB));
        assert_eq!(aclemu_stream_hold(s), 0);
        let u = dev.usage();
        assert_eq!((u.streams, u.malloc_count), (1, 1));
        assert_eq!(aclrtResetDevice(dev.id), 0);
        let u = dev.usage();
        assert_eq!((u.streams, u.malloc_count, u.malloc_bytes), (0, 0, 0), "released at 0");
        assert_eq!(aclrtSetDevice(dev.id), 0);
        assert_ne!(current_context(), primary, "a new primary context");
        assert_eq!(aclrtSetCurrentContext(primary), RT_CONTEXT_NULL, "the old one is gone");
        assert_eq!(aclrtDestroyStream(s), RT_INVALID_HANDLE);
        assert_eq!(aclrtFree(p), RT_PARAM_INVALID);
    }
    dev.assert_clean();
}

#[test]
fn a_created_context_holds_the_device_without_a_reference() {
    let dev = Dev::take();
    drain(&dev);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut ctx = null_mut();
        assert_eq!(aclrtCreateContext(null_mut(), dev.id), INVALID_PARAM);
        assert_eq!(aclrtCreateContext(&mut ctx, DEVICES as i32), RT_INVALID_DEVICEID);
        assert_eq!(aclrtCreateContext(&mut ctx, dev.id), 0);
        assert_eq!(refs(dev.id), 0, "not an aclrtSetDevice reference");
        assert_eq!(current_context(), ctx);
        assert_eq!(current_device(), Ok(dev.id));
        let (p, s) = (malloc(MIB), stream());
        // The primary context comes and goes; the created one keeps the memory.
        assert_eq!(aclrtSetDevice(dev.id), 0);
        assert_eq!(aclrtResetDevice(dev.id), 0);
        assert_eq!(dev.usage().malloc_count, 1);
        assert_eq!(dev.usage().streams, 1);
        assert_eq!(aclrtDestroyContext(ctx), 0);
        let u = dev.usage();
        assert_eq!((u.streams, u.malloc_count), (0, 0), "its streams and, unheld, the memory");
        assert_eq!(aclrtFree(p), RT_PARAM_INVALID);
        assert_eq!(aclrtSetDevice(dev.id), 0);
        assert_eq!(aclrtDestroyStream(s), RT_INVALID_HANDLE);
        assert_eq!(aclrtDestroyContext(ctx), RT_CONTEXT_NULL, "already destroyed");
    }
    dev.assert_clean();
}

#[test]
fn the_current_context_decides_the_current_device() {
    let a = Dev::take();
    let b = Dev::take_besides(&a);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtSetDevice(a.id), 0);
        let ca = current_context();
        assert_eq!(aclrtSetDevice(b.id), 0);
        let cb = current_context();
        assert_ne!(ca, cb);
        let (ra, rb) = (refs(a.id), refs(b.id));
        assert_eq!(aclrtSetCurrentContext(ca), 0);
        assert_eq!(current_device(), Ok(a.id));
        assert_eq!(current_context(), ca);
        assert_eq!((refs(a.id), refs(b.id)), (ra, rb), "switching contexts adds no reference");
        assert_eq!(aclrtDestroyContext(ca), RT_CONTEXT_NULL, "a primary context cannot be destroyed");
        assert_eq!(aclrtSetCurrentContext(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtSetCurrentContext(0x1234 as *mut c_void), RT_CONTEXT_NULL);
        assert_eq!(aclrtGetCurrentContext(null_mut()), INVALID_PARAM);
        let cbu = cb as usize;
        on_fresh_thread(move || {
            let mut ctx = null_mut();
            assert_eq!(aclrtGetCurrentContext(&mut ctx), RT_CONTEXT_NULL);
            assert_eq!(aclrtSetCurrentContext(cbu as *mut c_void), 0);
            assert_eq!(current_device(), Ok(b.id));
        });
        assert_eq!(current_device(), Ok(a.id), "another thread's switch is its own");
    }
    a.assert_clean();
    b.assert_clean();
}

#[test]
fn a_stream_of_another_context_is_refused_where_the_runtime_checks() {
    let a = Dev::take();
    let b = Dev::take_besides(&a);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtSetDevice(a.id), 0);
        let (s, e) = (stream(), event());
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtSetDevice(b.id), 0);
        assert_eq!(aclrtRecordEvent(e, s), RT_STREAM_CONTEXT);
        assert_eq!(aclrtStreamWaitEvent(s, e), RT_STREAM_CONTEXT);
        assert_eq!(aclrtDestroyStream(s), RT_STREAM_CONTEXT);
        // "Asynchronous 2D memory copy" checks it too (H2D = 1).
        let (src, d) = ([7u8; 64], malloc(64));
        assert_eq!(aclrtMemcpy2dAsync(d, 64, src.as_ptr().cast(), 64, 64, 1, 1, s), RT_STREAM_CONTEXT);
        // Query and synchronize do not check the context.
        let mut st = 9;
        assert_eq!(aclrtStreamQuery(s, &mut st), 0);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        // Without any current context both need one: 107002.
        let su = s as usize;
        on_fresh_thread(move || {
            let s = su as *mut c_void;
            let mut st = 9;
            assert_eq!(aclrtStreamQuery(s, &mut st), RT_CONTEXT_NULL);
            assert_eq!(aclrtSynchronizeStream(s), RT_CONTEXT_NULL);
        });
        // NULL is the current context's default stream.
        assert_eq!(aclrtRecordEvent(e, null_mut()), 0);
        assert_eq!(aclrtSynchronizeEvent(e), 0);
        assert_eq!(aclrtSetDevice(a.id), 0);
        assert_eq!(aclrtMemcpy2dAsync(d, 64, src.as_ptr().cast(), 64, 64, 1, 1, s), 0);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
    }
    a.assert_clean();
    b.assert_clean();
}
