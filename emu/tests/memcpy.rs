//! aclrtMemcpy / aclrtMemcpyAsync / aclrtMemset / aclrtMemsetAsync: the
//! runtime's checks in its order, data in every direction, queued work on
//! held streams, and the misuse a missing record_stream causes
//! (docs/runtime-behaviour.md "Copies and memsets").

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard};

const H2H: u32 = 0;
const H2D: u32 = 1;
const D2H: u32 = 2;
const D2D: u32 = 3;
const DEFAULT: u32 = 4;
/// ACL_ERROR_RT_STREAM_CONTEXT: a stream of another context.
const RT_STREAM_CONTEXT: i32 = 107_003;

/// Violations and armed faults are process-wide: the tests take turns.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The violation count; every test here reads it before it makes one on
/// purpose, so this binary only counts them.
fn violations() -> i64 {
    counting_violations();
    // SAFETY: no arguments; the counter is read atomically.
    unsafe { aclemu_violations() }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect()
}

/// Reads `len` bytes of device memory back with a synchronous D2H copy.
fn read(dev_ptr: *mut c_void, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: out holds len bytes; dev_ptr is a live block of at least len.
    assert_eq!(unsafe { aclrtMemcpy(out.as_mut_ptr().cast(), len, dev_ptr, len, D2H) }, 0);
    out
}

#[test]
fn count_zero_succeeds_before_any_other_check() {
    let _t = turn();
    let junk = 0x99usize as *mut c_void;
    // SAFETY: nothing is dereferenced for a count of 0.
    unsafe {
        assert_eq!(aclrtMemcpy(null_mut(), 0, null(), 0, 99), 0);
        assert_eq!(aclrtMemcpyAsync(null_mut(), 0, null(), 0, 99, junk), 0);
        assert_eq!(aclrtMemset(null_mut(), 0, 1, 0), 0);
        assert_eq!(aclrtMemsetAsync(null_mut(), 0, 1, 0, junk), 0);
    }
}

#[test]
fn acl_layer_checks_then_runtime_checks() {
    let _t = turn();
    let _dev = Dev::take();
    let (mut dst, src) = (vec![0u8; 64], pattern(64, 1));
    let (d, s) = (dst.as_mut_ptr().cast::<c_void>(), src.as_ptr().cast::<c_void>());
    // SAFETY: live host buffers of 64 bytes; counts never exceed them.
    unsafe {
        assert_eq!(aclrtMemcpy(null_mut(), 8, s, 8, H2H), INVALID_PARAM);
        assert_eq!(aclrtMemcpy(d, 8, null(), 8, H2H), INVALID_PARAM);
        assert_eq!(aclrtMemcpyAsync(d, 8, null(), 8, H2H, null_mut()), INVALID_PARAM);
        for kind in [6, 7, 1000] {
            assert_eq!(aclrtMemcpy(d, 8, s, 8, kind), INVALID_PARAM);
            assert_eq!(aclrtMemcpyAsync(d, 8, s, 8, kind, null_mut()), INVALID_PARAM);
        }
        // count > destMax: the runtime's check.
        assert_eq!(aclrtMemcpy(d, 8, s, 16, H2H), RT_PARAM_INVALID);
        assert_eq!(aclrtMemcpyAsync(d, 8, s, 16, H2H, null_mut()), RT_PARAM_INVALID);
        assert_eq!(aclrtMemset(null_mut(), 8, 0, 8), INVALID_PARAM);
        assert_eq!(aclrtMemset(d, 8, 0, 16), RT_PARAM_INVALID);
        assert_eq!(aclrtMemsetAsync(d, 8, 0, 16, null_mut()), RT_PARAM_INVALID);
        // An unknown stream handle.
        assert_eq!(aclrtMemcpyAsync(d, 8, s, 8, H2H, 0x99usize as *mut c_void), RT_INVALID_HANDLE);
    }
    assert!(dst.iter().all(|&b| b == 0), "a refused call wrote");
}

#[test]
fn sync_copies_carry_data_in_every_direction() {
    let _t = turn();
    let dev = Dev::take();
    let src = pattern(4096, 7);
    let a = malloc(4096);
    let b = malloc(4096);
    // SAFETY: blocks of 4096 bytes and host buffers of 4096.
    unsafe {
        assert_eq!(aclrtMemcpy(a, 4096, src.as_ptr().cast(), 4096, H2D), 0);
        assert_eq!(aclrtMemcpy(b, 4096, a, 4096, D2D), 0);
        assert_eq!(read(b, 4096), src);
        // DEFAULT: the addresses say device to device.
        assert_eq!(aclrtMemset(a, 4096, 0, 4096), 0);
        assert_eq!(aclrtMemcpy(a, 4096, b, 4096, DEFAULT), 0);
        assert_eq!(read(a, 4096), src);
        // Host to host is a kind of its own for the 1D call.
        let mut host = vec![0u8; 4096];
        assert_eq!(aclrtMemcpy(host.as_mut_ptr().cast(), 4096, src.as_ptr().cast(), 4096, H2H), 0);
        assert_eq!(host, src);
        // Onto itself: nothing to do.
        assert_eq!(aclrtMemcpy(a, 4096, a, 4096, D2D), 0);
        assert_eq!(read(a, 4096), src);
        // Memset stores the value's low byte.
        assert_eq!(aclrtMemset(a, 4096, 0x1A5, 100), 0);
        let back = read(a, 4096);
        assert!(back[..100].iter().all(|&x| x == 0xA5));
        assert_eq!(back[100..], src[100..]);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtFree(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn the_device_end_of_a_copy_must_be_live_device_memory() {
    let _t = turn();
    let dev = Dev::take();
    let mut host = vec![0u8; 256];
    let other = pattern(256, 3);
    let a = malloc(256);
    // SAFETY: host buffers of 256 bytes; `a` is freed before its last use,
    // which the emulator refuses without touching it.
    unsafe {
        // A host address named as the device end.
        assert_eq!(aclrtMemcpy(host.as_mut_ptr().cast(), 256, other.as_ptr().cast(), 256, H2D), RT_PARAM_INVALID);
        assert_eq!(
            aclrtMemcpyAsync(host.as_mut_ptr().cast(), 256, other.as_ptr().cast(), 256, D2H, null_mut()),
            RT_PARAM_INVALID
        );
        // Running past the end of a block.
        assert_eq!(aclrtMemcpy(a, 1 << 20, other.as_ptr().cast(), 1 << 20, H2D), RT_PARAM_INVALID);
        assert_eq!(aclrtFree(a), 0);
        // A freed block.
        assert_eq!(aclrtMemcpy(host.as_mut_ptr().cast(), 256, a, 256, D2H), RT_PARAM_INVALID);
    }
    assert!(host.iter().all(|&b| b == 0));
    dev.assert_clean();
}

#[test]
fn async_calls_run_when_the_held_stream_does() {
    let _t = turn();
    let dev = Dev::take();
    let s = stream();
    let src = pattern(1024, 9);
    let a = malloc(1024);
    let before = violations();
    // SAFETY: `src` outlives the stream's work (synchronized below); `a` is a
    // live block of 1024 bytes.
    unsafe {
        assert_eq!(aclrtMemset(a, 1024, 0, 1024), 0);
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtMemcpyAsync(a, 1024, src.as_ptr().cast(), 1024, H2D, s), 0);
        assert_eq!(aclrtMemsetAsync(a, 1024, 0x11, 16, s), 0);
        let mut st = 9;
        assert_eq!(aclrtStreamQuery(s, &mut st), 0);
        assert_eq!(st, 1, "queued work makes the stream NOT_READY");
        assert!(read(a, 1024).iter().all(|&b| b == 0), "queued work ran early");
        assert_eq!(aclemu_stream_release(s), 0);
        let back = read(a, 1024);
        assert!(back[..16].iter().all(|&b| b == 0x11), "the memset did not follow the copy");
        assert_eq!(back[16..], src[16..]);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    assert_eq!(violations(), before);
    dev.assert_clean();
}

/// What a missing `record_stream` looks like: the block a side stream's
/// queued copy still reads is freed (and could be handed out again).
#[test]
fn freeing_under_a_queued_copy_is_a_violation() {
    let _t = turn();
    let dev = Dev::take();
    let side = stream();
    let a = malloc(4096);
    let mut host = vec![0u8; 4096];
    let before = violations();
    // SAFETY: `host` outlives the stream's work; `a` is freed while the copy
    // is queued, which the emulator detects and skips.
    unsafe {
        assert_eq!(aclemu_stream_hold(side), 0);
        assert_eq!(aclrtMemcpyAsync(host.as_mut_ptr().cast(), 4096, a, 4096, D2H, side), 0);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(violations(), before + 1, "aclrtFree under the queued copy");
        // The copy then runs on memory that is gone: skipped, reported.
        assert_eq!(aclemu_stream_release(side), RT_INTERNAL_ERROR);
        assert_eq!(violations(), before + 2);
        assert_eq!(aclrtSynchronizeStream(side), 0);
        assert_eq!(aclrtDestroyStream(side), 0);
    }
    dev.assert_clean();
}

#[test]
fn another_streams_write_under_a_queued_copy_is_a_violation_unless_ordered() {
    let _t = turn();
    let dev = Dev::take();
    let (reader, writer) = (stream(), stream());
    let a = malloc(4096);
    let mut host = vec![0u8; 4096];
    let before = violations();
    // SAFETY: `host` outlives the streams' work; `a` stays live until freed
    // at the end.
    unsafe {
        assert_eq!(aclemu_stream_hold(reader), 0);
        assert_eq!(aclrtMemcpyAsync(host.as_mut_ptr().cast(), 4096, a, 4096, D2H, reader), 0);
        // Unordered: the writer's memset runs at once under the queued read.
        assert_eq!(aclrtMemsetAsync(a, 4096, 1, 64, writer), 0);
        assert_eq!(violations(), before + 1);
        // A synchronous write is no better.
        assert_eq!(aclrtMemset(a, 4096, 2, 64), 0);
        assert_eq!(violations(), before + 2);
        assert_eq!(aclemu_stream_release(reader), RT_INTERNAL_ERROR);
        assert_eq!(aclrtSynchronizeStream(writer), RT_INTERNAL_ERROR);

        // Ordered: the writer waits for an event recorded after the read.
        assert_eq!(aclemu_stream_hold(reader), 0);
        assert_eq!(aclrtMemcpyAsync(host.as_mut_ptr().cast(), 4096, a, 4096, D2H, reader), 0);
        let e = event();
        assert_eq!(aclrtRecordEvent(e, reader), 0);
        assert_eq!(aclrtStreamWaitEvent(writer, e), 0);
        assert_eq!(aclrtMemsetAsync(a, 4096, 3, 64, writer), 0);
        assert_eq!(aclemu_stream_release(reader), 0);
        assert_eq!(aclrtSynchronizeStream(writer), 0);
        assert_eq!(violations(), before + 2);
        assert!(host[..64].iter().all(|&b| b == 2), "the read saw the later write");
        assert!(read(a, 64).iter().all(|&b| b == 3));
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtDestroyStream(reader), 0);
        assert_eq!(aclrtDestroyStream(writer), 0);
    }
    dev.assert_clean();
}

#[test]
fn faults_and_costs_know_the_new_names() {
    let _t = turn();
    let _dev = Dev::take();
    let mut host = [0u8; 8];
    // SAFETY: a live 8-byte host buffer; names are NUL-terminated.
    unsafe {
        for name in [c"aclrtMemcpy", c"aclrtMemcpyAsync", c"aclrtMemset", c"aclrtMemsetAsync"] {
            assert_eq!(aclemu_fail_nth(name.as_ptr(), 1), 0, "{name:?}");
        }
        let h = host.as_mut_ptr().cast::<c_void>();
        assert_eq!(aclrtMemcpy(h, 8, h, 8, H2H), RT_INTERNAL_ERROR);
        assert_eq!(aclrtMemcpyAsync(h, 8, h, 8, H2H, null_mut()), RT_INTERNAL_ERROR);
        assert_eq!(aclrtMemset(h, 8, 0, 8), RT_INTERNAL_ERROR);
        assert_eq!(aclrtMemsetAsync(h, 8, 0, 8, null_mut()), RT_INTERNAL_ERROR);
        assert_eq!(aclemu_set_cost(c"aclrtMemcpyAsync".as_ptr(), 0), 0);
    }
}

#[test]
fn async_calls_refuse_a_stream_of_another_context() {
    let _t = turn();
    let dev = Dev::take();
    let other = Dev::take_besides(&dev);
    let b = malloc(64);
    // SAFETY: live handles and buffers; the context switches are undone.
    unsafe {
        assert_eq!(aclrtSetDevice(dev.id), 0);
        let s = stream();
        let a = malloc(64);
        assert_eq!(aclrtSetDevice(other.id), 0);
        let src = [1u8; 64];
        assert_eq!(aclrtMemcpyAsync(b, 64, src.as_ptr().cast(), 64, 1, s), RT_STREAM_CONTEXT);
        assert_eq!(aclrtMemsetAsync(b, 64, 0, 64, s), RT_STREAM_CONTEXT);
        assert_eq!(aclrtSetDevice(dev.id), 0);
        assert_eq!(aclrtMemsetAsync(a, 64, 0, 64, s), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtResetDevice(dev.id), 0);
        assert_eq!(aclrtResetDevice(other.id), 0);
    }
    // SAFETY: a live block, no longer used.
    assert_eq!(unsafe { aclrtFree(b) }, 0);
}
