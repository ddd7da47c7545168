//! The aclError numbers the emulator returns (docs/acl-api.md §2).
//!
//! Which layer a check lives in decides its code: argument checks of the ACL
//! layer give 100000, state checks of the runtime layer and the driver's
//! user-space library give 107xxx, checks inside the driver's kernel module
//! give 507899, and out-of-memory is always 207001.

/// `aclError` is a C `int`.
#[allow(non_camel_case_types)]
pub type aclError = i32;

/// Result of an internal operation; `Err` carries the aclError to return.
pub type AclResult<T> = Result<T, aclError>;

pub const ACL_SUCCESS: aclError = 0;
pub const ACL_ERROR_INVALID_PARAM: aclError = 100_000;
pub const ACL_ERROR_REPEAT_INITIALIZE: aclError = 100_002;
pub const ACL_ERROR_INVALID_FILE: aclError = 100_003;
pub const ACL_ERROR_REPEAT_FINALIZE: aclError = 100_037;
pub const ACL_ERROR_RT_PARAM_INVALID: aclError = 107_000;
pub const ACL_ERROR_RT_INVALID_DEVICEID: aclError = 107_001;
pub const ACL_ERROR_RT_CONTEXT_NULL: aclError = 107_002;
pub const ACL_ERROR_RT_STREAM_CONTEXT: aclError = 107_003;
pub const ACL_ERROR_RT_INVALID_HANDLE: aclError = 107_017;
pub const ACL_ERROR_RT_FEATURE_NOT_SUPPORT: aclError = 207_000;
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: aclError = 207_001;
pub const ACL_ERROR_RT_RESOURCE_ALLOC_FAIL: aclError = 207_005;
pub const ACL_ERROR_RT_NO_PERMISSION: aclError = 207_006;
pub const ACL_ERROR_RT_NO_EVENT_RESOURCE: aclError = 207_007;
pub const ACL_ERROR_RT_OVER_LIMIT: aclError = 207_012;
pub const ACL_ERROR_RT_INTERNAL_ERROR: aclError = 507_000;
pub const ACL_ERROR_RT_CONTEXT_RELEASE_ERROR: aclError = 507_007;
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: aclError = 507_046;
pub const ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: aclError = 507_047;
/// A driver-kernel -EINVAL the runtime's error map lacks (RB).
pub const ACL_ERROR_RT_DRV_INTERNAL_ERROR: aclError = 507_899;

/// Turns an internal result into the status a C caller sees.
pub fn status(result: AclResult<()>) -> aclError {
    match result {
        Ok(()) => ACL_SUCCESS,
        Err(code) => code,
    }
}

/// `Err(INVALID_PARAM)` unless `cond` holds: the ACL layer's argument check.
pub fn require(cond: bool) -> AclResult<()> {
    if cond {
        Ok(())
    } else {
        Err(ACL_ERROR_INVALID_PARAM)
    }
}
