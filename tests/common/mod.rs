//! Shared by the reliability tests: the emulator's `libascendcl.so` (built by
//! `cargo build --workspace`) loaded the way the allocator loads it, its
//! `aclemu_*` controls resolved from that same library (the test binaries do
//! not link the emulator, so there is one instance and one device table), and
//! small wrappers over the C API that tests call directly.
#![allow(dead_code)]

pub mod sleep_pools;

use npualloc::ffi::allocator::*;
use npualloc::ffi::handle::npualloc_allocator;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status;
use npualloc::ffi::stats::{npualloc_get_stats, npualloc_stats};
use npualloc::runtime::{Runtime, Stream};
use std::ffi::{c_char, c_void, CString};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// `target/<profile>/libascendcl.so`: integration tests run from `target/<profile>/deps/`.
pub fn emulator_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("libascendcl.so");
    assert!(
        path.is_file(),
        "the ACL emulator {} is not built; run `cargo build --workspace` (add --release for release tests) \
         before `cargo test`",
        path.display()
    );
    path
}

/// `aclemu_usage` from `emu/include/acl_emu.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub malloc_bytes: u64,
    pub malloc_count: u64,
    pub physical_bytes: u64,
    pub physical_count: u64,
    pub mapped_bytes: u64,
    pub reserved_ranges: u64,
    pub streams: u64,
    pub events: u64,
    pub descs: u64,
    pub syncs: u64,
}

impl Usage {
    /// Nothing live: no memory, handles, mappings, ranges, streams, events or descs.
    pub fn is_clean(&self) -> bool {
        let Usage {
            malloc_bytes,
            malloc_count,
            physical_bytes,
            physical_count,
            mapped_bytes,
            reserved_ranges,
            streams,
            events,
            descs,
            syncs: _,
        } = *self;
        [
            malloc_bytes,
            malloc_count,
            physical_bytes,
            physical_count,
            mapped_bytes,
            reserved_ranges,
            streams,
            events,
            descs,
        ]
        .iter()
        .all(|&n| n == 0)
    }
}

/// The loaded emulator: the runtime the allocator uses plus the test controls.
pub struct Emu {
    pub rt: Arc<Runtime>,
    fail_nth: unsafe extern "C" fn(*const c_char, i32) -> i32,
    fault_pending: unsafe extern "C" fn(*const c_char) -> i32,
    get_usage: unsafe extern "C" fn(i32, *mut Usage) -> i32,
    set_memory: unsafe extern "C" fn(i32, u64) -> i32,
    hold: unsafe extern "C" fn(*mut c_void) -> i32,
    release: unsafe extern "C" fn(*mut c_void) -> i32,
}

/// Loads the emulator once and points `NPUALLOC_ACL_LIBRARY` at it, so every
/// allocator created with a NULL or `acl_library`-less config uses it.
pub fn emu() -> &'static Emu {
    static EMU: OnceLock<Emu> = OnceLock::new();
    EMU.get_or_init(|| {
        let path = emulator_path();
        let path_str = path.to_str().expect("UTF-8 path").to_string();
        std::env::set_var("NPUALLOC_ACL_LIBRARY", &path_str);
        std::env::remove_var("NPUALLOC_CONF");
        let rt = Runtime::load(Some(&path_str)).expect("load the emulator");
        let c_path = CString::new(path_str).unwrap();
        // SAFETY: valid C string; the library is already loaded (the same
        // instance Runtime::load opened) and is never closed.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!handle.is_null(), "the emulator is not loaded");
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: live handle, valid C string.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            assert!(!p.is_null(), "the emulator lacks {name:?}");
            p
        };
        type StreamFn = unsafe extern "C" fn(*mut c_void) -> i32;
        // SAFETY: the signatures are the ones emu/include/acl_emu.h declares.
        unsafe {
            Emu {
                rt,
                fail_nth: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char, i32) -> i32>(sym(
                    c"aclemu_fail_nth",
                )),
                fault_pending: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char) -> i32>(sym(
                    c"aclemu_fault_pending",
                )),
                get_usage: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(i32, *mut Usage) -> i32>(sym(
                    c"aclemu_get_usage",
                )),
                set_memory: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(i32, u64) -> i32>(sym(
                    c"aclemu_set_device_memory",
                )),
                hold: std::mem::transmute::<*mut c_void, StreamFn>(sym(c"aclemu_stream_hold")),
                release: std::mem::transmute::<*mut c_void, StreamFn>(sym(c"aclemu_stream_release")),
            }
        }
    })
}

impl Emu {
    /// Arms (n >= 1) or disarms (0) a failure of the n-th next call of `function`.
    pub fn fail_nth(&self, function: &str, n: i32) {
        let c = CString::new(function).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { (self.fail_nth)(c.as_ptr(), n) }, 0, "aclemu_fail_nth({function}, {n})");
    }

    /// Calls of `function` left until its armed failure (0: fired or unarmed).
    pub fn fault_pending(&self, function: &str) -> i32 {
        let c = CString::new(function).unwrap();
        // SAFETY: valid C string.
        let n = unsafe { (self.fault_pending)(c.as_ptr()) };
        assert!(n >= 0, "aclemu_fault_pending({function}) = {n}");
        n
    }

    pub fn usage(&self, device: i32) -> Usage {
        let mut u = Usage::default();
        // SAFETY: valid out-pointer of the header's layout.
        assert_eq!(unsafe { (self.get_usage)(device, &mut u) }, 0, "aclemu_get_usage({device})");
        u
    }

    pub fn set_capacity(&self, device: i32, bytes: u64) {
        // SAFETY: plain values.
        assert_eq!(unsafe { (self.set_memory)(device, bytes) }, 0, "aclemu_set_device_memory({device})");
    }

    pub fn hold(&self, s: Stream) {
        // SAFETY: a stream handle (or NULL).
        assert_eq!(unsafe { (self.hold)(s.raw()) }, 0);
    }

    pub fn release(&self, s: Stream) {
        // SAFETY: a stream handle (or NULL).
        assert_eq!(unsafe { (self.release)(s.raw()) }, 0);
    }

    /// A stream of `device`'s primary context, made as a host makes one:
    /// `aclrtSetDevice(device)` (a reference the test keeps, as a host
    /// does until its reset), then the thread's context put back.
    pub fn create_stream(&self, device: i32) -> Stream {
        let rt = &self.rt;
        let saved = rt.current_context();
        rt.set_device(device).expect("set the device");
        let s = rt.create_stream().expect("create a stream");
        if let Some(ctx) = saved {
            let set = rt.api().aclrtSetCurrentContext.expect("the emulator has aclrtSetCurrentContext");
            // SAFETY: a context handle the runtime gave out.
            assert_eq!(unsafe { set(ctx.raw()) }, 0);
        }
        s
    }

    pub fn destroy_stream(&self, device: i32, s: Stream) {
        let rt = &self.rt;
        rt.on_device(device, || rt.destroy_stream(s)).expect("destroy a stream")
    }
}

/// A C-API allocator handle (raw; tests destroy it explicitly).
pub type Handle = *mut npualloc_allocator;

pub fn create(config: &str, device: i32) -> Result<Handle, (npualloc_status, String)> {
    emu();
    let c = CString::new(config).unwrap();
    let mut a: Handle = std::ptr::null_mut();
    // SAFETY: valid C string and out-pointer.
    match unsafe { npualloc_create(c.as_ptr(), device, &mut a) } {
        npualloc_status::NPUALLOC_OK => Ok(a),
        st => Err((st, last_error_message())),
    }
}

pub fn malloc(a: Handle, size: usize, stream: Stream) -> Result<usize, (npualloc_status, String)> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live handle and a valid out-pointer.
    match unsafe { npualloc_malloc(a, size, stream.raw(), &mut p) } {
        npualloc_status::NPUALLOC_OK => Ok(p as usize),
        st => Err((st, last_error_message())),
    }
}

pub fn free(a: Handle, p: usize) -> npualloc_status {
    // SAFETY: a live handle; the pointer is only looked up.
    unsafe { npualloc_free(a, p as *mut c_void) }
}

pub fn record_stream(a: Handle, p: usize, s: Stream) -> npualloc_status {
    // SAFETY: as in `free`.
    unsafe { npualloc_record_stream(a, p as *mut c_void, s.raw()) }
}

pub fn query(a: Handle, p: usize) -> Result<npualloc_block_info, npualloc_status> {
    let mut info = std::mem::MaybeUninit::<npualloc_block_info>::uninit();
    // SAFETY: a live handle and a valid out-pointer.
    match unsafe { npualloc_query(a, p as *const c_void, info.as_mut_ptr()) } {
        // SAFETY: written on success.
        npualloc_status::NPUALLOC_OK => Ok(unsafe { info.assume_init() }),
        st => Err(st),
    }
}

pub fn empty_cache(a: Handle) -> npualloc_status {
    // SAFETY: a live handle.
    unsafe { npualloc_empty_cache(a) }
}

pub fn stats(a: Handle) -> npualloc_stats {
    let mut s = npualloc_stats { struct_size: std::mem::size_of::<npualloc_stats>() as u32, ..Default::default() };
    // SAFETY: a live handle and a valid out-pointer.
    let st = unsafe { npualloc_get_stats(a, &mut s) };
    assert_eq!(st, npualloc_status::NPUALLOC_OK, "get_stats: {}", last_error_message());
    s
}

pub fn destroy(a: Handle) -> npualloc_status {
    // SAFETY: the handle is handed over.
    unsafe { npualloc_destroy(a) }
}

/// Every piece of mapped memory the allocator holds, as
/// `npualloc_for_each_segment` lists it (MAP events): address, bytes and
/// pool, by address.
pub fn mapped_pieces(a: Handle) -> Vec<(usize, usize, u64)> {
    use npualloc::ffi::hooks::{npualloc_for_each_segment, npualloc_segment_event};
    unsafe extern "C" fn seen(
        user: *mut c_void,
        _device: i32,
        event: i32,
        addr: *mut c_void,
        size: usize,
        _handle: *mut c_void,
        pool: u64,
    ) {
        // SAFETY: `user` is the vector below, alive for the call.
        let pieces = unsafe { &mut *user.cast::<Vec<(usize, usize, u64)>>() };
        if event == npualloc_segment_event::NPUALLOC_SEGMENT_MAP as i32 {
            pieces.push((addr as usize, size, pool));
        }
    }
    let mut pieces: Vec<(usize, usize, u64)> = Vec::new();
    // SAFETY: a live handle; `pieces` outlives the call.
    let st = unsafe { npualloc_for_each_segment(a, Some(seen), (&mut pieces as *mut Vec<_>).cast()) };
    assert_eq!(st, npualloc_status::NPUALLOC_OK, "for_each_segment: {}", last_error_message());
    pieces.sort_unstable();
    pieces
}
