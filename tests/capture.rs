//! Streams in graph capture (Note [capture] in the core), on the ACL
//! emulator: a capturing stream is accepted by every entry point without
//! being queried; empty_cache, the OOM ladder and destroy never query or
//! synchronize it, and never hand out or give back memory its captured
//! work uses, which a replay after all of them proves (the emulator counts
//! replayed work on freed or unmapped memory as a violation).

mod common;
use common::*;
use npualloc::ffi::desc::{npualloc_register, npualloc_unregister};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status;
use npualloc::ffi::pluggable::{npualloc_pluggable_free, npualloc_pluggable_init, npualloc_pluggable_malloc};
use npualloc::runtime::Stream;
use std::ffi::{c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, OnceLock};

const MIB: usize = 1 << 20;
const D2H: u32 = 2;
const GLOBAL: u32 = 0;
/// Arms a call counter: a failure this many calls ahead never fires here.
const FAR: i32 = 1 << 30;

/// The emulator's capture calls and counters, from the loaded library.
struct Capture {
    begin: unsafe extern "C" fn(*mut c_void, u32) -> i32,
    end: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> i32,
    execute: unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32,
    destroy: unsafe extern "C" fn(*mut c_void) -> i32,
    violations: unsafe extern "C" fn() -> i64,
    run_op: unsafe extern "C" fn(*mut c_void, *const usize, usize) -> i32,
}

fn cap() -> &'static Capture {
    static CAP: OnceLock<Capture> = OnceLock::new();
    CAP.get_or_init(|| {
        emu();
        let path = CString::new(emulator_path().to_str().unwrap()).unwrap();
        // SAFETY: valid C string; `emu()` loaded the library, which is never closed.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!handle.is_null());
        let sym = |name: &CStr| {
            // SAFETY: live handle, valid C string.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            assert!(!p.is_null(), "the emulator lacks {name:?}");
            p
        };
        type Begin = unsafe extern "C" fn(*mut c_void, u32) -> i32;
        type End = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> i32;
        type Execute = unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32;
        type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;
        type Violations = unsafe extern "C" fn() -> i64;
        type RunOp = unsafe extern "C" fn(*mut c_void, *const usize, usize) -> i32;
        // SAFETY: the signatures are the emulator's (emu/include/acl_emu.h).
        unsafe {
            Capture {
                begin: std::mem::transmute::<*mut c_void, Begin>(sym(c"aclmdlRICaptureBegin")),
                end: std::mem::transmute::<*mut c_void, End>(sym(c"aclmdlRICaptureEnd")),
                execute: std::mem::transmute::<*mut c_void, Execute>(sym(c"aclmdlRIExecuteAsync")),
                destroy: std::mem::transmute::<*mut c_void, Destroy>(sym(c"aclmdlRIDestroy")),
                violations: std::mem::transmute::<*mut c_void, Violations>(sym(c"aclemu_violations")),
                run_op: std::mem::transmute::<*mut c_void, RunOp>(sym(c"aclemu_run_op")),
            }
        }
    })
}

impl Capture {
    fn begin(&self, s: Stream) {
        // SAFETY: a live stream handle.
        assert_eq!(unsafe { (self.begin)(s.raw(), GLOBAL) }, 0);
    }
    fn end(&self, s: Stream) -> *mut c_void {
        let mut m = null_mut();
        // SAFETY: a live stream handle and out-pointer.
        assert_eq!(unsafe { (self.end)(s.raw(), &mut m) }, 0);
        m
    }
    fn execute(&self, m: *mut c_void, s: Stream) {
        // SAFETY: a live model and stream.
        assert_eq!(unsafe { (self.execute)(m, s.raw()) }, 0);
    }
    fn destroy(&self, m: *mut c_void) {
        // SAFETY: a live model.
        assert_eq!(unsafe { (self.destroy)(m) }, 0);
    }
    fn violations(&self) -> i64 {
        // SAFETY: no arguments.
        unsafe { (self.violations)() }
    }
}

/// Violations are counted process-wide: the tests of this file take turns.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts calls of the stream query and synchronize from now on.
struct Calls;

impl Calls {
    fn start() -> Calls {
        emu().fail_nth("aclrtStreamQuery", FAR);
        emu().fail_nth("aclrtSynchronizeStream", FAR);
        Calls
    }
    /// (queries, synchronizes) since `start`.
    fn made(&self) -> (i32, i32) {
        (FAR - emu().fault_pending("aclrtStreamQuery"), FAR - emu().fault_pending("aclrtSynchronizeStream"))
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        emu().fail_nth("aclrtStreamQuery", 0);
        emu().fail_nth("aclrtSynchronizeStream", 0);
    }
}

/// Queues (on a capturing stream: captures) a copy of `host.len()` bytes
/// of device memory at `src` into `host`, with `dev`'s context current (the
/// runtime refuses a stream of another context: 107003).
fn copy_out(host: &mut [u8], src: usize, s: Stream, dev: i32) {
    let rt = &emu().rt;
    let n = host.len();
    // SAFETY: `host` outlives every replay of the copy (the tests keep it
    // until the end); `src` is a live block of at least n bytes.
    rt.on_device(dev, || unsafe {
        rt.memcpy2d(host.as_mut_ptr().cast(), n, src as *const c_void, n, n, 1, D2H, Some(s))
    })
    .unwrap();
}

fn fill(addr: usize, len: usize, byte: u8) {
    // SAFETY: the emulator's device memory is host memory; the block is live.
    unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) }
}

#[test]
fn first_allocation_on_a_capturing_stream_works_through_every_entry_point() {
    let _t = turn();
    let c = cap();
    const DEV: i32 = 0;
    // Direct: npualloc_malloc.
    let a = create("", DEV).unwrap();
    let (s, g) = (emu().create_stream(DEV), emu().create_stream(DEV));
    c.begin(s);
    let calls = Calls::start();
    let p = malloc(a, 4096, s).expect("the first allocation on a capturing stream");
    // Desc: registered on a capturing stream, then used by an op.
    c.begin(g);
    // SAFETY: a live handle and stream.
    assert_eq!(unsafe { npualloc_register(a, g.raw()) }, npualloc_status::NPUALLOC_OK, "{}", last_error_message());
    let sizes = [4096usize, 3 * MIB];
    // SAFETY: a live stream and a readable array.
    assert_eq!(unsafe { (c.run_op)(g.raw(), sizes.as_ptr(), sizes.len()) }, 0, "an op on a capturing stream");
    assert_eq!(calls.made(), (0, 0), "a capturing stream was queried or synchronized");
    drop(calls);
    assert_eq!(free(a, p), npualloc_status::NPUALLOC_OK);
    c.destroy(c.end(s));
    c.destroy(c.end(g));
    // SAFETY: a live handle and stream.
    assert_eq!(unsafe { npualloc_unregister(a, g.raw()) }, npualloc_status::NPUALLOC_OK);
    assert_eq!(destroy(a), npualloc_status::NPUALLOC_OK);

    // Pluggable: torch_npu's entry points (process-wide allocators).
    npualloc_pluggable_init(1);
    let t = emu().create_stream(DEV);
    c.begin(t);
    let calls = Calls::start();
    // SAFETY: arguments as torch_npu passes them.
    let q = unsafe { npualloc_pluggable_malloc(4096, DEV, t.raw()) };
    assert!(!q.is_null(), "pluggable malloc on a capturing stream: {}", last_error_message());
    assert_eq!(calls.made(), (0, 0));
    drop(calls);
    // SAFETY: as above.
    unsafe { npualloc_pluggable_free(q, 4096, DEV, t.raw()) };
    assert_eq!(last_error_message(), "");
    c.destroy(c.end(t));
    for st in [s, g, t] {
        emu().destroy_stream(DEV, st);
    }
}

/// empty_cache, the OOM ladder and destroy, all during a capture whose
/// work reads a freed block: none queries or synchronizes the capturing
/// stream, and the block's memory stays for the replays.
fn reclaim_during_capture(config: &str, dev: i32) {
    let c = cap();
    emu().set_capacity(dev, (256 * MIB) as u64);
    let a = create(config, dev).unwrap();
    let (s, other, exec) = (emu().create_stream(dev), emu().create_stream(dev), emu().create_stream(dev));
    let keep = malloc(a, 4096, other).unwrap();
    c.begin(s);
    let p = malloc(a, MIB, s).unwrap();
    fill(p, MIB, 0x5a);
    let mut host = vec![0u8; 4096];
    copy_out(&mut host, p, s, dev);
    assert_eq!(free(a, p), npualloc_status::NPUALLOC_OK);
    // The freed block is not handed out again, on its stream or elsewhere.
    let q = malloc(a, MIB, s).unwrap();
    let r = malloc(a, MIB, other).unwrap();
    for x in [q, r] {
        assert!(x + MIB <= p || p + MIB <= x, "{config}: the captured block was handed out again");
    }
    assert!(stats(a).pending_free_bytes >= MIB as u64, "{config}: quarantined bytes are reported");
    let calls = Calls::start();
    assert_eq!(empty_cache(a), npualloc_status::NPUALLOC_OK, "{config}: {}", last_error_message());
    // Cannot fit: the whole ladder runs first.
    let huge = malloc(a, 255 * MIB, s).expect_err("over the device's capacity");
    assert_eq!(huge.0, npualloc_status::NPUALLOC_ERR_OUT_OF_MEMORY, "{config}: {}", huge.1);
    assert_eq!(calls.made().1, 0, "{config}: a stream was synchronized during capture");
    // Destroy while the capture goes on.
    assert_eq!(free(a, keep), npualloc_status::NPUALLOC_OK);
    assert_eq!(destroy(a), npualloc_status::NPUALLOC_OK, "{config}: {}", last_error_message());
    let (queries, syncs) = calls.made();
    drop(calls);
    assert_eq!(queries, 0, "{config}: a stream was queried");
    // Only `other`, once, at teardown (the emulator would refuse `s`, and
    // the refusal would be an error above).
    assert_eq!(syncs, 1, "{config}: synchronizations");
    let m = c.end(s);
    let before = c.violations();
    c.execute(m, exec);
    emu().rt.on_device(dev, || emu().rt.synchronize_stream(exec)).unwrap();
    assert_eq!(c.violations(), before, "{config}: the replay found its memory freed or unmapped");
    assert!(host.iter().all(|&b| b == 0x5a), "{config}: the replay read other data");
    c.destroy(m);
    let u = emu().usage(dev);
    assert!(u.malloc_count + u.mapped_bytes > 0, "{config}: the graph's memory is left to the runtime");
    for st in [s, other, exec] {
        emu().destroy_stream(dev, st);
    }
}

#[test]
fn reclaim_and_destroy_never_touch_a_capturing_stream_or_its_memory() {
    let _t = turn();
    reclaim_during_capture("expandable_segments:false", 2);
    reclaim_during_capture("expandable_segments:true", 3);
}

#[test]
fn after_capture_a_graph_streams_freed_blocks_stay_out_of_use() {
    let _t = turn();
    let c = cap();
    const DEV: i32 = 4;
    let a = create("expandable_segments:false", DEV).unwrap();
    let (s, other, exec) = (emu().create_stream(DEV), emu().create_stream(DEV), emu().create_stream(DEV));
    // A block of another stream, recorded on the capturing one.
    let b = malloc(a, MIB, other).unwrap();
    fill(b, MIB, 0x33);
    c.begin(s);
    assert_eq!(record_stream(a, b, s), npualloc_status::NPUALLOC_OK, "{}", last_error_message());
    let p = malloc(a, MIB, s).unwrap();
    fill(p, MIB, 0x44);
    let (mut from_b, mut from_p) = (vec![0u8; 4096], vec![0u8; 4096]);
    copy_out(&mut from_b, b, s, DEV);
    copy_out(&mut from_p, p, s, DEV);
    let m = c.end(s);
    // Freed after the capture: still never reused nor given back.
    assert_eq!(free(a, b), npualloc_status::NPUALLOC_OK);
    assert_eq!(free(a, p), npualloc_status::NPUALLOC_OK);
    assert_eq!(empty_cache(a), npualloc_status::NPUALLOC_OK, "{}", last_error_message());
    for (st, old) in [(other, b), (s, p)] {
        let x = malloc(a, MIB, st).unwrap();
        assert!(x + MIB <= old || old + MIB <= x, "a block the graph uses was handed out again");
        fill(x, MIB, 0);
    }
    let before = c.violations();
    c.execute(m, exec);
    emu().rt.on_device(DEV, || emu().rt.synchronize_stream(exec)).unwrap();
    assert_eq!(c.violations(), before);
    assert!(from_b.iter().all(|&x| x == 0x33) && from_p.iter().all(|&x| x == 0x44), "the replay read other data");
    assert!(stats(a).pending_free_bytes >= 2 * MIB as u64);
    c.destroy(m);
    assert_eq!(destroy(a), npualloc_status::NPUALLOC_OK, "{}", last_error_message());
    for st in [s, other, exec] {
        emu().destroy_stream(DEV, st);
    }
}

/// A stream seen capturing is a graph stream: its growth never moves a
/// wholly free handle (Note [moves of wholly free handles]), not even one
/// freed before the capture, since a graph replays on the addresses it
/// captured and a moved handle's old address is unmapped at the next
/// reclaim. (Here, not in the core's tests: teardown leaves a graph
/// stream's memory to the runtime, this test process's emulator.)
#[test]
fn a_graph_stream_moves_no_handle() {
    let _t = turn();
    let c = cap();
    const DEV: i32 = 0;
    // A roomy device and nothing mapped ahead: outside a capture the 33 MiB
    // request below would map the freed 32 MiB handle again, one map and no
    // physical allocation (the core's handle_moves tests).
    emu().set_capacity(DEV, 8 << 30);
    let a = create("map_ahead:false", DEV).unwrap();
    let s = emu().create_stream(DEV);
    let old = malloc(a, 32 * MIB, s).unwrap();
    let spacer = malloc(a, 3 * MIB, s).unwrap();
    assert_eq!(free(a, old), npualloc_status::NPUALLOC_OK);
    c.begin(s);
    // record_stream on the capturing stream makes it a graph stream.
    assert_eq!(record_stream(a, spacer, s), npualloc_status::NPUALLOC_OK, "{}", last_error_message());
    let before = stats(a);
    let grown = malloc(a, 33 * MIB, s).unwrap();
    let after = stats(a);
    assert_eq!(grown, spacer + 3 * MIB, "the request goes past the spacer");
    assert_eq!(
        (after.num_maps - before.num_maps, after.num_physical_mallocs - before.num_physical_mallocs),
        (1, 1),
        "a graph stream's growth moved a handle instead of making one"
    );
    c.destroy(c.end(s));
    assert_eq!(destroy(a), npualloc_status::NPUALLOC_OK, "{}", last_error_message());
    emu().destroy_stream(DEV, s);
}
