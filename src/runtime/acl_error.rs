//! The names of the aclError codes: every message shows an aclError as "NAME (number)" via [`AclErrorCode`].
//! Values are the ACL-level codes of `acl_base_rt.h` and the runtime-level codes of `rt_error_codes.h`
//! (docs/acl-api.md §2); an unlisted code shows as "unnamed aclError (number)".

use std::fmt;

/// (code, name) for every aclError the project knows by name.
pub const ACL_ERROR_NAMES: &[(i32, &str)] = &[
    (0, "ACL_SUCCESS"),
    (100000, "ACL_ERROR_INVALID_PARAM"),
    (100001, "ACL_ERROR_UNINITIALIZE"),
    (100002, "ACL_ERROR_REPEAT_INITIALIZE"),
    (100037, "ACL_ERROR_REPEAT_FINALIZE"),
    (200000, "ACL_ERROR_BAD_ALLOC"),
    (200001, "ACL_ERROR_API_NOT_SUPPORT"),
    (200002, "ACL_ERROR_INVALID_DEVICE"),
    (200003, "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED"),
    (200004, "ACL_ERROR_RESOURCE_NOT_MATCH"),
    (200005, "ACL_ERROR_INVALID_RESOURCE_HANDLE"),
    (200006, "ACL_ERROR_FEATURE_UNSUPPORTED"),
    (300000, "ACL_ERROR_STORAGE_OVER_LIMIT"),
    (500000, "ACL_ERROR_INTERNAL_ERROR"),
    (500001, "ACL_ERROR_FAILURE"),
    (500002, "ACL_ERROR_GE_FAILURE"),
    (500003, "ACL_ERROR_RT_FAILURE"),
    (500004, "ACL_ERROR_DRV_FAILURE"),
    (107000, "ACL_ERROR_RT_PARAM_INVALID"),
    (107001, "ACL_ERROR_RT_INVALID_DEVICEID"),
    (107002, "ACL_ERROR_RT_CONTEXT_NULL"),
    (107003, "ACL_ERROR_RT_STREAM_CONTEXT"),
    (107008, "ACL_ERROR_RT_ADDR_UNALIGNED"),
    (107016, "ACL_ERROR_RT_INVALID_MEMORY_TYPE"),
    (107017, "ACL_ERROR_RT_INVALID_HANDLE"),
    (107018, "ACL_ERROR_RT_INVALID_MALLOC_TYPE"),
    (107019, "ACL_ERROR_RT_WAIT_TIMEOUT"),
    (107027, "ACL_ERROR_RT_STREAM_CAPTURED"),
    (107028, "ACL_ERROR_RT_EVENT_CAPTURED"),
    (207000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"),
    (207001, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
    (207002, "ACL_ERROR_RT_MEMORY_FREE"),
    (207004, "ACL_ERROR_RT_NO_DEVICE"),
    (207005, "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL"),
    (207007, "ACL_ERROR_RT_NO_EVENT_RESOURCE"),
    (207008, "ACL_ERROR_RT_NO_STREAM_RESOURCE"),
    (207012, "ACL_ERROR_RT_OVER_LIMIT"),
    (207018, "ACL_ERROR_RT_DEVICE_OOM"),
    (507000, "ACL_ERROR_RT_INTERNAL_ERROR"),
    (507004, "ACL_ERROR_RT_STREAM_NOT_COMPLETE"),
    (507006, "ACL_ERROR_RT_EVENT_NOT_COMPLETE"),
    (507053, "ACL_ERROR_RT_DEVICE_MEM_ERROR"),
    (507899, "ACL_ERROR_RT_DRV_INTERNAL_ERROR"),
];

/// An aclError as a message shows it: "ACL_ERROR_RT_MEMORY_ALLOCATION (207001)".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclErrorCode(pub i32);

impl fmt::Display for AclErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match ACL_ERROR_NAMES.iter().find(|&&(code, _)| code == self.0) {
            Some((_, name)) => write!(f, "{name} ({})", self.0),
            None => write!(f, "unnamed aclError ({})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    fn acl_error_name(code: i32) -> Option<&'static str> {
        ACL_ERROR_NAMES.iter().find(|&&(c, _)| c == code).map(|&(_, n)| n)
    }

    #[test]
    fn codes_and_names_are_unique() {
        for (i, &(code, name)) in ACL_ERROR_NAMES.iter().enumerate() {
            for &(c, n) in &ACL_ERROR_NAMES[i + 1..] {
                assert!(code != c && name != n, "{name} ({code}) and {n} ({c}) collide");
            }
        }
    }

    /// The table agrees with the constants the bindings were generated with.
    #[test]
    fn table_agrees_with_the_bindings() {
        let bound: &[(i32, &str)] = &[
            (sys::ACL_ERROR_INVALID_PARAM, "ACL_ERROR_INVALID_PARAM"),
            (sys::ACL_ERROR_UNINITIALIZE, "ACL_ERROR_UNINITIALIZE"),
            (sys::ACL_ERROR_REPEAT_INITIALIZE, "ACL_ERROR_REPEAT_INITIALIZE"),
            (sys::ACL_ERROR_BAD_ALLOC, "ACL_ERROR_BAD_ALLOC"),
            (sys::ACL_ERROR_API_NOT_SUPPORT, "ACL_ERROR_API_NOT_SUPPORT"),
            (sys::ACL_ERROR_INVALID_DEVICE, "ACL_ERROR_INVALID_DEVICE"),
            (sys::ACL_ERROR_INVALID_RESOURCE_HANDLE, "ACL_ERROR_INVALID_RESOURCE_HANDLE"),
            (sys::ACL_ERROR_FEATURE_UNSUPPORTED, "ACL_ERROR_FEATURE_UNSUPPORTED"),
            (sys::ACL_ERROR_INTERNAL_ERROR, "ACL_ERROR_INTERNAL_ERROR"),
            (sys::ACL_ERROR_FAILURE, "ACL_ERROR_FAILURE"),
            (sys::ACL_ERROR_RT_FAILURE, "ACL_ERROR_RT_FAILURE"),
            (sys::ACL_ERROR_RT_PARAM_INVALID, "ACL_ERROR_RT_PARAM_INVALID"),
            (sys::ACL_ERROR_RT_INVALID_DEVICEID, "ACL_ERROR_RT_INVALID_DEVICEID"),
            (sys::ACL_ERROR_RT_CONTEXT_NULL, "ACL_ERROR_RT_CONTEXT_NULL"),
            (sys::ACL_ERROR_RT_INVALID_HANDLE, "ACL_ERROR_RT_INVALID_HANDLE"),
            (sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"),
            (sys::ACL_ERROR_RT_MEMORY_ALLOCATION, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
            (sys::ACL_ERROR_RT_DEVICE_OOM, "ACL_ERROR_RT_DEVICE_OOM"),
            (sys::ACL_ERROR_RT_INTERNAL_ERROR, "ACL_ERROR_RT_INTERNAL_ERROR"),
        ];
        for &(code, name) in bound {
            assert_eq!(acl_error_name(code), Some(name), "{name} is {code} in the bindings");
        }
    }

    #[test]
    fn a_code_is_shown_with_its_name() {
        assert_eq!(AclErrorCode(207001).to_string(), "ACL_ERROR_RT_MEMORY_ALLOCATION (207001)");
        assert_eq!(AclErrorCode(107001).to_string(), "ACL_ERROR_RT_INVALID_DEVICEID (107001)");
        assert_eq!(AclErrorCode(-5).to_string(), "unnamed aclError (-5)");
    }
}
