//! The torch_npu pluggable entry points called directly, the way torch_npu
//! calls them, on the ACL emulator (built by `cargo build --workspace`). The
//! allocators are process-wide, so everything runs in one test.

use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::pluggable::*;
use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr::null_mut;

/// The emulator next to this test binary (`target/<profile>/deps/..`).
fn emulator_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("libascendcl.so");
    assert!(path.is_file(), "the ACL emulator {} is not built; run `cargo build --workspace`", path.display());
    path
}

#[test]
fn pluggable_hooks_on_the_emulator() {
    // Set before npualloc reads the environment (this is the binary's only test).
    std::env::set_var("NPUALLOC_ACL_LIBRARY", emulator_path());
    std::env::remove_var("NPUALLOC_CONF");
    npualloc_pluggable_init(2);
    assert_eq!(last_error_message(), "");

    // A refused fraction changes nothing: device 1's allocator is not made.
    for bad in [1.5, -0.25, f64::NAN] {
        npualloc_pluggable_set_memory_fraction(bad, 1);
        assert!(last_error_message().contains("fraction"), "{bad}: {}", last_error_message());
        assert!(stats(1).unwrap().is_none(), "set_memory_fraction({bad}) created device 1's allocator");
    }

    // SAFETY: (all calls below) arguments are what torch_npu would pass.
    unsafe {
        let sizes = [512usize, 1, 4096, 1 << 20, 3 << 20, 100_000];
        let mut live: Vec<(*mut c_void, usize)> = Vec::new();
        for &size in &sizes {
            let p = npualloc_pluggable_malloc(size, 0, null_mut());
            assert!(!p.is_null(), "malloc({size}): {}", last_error_message());
            assert_eq!(p as usize % 512, 0);
            live.push((p, size));
        }
        // base_alloc reports the segment holding any address of a live block.
        for &(p, size) in &live {
            let mut seg = 0usize;
            let base = npualloc_pluggable_base_alloc(p.cast::<u8>().add(size - 1).cast(), &mut seg);
            assert!(!base.is_null(), "{}", last_error_message());
            assert!((base as usize) <= p as usize && p as usize + size <= base as usize + seg);
        }
        let first = stats(0).unwrap().expect("device 0 has an allocator");
        assert_eq!(first.active_blocks, sizes.len() as u64);

        // Device 1 is a separate allocator: device 0's pointers are foreign there.
        let q = npualloc_pluggable_malloc(4096, 1, null_mut());
        assert!(!q.is_null(), "{}", last_error_message());
        npualloc_pluggable_free(live[0].0, live[0].1, 1, null_mut());
        assert!(last_error_message().contains("unknown pointer"), "{}", last_error_message());
        assert_eq!(stats(0).unwrap().unwrap().active_blocks, sizes.len() as u64);

        // Outside the init'ed device count.
        assert!(npualloc_pluggable_malloc(64, 2, null_mut()).is_null());
        assert!(last_error_message().contains("device 2 is not in 0 to 1"), "{}", last_error_message());

        for &(p, size) in &live {
            npualloc_pluggable_free(p, size, 0, null_mut());
            assert_eq!(last_error_message(), "");
        }
        npualloc_pluggable_free(live[1].0, live[1].1, 0, null_mut());
        assert!(last_error_message().contains("unknown pointer"), "{}", last_error_message());
        let mut seg = 0usize;
        assert!(npualloc_pluggable_base_alloc(live[1].0, &mut seg).is_null());
        npualloc_pluggable_free(q, 4096, 1, null_mut());
        assert_eq!(last_error_message(), "");

        let s = stats(0).unwrap().unwrap();
        assert_eq!((s.allocated_bytes, s.num_allocs, s.num_frees), (0, 6, 6));
        assert!(s.allocated_bytes_peak > 0);
        npualloc_pluggable_reset_peak_stats(0);
        assert_eq!(stats(0).unwrap().unwrap().allocated_bytes_peak, 0);

        npualloc_pluggable_empty_cache(true);
        assert_eq!(last_error_message(), "");
        assert_eq!(stats(0).unwrap().unwrap().reserved_bytes, 0);

        npualloc_pluggable_set_memory_fraction(0.5, 0);
        assert_eq!(last_error_message(), "");
        npualloc_pluggable_set_memory_fraction(-0.5, 0);
        assert!(last_error_message().contains("fraction"));
        assert!(npualloc_pluggable_malloc(0, 0, null_mut()).is_null());
        assert_eq!(last_error_message(), "", "size 0 is not an error");

        // Memory history of device 0's allocator, as torch users turn it on.
        use npualloc::ffi::history::*;
        use npualloc::ffi::npualloc_status::*;
        assert_eq!(npualloc_pluggable_record_history(0, 100), NPUALLOC_OK);
        let p = npualloc_pluggable_malloc(5000, 0, null_mut());
        assert!(!p.is_null());
        npualloc_pluggable_free(p, 5000, 0, null_mut());
        let mut json: *mut std::ffi::c_char = null_mut();
        assert_eq!(npualloc_pluggable_snapshot_pytorch_json(0, &mut json), NPUALLOC_OK);
        let text = std::ffi::CStr::from_ptr(json).to_str().unwrap().to_string();
        npualloc::ffi::stats::npualloc_string_free(json);
        let alloc = format!("{{\"action\":\"alloc\",\"addr\":{},\"size\":5000,", p as usize);
        assert!(text.contains(&alloc), "{text}");
        assert!(text.contains("\"action\":\"free_completed\""), "{text}");
        assert_eq!(npualloc_pluggable_record_history(2, 100), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().contains("device 2"), "{}", last_error_message());
        assert_eq!(npualloc_pluggable_record_history(0, 0), NPUALLOC_OK);
    }
}
