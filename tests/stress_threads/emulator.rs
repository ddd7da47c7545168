//! The emulator's test controls this test uses, by name from the emulator
//! `common::emu` loaded.

use super::common::{emu, emulator_path};
use std::ffi::{c_void, CStr, CString};

/// An emulator control by name, from the emulator `common::emu` loaded.
pub(crate) fn emulator_symbol(name: &CStr) -> *mut c_void {
    emu();
    let path = CString::new(emulator_path().to_str().expect("UTF-8 path")).unwrap();
    // SAFETY: a valid C string; RTLD_NOLOAD returns the loaded instance.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!handle.is_null(), "the emulator is not loaded");
    // SAFETY: a live handle and a valid C string.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!sym.is_null(), "the emulator lacks {name:?}");
    sym
}

/// `aclemu_violations`: misuse of memory under queued work seen so far.
pub(crate) fn violations() -> i64 {
    // SAFETY: the signature acl_emu.h declares.
    let f: unsafe extern "C" fn() -> i64 = unsafe { std::mem::transmute(emulator_symbol(c"aclemu_violations")) };
    // SAFETY: no arguments.
    unsafe { f() }
}

/// `aclemu_set_event_lag`.
pub(crate) fn set_event_lag(queries: u32) {
    // SAFETY: the signature acl_emu.h declares.
    let f: unsafe extern "C" fn(u32) -> i32 = unsafe { std::mem::transmute(emulator_symbol(c"aclemu_set_event_lag")) };
    // SAFETY: a plain value.
    assert_eq!(unsafe { f(queries) }, 0);
}
