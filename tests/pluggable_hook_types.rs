//! torch_npu's hook types
//! (docs/runtime-behaviour.md "torch_npu's pluggable hooks"): the reset-peak hook is called as `void(c10::DeviceIndex)`, an
//! `int8_t`, so only the argument's low byte is meaningful; a memory
//! fraction of 0 is accepted, as torch_npu accepts it. The allocators are
//! process-wide, so everything runs in one test of its own binary.

use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::pluggable::*;
use std::ffi::c_int;
use std::path::PathBuf;
use std::ptr::null_mut;

fn emulator_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("libascendcl.so");
    assert!(path.is_file(), "the ACL emulator {} is not built; run `cargo build --workspace`", path.display());
    path
}

fn peak(device: c_int) -> u64 {
    stats(device).unwrap().expect("the allocator exists").allocated_bytes_peak
}

#[test]
fn hooks_take_torch_npu_argument_types() {
    std::env::set_var("NPUALLOC_ACL_LIBRARY", emulator_path());
    std::env::remove_var("NPUALLOC_CONF");
    npualloc_pluggable_init(2);

    // SAFETY: arguments are what torch_npu passes; the transmutes below only
    // change how the argument register is filled, as a caller passing an
    // int8_t may leave it.
    unsafe {
        for device in [0, 1] {
            let p = npualloc_pluggable_malloc(4096, device, null_mut());
            assert!(!p.is_null(), "{}", last_error_message());
            npualloc_pluggable_free(p, 4096, device, null_mut());
            assert!(peak(device) > 0);
        }

        // The reset-peak hook as an int8_t function, the type torch_npu uses.
        let as_i8: extern "C" fn(i8) = std::mem::transmute(npualloc_pluggable_reset_peak_stats as extern "C" fn(c_int));
        as_i8(1);
        assert_eq!(last_error_message(), "");
        assert_eq!(peak(1), 0);
        assert!(peak(0) > 0, "only device 1 was reset");

        // Garbage above the low byte, as an int8_t caller may leave it: the
        // hook reads device 0.
        let raw = npualloc_pluggable_reset_peak_stats as extern "C" fn(c_int);
        raw(0x5a5a_5a00_u32 as c_int);
        assert_eq!(last_error_message(), "", "device 0 with garbage in the upper bits");
        assert_eq!(peak(0), 0);

        // A bad DeviceIndex is still refused: -1, with garbage above it.
        raw(0x1234_56ff_u32 as c_int);
        assert!(last_error_message().contains("-1"), "{}", last_error_message());
        as_i8(5);
        assert!(last_error_message().contains("device 5"), "{}", last_error_message());

        // Memory fraction 0, which torch_npu accepts: nothing more may be
        // reserved, so a request the cache cannot serve runs out of memory.
        npualloc_pluggable_empty_cache(true);
        npualloc_pluggable_set_memory_fraction(0.0, 0);
        assert_eq!(last_error_message(), "");
        assert!(npualloc_pluggable_malloc(1 << 20, 0, null_mut()).is_null());
        assert!(last_error_message().contains("memory fraction"), "{}", last_error_message());
        npualloc_pluggable_set_memory_fraction(1.0, 0);
        let p = npualloc_pluggable_malloc(1 << 20, 0, null_mut());
        assert!(!p.is_null(), "{}", last_error_message());
        npualloc_pluggable_free(p, 1 << 20, 0, null_mut());
        // Outside [0, 1] is still refused.
        for bad in [-0.01, 1.01, f64::NAN] {
            npualloc_pluggable_set_memory_fraction(bad, 0);
            assert!(last_error_message().contains("fraction"), "{bad}: {}", last_error_message());
        }
    }
}
