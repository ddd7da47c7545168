//! `npualloc_pluggable_allocator`: the pluggable entry points' process-wide
//! allocator as a C handle, with the C API's erase_stream and before-release
//! hook on it, on the ACL emulator. Process-wide state: one test.

use npualloc::ffi::allocator::{npualloc_destroy, npualloc_erase_stream, npualloc_record_stream};
use npualloc::ffi::handle::npualloc_allocator;
use npualloc::ffi::hooks::{npualloc_set_before_release, npualloc_set_oom_observer};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::pluggable::*;
use npualloc::ffi::stats::{npualloc_get_stats, npualloc_stats};
use npualloc::ffi::status::npualloc_status::*;
use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};

fn emulator_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("libascendcl.so");
    assert!(path.is_file(), "the ACL emulator {} is not built; run `cargo build --workspace`", path.display());
    path
}

static CALLS: AtomicU32 = AtomicU32::new(0);
static REFUSED: AtomicU32 = AtomicU32::new(0);
static REPORT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

unsafe extern "C" fn refused(_: *mut c_void, device: i32, requested: usize, report: *const std::ffi::c_char) {
    // SAFETY: the report is a C string valid during the call.
    let text = unsafe { std::ffi::CStr::from_ptr(report) }.to_string_lossy().into_owned();
    assert_eq!((device, requested), (0, 1 << 40));
    *REPORT.lock().unwrap() = text;
    REFUSED.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn count(user: *mut c_void, device: i32) {
    assert_eq!(user as usize, 0x1234, "the hook gets its user pointer");
    assert_eq!(device, 0);
    CALLS.fetch_add(1, Ordering::SeqCst);
}

fn stats(a: *mut npualloc_allocator) -> npualloc_stats {
    // SAFETY: all zeroes is a valid npualloc_stats (integers only).
    let mut s: npualloc_stats = unsafe { std::mem::zeroed() };
    s.struct_size = std::mem::size_of::<npualloc_stats>() as u32;
    // SAFETY: a is a live handle, s a valid out-struct.
    assert_eq!(unsafe { npualloc_get_stats(a, &mut s) }, NPUALLOC_OK, "{}", last_error_message());
    s
}

#[test]
fn the_pluggable_allocator_as_a_handle() {
    std::env::set_var("NPUALLOC_ACL_LIBRARY", emulator_path());
    std::env::set_var("NPUALLOC_CONF", "expandable_segments:false");
    npualloc_pluggable_init(2);
    // SAFETY: (all calls below) the arguments are valid or deliberately bad
    // values each function checks.
    unsafe {
        let mut a: *mut npualloc_allocator = null_mut();
        assert_eq!(npualloc_pluggable_allocator(0, null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_pluggable_allocator(2, &mut a), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(a.is_null(), "nothing written on failure");
        assert_eq!(npualloc_pluggable_allocator(0, &mut a), NPUALLOC_OK, "{}", last_error_message());
        let mut again: *mut npualloc_allocator = null_mut();
        assert_eq!(npualloc_pluggable_allocator(0, &mut again), NPUALLOC_OK);
        assert_eq!(a, again, "one allocator per device");

        // The handle sees what the pluggable entry points allocate.
        let p = npualloc_pluggable_malloc(1 << 20, 0, null_mut());
        assert!(!p.is_null(), "{}", last_error_message());
        assert_eq!(stats(a).active_blocks, 1);

        // erase_stream: never-recorded streams are fine, foreign pointers refused.
        assert_eq!(npualloc_erase_stream(a, p, null_mut()), NPUALLOC_OK);
        assert_eq!(npualloc_record_stream(a, p, null_mut()), NPUALLOC_OK);
        assert_eq!(npualloc_erase_stream(a, p.cast::<u8>().add(512).cast(), null_mut()), NPUALLOC_ERR_UNKNOWN_POINTER);
        assert!(last_error_message().contains("erase_stream"), "{}", last_error_message());
        assert_eq!(npualloc_erase_stream(null_mut(), p, null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT);

        // destroy refuses it, and it keeps working.
        assert_eq!(npualloc_destroy(a), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().contains("process-wide"), "{}", last_error_message());
        assert_eq!(stats(a).active_blocks, 1);

        // The before-release hook runs at torch_npu's empty_cache.
        assert_eq!(npualloc_set_before_release(null_mut(), Some(count), null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_set_before_release(a, Some(count), 0x1234 as *mut c_void), NPUALLOC_OK);
        npualloc_pluggable_free(p, 1 << 20, 0, null_mut());
        npualloc_pluggable_empty_cache(true);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        assert_eq!(stats(a).reserved_bytes, 0);
        assert_eq!(npualloc_set_before_release(a, None, null_mut()), NPUALLOC_OK);
        npualloc_pluggable_empty_cache(true);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1, "a removed hook is not called");

        // The out-of-memory observer: once per refusal, with its report.
        assert_eq!(npualloc_set_oom_observer(null_mut(), Some(refused), null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(npualloc_set_oom_observer(a, Some(refused), null_mut()), NPUALLOC_OK);
        assert!(npualloc_pluggable_malloc(1 << 40, 0, null_mut()).is_null());
        assert_eq!(REFUSED.load(Ordering::SeqCst), 1);
        let report = REPORT.lock().unwrap().clone();
        assert!(report.starts_with("cannot allocate"), "{report}");
        assert!(last_error_message().contains(&report), "the last error carries the same report");
        assert_eq!(npualloc_set_oom_observer(a, None, null_mut()), NPUALLOC_OK);
        assert!(npualloc_pluggable_malloc(1 << 40, 0, null_mut()).is_null());
        assert_eq!(REFUSED.load(Ordering::SeqCst), 1, "a removed observer is not called");
    }
}
