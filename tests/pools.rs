//! Private pools through the C API (Note [pools] in the core), on the ACL
//! emulator: the rules of `npualloc_pool_*` at the boundary, routing
//! through every entry point (direct, desc, pluggable), and graph capture
//! into a pool, replayed while other streams allocate and free, checked
//! with the emulator's violation counter (replayed work on memory freed or
//! unmapped, or written by other work meanwhile).

mod common;
use common::*;
use npualloc::ffi::desc::{npualloc_register, npualloc_unregister};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status;
use npualloc::ffi::pluggable::{
    npualloc_pluggable_allocator, npualloc_pluggable_free, npualloc_pluggable_init, npualloc_pluggable_malloc,
};
use npualloc::ffi::pools::*;
use npualloc::ffi::sleep::{npualloc_sleep, npualloc_wake};
use npualloc::ffi::stats::npualloc_stats;
use npualloc::runtime::Stream;
use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard, OnceLock};

const MIB: usize = 1 << 20;
const H2D: u32 = 1;
const D2H: u32 = 2;
const D2D: u32 = 3;
const OK: npualloc_status = npualloc_status::NPUALLOC_OK;
const INVALID: npualloc_status = npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT;

type Begin = unsafe extern "C" fn(*mut c_void, u32) -> i32;
type End = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> i32;
type Execute = unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32;
type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;
type Violations = unsafe extern "C" fn() -> i64;
type RunOp = unsafe extern "C" fn(*mut c_void, *const usize, usize) -> i32;

/// The emulator's capture calls and its violation counter.
struct Capture {
    begin: Begin,
    end: End,
    execute: Execute,
    destroy: Destroy,
    violations: Violations,
    run_op: RunOp,
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

fn pool_create(a: Handle, config: Option<&str>) -> Result<u64, (npualloc_status, String)> {
    let c = config.map(|c| CString::new(c).unwrap());
    let mut id = u64::MAX;
    // SAFETY: a live handle, a C string or NULL, a valid out-pointer.
    match unsafe { npualloc_pool_create(a, c.as_ref().map_or(null(), |c| c.as_ptr()), &mut id) } {
        OK => Ok(id),
        st => {
            assert_eq!(id, u64::MAX, "out_pool written on failure");
            Err((st, last_error_message()))
        }
    }
}

fn begin(a: Handle, pool: u64, s: Option<Stream>) -> npualloc_status {
    // SAFETY: a live handle.
    unsafe { npualloc_pool_begin(a, pool, s.map_or(null_mut(), |s| s.raw())) }
}

fn end(a: Handle, pool: u64, s: Option<Stream>) -> npualloc_status {
    // SAFETY: a live handle.
    unsafe { npualloc_pool_end(a, pool, s.map_or(null_mut(), |s| s.raw())) }
}

fn pool_destroy(a: Handle, pool: u64) -> npualloc_status {
    // SAFETY: a live handle.
    unsafe { npualloc_pool_destroy(a, pool) }
}

fn pool_stats(a: Handle, pool: u64) -> npualloc_stats {
    let mut s = npualloc_stats { struct_size: std::mem::size_of::<npualloc_stats>() as u32, ..Default::default() };
    // SAFETY: a live handle and a valid out-pointer.
    let st = unsafe { npualloc_pool_get_stats(a, pool, &mut s) };
    assert_eq!(st, OK, "pool_get_stats: {}", last_error_message());
    s
}

fn fill(addr: usize, len: usize, byte: u8) {
    // SAFETY: the emulator's device memory is host memory; the block is live.
    unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) }
}

#[test]
fn pool_calls_refuse_bad_input_and_change_nothing() {
    let _t = turn();
    const DEV: i32 = 0;
    let a = create("expandable_segments:false", DEV).unwrap();
    let s = emu().create_stream(DEV);
    let (st, m) = pool_create(a, Some("sleep:nap")).unwrap_err();
    assert_eq!(st, npualloc_status::NPUALLOC_ERR_BAD_CONFIG);
    assert!(m.contains("sleep"), "{m}");
    let (st, m) = pool_create(a, Some("colour:blue")).unwrap_err();
    assert_eq!(st, npualloc_status::NPUALLOC_ERR_BAD_CONFIG);
    assert!(m.contains("colour"), "{m}");
    let p = pool_create(a, None).unwrap();
    let q = pool_create(a, Some("sleep:offload,use_on_oom:true")).unwrap();
    assert!(p >= 1 && q > p, "ids {p} {q}");
    // SAFETY: NULL out-pointer refused before anything happens.
    assert_eq!(unsafe { npualloc_pool_create(a, null(), null_mut()) }, INVALID);
    assert!(last_error_message().contains("out_pool"), "{}", last_error_message());
    // Unknown pools, a bad stream, pool 0, end without a route.
    assert_eq!(begin(a, 77, Some(s)), INVALID);
    assert_eq!(begin(a, p, Some(Stream(0xdead0))), INVALID);
    assert_eq!(end(a, p, Some(s)), INVALID);
    assert_eq!(pool_destroy(a, 0), INVALID);
    assert_eq!(pool_destroy(a, 77), INVALID);
    let mut st = npualloc_stats { struct_size: 4, ..Default::default() };
    // SAFETY: a live handle; a too-small struct_size is refused before writing.
    assert_eq!(unsafe { npualloc_pool_get_stats(a, p, &mut st) }, INVALID);
    // SAFETY: as above, an unknown pool.
    assert_eq!(unsafe { npualloc_pool_get_stats(a, 77, &mut npualloc_stats::default()) }, INVALID);
    // Nothing above changed the routing: allocations stay in pool 0.
    let x = malloc(a, 4096, s).unwrap();
    assert_eq!((pool_stats(a, 0).active_blocks, pool_stats(a, p).active_blocks), (1, 0));
    // Nested routes; the wrong pool_end changes nothing.
    assert_eq!(begin(a, p, Some(s)), OK);
    assert_eq!(begin(a, q, None), OK);
    assert_eq!(end(a, p, None), INVALID);
    assert!(last_error_message().contains(&format!("pool {q}")), "{}", last_error_message());
    let y = malloc(a, 4096, s).unwrap();
    assert_eq!(pool_stats(a, q).active_blocks, 1, "the thread route, newer, wins");
    assert_eq!(pool_destroy(a, q), INVALID, "a routed pool cannot be destroyed");
    assert_eq!(end(a, q, None), OK);
    let z = malloc(a, 4096, s).unwrap();
    assert_eq!(pool_stats(a, p).active_blocks, 1);
    assert_eq!(end(a, p, Some(s)), OK);
    let total = stats(a);
    let sum: u64 = [0, p, q].iter().map(|&i| pool_stats(a, i).allocated_bytes).sum();
    assert_eq!(total.allocated_bytes, sum, "the allocator's stats are totals over every pool");
    for b in [x, y, z] {
        assert_eq!(free(a, b), OK);
    }
    assert_eq!(pool_destroy(a, q), OK);
    assert_eq!(pool_destroy(a, q), INVALID, "destroyed once");
    assert_eq!(begin(a, q, None), INVALID, "a destroyed pool takes no route");
    assert_eq!(pool_create(a, None).unwrap(), q + 1, "ids are never reused");
    assert_eq!(destroy(a), OK);
    emu().destroy_stream(DEV, s);
}

/// A route applies to every entry point: GE's desc path (an op on a
/// registered stream) and torch_npu's pluggable one.
#[test]
fn routes_apply_to_the_desc_and_pluggable_entry_points() {
    let _t = turn();
    let c = cap();
    const DEV: i32 = 1;
    let a = create("expandable_segments:false", DEV).unwrap();
    let g = emu().create_stream(DEV);
    // SAFETY: a live handle and stream.
    assert_eq!(unsafe { npualloc_register(a, g.raw()) }, OK, "{}", last_error_message());
    let p = pool_create(a, None).unwrap();
    assert_eq!(begin(a, p, Some(g)), OK);
    let sizes = [4096usize, 3 * MIB];
    // SAFETY: a live stream and a readable array.
    assert_eq!(unsafe { (c.run_op)(g.raw(), sizes.as_ptr(), sizes.len()) }, 0);
    emu().rt.on_device(DEV, || emu().rt.synchronize_stream(g)).unwrap();
    assert_eq!(pool_stats(a, p).num_allocs, 2, "the op's allocations came from the pool");
    assert_eq!(pool_stats(a, 0).num_allocs, 0);
    assert_eq!(end(a, p, Some(g)), OK);
    // SAFETY: a live handle and stream.
    assert_eq!(unsafe { npualloc_unregister(a, g.raw()) }, OK);
    assert_eq!(destroy(a), OK);

    npualloc_pluggable_init(4);
    let mut h: Handle = null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { npualloc_pluggable_allocator(DEV, &mut h) }, OK, "{}", last_error_message());
    let t = emu().create_stream(DEV);
    let q = pool_create(h, None).unwrap();
    assert_eq!(begin(h, q, Some(t)), OK);
    // SAFETY: arguments as torch_npu passes them.
    let x = unsafe { npualloc_pluggable_malloc(MIB, DEV, t.raw()) };
    assert!(!x.is_null(), "{}", last_error_message());
    assert_eq!(pool_stats(h, q).active_blocks, 1, "the pluggable malloc came from the pool");
    assert_eq!(end(h, q, Some(t)), OK);
    // SAFETY: as above.
    unsafe { npualloc_pluggable_free(x, MIB, DEV, t.raw()) };
    assert_eq!(pool_stats(h, q).active_blocks, 0, "the free went to the block's pool");
    assert_eq!(pool_destroy(h, q), OK);
    for st in [g, t] {
        emu().destroy_stream(DEV, st);
    }
}

thread_local! {
    /// The device `copy2d` queues on.
    static DEVICE: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// Queues a 2D copy of `rows` rows of `width` bytes (pitches as given).
#[allow(clippy::too_many_arguments)]
fn copy2d(dst: usize, dpitch: usize, src: usize, spitch: usize, width: usize, rows: usize, kind: u32, s: Stream) {
    let rt = &emu().rt;
    let dev = DEVICE.with(|d| d.get());
    rt.on_device(dev, || {
        // SAFETY: the tests keep every host buffer alive while any replay may
        // run, and the device ranges are live blocks at least that large.
        unsafe { rt.memcpy2d(dst as *mut c_void, dpitch, src as *const c_void, spitch, width, rows, kind, Some(s)) }
    })
    .unwrap();
}

fn capture_into_a_pool(config: &str, dev: i32) {
    capture_into_a_pool_sleeping(config, dev, None, false);
}

/// `capture_into_a_pool`, the pool made with `pool_config`; with `sleeps`,
/// the allocator sleeps and wakes before each replay.
fn capture_into_a_pool_sleeping(config: &str, dev: i32, pool_config: Option<&str>, sleeps: bool) {
    let c = cap();
    DEVICE.with(|d| d.set(dev));
    emu().set_capacity(dev, (512 * MIB) as u64);
    let a = create(config, dev).unwrap();
    let (s, exec, other) = (emu().create_stream(dev), emu().create_stream(dev), emu().create_stream(dev));
    let p = pool_create(a, pool_config).unwrap();
    const W: usize = 1000;
    const PITCH: usize = 1024;
    const ROWS: usize = 64;
    let input = vec![0u8; PITCH * ROWS];
    let mut output = vec![0u8; W * ROWS];
    // Routed before the capture begins (as torch_npu does), or once it runs.
    let route_first = config.contains("false");
    if route_first {
        assert_eq!(begin(a, p, Some(s)), OK, "{}", last_error_message());
    }
    // SAFETY: a live stream handle.
    assert_eq!(unsafe { (c.begin)(s.raw(), 0) }, 0);
    // Counts stream queries and synchronizes from here to the capture's end.
    const FAR: i32 = 1 << 30;
    emu().fail_nth("aclrtStreamQuery", FAR);
    emu().fail_nth("aclrtSynchronizeStream", FAR);
    if !route_first {
        assert_eq!(begin(a, p, Some(s)), OK, "a capturing stream is routed: {}", last_error_message());
    }
    // input (host, pitched) -> x -> tmp -> y -> output (host, packed)
    let x = malloc(a, PITCH * ROWS, s).unwrap();
    copy2d(x, PITCH, input.as_ptr() as usize, PITCH, W, ROWS, H2D, s);
    let tmp = malloc(a, 2 * MIB, s).unwrap();
    copy2d(tmp, 2048, x, PITCH, W, ROWS, D2D, s);
    let y = malloc(a, W * ROWS, s).unwrap();
    copy2d(y, W, tmp, 2048, W, ROWS, D2D, s);
    assert_eq!(free(a, tmp), OK, "{}", last_error_message());
    // A block freed in the capture serves a later allocation of the same capture.
    let tmp2 = malloc(a, 2 * MIB, s).unwrap();
    assert_eq!(tmp2, tmp, "{config}: the capture's freed block was not reused by the capture");
    copy2d(tmp2, W, y, W, W, ROWS, D2D, s);
    copy2d(output.as_mut_ptr() as usize, W, tmp2, W, W, ROWS, D2H, s);
    let mut model = null_mut();
    // SAFETY: a live stream and out-pointer.
    assert_eq!(unsafe { (c.end)(s.raw(), &mut model) }, 0);
    assert_eq!(end(a, p, Some(s)), OK);
    // The graph keeps x, y and tmp2; it is the pool's memory until pool_destroy.
    let graph: Vec<(usize, usize)> = vec![(x, PITCH * ROWS), (y, W * ROWS), (tmp2, 2 * MIB)];
    assert_eq!(free(a, tmp2), OK);
    assert_eq!(free(a, y), OK);
    let made = (FAR - emu().fault_pending("aclrtStreamQuery"), FAR - emu().fault_pending("aclrtSynchronizeStream"));
    emu().fail_nth("aclrtStreamQuery", 0);
    emu().fail_nth("aclrtSynchronizeStream", 0);
    // The capture's allocations (the pool's first on `s`), frees and reuse
    // neither queried nor synchronized any stream.
    assert_eq!(made, (0, 0), "{config}: a stream was queried or synchronized during the capture");
    let graph_bytes = pool_stats(a, p).reserved_bytes;
    assert!(graph_bytes > 0);
    for round in 0..5u8 {
        // Other streams allocate, write and free, empty_cache runs: none
        // of it may land on the graph's memory.
        let mut held = Vec::new();
        for (i, size) in [512usize, 64 * 1024, 2 * MIB, 5 * MIB, 30 * MIB].into_iter().enumerate() {
            let st = if i % 2 == 0 { other } else { s };
            let b = malloc(a, size, st).unwrap();
            for &(g, len) in &graph {
                assert!(b + size <= g || g + len <= b, "{config}: round {round}: the graph's memory was handed out");
            }
            fill(b, size, 0xee);
            held.push(b);
        }
        for b in held.drain(..).step_by(2) {
            assert_eq!(free(a, b), OK);
        }
        assert_eq!(empty_cache(a), OK, "{}", last_error_message());
        assert_eq!(pool_stats(a, p).reserved_bytes, graph_bytes, "{config}: empty_cache took the pool's memory");
        // New input each replay; the output must follow it.
        let byte = 0x10 + round;
        // SAFETY: `input` is the host buffer the graph reads; no replay runs now.
        unsafe { std::ptr::write_bytes(input.as_ptr() as *mut u8, byte, input.len()) };
        if sleeps {
            // SAFETY: a live handle.
            assert_eq!(unsafe { npualloc_sleep(a) }, OK, "{config}: {}", last_error_message());
            // SAFETY: as above.
            assert_eq!(unsafe { npualloc_wake(a) }, OK, "{config}: {}", last_error_message());
            assert_eq!(pool_stats(a, p).reserved_bytes, graph_bytes, "{config}: sleep took the graph pool's memory");
        }
        let before = c.violations();
        // SAFETY: a live model and stream.
        assert_eq!(unsafe { (c.execute)(model, exec.raw()) }, 0);
        emu().rt.on_device(dev, || emu().rt.synchronize_stream(exec)).unwrap();
        assert_eq!(c.violations(), before, "{config}: round {round}: the replay met freed, unmapped or reused memory");
        assert!(output.iter().all(|&b| b == byte), "{config}: round {round}: the replay's output is wrong");
        for b in held {
            let _ = free(a, b);
        }
        let _ = malloc(a, 4096, other).map(|b| free(a, b));
    }
    // SAFETY: a live model.
    assert_eq!(unsafe { (c.destroy)(model) }, 0);
    assert_eq!(free(a, x), OK);
    assert_eq!(pool_destroy(a, p), OK, "{}", last_error_message());
    assert_eq!(pool_stats(a, p).reserved_bytes, 0, "{config}: pool_destroy gave the graph's memory back");
    assert_eq!(destroy(a), OK, "{}", last_error_message());
    let u = emu().usage(dev);
    assert_eq!((u.malloc_count, u.mapped_bytes), (0, 0), "{config}: memory left behind");
    for st in [s, exec, other] {
        emu().destroy_stream(dev, st);
    }
}

#[test]
fn a_graph_captured_into_a_pool_replays_safely_while_others_allocate() {
    let _t = turn();
    capture_into_a_pool("expandable_segments:false", 2);
    capture_into_a_pool("expandable_segments:true", 3);
}

#[test]
fn a_graph_pool_keeps_its_cached_memory_through_sleep_and_replays_after_wake() {
    let _t = turn();
    // A kept pool (the graph pools torch_npu makes) and an offload pool:
    // the blocks freed during the capture stay mapped through sleep.
    capture_into_a_pool_sleeping("expandable_segments:false", 4, None, true);
    capture_into_a_pool_sleeping("expandable_segments:true", 5, None, true);
    capture_into_a_pool_sleeping("expandable_segments:true", 6, Some("sleep:offload"), true);
}

/// The pieces of mapped memory of pool `p` (handles, or fixed segments), by
/// address.
fn pool_pieces(a: Handle, p: u64) -> Vec<(usize, usize)> {
    mapped_pieces(a).into_iter().filter(|&(_, _, pool)| pool == p).map(|(at, n, _)| (at, n)).collect()
}

/// A pool's `alignment` and `no_split` (`npualloc_pool_create` in
/// include/npualloc.h): every block of an aligned pool starts on its boundary
/// and is a whole number of units; a no_split block is whole 2 MiB pages of
/// its own, never cut from cached memory it would share. Run again under
/// `ACLEMU_MALLOC_ALIGN=random`, where fixed segments start off their page.
fn shaped_pools(config: &str, dev: i32) {
    let a = create(config, dev).unwrap();
    let s = emu().create_stream(dev);
    for (text, key) in [("alignment:3000", "alignment"), ("alignment:4m", "alignment"), ("no_split:maybe", "no_split")]
    {
        let (st, m) = pool_create(a, Some(text)).unwrap_err();
        assert_eq!(st, npualloc_status::NPUALLOC_ERR_BAD_CONFIG, "{text}");
        assert!(m.contains(key), "{text}: {m}");
    }
    let fixed = config.contains("false");
    // Seeded sizes from 1 byte to 6 MiB, a third of the blocks freed as it goes.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ dev as u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (pool_config, unit) in [("alignment:64k", 64 << 10), ("alignment:2m", 2 * MIB), ("no_split:true", 2 * MIB)] {
        let p = pool_create(a, Some(pool_config)).unwrap();
        assert_eq!(begin(a, p, Some(s)), OK);
        let mut live = Vec::new();
        for i in 0..60 {
            let size = match next() % 3 {
                0 => 1 + (next() % 4096) as usize,
                1 => 1 + (next() % MIB as u64) as usize,
                _ => 1 + (next() % (6 * MIB) as u64) as usize,
            };
            let b = malloc(a, size, s).unwrap_or_else(|e| panic!("{pool_config}: {size} bytes: {e:?}"));
            let info = query(a, b).unwrap();
            assert_eq!(b % unit, 0, "{config} {pool_config}: block at {b:#x} for {size} bytes");
            assert_eq!(info.size as usize % unit, 0, "{config} {pool_config}: {} bytes", info.size);
            assert!(info.size as usize >= size && info.requested as usize == size);
            fill(b, info.size as usize, i as u8);
            live.push((b, info.size as usize, i as u8));
            if next() % 3 == 0 {
                let (b, _, _) = live.swap_remove((next() % live.len() as u64) as usize);
                assert_eq!(free(a, b), OK);
            }
        }
        // Every live block kept its bytes: no two shared memory.
        for &(b, len, byte) in &live {
            // SAFETY: a live block of `len` bytes of the emulator's host-memory device.
            let got = unsafe { std::slice::from_raw_parts(b as *const u8, len) };
            assert!(got.iter().all(|&v| v == byte), "{config} {pool_config}: block {b:#x} was overwritten");
        }
        // In a range a no_split block is whole handles no other block
        // touches (fixed mode: one segment per block, checked below).
        if !fixed && pool_config.starts_with("no_split") {
            let pieces = pool_pieces(a, p);
            for &(b, len, _) in &live {
                let under: Vec<_> = pieces.iter().filter(|&&(at, n)| at < b + len && b < at + n).collect();
                assert!(
                    under.iter().all(|&&(at, n)| b <= at && at + n <= b + len),
                    "{config}: a piece crosses the edge of block {b:#x}+{len:#x}: {under:x?}"
                );
                assert_eq!(under.iter().map(|&&(_, n)| n).sum::<usize>(), len, "{config}: block {b:#x} {under:x?}");
            }
        }
        for (b, _, _) in live {
            assert_eq!(free(a, b), OK);
        }
        assert_eq!(end(a, p, Some(s)), OK);
        assert_eq!(pool_destroy(a, p), OK);
    }
    // no_split: each block is a segment (fixed) or handles (a range) of its
    // own, exactly its pages, and a smaller request takes a cached block
    // whole.
    let p = pool_create(a, Some("no_split:true")).unwrap();
    assert_eq!(begin(a, p, Some(s)), OK);
    let five = malloc(a, 5 * MIB, s).unwrap();
    let three = malloc(a, 3 * MIB, s).unwrap();
    let one = malloc(a, MIB, s).unwrap();
    let sizes: Vec<u64> = [five, three, one].iter().map(|&b| query(a, b).unwrap().size).collect();
    assert_eq!(sizes, [6 * MIB as u64, 4 * MIB as u64, 2 * MIB as u64]);
    if fixed {
        // Blocks tile exactly their segments (a segment the runtime placed
        // off a 2 MiB boundary also holds slack before its first block).
        let st = pool_stats(a, p);
        assert_eq!((st.segments, st.address_space_bytes), (3, 12 * MIB as u64), "one segment per block: {st:?}");
    }
    assert_eq!(free(a, three), OK);
    let again = malloc(a, MIB, s).unwrap();
    assert_eq!((again, query(a, again).unwrap().size), (three, 4 * MIB as u64), "taken whole");
    let mut live = vec![five, again, one];
    if !fixed {
        // In a range, freed neighbours coalesce: a request takes each
        // handle it touches whole and leaves the others free; fresh handles
        // are exactly a block's pages.
        assert_eq!(pool_pieces(a, p), [(five, 6 * MIB), (three, 4 * MIB), (one, 2 * MIB)]);
        assert_eq!(free(a, again), OK);
        assert_eq!(free(a, one), OK);
        let mid = malloc(a, 3 * MIB, s).unwrap();
        assert_eq!((mid, query(a, mid).unwrap().size), (three, 4 * MIB as u64), "exactly one handle");
        let next = malloc(a, 1, s).unwrap();
        assert_eq!((next, query(a, next).unwrap().size), (one, 2 * MIB as u64), "the other handle");
        let tail = malloc(a, 5 * MIB, s).unwrap();
        assert_eq!(query(a, tail).unwrap().size, 6 * MIB as u64);
        assert_eq!(pool_pieces(a, p).last(), Some(&(tail, 6 * MIB)), "a fresh handle of its own");
        for b in [mid, next] {
            assert_eq!(free(a, b), OK);
        }
        let spans = malloc(a, 4 * MIB + 1, s).unwrap();
        assert_eq!((spans, query(a, spans).unwrap().size), (three, 6 * MIB as u64), "two handles, whole");
        // A request that ends inside a handle takes it to its end.
        assert_eq!(free(a, five), OK);
        let ext = malloc(a, 3 * MIB, s).unwrap();
        assert_eq!((ext, query(a, ext).unwrap().size), (five, 6 * MIB as u64), "to the end of its handle");
        live = vec![ext, spans, tail];
    }
    for b in live {
        assert_eq!(free(a, b), OK);
    }
    assert_eq!(end(a, p, Some(s)), OK);
    assert_eq!(pool_destroy(a, p), OK);
    // A default-pool request that runs out of memory is served from a
    // use_on_oom pool's cache in that pool's shape, and the pool keeps it
    // (a no_split pool's block in a range: each handle it touches, whole;
    // on this small device handles are 4 MiB, and 29 MiB ends inside one).
    for (pool_config, unit, odd) in [
        ("alignment:64k,use_on_oom:true", 64 << 10, 30 * MIB + 1000),
        ("no_split:true,use_on_oom:true", 2 * MIB, 29 * MIB),
    ] {
        emu().set_capacity(dev, (64 * MIB) as u64);
        let p = pool_create(a, Some(pool_config)).unwrap();
        assert_eq!(begin(a, p, Some(s)), OK);
        let cached = malloc(a, 40 * MIB, s).unwrap();
        assert_eq!(end(a, p, Some(s)), OK);
        assert_eq!(free(a, cached), OK);
        let served = malloc(a, odd, s).unwrap();
        let info = query(a, served).unwrap();
        assert_eq!(pool_stats(a, p).active_blocks, 1, "{config} {pool_config}: served as the pool's block");
        assert_eq!((served % unit, info.size as usize % unit), (0, 0), "{config} {pool_config}: {info:?}");
        assert_eq!(begin(a, p, Some(s)), OK);
        let next = malloc(a, 1000, s).unwrap();
        assert_eq!(next % unit, 0, "{config} {pool_config}: the pool's next block at {next:#x}");
        assert_eq!(end(a, p, Some(s)), OK);
        for b in [served, next] {
            assert_eq!(free(a, b), OK);
        }
        assert_eq!(pool_destroy(a, p), OK);
        emu().set_capacity(dev, 8 << 30);
    }
    // The default pool is untouched by it all.
    let plain = malloc(a, 1000, s).unwrap();
    assert_eq!(query(a, plain).unwrap().size, 1024);
    assert_eq!(free(a, plain), OK);
    assert_eq!(destroy(a), OK);
    emu().destroy_stream(dev, s);
    assert!(emu().usage(dev).is_clean(), "{config}: device {dev} left {:?}", emu().usage(dev));
}

#[test]
fn aligned_and_unsplit_pools_hand_out_registrable_blocks() {
    let _t = turn();
    shaped_pools("expandable_segments:false", 1);
    shaped_pools("expandable_segments:true", 7);
}

/// With 20 MiB pages a no_split block is at least one page: the page's
/// handle is the block's alone.
#[test]
fn unsplit_blocks_take_whole_large_pages() {
    let _t = turn();
    let a = create("expandable_segments:true,page_size:20m", 1).unwrap();
    let s = emu().create_stream(1);
    let p = pool_create(a, Some("no_split:true")).unwrap();
    assert_eq!(begin(a, p, Some(s)), OK);
    let page = 20 * MIB;
    let (x, y, z) = (malloc(a, MIB, s).unwrap(), malloc(a, 21 * MIB, s).unwrap(), malloc(a, 1, s).unwrap());
    let sizes: Vec<usize> = [x, y, z].iter().map(|&b| query(a, b).unwrap().size as usize).collect();
    assert_eq!(sizes, [page, 2 * page, page]);
    assert_eq!(pool_pieces(a, p), [(x, page), (y, 2 * page), (z, page)]);
    assert_eq!(free(a, x), OK);
    let again = malloc(a, 3 * MIB, s).unwrap();
    assert_eq!((again, query(a, again).unwrap().size as usize), (x, page));
    for b in [again, y, z] {
        assert_eq!(free(a, b), OK);
    }
    assert_eq!(end(a, p, Some(s)), OK);
    assert_eq!(pool_destroy(a, p), OK);
    assert_eq!(destroy(a), OK);
}
