//! The torch_npu pluggable hooks switch devices without touching the
//! host's reference counts or context: each device's allocator takes one
//! `aclrtSetDevice` reference when it is made (it lives for the process),
//! and malloc/free on two devices from one thread change nothing after
//! that. Pluggable allocators are process-wide, so this binary has one test.

use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::pluggable::*;
use npualloc::runtime::Runtime;
use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::ptr::null_mut;

fn emulator_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("libascendcl.so");
    assert!(path.is_file(), "the ACL emulator {} is not built; run `cargo build --workspace`", path.display());
    path
}

fn emu_fn(name: &std::ffi::CStr) -> *mut c_void {
    let c = CString::new(emulator_path().to_str().unwrap()).unwrap();
    // SAFETY: valid C string; the library is already loaded and never closed.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!handle.is_null(), "the emulator is not loaded");
    // SAFETY: live handle, valid C string.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!p.is_null(), "the emulator lacks {name:?}");
    p
}

fn refs() -> [i64; 2] {
    // SAFETY: the signature emu/include/acl_emu.h declares.
    let f = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn(i32) -> i64>(emu_fn(c"aclemu_device_refs")) };
    [f(0), f(1)]
}

#[test]
fn pluggable_hooks_leave_reference_counts_and_the_host_context_alone() {
    let path = emulator_path();
    std::env::set_var("NPUALLOC_ACL_LIBRARY", &path);
    std::env::remove_var("NPUALLOC_CONF");
    let rt = Runtime::load(path.to_str()).expect("load the emulator");
    rt.set_device(0).unwrap();
    let host = (rt.current_device(), rt.current_context());
    let start = refs();
    npualloc_pluggable_init(2);
    // SAFETY: (all calls below) arguments are what torch_npu would pass.
    unsafe {
        // The first call on each device makes its allocator: one reference each.
        for device in [0, 1] {
            let p = npualloc_pluggable_malloc(4096, device, null_mut());
            assert!(!p.is_null(), "{}", last_error_message());
            npualloc_pluggable_free(p, 4096, device, null_mut());
        }
        assert_eq!(refs(), [start[0] + 1, start[1] + 1], "one reference per device allocator");
        assert_eq!((rt.current_device(), rt.current_context()), host);
        let made = refs();
        for round in 0..20usize {
            for device in [1, 0] {
                let size = (round + 1) << 20;
                let p = npualloc_pluggable_malloc(size, device, null_mut());
                assert!(!p.is_null(), "{}", last_error_message());
                npualloc_pluggable_free(p, size, device, null_mut());
            }
            npualloc_pluggable_empty_cache(true);
        }
        assert_eq!(refs(), made, "malloc/free/empty_cache changed reference counts");
        assert_eq!((rt.current_device(), rt.current_context()), host, "the host's device or context changed");
    }
}
