//! aclrtMemcpy2d / aclrtMemcpy2dAsync: every documented check in its
//! documented order, row-by-row copies, and queued copies on held streams
//! (docs/acl-api.md §5).

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

const H2H: u32 = 0;
const H2D: u32 = 1;
const D2H: u32 = 2;
const D2D: u32 = 3;
const DEFAULT: u32 = 4;

fn buf(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

#[test]
fn zero_extent_succeeds_before_other_checks() {
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtMemcpy2d(null_mut(), 0, null(), 0, 0, 7, 99), 0);
        assert_eq!(aclrtMemcpy2d(null_mut(), 0, null(), 0, 7, 0, 99), 0);
        // The async form too, even without a stream or device.
        let junk = 0x99usize as *mut c_void;
        assert_eq!(aclrtMemcpy2dAsync(null_mut(), 0, null(), 0, 0, 1, 99, junk), 0);
    }
}

#[test]
fn acl_layer_checks_give_invalid_param() {
    let (mut dst, src) = (buf(64, 0), buf(64, 1));
    let (d, s) = (dst.as_mut_ptr().cast::<c_void>(), src.as_ptr().cast::<c_void>());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtMemcpy2d(null_mut(), 8, s, 8, 8, 2, H2D), INVALID_PARAM);
        assert_eq!(aclrtMemcpy2d(d, 8, null(), 8, 8, 2, H2D), INVALID_PARAM);
        assert_eq!(aclrtMemcpy2d(d, 8, s, 4, 8, 2, H2D), INVALID_PARAM);
        assert_eq!(aclrtMemcpy2d(d, 4, s, 8, 8, 2, H2D), INVALID_PARAM);
        for kind in [H2H, 5, 6, 7, 1000] {
            assert_eq!(aclrtMemcpy2d(d, 8, s, 8, 8, 2, kind), INVALID_PARAM);
            assert_eq!(aclrtMemcpy2dAsync(d, 8, s, 8, 8, 2, kind, null_mut()), INVALID_PARAM);
        }
    }
}

#[test]
fn runtime_limits_give_param_invalid() {
    let (mut dst, src) = (buf(64, 0), buf(64, 1));
    let (d, s) = (dst.as_mut_ptr().cast::<c_void>(), src.as_ptr().cast::<c_void>());
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        // Checked before anything is touched, so no memory is needed.
        assert_eq!(aclrtMemcpy2d(d, 8, s, 8, 8, 5 * 1024 * 1024 + 1, H2D), RT_PARAM_INVALID);
        assert_eq!(aclrtMemcpy2d(d, 6_000_000, s, 6_000_000, 5_000_001, 1, H2D), RT_PARAM_INVALID);
        assert_eq!(aclrtMemcpy2dAsync(d, 8, s, 8, 8, 5 * 1024 * 1024 + 1, H2D, null_mut()), RT_PARAM_INVALID);
        assert_eq!(aclrtMemcpy2d(d, usize::MAX, s, 8, 8, 3, H2D), RT_PARAM_INVALID);
    }
}

#[test]
fn sync_d2d_refusal_comes_after_the_limits() {
    // RT `ApiErrorDecorator::MemCopy2DSync` refuses D2D (207000) only after
    // `MemCopy2DCheckParam` applied the limits (107000): a sync D2D copy over
    // a limit is answered 107000. Checked before any memory is touched.
    let (mut dst, src) = (buf(64, 0), buf(64, 1));
    let (d, s) = (dst.as_mut_ptr().cast::<c_void>(), src.as_ptr().cast::<c_void>());
    // SAFETY: live locals; the calls fail before touching them.
    unsafe {
        assert_eq!(aclrtMemcpy2d(d, 8, s, 8, 8, 5 * 1024 * 1024 + 1, D2D), RT_PARAM_INVALID);
        assert_eq!(aclrtMemcpy2d(d, 6_000_000, s, 6_000_000, 5_000_001, 1, D2D), RT_PARAM_INVALID);
        // A bad kind is the ACL layer's, before the limits.
        assert_eq!(aclrtMemcpy2d(d, 8, s, 8, 8, 5 * 1024 * 1024 + 1, H2H), INVALID_PARAM);
        // Within the limits, D2D is "not supported", whatever the addresses.
        assert_eq!(aclrtMemcpy2d(d, 8, s, 8, 8, 2, D2D), RT_FEATURE_NOT_SUPPORT);
    }
    assert_eq!(dst, buf(64, 0), "nothing was copied");
}

#[test]
fn sync_copy_directions() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let a = malloc(256);
        let b = malloc(256);
        assert_eq!(aclrtMemcpy2d(a, 16, b, 16, 16, 4, D2D), RT_FEATURE_NOT_SUPPORT);
        // DEFAULT between two device blocks resolves to D2D, which the
        // runtime's parameter check refuses for the sync call.
        assert_eq!(aclrtMemcpy2d(a, 16, b, 16, 16, 4, DEFAULT), RT_PARAM_INVALID);
        let src = buf(64, 3);
        // DEFAULT between two host buffers is host-to-host: refused by both.
        let mut other = vec![0u8; 64];
        let o = other.as_mut_ptr().cast();
        assert_eq!(aclrtMemcpy2d(o, 16, src.as_ptr().cast(), 16, 16, 4, DEFAULT), RT_PARAM_INVALID);
        assert_eq!(aclrtMemcpy2dAsync(o, 16, src.as_ptr().cast(), 16, 16, 4, DEFAULT, null_mut()), RT_PARAM_INVALID);
        assert!(other.iter().all(|&b| b == 0));
        assert_eq!(aclrtMemcpy2d(a, 16, src.as_ptr().cast(), 16, 16, 4, DEFAULT), 0);
        let mut back = vec![0u8; 64];
        assert_eq!(aclrtMemcpy2d(back.as_mut_ptr().cast(), 16, a, 16, 16, 4, D2H), 0);
        assert_eq!(back, src);
        assert_eq!(aclrtFree(a), 0);
        assert_eq!(aclrtFree(b), 0);
    }
    dev.assert_clean();
}

#[test]
fn pitched_copy_moves_only_width_bytes_per_row() {
    let dev = Dev::take();
    let src = buf(10 * 5, 7);
    let mut dst = vec![0xeeu8; 12 * 5];
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtMemcpy2d(dst.as_mut_ptr().cast(), 12, src.as_ptr().cast(), 10, 6, 5, H2D), 0);
    }
    for row in 0..5 {
        assert_eq!(&dst[row * 12..row * 12 + 6], &src[row * 10..row * 10 + 6]);
        assert!(dst[row * 12 + 6..row * 12 + 12].iter().all(|&b| b == 0xee));
    }
    dev.assert_clean();
}

#[test]
fn async_copy_on_a_held_stream_waits_for_release() {
    let dev = Dev::take();
    let s = stream();
    let e = event();
    let src = buf(32 * 4, 9);
    let mut dst = vec![0u8; 32 * 4];
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = malloc(32 * 4);
        assert_eq!(aclemu_stream_hold(s), 0);
        assert_eq!(aclrtMemcpy2dAsync(d, 32, src.as_ptr().cast(), 32, 32, 4, H2D, s), 0);
        assert_eq!(aclrtMemcpy2dAsync(dst.as_mut_ptr().cast(), 32, d, 32, 32, 4, D2H, s), 0);
        assert_eq!(aclrtRecordEvent(e, s), 0);
        assert!(dst.iter().all(|&b| b == 0), "copy ran before release");
        assert_eq!(status(e), NOT_READY);
        assert_eq!(aclemu_stream_release(s), 0);
        assert_eq!(dst, src);
        assert_eq!(status(e), COMPLETE);
        // Async D2D is supported.
        let d2 = malloc(32 * 4);
        assert_eq!(aclrtMemcpy2dAsync(d2, 32, d, 32, 32, 4, D2D, s), 0);
        assert_eq!(std::slice::from_raw_parts(d2.cast::<u8>(), 128), &src[..]);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtFree(d2), 0);
        assert_eq!(aclrtDestroyEvent(e), 0);
        assert_eq!(aclrtDestroyStream(s), 0);
    }
    dev.assert_clean();
}

#[test]
fn async_copy_runs_at_synchronize_and_on_the_default_stream() {
    let dev = Dev::take();
    let src = buf(64, 1);
    let mut dst = vec![0u8; 64];
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let d = malloc(64);
        assert_eq!(aclemu_stream_hold(null_mut()), 0);
        // DEFAULT from host to device memory is H2D.
        assert_eq!(aclrtMemcpy2dAsync(d, 8, src.as_ptr().cast(), 8, 8, 8, DEFAULT, null_mut()), 0);
        assert_eq!(aclrtMemcpy2dAsync(dst.as_mut_ptr().cast(), 8, d, 8, 8, 8, DEFAULT, null_mut()), 0);
        assert!(dst.iter().all(|&b| b == 0));
        assert_eq!(aclrtSynchronizeStream(null_mut()), 0);
        assert_eq!(dst, src);
        assert_eq!(aclemu_stream_release(null_mut()), 0);
        assert_eq!(aclrtFree(d), 0);
        let junk = 0x1234usize as *mut c_void;
        assert_eq!(
            aclrtMemcpy2dAsync(dst.as_mut_ptr().cast(), 8, src.as_ptr().cast(), 8, 8, 8, H2D, junk),
            RT_INVALID_HANDLE
        );
    }
    dev.assert_clean();
}
