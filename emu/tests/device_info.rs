//! aclrtGetDeviceCount, aclrtGetSocName and the CANN version queries
//! (docs/runtime-behaviour.md "Device facts").

mod common;
use ascendcl::*;
use common::*;
use std::ffi::CStr;
use std::ptr::null_mut;

const INVALID_FILE: i32 = 100_003;

#[test]
fn the_device_count_needs_no_device_and_sets_none() {
    on_fresh_thread(|| {
        let refs: Vec<i64> = (0..DEVICES as i32).map(|d| aclemu_device_refs(d)).collect();
        let mut n = 0u32;
        // SAFETY: a live out-pointer, then NULL.
        unsafe {
            assert_eq!(aclrtGetDeviceCount(&mut n), 0);
            assert_eq!(aclrtGetDeviceCount(null_mut()), INVALID_PARAM);
            let mut d = -1;
            assert_eq!(aclrtGetDevice(&mut d), RT_CONTEXT_NULL, "the count set a device");
        }
        assert_eq!(n as usize, DEVICES);
        let after: Vec<i64> = (0..DEVICES as i32).map(|d| aclemu_device_refs(d)).collect();
        assert_eq!(after, refs, "the count took device references");
    });
}

#[test]
fn the_soc_name_is_the_emulated_cards() {
    // SAFETY: no arguments; the result is NULL or a static C string.
    let name = unsafe { aclrtGetSocName() };
    assert!(!name.is_null());
    // SAFETY: non-NULL and NUL-terminated for the life of the process.
    let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap();
    let expected = std::env::var("ACLEMU_SOC_NAME").ok().filter(|n| !n.trim().is_empty());
    assert_eq!(name, expected.as_deref().unwrap_or("Ascend910B1"));
    // The same pointer every time: callers may keep it.
    // SAFETY: as above.
    assert_eq!(unsafe { aclrtGetSocName() }, unsafe { aclrtGetSocName() });
}

#[test]
fn no_cann_package_is_installed() {
    let mut version = [0u8; 640];
    let mut text = [0u8; 128];
    let p = version.as_mut_ptr().cast();
    // SAFETY: buffers larger than aclCANNPackageVersion and a version string.
    unsafe {
        for name in 0..=7 {
            assert_eq!(aclsysGetCANNVersion(name, p), INVALID_FILE);
        }
        assert_eq!(aclsysGetCANNVersion(8, p), INVALID_PARAM);
        assert_eq!(aclsysGetCANNVersion(0, null_mut()), INVALID_PARAM);
        let pkg = c"runtime".as_ptr().cast_mut();
        assert_eq!(aclsysGetVersionStr(pkg, text.as_mut_ptr().cast()), INVALID_FILE);
        assert_eq!(aclsysGetVersionStr(null_mut(), text.as_mut_ptr().cast()), INVALID_PARAM);
        assert_eq!(aclsysGetVersionStr(pkg, null_mut()), INVALID_PARAM);
    }
    assert!(version.iter().chain(text.iter()).all(|&b| b == 0), "a refused query wrote");
}
