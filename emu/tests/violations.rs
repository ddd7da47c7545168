//! Memory in use by queued work (Note [pins] in the emulator): a misbehaving
//! allocator is caught, a well-ordered one is not. `aclemu_violations` is
//! process-wide, so the tests of this file take turns.

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

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

/// A desc whose blocks are addresses. `mode` picks how it misbehaves.
struct Alloc {
    mode: Mode,
    /// The block every alloc returns in `OneBlock` mode.
    block: usize,
    allocs: AtomicUsize,
}

#[derive(PartialEq)]
enum Mode {
    /// Hands the same block to everyone and never frees it.
    OneBlock,
    /// One aclrtMalloc per block, aclrtFree as soon as GE frees it.
    FreeAtOnce,
}

unsafe extern "C" fn a_alloc(obj: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: obj is what this test registered with the desc; it outlives the callbacks.
    let a = unsafe { &*(obj as *const Alloc) };
    a.allocs.fetch_add(1, Ordering::SeqCst);
    match a.mode {
        Mode::OneBlock => a.block as *mut c_void,
        Mode::FreeAtOnce => malloc(size),
    }
}

unsafe extern "C" fn a_free(obj: *mut c_void, block: *mut c_void) {
    // SAFETY: obj is what this test registered with the desc; it outlives the callbacks.
    let a = unsafe { &*(obj as *const Alloc) };
    if a.mode == Mode::FreeAtOnce {
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        assert_eq!(unsafe { aclrtFree(block) }, 0);
    }
}

unsafe extern "C" fn a_advise(obj: *mut c_void, size: usize, _: *mut c_void) -> *mut c_void {
    // SAFETY: the same contract as this callback's own.
    unsafe { a_alloc(obj, size) }
}

unsafe extern "C" fn a_addr(block: *mut c_void) -> *mut c_void {
    block
}

/// Registers `a` on `s`; returns the desc.
fn register(s: *mut c_void, a: &Alloc) -> *mut c_void {
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = aclrtAllocatorCreateDesc();
        assert_eq!(aclrtAllocatorSetObjToDesc(d, a as *const Alloc as *mut c_void), 0);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(d, Some(a_alloc)), 0);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(d, Some(a_free)), 0);
        assert_eq!(aclrtAllocatorSetAllocAdviseFuncToDesc(d, Some(a_advise)), 0);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, Some(a_addr)), 0);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        d
    }
}

fn unregister(s: *mut c_void, d: *mut c_void) {
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
    }
}

fn one_block(block: *mut c_void) -> Alloc {
    Alloc { mode: Mode::OneBlock, block: block as usize, allocs: AtomicUsize::new(0) }
}

#[test]
fn one_block_handed_to_two_streams_while_one_is_held_is_caught() {
    let _t = turn();
    let dev = Dev::take();
    let (a, b) = (stream(), stream());
    let block = malloc(4096);
    let alloc = one_block(block);
    let (da, db) = (register(a, &alloc), register(b, &alloc));
    let sizes = [4096usize];
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclemu_run_op(a, sizes.as_ptr(), 1), 0);
        assert_eq!(violations(), before);
        // b's op writes the block a's queued op still uses.
        assert_eq!(aclemu_run_op(b, sizes.as_ptr(), 1), 0);
        assert_eq!(violations(), before + 1);
        // Both streams report it once, at their next synchronize/release.
        assert_eq!(aclrtSynchronizeStream(b), RT_INTERNAL_ERROR);
        assert_eq!(aclrtSynchronizeStream(b), 0);
        assert_eq!(aclemu_stream_release(a), RT_INTERNAL_ERROR);
        assert_eq!(aclrtSynchronizeStream(a), 0);
        // Once a's op ran, the block is free to reuse.
        assert_eq!(aclemu_run_op(b, sizes.as_ptr(), 1), 0);
        assert_eq!(violations(), before + 1);
        unregister(a, da);
        unregister(b, db);
        assert_eq!(aclrtFree(block), 0);
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_stream_that_waits_for_the_other_may_reuse_its_block() {
    let _t = turn();
    let dev = Dev::take();
    let (a, b, c) = (stream(), stream(), stream());
    let (e, f) = (event(), event());
    let block = malloc(4096);
    let alloc = one_block(block);
    let (da, db) = (register(a, &alloc), register(b, &alloc));
    let sizes = [4096usize];
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclemu_run_op(a, sizes.as_ptr(), 1), 0);
        assert_eq!(aclrtRecordEvent(e, a), 0);
        // b waits for a through c: ordered after a's op.
        assert_eq!(aclrtStreamWaitEvent(c, e), 0);
        assert_eq!(aclrtRecordEvent(f, c), 0);
        assert_eq!(aclrtStreamWaitEvent(b, f), 0);
        assert_eq!(aclemu_run_op(b, sizes.as_ptr(), 1), 0);
        assert_eq!(aclemu_stream_release(a), 0);
        assert_eq!(aclrtSynchronizeStream(b), 0);
        assert_eq!(violations(), before);
        unregister(a, da);
        unregister(b, db);
        assert_eq!(aclrtFree(block), 0);
        for x in [e, f] {
            assert_eq!(aclrtDestroyEvent(x), 0);
        }
        for s in [a, b, c] {
            assert_eq!(aclrtDestroyStream(s), 0);
        }
    }
    dev.assert_clean();
}

#[test]
fn acl_free_under_a_held_streams_op_is_caught() {
    let _t = turn();
    let dev = Dev::take();
    let s = stream();
    let alloc = Alloc { mode: Mode::FreeAtOnce, block: 0, allocs: AtomicUsize::new(0) };
    let d = register(s, &alloc);
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_stream_hold(s), 0);
        // GE frees the blocks right after launch; this allocator hands the
        // memory back to the runtime at once, under the queued op.
        assert_eq!(aclemu_run_op(s, [4096usize, 8192].as_ptr(), 2), 0);
        assert_eq!(violations(), before + 2);
        // When the op runs, its memory is gone: one more each.
        assert_eq!(aclemu_stream_release(s), RT_INTERNAL_ERROR);
        assert_eq!(violations(), before + 3);
        assert_eq!(aclrtSynchronizeStream(s), 0);
        // Without a hold the op has run before the free: nothing to catch.
        assert_eq!(aclemu_run_op(s, [4096usize].as_ptr(), 1), 0);
        assert_eq!(violations(), before + 3);
        unregister(s, d);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

/// A pinned host buffer and a mapped 2 MiB device range.
struct Mapped {
    base: *mut c_void,
    handle: *mut c_void,
}

fn mapped(dev: &Dev) -> Mapped {
    let base = reserve(2 * MIB);
    let handle = physical(dev, 2 * MIB);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtMapMem(base, 2 * MIB, 0, handle, 0) }, 0);
    Mapped { base, handle }
}

fn pinned(len: usize) -> *mut c_void {
    let mut p = null_mut();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtMallocHost(&mut p, len) }, 0);
    p
}

const D2H: u32 = 2;
const H2D: u32 = 1;

#[test]
fn unmapping_under_a_queued_copy_is_caught_and_the_copy_skipped() {
    let _t = turn();
    let dev = Dev::take();
    let s = stream();
    let m = mapped(&dev);
    let host = pinned(4096);
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        *m.base.cast::<u8>() = 7;
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtMemcpy2dAsync(host, 64, m.base, 64, 64, 1, D2H, s), 0);
        assert_eq!(aclrtUnmapMem(m.base), 0);
        assert_eq!(violations(), before + 1);
        // The copy finds its source unmapped: skipped, counted.
        assert_eq!(aclrtSynchronizeStream(s), RT_INTERNAL_ERROR);
        assert_eq!(violations(), before + 2);
        assert_eq!(*host.cast::<u8>(), 0);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(aclrtFreePhysical(m.handle), 0);
        assert_eq!(aclrtReleaseMemAddress(m.base), 0);
        assert_eq!(aclrtFreeHost(host), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_copy_into_memory_another_streams_copy_reads_is_caught() {
    let _t = turn();
    let dev = Dev::take();
    let (a, b) = (stream(), stream());
    let m = mapped(&dev);
    let (out, src) = (pinned(4096), pinned(4096));
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        *m.base.cast::<u8>() = 1;
        *src.cast::<u8>() = 2;
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclrtMemcpy2dAsync(out, 64, m.base, 64, 64, 1, D2H, a), 0);
        // b overwrites the range before a's copy read it.
        assert_eq!(aclrtMemcpy2dAsync(m.base, 64, src, 64, 64, 1, H2D, b), 0);
        assert_eq!(violations(), before + 1);
        // The device reports it at the next device-wide synchronize too.
        assert_eq!(aclrtSynchronizeDevice(), RT_INTERNAL_ERROR);
        assert_eq!(aclrtSynchronizeDevice(), 0);
        assert_eq!(aclemu_stream_release(a), 0);
        assert_eq!(aclrtUnmapMem(m.base), 0);
        assert_eq!(violations(), before + 1);
        assert_eq!(aclrtFreePhysical(m.handle), 0);
        assert_eq!(aclrtReleaseMemAddress(m.base), 0);
        assert_eq!(aclrtFreeHost(out), 0);
        assert_eq!(aclrtFreeHost(src), 0);
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn work_that_waits_for_a_copy_may_use_what_it_wrote() {
    let _t = turn();
    let dev = Dev::take();
    let (a, b) = (stream(), stream());
    let e = event();
    let block = malloc(4096);
    let alloc = one_block(block);
    let db = register(b, &alloc);
    let src = pinned(4096);
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        // a will write the block; b's op, queued earlier in host order but
        // waiting for a's copy, uses it afterwards.
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclrtMemcpy2dAsync(block, 64, src, 64, 64, 1, H2D, a), 0);
        assert_eq!(aclrtRecordEvent(e, a), 0);
        assert_eq!(aclrtStreamWaitEvent(b, e), 0);
        assert_eq!(aclemu_run_op(b, [4096usize].as_ptr(), 1), 0);
        assert_eq!(aclemu_stream_release(a), 0);
        assert_eq!(aclrtSynchronizeStream(b), 0);
        assert_eq!(violations(), before);
        unregister(b, db);
        assert_eq!(aclrtFree(block), 0);
        assert_eq!(aclrtFreeHost(src), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}

/// The child of `a_violation_aborts_at_its_call_when_asked`: the scene of
/// `acl_free_under_a_held_streams_op_is_caught` with aborting turned on.
/// It must not get past the first violation.
fn free_under_a_held_op_with_aborts_on() {
    let dev = Dev::take();
    let s = stream();
    let alloc = Alloc { mode: Mode::FreeAtOnce, block: 0, allocs: AtomicUsize::new(0) };
    let d = register(s, &alloc);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        aclemu_set_violation_abort(1);
        assert_eq!(aclemu_stream_hold(s), 0);
        aclemu_run_op(s, [4096usize].as_ptr(), 1);
    }
    eprintln!("CHILD NOT ABORTED");
    unregister(s, d);
    drop(dev);
}

/// With aborting on, the first violation ends the process with SIGABRT and
/// prints what happened and the stack of the call that made it; the process
/// does not go on past it.
#[test]
fn a_violation_aborts_at_its_call_when_asked() {
    const CHILD: &str = "ACLEMU_TEST_VIOLATION_CHILD";
    if std::env::var_os(CHILD).is_some() {
        free_under_a_held_op_with_aborts_on();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_violation_aborts_at_its_call_when_asked", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("ACLEMU_VIOLATIONS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    const SIGABRT: i32 = 6;
    assert_eq!(out.status.signal(), Some(SIGABRT), "{:?}\n{stderr}", out.status);
    assert!(!stderr.contains("CHILD NOT ABORTED"), "{stderr}");
    assert!(stderr.contains("acl-emu: violation 1: aclrtFree released memory that queued work still uses"), "{stderr}");
    assert!(stderr.contains("aborting at the violation"), "{stderr}");
    // The stack names the runtime call that made the violation.
    assert!(stderr.contains("check_release") && stderr.contains("aclrtFree"), "{stderr}");
}

#[test]
fn an_op_launched_on_named_ranges_pins_them_like_any_queued_op() {
    let _t = turn();
    let dev = Dev::take();
    let (a, b) = (stream(), stream());
    let block = malloc(4096);
    let span = |addr: *mut c_void, size| aclemu_span { addr: addr as *const c_void, size };
    let before = violations();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_launch(a, null_mut(), 2), INVALID_PARAM);
        assert_eq!(aclemu_launch(a, null_mut(), 0), 0);
        let host = [0u8; 64];
        assert_eq!(aclemu_launch(a, &span(host.as_ptr() as *mut c_void, 64), 1), RT_PARAM_INVALID);
        assert_eq!(aclemu_launch(a, &span(block, 1 << 40), 1), RT_PARAM_INVALID);
        assert_eq!(aclemu_launch(0xdead_0000usize as *mut c_void, &span(block, 64), 1), RT_INVALID_HANDLE);
        assert_eq!(violations(), before);
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclemu_launch(a, &span(block, 4096), 1), 0);
        // Another stream's op on the same memory while a's still waits.
        assert_eq!(aclemu_launch(b, &span((block as usize + 1024) as *mut c_void, 16), 1), 0);
        assert_eq!(violations(), before + 1);
        assert_eq!(aclrtSynchronizeStream(b), RT_INTERNAL_ERROR);
        assert_eq!(aclemu_stream_release(a), RT_INTERNAL_ERROR);
        // After a's op ran, b may use the memory; so may a stream that waits for a.
        assert_eq!(aclemu_launch(b, &span(block, 4096), 1), 0);
        assert_eq!(aclemu_stream_hold(a), 0);
        assert_eq!(aclemu_launch(a, &span(block, 4096), 1), 0);
        let e = event();
        assert_eq!(aclrtRecordEvent(e, a), 0);
        assert_eq!(aclrtStreamWaitEvent(b, e), 0);
        assert_eq!(aclemu_launch(b, &span(block, 4096), 1), 0);
        assert_eq!(violations(), before + 1);
        assert_eq!(aclemu_stream_release(a), 0);
        assert_eq!(aclrtSynchronizeStream(b), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtFree(block), 0);
        assert_eq!(aclrtDestroyStream(a), 0);
        assert_eq!(aclrtDestroyStream(b), 0);
    }
    dev.assert_clean();
}
