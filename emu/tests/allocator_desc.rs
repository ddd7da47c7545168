//! The aclrtAllocator* family (docs/acl-api.md §6.1) and
//! `aclemu_run_op`, which drives a registered allocator as GE does (§6.3).

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A tiny test allocator: one aclrtMalloc per block. Its knobs make it
/// misbehave on purpose.
#[derive(Default)]
struct TestAlloc {
    allocs: AtomicUsize,
    frees: AtomicUsize,
    advises: AtomicUsize,
    /// Return the first block's address for every block.
    alias: bool,
    /// Return NULL on this call (1-based), 0 = never.
    fail_on: usize,
    /// Record this event on the default stream from inside alloc.
    record_inside: Option<usize>,
    first_addr: Mutex<Option<usize>>,
    /// Keep freed blocks' memory here (freed by `release_kept`) instead of
    /// calling aclrtFree at once, as a caching allocator does.
    keep: Option<Mutex<Vec<usize>>>,
}

impl TestAlloc {
    /// An allocator that keeps freed memory until `release_kept`.
    fn keeping() -> TestAlloc {
        TestAlloc { keep: Some(Mutex::new(Vec::new())), ..Default::default() }
    }

    /// aclrtFree of every block kept so far.
    fn release_kept(&self) {
        for ptr in self.keep.as_ref().unwrap().lock().unwrap().drain(..) {
            // SAFETY: ptr came from aclrtMalloc and is freed once.
            assert_eq!(unsafe { aclrtFree(ptr as *mut c_void) }, 0);
        }
    }
}

/// What a block handle points to.
struct Block {
    ptr: *mut c_void,
    addr: *mut c_void,
}

unsafe extern "C" fn t_alloc(obj: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: obj is what this test registered with the desc; it outlives the callbacks.
    let a = unsafe { &*(obj as *const TestAlloc) };
    let n = a.allocs.fetch_add(1, Ordering::SeqCst) + 1;
    if n == a.fail_on {
        return null_mut();
    }
    if let Some(e) = a.record_inside {
        // Re-entering the emulator from a callback must not deadlock.
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        assert_eq!(unsafe { aclrtRecordEvent(e as *mut c_void, null_mut()) }, 0);
    }
    let mut ptr = null_mut();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    assert_eq!(unsafe { aclrtMalloc(&mut ptr, size.max(1), 0) }, 0);
    let mut first = a.first_addr.lock().unwrap();
    let addr = if a.alias { *first.get_or_insert(ptr as usize) as *mut c_void } else { ptr };
    Box::into_raw(Box::new(Block { ptr, addr })).cast()
}

unsafe extern "C" fn t_free(obj: *mut c_void, block: *mut c_void) {
    // SAFETY: obj is what this test registered with the desc; it outlives the callbacks.
    let a = unsafe { &*(obj as *const TestAlloc) };
    a.frees.fetch_add(1, Ordering::SeqCst);
    // SAFETY: block came from Box::into_raw in t_alloc, and each block is freed once.
    let b = unsafe { Box::from_raw(block.cast::<Block>()) };
    match &a.keep {
        Some(kept) => kept.lock().unwrap().push(b.ptr as usize),
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        None => assert_eq!(unsafe { aclrtFree(b.ptr) }, 0),
    }
}

unsafe extern "C" fn t_advise(obj: *mut c_void, size: usize, _addr: *mut c_void) -> *mut c_void {
    // SAFETY: obj is what this test registered with the desc; it outlives the callbacks.
    let a = unsafe { &*(obj as *const TestAlloc) };
    a.advises.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the same contract as this callback's own.
    unsafe { t_alloc(obj, size) }
}

unsafe extern "C" fn t_get_addr(block: *mut c_void) -> *mut c_void {
    // SAFETY: block is a live Block made by t_alloc.
    unsafe { (*block.cast::<Block>()).addr }
}

unsafe extern "C" fn other_alloc(_obj: *mut c_void, _size: usize) -> *mut c_void {
    null_mut()
}

/// A desc with every field set for `obj`.
fn full_desc(obj: &TestAlloc) -> *mut c_void {
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = aclrtAllocatorCreateDesc();
        assert!(!d.is_null());
        assert_eq!(aclrtAllocatorSetObjToDesc(d, obj as *const TestAlloc as *mut c_void), 0);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(d, Some(t_alloc)), 0);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(d, Some(t_free)), 0);
        assert_eq!(aclrtAllocatorSetAllocAdviseFuncToDesc(d, Some(t_advise)), 0);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, Some(t_get_addr)), 0);
        d
    }
}

#[test]
fn setters_reject_null_desc_and_value() {
    let dev = Dev::take();
    let obj = TestAlloc::default();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = aclrtAllocatorCreateDesc();
        assert_eq!(dev.usage().descs, 1);
        let o = &obj as *const TestAlloc as *mut c_void;
        assert_eq!(aclrtAllocatorSetObjToDesc(null_mut(), o), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetObjToDesc(d, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(null_mut(), Some(t_alloc)), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(d, None), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(null_mut(), Some(t_free)), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(d, None), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetAllocAdviseFuncToDesc(null_mut(), Some(t_advise)), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetAllocAdviseFuncToDesc(d, None), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(null_mut(), Some(t_get_addr)), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, None), INVALID_PARAM);
        assert_eq!(aclrtAllocatorDestroyDesc(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        // Destroyed descs are unknown.
        assert_eq!(aclrtAllocatorDestroyDesc(d), INVALID_PARAM);
        assert_eq!(aclrtAllocatorSetObjToDesc(d, o), INVALID_PARAM);
    }
    dev.assert_clean();
}

#[test]
fn register_checks_every_field_but_advise() {
    let dev = Dev::take();
    let obj = TestAlloc::default();
    let s = stream();
    let o = &obj as *const TestAlloc as *mut c_void;
    type Setter = fn(*mut c_void, *mut c_void);
    let setters: [Setter; 4] = [
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        |d, o| assert_eq!(unsafe { aclrtAllocatorSetObjToDesc(d, o) }, 0),
        |d, _| {
            assert_eq!(
                // SAFETY: d is a live desc and the callback has the ACL signature.
                unsafe { aclrtAllocatorSetAllocFuncToDesc(d, Some(t_alloc)) },
                0
            )
        },
        |d, _| {
            assert_eq!(
                // SAFETY: d is a live desc and the callback has the ACL signature.
                unsafe { aclrtAllocatorSetFreeFuncToDesc(d, Some(t_free)) },
                0
            )
        },
        |d, _| {
            assert_eq!(
                // SAFETY: d is a live desc and the callback has the ACL signature.
                unsafe { aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, Some(t_get_addr)) },
                0
            )
        },
    ];
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        // Leave out each required field in turn.
        for missing in 0..setters.len() {
            let d = aclrtAllocatorCreateDesc();
            for (i, set) in setters.iter().enumerate() {
                if i != missing {
                    set(d, o);
                }
            }
            assert_eq!(aclrtAllocatorRegister(s, d), INVALID_PARAM, "missing field {missing}");
            assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        }
        // Advise is not checked.
        let d = aclrtAllocatorCreateDesc();
        for set in &setters {
            set(d, o);
        }
        assert_eq!(aclrtAllocatorRegister(null_mut(), d), INVALID_PARAM);
        assert_eq!(aclrtAllocatorRegister(s, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn registration_is_a_copy_and_last_one_wins() {
    let dev = Dev::take();
    let (obj1, obj2) = (TestAlloc::default(), TestAlloc::default());
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d1 = full_desc(&obj1);
        let d2 = full_desc(&obj2);
        assert_eq!(aclrtAllocatorRegister(s, d1), 0);
        assert_eq!(aclrtAllocatorRegister(s, d2), 0);
        let (mut desc, mut o) = (null_mut(), null_mut());
        let mut alloc: aclrtAllocatorAllocFunc = None;
        let mut free: aclrtAllocatorFreeFunc = None;
        let mut advise: aclrtAllocatorAllocAdviseFunc = None;
        let mut get_addr: aclrtAllocatorGetAddrFromBlockFunc = None;
        assert_eq!(
            aclrtAllocatorGetByStream(s, &mut desc, &mut o, &mut alloc, &mut free, &mut advise, &mut get_addr),
            0
        );
        assert_eq!(desc, d2);
        assert_eq!(o, &obj2 as *const TestAlloc as *mut c_void);
        assert_eq!(alloc.map(|f| f as *const () as usize), Some(t_alloc as *const () as usize));
        assert_eq!(free.map(|f| f as *const () as usize), Some(t_free as *const () as usize));
        assert_eq!(advise.map(|f| f as *const () as usize), Some(t_advise as *const () as usize));
        assert_eq!(get_addr.map(|f| f as *const () as usize), Some(t_get_addr as *const () as usize));
        // Later setters do not touch the registration.
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(d2, Some(other_alloc)), 0);
        assert_eq!(
            aclrtAllocatorGetByStream(s, &mut desc, null_mut(), &mut alloc, null_mut(), null_mut(), null_mut()),
            0
        );
        assert_eq!(alloc.map(|f| f as *const () as usize), Some(t_alloc as *const () as usize));
        // DestroyDesc leaves it in place; GetByStream returns the stale desc.
        assert_eq!(aclrtAllocatorDestroyDesc(d2), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d1), 0);
        desc = null_mut();
        assert_eq!(
            aclrtAllocatorGetByStream(s, &mut desc, null_mut(), null_mut(), null_mut(), null_mut(), null_mut()),
            0
        );
        assert_eq!(desc, d2);
        // GetByStream argument checks.
        assert_eq!(
            aclrtAllocatorGetByStream(
                null_mut(),
                &mut desc,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut()
            ),
            INVALID_PARAM
        );
        assert_eq!(
            aclrtAllocatorGetByStream(s, null_mut(), null_mut(), null_mut(), null_mut(), null_mut(), null_mut()),
            INVALID_PARAM
        );
        // Unregister: NULL rejected, otherwise idempotent.
        assert_eq!(aclrtAllocatorUnregister(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(
            aclrtAllocatorGetByStream(s, &mut desc, null_mut(), null_mut(), null_mut(), null_mut(), null_mut()),
            INVALID_PARAM
        );
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn registration_outlives_its_stream() {
    let dev = Dev::take();
    let obj = TestAlloc::default();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let s = stream();
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
        let mut desc = null_mut();
        assert_eq!(
            aclrtAllocatorGetByStream(s, &mut desc, null_mut(), null_mut(), null_mut(), null_mut(), null_mut()),
            0
        );
        // But no op runs on a destroyed stream.
        assert_eq!(aclemu_run_op(s, [64usize].as_ptr(), 1), RT_INVALID_HANDLE);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 0);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
    }
    dev.assert_clean();
}

#[test]
fn run_op_allocates_touches_and_frees_through_the_allocator() {
    let dev = Dev::take();
    let obj = TestAlloc::default();
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let sizes = [1usize, 4096, MIB + 3, 0, 77];
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclemu_run_op(s, sizes.as_ptr(), sizes.len()), 0);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 5);
        assert_eq!(obj.frees.load(Ordering::SeqCst), 5);
        // GE never calls advise on this path.
        assert_eq!(obj.advises.load(Ordering::SeqCst), 0);
        assert_eq!(dev.usage().malloc_count, 0);
        assert_eq!(aclemu_run_op(s, null_mut(), 0), 0);
        assert_eq!(aclemu_run_op(s, null_mut(), 2), INVALID_PARAM);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn run_op_on_a_held_stream_is_pending_work() {
    let dev = Dev::take();
    let obj = TestAlloc::keeping();
    let (s, e) = (stream(), event());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclemu_run_op(s, [256usize].as_ptr(), 1), 0);
        // Blocks are freed on the host right after launch...
        assert_eq!(obj.frees.load(Ordering::SeqCst), 1);
        // ...but the op itself is still queued.
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(status(e), COMPLETE);
        obj.release_kept();
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn run_op_catches_overlapping_blocks() {
    let dev = Dev::take();
    let obj = TestAlloc { alias: true, ..Default::default() };
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclemu_run_op(s, [64usize, 64].as_ptr(), 2), RT_INTERNAL_ERROR);
        // Every block was still freed.
        assert_eq!(obj.frees.load(Ordering::SeqCst), 2);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn run_op_fails_with_oom_when_alloc_returns_null() {
    let dev = Dev::take();
    let obj = TestAlloc { fail_on: 3, ..Default::default() };
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclemu_run_op(s, [64usize, 64, 64, 64].as_ptr(), 4), RT_MEMORY_ALLOCATION);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 3);
        assert_eq!(obj.frees.load(Ordering::SeqCst), 2);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn callbacks_may_call_back_into_the_emulator() {
    let dev = Dev::take();
    let e = event();
    let obj = TestAlloc { record_inside: Some(e as usize), ..Default::default() };
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclemu_run_op(s, [64usize, 128].as_ptr(), 2), 0);
        assert_eq!(status(e), COMPLETE);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

/// Blocks of a VMM-backed allocator that maps one physical handle at two
/// addresses alias each other without overlapping: the pattern check
/// catches it.
#[test]
fn run_op_catches_aliased_physical_memory() {
    let dev = Dev::take();
    struct Vmm {
        base: usize,
        handle: usize,
        next: AtomicUsize,
    }
    unsafe extern "C" fn v_alloc(obj: *mut c_void, _size: usize) -> *mut c_void {
        // SAFETY: obj is what this test registered with the desc; it outlives the callbacks.
        let v = unsafe { &*(obj as *const Vmm) };
        let i = v.next.fetch_add(1, Ordering::SeqCst);
        let addr = (v.base + i * 2 * MIB) as *mut c_void;
        assert_eq!(
            // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
            unsafe { aclrtMapMem(addr, 2 * MIB, 0, v.handle as *mut c_void, 0) },
            0
        );
        addr
    }
    unsafe extern "C" fn v_free(_obj: *mut c_void, block: *mut c_void) {
        // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
        assert_eq!(unsafe { aclrtUnmapMem(block) }, 0);
    }
    unsafe extern "C" fn v_addr(block: *mut c_void) -> *mut c_void {
        block
    }
    unsafe extern "C" fn v_advise(obj: *mut c_void, size: usize, _: *mut c_void) -> *mut c_void {
        // SAFETY: the same contract as this callback's own.
        unsafe { v_alloc(obj, size) }
    }
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let v = Vmm {
            base: reserve(4 * MIB) as usize,
            handle: physical(&dev, 2 * MIB) as usize,
            next: AtomicUsize::new(0),
        };
        let d = aclrtAllocatorCreateDesc();
        assert_eq!(aclrtAllocatorSetObjToDesc(d, &v as *const Vmm as *mut c_void), 0);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(d, Some(v_alloc)), 0);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(d, Some(v_free)), 0);
        assert_eq!(aclrtAllocatorSetAllocAdviseFuncToDesc(d, Some(v_advise)), 0);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, Some(v_addr)), 0);
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        assert_eq!(aclemu_run_op(s, [2 * MIB, 2 * MIB].as_ptr(), 2), RT_INTERNAL_ERROR);
        assert_eq!(dev.usage().mapped_bytes, 0);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtFreePhysical(v.handle as *mut c_void), 0);
        assert_eq!(aclrtReleaseMemAddress(v.base as *mut c_void), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

/// GE's registration rules (RB "How GE uses a registered allocator").
#[test]
fn a_stream_that_ran_an_op_unregistered_keeps_ges_allocator() {
    let dev = Dev::take();
    let obj = TestAlloc::default();
    let (early, late) = (stream(), stream());
    let sizes = [64usize, 4096];
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        // Nothing registered: GE's own allocator runs the op.
        assert_eq!(aclemu_run_op(early, sizes.as_ptr(), 2), 0);
        let d = full_desc(&obj);
        assert_eq!(aclrtAllocatorRegister(early, d), 0);
        assert_eq!(aclrtAllocatorRegister(late, d), 0);
        // `early` keeps it for good; `late` uses the registered one.
        assert_eq!(aclemu_run_op(early, sizes.as_ptr(), 2), 0);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 0);
        assert_eq!(aclemu_run_op(late, sizes.as_ptr(), 2), 0);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 2);
        // A NULL stream always falls back to GE's allocator.
        assert_eq!(aclemu_run_op(null_mut(), sizes.as_ptr(), 2), 0);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 2);
        assert_eq!(dev.usage().malloc_count, 0);
        assert_eq!(aclrtAllocatorUnregister(early), 0);
        assert_eq!(aclrtAllocatorUnregister(late), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyStream(early), 0);
        assert_eq!(aclrtDestroyStream(late), 0);
    }
    dev.assert_clean();
}

#[test]
fn a_registration_without_alloc_advise_is_refused_by_run_op() {
    let dev = Dev::take();
    let obj = TestAlloc::default();
    let s = stream();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = aclrtAllocatorCreateDesc();
        let o = &obj as *const TestAlloc as *mut c_void;
        assert_eq!(aclrtAllocatorSetObjToDesc(d, o), 0);
        assert_eq!(aclrtAllocatorSetAllocFuncToDesc(d, Some(t_alloc)), 0);
        assert_eq!(aclrtAllocatorSetFreeFuncToDesc(d, Some(t_free)), 0);
        assert_eq!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, Some(t_get_addr)), 0);
        // The runtime registers it (it does not check advise)...
        assert_eq!(aclrtAllocatorRegister(s, d), 0);
        // ...but GE would deadlock on it; the emulator refuses the op.
        assert_eq!(aclemu_run_op(s, [64usize].as_ptr(), 1), INVALID_PARAM);
        assert_eq!(obj.allocs.load(Ordering::SeqCst), 0);
        assert_eq!(aclrtAllocatorUnregister(s), 0);
        assert_eq!(aclrtAllocatorDestroyDesc(d), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}
