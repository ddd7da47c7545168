//! Status codes returned by every fallible export, and their names.
//!
//! The numbers are part of the ABI (see the API contract): 0 is success,
//! 1-99 argument and usage errors, 100-199 capacity, 200-299 the ACL runtime,
//! 900+ bugs. A released number never changes meaning.

use crate::error::Error;
use std::ffi::c_char;

/// The result of every npualloc function that can fail. `NPUALLOC_OK` is 0.
///
/// A 32-bit value. On failure `npualloc_last_error()` returns a message with
/// the details, and `npualloc_status_name()` the name of the code.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
#[must_use]
pub enum npualloc_status {
    /// Success.
    NPUALLOC_OK = 0,
    /// NULL where a value is required, a zero or overflowing size, a bad enum value or a bad stream.
    NPUALLOC_ERR_INVALID_ARGUMENT = 1,
    /// An unknown key, a bad value or conflicting keys in a config string.
    NPUALLOC_ERR_BAD_CONFIG = 2,
    /// A pointer or block this allocator does not own, or one already freed.
    NPUALLOC_ERR_UNKNOWN_POINTER = 3,
    /// A 2D copy would touch bytes outside the allocation that owns its first byte.
    NPUALLOC_ERR_COPY_OUT_OF_BOUNDS = 4,
    /// A valid request this runtime or backend cannot do.
    NPUALLOC_ERR_UNSUPPORTED = 5,
    /// The device could not satisfy the request after every recovery step.
    NPUALLOC_ERR_OUT_OF_MEMORY = 100,
    /// An ACL call failed; the last error names the function and its aclError number.
    NPUALLOC_ERR_RUNTIME = 200,
    /// libascendcl could not be loaded or lacks a required symbol.
    NPUALLOC_ERR_RUNTIME_UNAVAILABLE = 201,
    /// A bug: a caught panic or a broken invariant.
    NPUALLOC_ERR_INTERNAL = 900,
}

/// A status as C passes it in: any 32-bit value, possibly not a valid
/// [`npualloc_status`]. Functions that *receive* a status take this type, so
/// Rust never holds an enum with an invalid discriminant (which would be
/// undefined behaviour); [`npualloc_status::from_raw`] converts it.
/// cbindgen.toml renames it to `npualloc_status` (and does not emit it), so
/// the header shows the enum type; both are `int32_t` underneath.
#[allow(non_camel_case_types)]
pub type npualloc_status_raw = i32;

const ALL: [npualloc_status; 10] = [
    npualloc_status::NPUALLOC_OK,
    npualloc_status::NPUALLOC_ERR_INVALID_ARGUMENT,
    npualloc_status::NPUALLOC_ERR_BAD_CONFIG,
    npualloc_status::NPUALLOC_ERR_UNKNOWN_POINTER,
    npualloc_status::NPUALLOC_ERR_COPY_OUT_OF_BOUNDS,
    npualloc_status::NPUALLOC_ERR_UNSUPPORTED,
    npualloc_status::NPUALLOC_ERR_OUT_OF_MEMORY,
    npualloc_status::NPUALLOC_ERR_RUNTIME,
    npualloc_status::NPUALLOC_ERR_RUNTIME_UNAVAILABLE,
    npualloc_status::NPUALLOC_ERR_INTERNAL,
];

impl npualloc_status {
    /// Every status, in numeric order. (A function, not an associated
    /// constant, so cbindgen leaves it out of the header.)
    pub const fn all() -> [npualloc_status; 10] {
        ALL
    }

    /// The status with this number, or None for a number that is not one.
    pub fn from_raw(raw: npualloc_status_raw) -> Option<Self> {
        ALL.into_iter().find(|s| *s as i32 == raw)
    }

    /// The name as written in C, e.g. "NPUALLOC_ERR_OUT_OF_MEMORY".
    pub fn name(self) -> &'static str {
        let with_nul = self.name_with_nul();
        &with_nul[..with_nul.len() - 1]
    }

    fn name_with_nul(self) -> &'static str {
        use npualloc_status::*;
        match self {
            NPUALLOC_OK => "NPUALLOC_OK\0",
            NPUALLOC_ERR_INVALID_ARGUMENT => "NPUALLOC_ERR_INVALID_ARGUMENT\0",
            NPUALLOC_ERR_BAD_CONFIG => "NPUALLOC_ERR_BAD_CONFIG\0",
            NPUALLOC_ERR_UNKNOWN_POINTER => "NPUALLOC_ERR_UNKNOWN_POINTER\0",
            NPUALLOC_ERR_COPY_OUT_OF_BOUNDS => "NPUALLOC_ERR_COPY_OUT_OF_BOUNDS\0",
            NPUALLOC_ERR_UNSUPPORTED => "NPUALLOC_ERR_UNSUPPORTED\0",
            NPUALLOC_ERR_OUT_OF_MEMORY => "NPUALLOC_ERR_OUT_OF_MEMORY\0",
            NPUALLOC_ERR_RUNTIME => "NPUALLOC_ERR_RUNTIME\0",
            NPUALLOC_ERR_RUNTIME_UNAVAILABLE => "NPUALLOC_ERR_RUNTIME_UNAVAILABLE\0",
            NPUALLOC_ERR_INTERNAL => "NPUALLOC_ERR_INTERNAL\0",
        }
    }
}

impl From<&Error> for npualloc_status {
    fn from(err: &Error) -> Self {
        use npualloc_status::*;
        match err {
            Error::InvalidArgument(_) => NPUALLOC_ERR_INVALID_ARGUMENT,
            Error::BadConfig { .. } => NPUALLOC_ERR_BAD_CONFIG,
            Error::UnknownPointer(_) => NPUALLOC_ERR_UNKNOWN_POINTER,
            Error::CopyOutOfBounds(_) => NPUALLOC_ERR_COPY_OUT_OF_BOUNDS,
            Error::Unsupported(_) => NPUALLOC_ERR_UNSUPPORTED,
            Error::OutOfMemory(_) => NPUALLOC_ERR_OUT_OF_MEMORY,
            Error::Runtime { .. } => NPUALLOC_ERR_RUNTIME,
            Error::RuntimeUnavailable(_) => NPUALLOC_ERR_RUNTIME_UNAVAILABLE,
            Error::Internal(_) => NPUALLOC_ERR_INTERNAL,
        }
    }
}

const UNKNOWN_STATUS: &str = "NPUALLOC_UNKNOWN_STATUS\0";

/// The name of a status code as a static string, e.g. "NPUALLOC_ERR_OUT_OF_MEMORY".
///
/// Any value may be passed: one that is not a status code gives
/// "NPUALLOC_UNKNOWN_STATUS". Never returns NULL; the string is static and must
/// not be freed. Thread-safe; does not change the thread's last error.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_status_name(status: npualloc_status_raw) -> *const c_char {
    ffi_boundary!("npualloc_status_name", UNKNOWN_STATUS.as_ptr().cast(), {
        npualloc_status::from_raw(status).map_or(UNKNOWN_STATUS, npualloc_status::name_with_nul).as_ptr().cast()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{AclCallError, RuntimeError};
    use std::ffi::CStr;

    #[test]
    fn numbers_are_the_contract() {
        use npualloc_status::*;
        let expected = [
            (NPUALLOC_OK, 0),
            (NPUALLOC_ERR_INVALID_ARGUMENT, 1),
            (NPUALLOC_ERR_BAD_CONFIG, 2),
            (NPUALLOC_ERR_UNKNOWN_POINTER, 3),
            (NPUALLOC_ERR_COPY_OUT_OF_BOUNDS, 4),
            (NPUALLOC_ERR_UNSUPPORTED, 5),
            (NPUALLOC_ERR_OUT_OF_MEMORY, 100),
            (NPUALLOC_ERR_RUNTIME, 200),
            (NPUALLOC_ERR_RUNTIME_UNAVAILABLE, 201),
            (NPUALLOC_ERR_INTERNAL, 900),
        ];
        for (status, number) in expected {
            assert_eq!(status as i32, number, "{status:?}");
            assert_eq!(npualloc_status::from_raw(number), Some(status));
        }
        assert_eq!(expected.len(), npualloc_status::all().len());
        assert_eq!(std::mem::size_of::<npualloc_status>(), 4);
    }

    #[test]
    fn names_match_variants() {
        for status in npualloc_status::all() {
            assert_eq!(status.name(), format!("{status:?}"));
            let c = unsafe { CStr::from_ptr(npualloc_status_name(status as i32)) };
            assert_eq!(c.to_str().unwrap(), status.name());
        }
        for bogus in [-1, 6, 99, 101, 202, 899, 901, i32::MIN, i32::MAX] {
            let c = unsafe { CStr::from_ptr(npualloc_status_name(bogus)) };
            assert_eq!(c.to_str().unwrap(), "NPUALLOC_UNKNOWN_STATUS");
        }
    }

    #[test]
    fn errors_map_to_statuses() {
        use npualloc_status::*;
        let call = AclCallError { function: "aclrtMalloc", code: 207001 };
        let cases = [
            (Error::InvalidArgument("x".into()), NPUALLOC_ERR_INVALID_ARGUMENT),
            (Error::bad_config("k", "v"), NPUALLOC_ERR_BAD_CONFIG),
            (Error::UnknownPointer("p".into()), NPUALLOC_ERR_UNKNOWN_POINTER),
            (Error::CopyOutOfBounds("c".into()), NPUALLOC_ERR_COPY_OUT_OF_BOUNDS),
            (Error::Unsupported("u".into()), NPUALLOC_ERR_UNSUPPORTED),
            (Error::OutOfMemory("o".into()), NPUALLOC_ERR_OUT_OF_MEMORY),
            (Error::runtime(call, "growing the pool"), NPUALLOC_ERR_RUNTIME),
            (
                Error::RuntimeUnavailable(RuntimeError::Unavailable { path: "p".into(), reason: "r".into() }),
                NPUALLOC_ERR_RUNTIME_UNAVAILABLE,
            ),
            (Error::Internal("i".into()), NPUALLOC_ERR_INTERNAL),
        ];
        for (err, status) in cases {
            assert_eq!(npualloc_status::from(&err), status, "{err}");
        }
    }
}
