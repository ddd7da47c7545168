//! Streams with a configuration: aclrtCreateStreamWithConfig, forced destroy,
//! synchronize with a timeout, per-stream settings
//! (docs/runtime-behaviour.md "Streams with a configuration").

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;

const H2D: u32 = 1;
const STREAM_SYNC_TIMEOUT: i32 = 507_046;
const ACL_STREAM_FAST_LAUNCH: u32 = 0x1;
const ACL_STREAM_FAST_SYNC: u32 = 0x2;
const ACL_STREAM_PERSISTENT: u32 = 0x4;

fn config_stream(priority: u32, flag: u32) -> *mut c_void {
    let mut s = null_mut();
    // SAFETY: a live out-pointer.
    assert_eq!(unsafe { aclrtCreateStreamWithConfig(&mut s, priority, flag) }, 0);
    s
}

/// Queues an H2D copy of `src` into `dst` on `s`.
fn queue_copy(dst: *mut c_void, src: &[u8], s: *mut c_void) {
    // SAFETY: the callers keep `src` alive until the stream has run the copy.
    assert_eq!(unsafe { aclrtMemcpyAsync(dst, src.len(), src.as_ptr().cast(), src.len(), H2D, s) }, 0);
}

fn first_byte(dev_ptr: *mut c_void) -> u8 {
    let mut b = 0u8;
    // SAFETY: one byte each side.
    assert_eq!(unsafe { aclrtMemcpy((&mut b as *mut u8).cast(), 1, dev_ptr, 1, 2) }, 0);
    b
}

#[test]
fn a_configured_stream_is_a_stream() {
    let dev = Dev::take();
    // SAFETY: NULL out-pointer, then live locals and emulator handles.
    unsafe {
        assert_eq!(aclrtCreateStreamWithConfig(null_mut(), 0, 0), INVALID_PARAM);
        // Out-of-range priorities are clamped, unknown flag bits dropped.
        let s = config_stream(1000, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC | 0x8000);
        assert_eq!(dev.usage().streams, 1);
        let src = [7u8; 64];
        let a = malloc(64);
        assert_eq!(aclemu_stream_hold(s), 0);
        queue_copy(a, &src, s);
        assert_eq!(first_byte(a), 0);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(first_byte(a), 7);
        // Ids: distinct per stream, and the default stream has one too.
        let t = config_stream(0, 0);
        let (mut i, mut j, mut k) = (-1, -1, -1);
        assert_eq!(aclrtStreamGetId(s, &mut i), 0);
        assert_eq!(aclrtStreamGetId(t, &mut j), 0);
        assert_eq!(aclrtStreamGetId(null_mut(), &mut k), 0);
        assert!(i >= 0 && j >= 0 && k >= 0 && i != j && i != k && j != k);
        assert_eq!(aclrtStreamGetId(s, null_mut()), INVALID_PARAM);
        // The overflow switch: 0 at first, kept per stream, 0 or 1 only.
        let mut flag = 9;
        assert_eq!(aclrtGetStreamOverflowSwitch(s, &mut flag), 0);
        assert_eq!(flag, 0);
        assert_eq!(aclrtSetStreamOverflowSwitch(s, 1), 0);
        assert_eq!(aclrtSetStreamOverflowSwitch(s, 2), INVALID_PARAM);
        assert_eq!(aclrtGetStreamOverflowSwitch(s, &mut flag), 0);
        assert_eq!(flag, 1);
        assert_eq!(aclrtGetStreamOverflowSwitch(t, &mut flag), 0);
        assert_eq!(flag, 0);
        assert_eq!(aclrtGetStreamOverflowSwitch(s, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtSetStreamFailureMode(s, 1), 0);
        assert_eq!(aclrtSetStreamFailureMode(0x99usize as *mut c_void, 1), RT_INVALID_HANDLE);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(t), 0);
        // A destroyed stream's settings are gone with it.
        assert_eq!(aclrtGetStreamOverflowSwitch(s, &mut flag), RT_INVALID_HANDLE);
    }
    dev.assert_clean();
}

#[test]
fn a_timeout_is_checked_then_waited_for() {
    let dev = Dev::take();
    let s = stream();
    let src = [5u8; 64];
    let a = malloc(64);
    // SAFETY: live locals and emulator handles; `src` outlives the work.
    unsafe {
        for bad in [-2, 0, i32::MIN] {
            assert_eq!(aclrtSynchronizeStreamWithTimeout(s, bad), RT_PARAM_INVALID);
            assert_eq!(aclrtSynchronizeDeviceWithTimeout(bad), RT_PARAM_INVALID);
        }
        // Nothing held: the work finishes, whatever the timeout.
        queue_copy(a, &src, s);
        assert_eq!(aclrtSynchronizeStreamWithTimeout(s, 10), 0);
        assert_eq!(aclrtSynchronizeDeviceWithTimeout(10), 0);
        // A held stream's work does not finish in time: 507046, still queued.
        assert_eq!(aclrtMemset(a, 64, 0, 64), 0);
        assert_eq!(aclemu_stream_hold(s), 0);
        queue_copy(a, &src, s);
        let syncs = dev.syncs();
        assert_eq!(aclrtSynchronizeStreamWithTimeout(s, 100), STREAM_SYNC_TIMEOUT);
        assert_eq!(aclrtSynchronizeDeviceWithTimeout(100), STREAM_SYNC_TIMEOUT);
        assert_eq!(first_byte(a), 0);
        assert_eq!(dev.syncs(), syncs, "a timed-out synchronize is not a sync");
        // A stream that waits for the held one times out too.
        let e = event();
        let other = stream();
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtStreamWaitEvent(other, e), 0);
        assert_eq!(aclrtMemsetAsync(a, 64, 9, 1, other), 0);
        assert_eq!(aclrtSynchronizeStreamWithTimeout(other, 100), STREAM_SYNC_TIMEOUT);
        // -1 waits for ever: the work is forced through, as by aclrtSynchronizeStream.
        assert_eq!(aclrtSynchronizeStreamWithTimeout(other, -1), 0);
        assert_eq!(first_byte(a), 9);
        assert_eq!(aclrtSynchronizeDeviceWithTimeout(-1), 0);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(other), 0);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_persistent_streams_synchronize_returns_at_once() {
    let dev = Dev::take();
    let s = config_stream(0, ACL_STREAM_PERSISTENT);
    let src = [3u8; 64];
    let a = malloc(64);
    // SAFETY: live locals and emulator handles; `src` outlives the work.
    unsafe {
        assert_eq!(aclrtMemset(a, 64, 0, 64), 0);
        assert_eq!(aclemu_stream_hold(s), 0);
        queue_copy(a, &src, s);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(aclrtSynchronizeStreamWithTimeout(s, 100), 0);
        assert_eq!(first_byte(a), 0, "the runtime does not wait for a persistent stream");
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(first_byte(a), 3);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_forced_destroy_drops_the_queued_work() {
    let dev = Dev::take();
    let s = stream();
    let waiter = stream();
    let src = [8u8; 64];
    let a = malloc(64);
    // SAFETY: live locals and emulator handles; `src` outlives the work.
    unsafe {
        assert_eq!(aclrtDestroyStreamForce(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtMemset(a, 64, 0, 64), 0);
        assert_eq!(aclemu_stream_hold(s), 0);
        queue_copy(a, &src, s);
        let e = event();
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(aclrtStreamWaitEvent(waiter, e), 0);
        assert_eq!(aclrtMemsetAsync(a, 64, 4, 1, waiter), 0);
        assert_eq!(aclrtDestroyStreamForce(s), 0);
        // The copy never ran; the waiting stream went on.
        assert_eq!(first_byte(a), 4);
        let mut b = [0u8; 2];
        assert_eq!(aclrtMemcpy(b.as_mut_ptr().cast(), 2, a, 2, 2), 0);
        assert_eq!(b, [4, 0]);
        assert_eq!(aclrtDestroyStreamForce(s), RT_INVALID_HANDLE);
        // Its pin went with it: freeing the block is no violation.
        let before = aclemu_violations();
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclemu_violations(), before);
        assert_eq!(aclrtSynchronizeStream(waiter), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(waiter), 0);
    }
    dev.assert_clean();
}
