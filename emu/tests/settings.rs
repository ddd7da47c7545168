//! The float-overflow mode and op timeouts torch_npu sets at initialization
//! (docs/runtime-behaviour.md "Runtime settings").

mod common;
use ascendcl::*;
use common::*;
use std::ptr::null_mut;

#[test]
fn the_sat_mode_is_checked_and_kept() {
    let _dev = Dev::take();
    let mut mode = -1;
    // SAFETY: live out-pointers, then NULL.
    unsafe {
        assert_eq!(aclrtSetDeviceSatMode(2), RT_PARAM_INVALID);
        assert_eq!(aclrtSetDeviceSatMode(-1), RT_PARAM_INVALID);
        assert_eq!(aclrtSetDeviceSatMode(1), 0);
        assert_eq!(aclrtGetDeviceSatMode(&mut mode), 0);
        assert_eq!(mode, 1);
        assert_eq!(aclrtSetDeviceSatMode(0), 0);
        assert_eq!(aclrtGetDeviceSatMode(&mut mode), 0);
        assert_eq!(mode, 0);
        assert_eq!(aclrtGetDeviceSatMode(null_mut()), INVALID_PARAM);
    }
}

#[test]
fn op_timeouts_are_accepted_and_v2_needs_a_context() {
    let mut actual = 0u64;
    on_fresh_thread(|| {
        // SAFETY: a live out-pointer.
        assert_eq!(unsafe { aclrtSetOpExecuteTimeOutV2(5_000, &mut actual) }, RT_CONTEXT_NULL);
    });
    let _dev = Dev::take();
    // SAFETY: live out-pointers, then NULL.
    unsafe {
        assert_eq!(aclrtSetOpExecuteTimeOutV2(5_000, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtSetOpExecuteTimeOutV2(5_000, &mut actual), 0);
        assert_eq!(actual, 5_000);
        assert_eq!(aclrtSetOpWaitTimeout(30), 0);
        assert_eq!(aclrtSetOpExecuteTimeOut(30), 0);
    }
}
