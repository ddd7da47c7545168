//! Stream capture: work on a capturing stream is recorded into a model, not
//! run; each aclmdlRIExecuteAsync runs it on the execute stream; query,
//! synchronize and destroy of a capturing stream give 107027; events
//! recorded during capture are captured (107028); the capture modes decide
//! which synchronous calls are refused (107030); replayed work is checked
//! against freed and unmapped memory like direct work.

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};

const STREAM_CAPTURED: i32 = 107_027;
const EVENT_CAPTURED: i32 = 107_028;
const STREAM_NOT_CAPTURED: i32 = 107_029;
const CAPTURE_MODE_NOT_SUPPORT: i32 = 107_030;
const WRONG_THREAD: i32 = 107_038;
const GLOBAL: u32 = 0;
const THREAD_LOCAL: u32 = 1;
const RELAXED: u32 = 2;
const STATUS_NONE: u32 = 0;
const STATUS_ACTIVE: u32 = 1;
const H2D: u32 = 1;
const D2H: u32 = 2;

/// `aclemu_violations` is process-wide: tests that count it take turns.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn pinned(len: usize) -> *mut u8 {
    let mut p = null_mut();
    // SAFETY: a live out-pointer.
    assert_eq!(unsafe { aclrtMallocHost(&mut p, len) }, 0);
    // SAFETY: the buffer is `len` bytes.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
    p.cast()
}

fn begin(s: *mut c_void, mode: u32) {
    // SAFETY: a live stream handle.
    assert_eq!(unsafe { aclmdlRICaptureBegin(s, mode) }, 0);
}

fn end(s: *mut c_void) -> *mut c_void {
    let mut m = null_mut();
    // SAFETY: a live stream handle and out-pointer.
    assert_eq!(unsafe { aclmdlRICaptureEnd(s, &mut m) }, 0);
    assert!(!m.is_null());
    m
}

fn info(s: *mut c_void) -> (u32, *mut c_void) {
    let (mut st, mut m) = (99, null_mut());
    // SAFETY: a live stream handle and out-pointers.
    assert_eq!(unsafe { aclmdlRICaptureGetInfo(s, &mut st, &mut m) }, 0);
    (st, m)
}

/// Queues `dev <- src` then `out <- dev` (one byte each, via 64-byte rows).
fn copy_through(dev: *mut c_void, src: *mut u8, out: *mut u8, s: *mut c_void) {
    // SAFETY: 64-byte buffers: pinned host memory and device memory.
    unsafe {
        assert_eq!(aclrtMemcpy2dAsync(dev, 64, src.cast(), 64, 64, 1, H2D, s), 0);
        assert_eq!(aclrtMemcpy2dAsync(out.cast(), 64, dev, 64, 64, 1, D2H, s), 0);
    }
}

#[test]
fn captured_work_is_recorded_not_run_and_runs_at_each_execute_on_the_execute_stream() {
    let dev = Dev::take();
    let (s, exec) = (stream(), stream());
    let d = malloc(4096);
    let (src, out) = (pinned(64), pinned(64));
    // SAFETY: handles and buffers above are live; host buffers are 64 bytes.
    unsafe {
        *src = 5;
        begin(s, GLOBAL);
        copy_through(d, src, out, s);
        assert_eq!(*d.cast::<u8>(), 0, "captured work ran during capture");
        let m = end(s);
        assert_eq!(*out, 0, "captured work ran at the end of capture");
        *src = 6;
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(*out, 6);
        // A second execute runs it again, reading the host buffer anew.
        *src = 9;
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(*out, 9);
        // On a held execute stream the replay waits there.
        *src = 11;
        assert_eq!(aclemu_stream_hold(exec), 0);
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(*out, 9);
        // The capture stream itself was left alone.
        let mut st = 99;
        assert_eq!(aclrtStreamQuery(s, &mut st), 0);
        assert_eq!(st, 0);
        assert_eq!(aclemu_stream_release(exec), 0);
        assert_eq!(*out, 11);
        // Work an execute queued survives the model's destruction.
        assert_eq!(aclemu_stream_hold(exec), 0);
        *src = 12;
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(aclmdlRIDestroy(m), 0);
        assert_eq!(aclmdlRIExecuteAsync(m, exec), RT_INVALID_HANDLE);
        assert_eq!(aclmdlRIDestroy(m), RT_INVALID_HANDLE);
        assert_eq!(aclmdlRIDestroy(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtSynchronizeStream(exec), 0);
        assert_eq!(*out, 12);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtFreeHost(src.cast()), 0);
        assert_eq!(aclrtFreeHost(out.cast()), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(exec), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_capturing_stream_refuses_query_synchronize_destroy_and_execute() {
    let dev = Dev::take();
    let (s, other) = (stream(), stream());
    // SAFETY: live handles and out-pointers, or NULL where the test says.
    unsafe {
        assert_eq!(info(s), (STATUS_NONE, null_mut()));
        assert_eq!(aclmdlRICaptureBegin(null_mut(), GLOBAL), INVALID_PARAM);
        assert_eq!(aclmdlRICaptureBegin(s, 3), RT_PARAM_INVALID);
        assert_eq!(aclmdlRICaptureEnd(s, &mut null_mut()), STREAM_NOT_CAPTURED);
        begin(s, GLOBAL);
        assert_eq!(aclmdlRICaptureBegin(s, GLOBAL), STREAM_CAPTURED);
        let (st, m) = info(s);
        assert_eq!(st, STATUS_ACTIVE);
        assert!(!m.is_null());
        assert_eq!(aclmdlRICaptureGetInfo(s, null_mut(), null_mut()), INVALID_PARAM);
        assert_eq!(aclmdlRICaptureGetInfo(null_mut(), &mut 0, null_mut()), INVALID_PARAM);
        let mut status = 99;
        assert_eq!(aclrtStreamQuery(s, &mut status), STREAM_CAPTURED);
        assert_eq!(status, 99);
        assert_eq!(aclrtSynchronizeStream(s), STREAM_CAPTURED);
        assert_eq!(aclrtDestroyStream(s), STREAM_CAPTURED);
        // Another stream is unaffected.
        assert_eq!(aclrtStreamQuery(other, &mut status), 0);
        assert_eq!(aclrtSynchronizeStream(other), 0);
        // The open model cannot run or go yet.
        assert_eq!(aclmdlRIExecuteAsync(m, other), 107_026);
        assert_eq!(aclmdlRIDestroy(m), 107_026);
        let ended = end(s);
        assert_eq!(ended, m, "GetInfo named the model End returns");
        assert_eq!(info(s), (STATUS_NONE, null_mut()));
        // Executing on a capturing stream is refused.
        begin(other, RELAXED);
        assert_eq!(aclmdlRIExecuteAsync(m, other), STREAM_CAPTURED);
        let empty = end(other);
        assert_eq!(aclrtStreamQuery(s, &mut status), 0);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(aclmdlRIDestroy(m), 0);
        assert_eq!(aclmdlRIDestroy(empty), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(other), 0);
    }
    dev.assert_clean();
}

#[test]
fn events_recorded_during_capture_are_captured_and_recorded_at_each_execute() {
    let dev = Dev::take();
    let (s, exec) = (stream(), stream());
    let e = event();
    // SAFETY: live handles and out-pointers.
    unsafe {
        begin(s, GLOBAL);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        let mut st = 99;
        assert_eq!(aclrtQueryEventStatus(e, &mut st), EVENT_CAPTURED);
        assert_eq!(aclrtSynchronizeEvent(e), EVENT_CAPTURED);
        let m = end(s);
        // Never recorded outside capture: an old-mode event stays NOT_READY.
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_hold(exec), 0);
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(status(e), NOT_READY, "the replayed record waits on the held execute stream");
        assert_eq!(aclemu_stream_release(exec), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclmdlRIDestroy(m), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(exec), 0);
    }
    dev.assert_clean();
}

/// A synchronous H2D 2D copy on the calling thread.
fn sync_copy(dst: *mut c_void, src: *mut u8) -> i32 {
    // SAFETY: 64-byte buffers.
    unsafe { aclrtMemcpy2d(dst, 64, src.cast(), 64, 64, 1, H2D) }
}

/// The status of `sync_copy` on a fresh thread with `device` current.
fn sync_copy_elsewhere(device: i32, dst: *mut c_void, src: *mut u8) -> i32 {
    let (dst, src) = (dst as usize, src as usize);
    std::thread::spawn(move || {
        // SAFETY: a valid device id.
        assert_eq!(unsafe { aclrtSetDevice(device) }, 0);
        sync_copy(dst as *mut c_void, src as *mut u8)
    })
    .join()
    .unwrap()
}

#[test]
fn capture_modes_decide_which_threads_may_make_synchronous_calls() {
    let dev = Dev::take();
    let s = stream();
    let d = malloc(4096);
    let src = pinned(64);
    assert_eq!(sync_copy(d, src), 0);
    // GLOBAL: refused on every thread of the device.
    begin(s, GLOBAL);
    assert_eq!(sync_copy(d, src), CAPTURE_MODE_NOT_SUPPORT);
    assert_eq!(sync_copy_elsewhere(dev.id, d, src), CAPTURE_MODE_NOT_SUPPORT);
    // The thread may relax itself with the exchange mode, and restore it.
    let mut mode = RELAXED;
    // SAFETY: a live in/out pointer.
    assert_eq!(unsafe { aclmdlRICaptureThreadExchangeMode(&mut mode) }, 0);
    assert_eq!(mode, GLOBAL);
    assert_eq!(sync_copy(d, src), 0);
    // SAFETY: as above.
    assert_eq!(unsafe { aclmdlRICaptureThreadExchangeMode(&mut mode) }, 0);
    assert_eq!(mode, RELAXED);
    let mut bad = 7;
    // SAFETY: as above; NULL is refused.
    unsafe {
        assert_eq!(aclmdlRICaptureThreadExchangeMode(&mut bad), RT_PARAM_INVALID);
        assert_eq!(aclmdlRICaptureThreadExchangeMode(null_mut()), INVALID_PARAM);
    }
    // SAFETY: live handles.
    unsafe { assert_eq!(aclmdlRIDestroy(end(s)), 0) };
    // THREAD_LOCAL: refused only on the capturing thread.
    begin(s, THREAD_LOCAL);
    assert_eq!(sync_copy(d, src), CAPTURE_MODE_NOT_SUPPORT);
    assert_eq!(sync_copy_elsewhere(dev.id, d, src), 0);
    // SAFETY: live handles.
    unsafe { assert_eq!(aclmdlRIDestroy(end(s)), 0) };
    // RELAXED: allowed everywhere.
    begin(s, RELAXED);
    assert_eq!(sync_copy(d, src), 0);
    assert_eq!(sync_copy_elsewhere(dev.id, d, src), 0);
    // A RELAXED capture may end on another thread.
    let sv = s as usize;
    let m = std::thread::spawn(move || {
        let mut m = null_mut();
        // SAFETY: a live stream handle and out-pointer.
        assert_eq!(unsafe { aclmdlRICaptureEnd(sv as *mut c_void, &mut m) }, 0);
        m as usize
    })
    .join()
    .unwrap();
    // A GLOBAL one may not: 107038, and the capture is gone.
    begin(s, GLOBAL);
    let code = std::thread::spawn(move || {
        let mut m = null_mut();
        // SAFETY: as above.
        unsafe { aclmdlRICaptureEnd(sv as *mut c_void, &mut m) }
    })
    .join()
    .unwrap();
    assert_eq!(code, WRONG_THREAD);
    assert_eq!(info(s), (STATUS_NONE, null_mut()));
    assert_eq!(sync_copy(d, src), 0);
    // SAFETY: live handles.
    unsafe {
        assert_eq!(aclmdlRIDestroy(m as *mut c_void), 0);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtFreeHost(src.cast()), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn replayed_work_on_freed_or_unmapped_memory_is_a_violation() {
    let _t = turn();
    let dev = Dev::take();
    let (s, exec) = (stream(), stream());
    let d = malloc(4096);
    let (src, out) = (pinned(64), pinned(64));
    // SAFETY: live handles; buffers as described.
    unsafe {
        begin(s, GLOBAL);
        copy_through(d, src, out, s);
        let m = end(s);
        counting_violations();
        let before = aclemu_violations();
        // Freeing after capture is no violation by itself: nothing is queued.
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclemu_violations(), before);
        // The replay touches the freed memory: both copies are caught and skipped.
        *src = 3;
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(aclemu_violations(), before + 2);
        assert_eq!(*out, 0);
        assert_eq!(aclrtSynchronizeStream(exec), RT_INTERNAL_ERROR);
        assert_eq!(aclmdlRIDestroy(m), 0);

        // Mapped memory: a replay queued on a held stream pins it, so the
        // unmap is caught too, and the replay when it runs.
        let base = reserve(2 * MIB);
        let handle = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, handle, 0), 0);
        begin(s, GLOBAL);
        copy_through(base, src, out, s);
        let m = end(s);
        assert_eq!(aclemu_stream_hold(exec), 0);
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        counting_violations();
        let before = aclemu_violations();
        assert_eq!(aclrtUnmapMem(base), 0);
        assert_eq!(aclemu_violations(), before + 1);
        assert_eq!(aclemu_stream_release(exec), RT_INTERNAL_ERROR);
        assert_eq!(aclemu_violations(), before + 3);
        assert_eq!(aclmdlRIDestroy(m), 0);
        assert_eq!(aclrtFreePhysical(handle), 0);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
        assert_eq!(aclrtFreeHost(src.cast()), 0);
        assert_eq!(aclrtFreeHost(out.cast()), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(exec), 0);
    }
    dev.assert_clean();
}

/// GE's allocator on a stream: every block is the one address `obj` holds.
unsafe extern "C" fn one_alloc(obj: *mut c_void, _size: usize) -> *mut c_void {
    // SAFETY: obj is the test's `usize` cell, alive while registered.
    unsafe { *(obj as *const usize) as *mut c_void }
}

unsafe extern "C" fn no_free(_obj: *mut c_void, _block: *mut c_void) {}

unsafe extern "C" fn one_advise(obj: *mut c_void, size: usize, _: *mut c_void) -> *mut c_void {
    // SAFETY: the same contract as this callback's own.
    unsafe { one_alloc(obj, size) }
}

unsafe extern "C" fn same_addr(block: *mut c_void) -> *mut c_void {
    block
}

#[test]
fn a_captured_op_replayed_over_memory_another_streams_queued_work_uses_is_caught() {
    let _t = turn();
    let dev = Dev::take();
    let (s, exec, other) = (stream(), stream(), stream());
    let d = malloc(4096);
    let cell: usize = d as usize;
    let out = pinned(64);
    let sizes = [4096usize];
    // SAFETY: live handles; `cell` outlives the registration; buffers as described.
    unsafe {
        let desc = aclrtAllocatorCreateDesc();
        assert_eq!(aclrtAllocatorSetObjToDesc(desc, &cell as *const usize as *mut c_void), 0);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(desc, Some(one_alloc)), 0);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(desc, Some(no_free)), 0);
        assert_eq!(aclrtAllocatorSetAllocAdviseFuncToDesc(desc, Some(one_advise)), 0);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(desc, Some(same_addr)), 0);
        assert_eq!(aclrtAllocatorRegister(s, desc), 0);
        begin(s, GLOBAL);
        assert_eq!(aclemu_run_op(s, sizes.as_ptr(), 1), 0);
        let m = end(s);
        counting_violations();
        let before = aclemu_violations();
        // Replayed with nothing else using the block: fine.
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(aclemu_violations(), before);
        // Another stream's queued copy still reads the block: the replayed
        // op's write is a violation.
        assert_eq!(aclemu_stream_hold(other), 0);
        assert_eq!(aclrtMemcpy2dAsync(out.cast(), 64, d, 64, 64, 1, D2H, other), 0);
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(aclemu_violations(), before + 1);
        assert_eq!(aclrtSynchronizeStream(exec), RT_INTERNAL_ERROR);
        assert_eq!(aclemu_stream_release(other), RT_INTERNAL_ERROR);
        assert_eq!(aclmdlRIDestroy(m), 0);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(desc), 0);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtFreeHost(out.cast()), 0);
        for st in [s, exec, other] {
            assert_eq!(aclrtDestroyStream(st), 0);
        }
    }
    dev.assert_clean();
}

/// The 1D calls follow the same capture rules as the 2D ones: a synchronous
/// `aclrtMemcpy` / `aclrtMemset` is refused under a GLOBAL capture (the
/// runtime's `MemCopySync` / `MemSetSync` check the capture mode), a
/// synchronize with a timeout of a capturing stream is 107027 like the plain
/// one, and an async memset is recorded and runs at each execute.
#[test]
fn one_dimensional_copies_and_memsets_follow_the_capture_rules() {
    let dev = Dev::take();
    let (s, exec) = (stream(), stream());
    let d = malloc(4096);
    let src = pinned(64);
    let out = pinned(64);
    // SAFETY: 64-byte buffers: pinned host memory and device memory; live streams.
    unsafe {
        assert_eq!(aclrtMemcpy(d, 64, src.cast(), 64, H2D), 0);
        begin(s, GLOBAL);
        assert_eq!(aclrtMemcpy(d, 64, src.cast(), 64, H2D), CAPTURE_MODE_NOT_SUPPORT);
        assert_eq!(aclrtMemset(d, 64, 7, 64), CAPTURE_MODE_NOT_SUPPORT);
        assert_eq!(aclrtSynchronizeStreamWithTimeout(s, 1000), STREAM_CAPTURED);
        assert_eq!(aclrtMemsetAsync(d, 64, 0x5a, 64, s), 0);
        assert_eq!(aclrtMemcpyAsync(out.cast(), 64, d, 64, D2H, s), 0);
        let m = end(s);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        assert_eq!(*out, 0, "captured work does not run at capture");
        assert_eq!(aclmdlRIExecuteAsync(m, exec), 0);
        assert_eq!(aclrtSynchronizeStream(exec), 0);
        assert_eq!(std::slice::from_raw_parts(out, 64), &[0x5a; 64][..], "the memset ran at the execute");
        assert_eq!(aclmdlRIDestroy(m), 0);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtFreeHost(src.cast()), 0);
        assert_eq!(aclrtFreeHost(out.cast()), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        assert_eq!(aclrtDestroyStream(exec), 0);
    }
    dev.assert_clean();
}
