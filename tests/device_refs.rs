//! Switching devices leaves the host's state alone: every device's
//! `aclrtSetDevice` reference count (the emulator's `aclemu_device_refs`),
//! the thread's current device and its current context (an explicit one
//! included) are as the host left them, through the C API and the desc
//! path (the emulator's graph-engine driver). And a stream of another
//! device is refused by `npualloc_malloc`, `npualloc_record_stream` and
//! `npualloc_register`, naming both devices.
//!
//! Tests of this binary run in parallel and each uses devices of its own,
//! so reference counts are exact.

mod common;

use common::{create, destroy, emu, free, malloc, record_stream};
use npualloc::ffi::desc::{npualloc_register, npualloc_unregister};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::*;
use npualloc::runtime::Stream;
use std::ffi::{c_void, CStr};

/// A function of the emulator, resolved from the instance npualloc loaded.
fn emu_fn(name: &CStr) -> *mut c_void {
    emu();
    let path = common::emulator_path();
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: valid C string; the library is already loaded and never closed.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!handle.is_null(), "the emulator is not loaded");
    // SAFETY: live handle, valid C string.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!p.is_null(), "the emulator lacks {name:?}");
    p
}

fn refs(device: i32) -> i64 {
    // SAFETY: the signature emu/include/acl_emu.h declares.
    let f = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn(i32) -> i64>(emu_fn(c"aclemu_device_refs")) };
    f(device)
}

fn all_refs(devices: &[i32]) -> Vec<i64> {
    devices.iter().map(|&d| refs(d)).collect()
}

/// The thread's current device and context, as the host sees them.
fn host_state() -> (Option<i32>, Option<usize>) {
    type Get = unsafe extern "C" fn(*mut *mut c_void) -> i32;
    // SAFETY: the ACL signature of aclrtGetCurrentContext.
    let get = unsafe { std::mem::transmute::<*mut c_void, Get>(emu_fn(c"aclrtGetCurrentContext")) };
    let mut ctx = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let ctx = (unsafe { get(&mut ctx) } == 0).then_some(ctx as usize);
    (emu().rt.current_device(), ctx)
}

/// Runs an op of the given workspace sizes on `stream` (the emulator's
/// graph-engine driver: it allocates through the stream's registered desc).
fn run_op(stream: Stream, sizes: &[usize]) -> i32 {
    type RunOp = unsafe extern "C" fn(*mut c_void, *const usize, usize) -> i32;
    // SAFETY: the signature emu/include/acl_emu.h declares.
    let f = unsafe { std::mem::transmute::<*mut c_void, RunOp>(emu_fn(c"aclemu_run_op")) };
    // SAFETY: a live stream and a valid array of `sizes.len()` sizes.
    unsafe { f(stream.raw(), sizes.as_ptr(), sizes.len()) }
}

#[test]
fn a_thread_using_allocators_of_two_devices_leaves_reference_counts_as_found() {
    let e = emu();
    let (host, d0, d1) = (4, 5, 6);
    e.rt.set_device(host).unwrap();
    let devices = [host, d0, d1];
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        let before = all_refs(&devices);
        let state = host_state();
        assert_eq!(state.0, Some(host));
        let a = create(config, d0).unwrap();
        let b = create(config, d1).unwrap();
        assert_eq!(host_state(), state, "{config}: create switched the host's context");
        // Streams the host made on each device (with that device set, as a host does).
        let (s0, s1) = (e.create_stream(d0), e.create_stream(d1));
        let after_streams = all_refs(&devices);
        let state = host_state();
        for _ in 0..3 {
            for (h, s) in [(a, s0), (b, s1)] {
                let p = malloc(h, 3 << 20, s).unwrap();
                let q = malloc(h, 512, Stream::DEFAULT).unwrap();
                assert_eq!(record_stream(h, q, s), NPUALLOC_OK, "{}", last_error_message());
                assert_eq!((free(h, p), free(h, q)), (NPUALLOC_OK, NPUALLOC_OK));
                assert_eq!(common::empty_cache(h), NPUALLOC_OK, "{}", last_error_message());
            }
            // SAFETY: live handles; NULL stream is refused, a real one registers.
            unsafe {
                assert_eq!(npualloc_register(a, s0.raw()), NPUALLOC_OK, "{}", last_error_message());
            }
            assert_eq!(run_op(s0, &[4096, 1 << 20]), 0, "the desc path");
            // SAFETY: as above.
            unsafe { assert_eq!(npualloc_unregister(a, s0.raw()), NPUALLOC_OK) };
        }
        assert_eq!(all_refs(&devices), after_streams, "{config}: allocator calls changed reference counts");
        assert_eq!(host_state(), state, "{config}: allocator calls changed the host's device or context");
        e.destroy_stream(d0, s0);
        e.destroy_stream(d1, s1);
        assert_eq!((destroy(a), destroy(b)), (NPUALLOC_OK, NPUALLOC_OK));
        // The streams' aclrtSetDevice references are the test's own (one each).
        let mut expected = before.clone();
        expected[1] += 1;
        expected[2] += 1;
        assert_eq!(all_refs(&devices), expected, "{config}: destroy did not give the allocators' references back");
        // The host's reset pairs with its set: the test's references go too.
        for d in [d0, d1] {
            // SAFETY: plain value argument.
            assert_eq!(unsafe { (e.rt.api().aclrtResetDevice)(d) }, 0);
        }
        assert_eq!(all_refs(&devices), before, "{config}");
        assert!(e.usage(d0).is_clean() && e.usage(d1).is_clean(), "{:?} {:?}", e.usage(d0), e.usage(d1));
    }
}

#[test]
fn an_explicit_context_of_the_host_survives_allocator_calls() {
    emu();
    let (host, d) = (7, 1);
    type Create = unsafe extern "C" fn(*mut *mut c_void, i32) -> i32;
    type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;
    // SAFETY: the ACL signatures of these names.
    let (create_ctx, destroy_ctx) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Create>(emu_fn(c"aclrtCreateContext")),
            std::mem::transmute::<*mut c_void, Destroy>(emu_fn(c"aclrtDestroyContext")),
        )
    };
    let mut ctx = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { create_ctx(&mut ctx, host) }, 0);
    let before = all_refs(&[host, d]);
    let a = create("", d).unwrap();
    let p = malloc(a, 1 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(common::empty_cache(a), NPUALLOC_OK);
    assert_eq!(host_state().1, Some(ctx as usize), "the host's explicit context was replaced");
    assert_eq!(host_state().0, Some(host));
    assert_eq!(destroy(a), NPUALLOC_OK);
    assert_eq!(all_refs(&[host, d]), before);
    // SAFETY: the context created above.
    assert_eq!(unsafe { destroy_ctx(ctx) }, 0);
}

#[test]
fn a_stream_of_another_device_is_refused() {
    let e = emu();
    let (d0, d1) = (0, 2);
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        let a = create(config, d0).unwrap();
        let b = create(config, d1).unwrap();
        let s1 = e.create_stream(d1);
        let p = malloc(a, 4096, Stream::DEFAULT).unwrap();
        let expect_refused = |st: npualloc::ffi::npualloc_status, call: &str| {
            assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "{config}: {call}: {}", last_error_message());
            let msg = last_error_message();
            assert!(msg.contains(&format!("device {d1}")) && msg.contains(&format!("device {d0}")), "{call}: {msg}");
        };
        expect_refused(malloc(a, 4096, s1).map(|_| NPUALLOC_OK).unwrap_or_else(|(st, _)| st), "npualloc_malloc");
        expect_refused(record_stream(a, p, s1), "npualloc_record_stream");
        // SAFETY: a live handle and a live stream.
        expect_refused(unsafe { npualloc_register(a, s1.raw()) }, "npualloc_register");
        // Its own device's allocator takes the stream.
        let q = malloc(b, 4096, s1).unwrap();
        assert_eq!((free(a, p), free(b, q)), (NPUALLOC_OK, NPUALLOC_OK));
        e.destroy_stream(d1, s1);
        assert_eq!((destroy(a), destroy(b)), (NPUALLOC_OK, NPUALLOC_OK));
    }
}
