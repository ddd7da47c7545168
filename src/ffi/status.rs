//! Status codes returned by every fallible export, and their names. The numbers are part of the ABI (see the API
//! contract): 0 is success, 1-99 argument and usage errors, 100-199 capacity, 200-299 the ACL runtime, 900+ bugs. A
//! released number never changes meaning.

use crate::error::Error;
use macro_rules_attribute::apply;
use std::ffi::c_char;

/// Re-emits the status enum unchanged and derives from its variants `ALL`, each C name and each doc comment, so the
/// list is written once; the enum stays plain source under `#[apply]`, which is what cbindgen reads.
macro_rules! status_table {
    (
        $(#[$meta:meta])*
        pub enum $enum:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $number:literal, )*
        }
    ) => {
        $(#[$meta])*
        pub enum $enum {
            $( $(#[doc = $doc])* $variant = $number, )*
        }

        const ALL: [$enum; [$($number),*].len()] = [$($enum::$variant),*];

        impl $enum {
            fn name_with_nul(self) -> &'static str {
                match self {
                    $($enum::$variant => concat!(stringify!($variant), "\0"),)*
                }
            }

            /// The lines of the doc comment, which the header repeats.
            #[cfg(test)]
            pub fn doc_lines(self) -> &'static [&'static str] {
                match self {
                    $($enum::$variant => &[$($doc),*],)*
                }
            }
        }
    };
}

#[apply(status_table!)]
/// The result of every npualloc function that can fail (32 bits; `NPUALLOC_OK` is 0). On failure
/// `npualloc_last_error()` returns a message with the details, and `npualloc_status_name()` the name of the code.
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

/// A status as C passes it in: any 32-bit value. Functions that *receive* a status take this type, so Rust never holds
/// an enum with an invalid discriminant (undefined behaviour); [`npualloc_status::from_raw`] converts it. cbindgen.toml
/// renames it to `npualloc_status`, so the header shows the enum type; both are `int32_t` underneath.
#[allow(non_camel_case_types)]
pub type npualloc_status_raw = i32;

impl npualloc_status {
    /// The status with this number, or None for a number that is not one.
    pub fn from_raw(raw: npualloc_status_raw) -> Option<Self> {
        ALL.into_iter().find(|s| *s as i32 == raw)
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

/// The name of a status code as a static string, e.g. "NPUALLOC_ERR_OUT_OF_MEMORY"; any other value gives
/// "NPUALLOC_UNKNOWN_STATUS". Never returns NULL; do not free the string. Does not change the thread's last error.
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

    impl npualloc_status {
        /// Every status, in numeric order (a function, not an associated constant, so cbindgen leaves it out).
        pub const fn all() -> [npualloc_status; ALL.len()] {
            ALL
        }

        /// The name as written in C, e.g. "NPUALLOC_ERR_OUT_OF_MEMORY".
        pub fn name(self) -> &'static str {
            let with_nul = self.name_with_nul();
            &with_nul[..with_nul.len() - 1]
        }
    }

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
            // SAFETY: npualloc_status_name returns a static NUL-terminated string.
            let c = unsafe { CStr::from_ptr(npualloc_status_name(status as i32)) };
            assert_eq!(c.to_str().unwrap(), status.name());
        }
        for bogus in [-1, 6, 99, 101, 202, 899, 901, i32::MIN, i32::MAX] {
            // SAFETY: as above.
            let c = unsafe { CStr::from_ptr(npualloc_status_name(bogus)) };
            assert_eq!(c.to_str().unwrap(), "NPUALLOC_UNKNOWN_STATUS");
        }
    }

    #[test]
    fn every_status_has_its_own_number_and_name() {
        let all = npualloc_status::all();
        for (i, a) in all.iter().enumerate() {
            assert!(a.name().starts_with("NPUALLOC_"), "{a:?}");
            assert!(!a.doc_lines().is_empty(), "{a:?} has no doc comment");
            for b in &all[i + 1..] {
                assert!((*a as i32) < (*b as i32), "{a:?} and {b:?}: numbers not distinct and ascending");
                assert_ne!(a.name(), b.name());
            }
        }
    }

    /// The header (generated by cbindgen from the enum as written) declares
    /// the same statuses, numbers and doc comments as the table yields.
    #[test]
    fn header_enum_matches_the_table() {
        let header = include_str!("../../include/npualloc.h");
        let body = header
            .split_once("enum npualloc_status\n")
            .and_then(|(_, rest)| rest.split_once("};"))
            .expect("the header declares enum npualloc_status")
            .0;
        let lines: Vec<&str> = body.lines().map(str::trim).collect();
        let declared: Vec<(usize, &str, i32)> = lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let (name, number) = l.strip_suffix(',')?.split_once(" = ")?;
                Some((i, name, number.parse().ok()?))
            })
            .collect();
        let all = npualloc_status::all();
        assert_eq!(declared.len(), all.len(), "{declared:?}");
        for ((at, name, number), status) in declared.into_iter().zip(all) {
            assert_eq!((name, number), (status.name(), status as i32));
            let comment = &lines[at - 1 - status.doc_lines().len()..at - 1];
            for (got, want) in comment.iter().zip(status.doc_lines()) {
                assert_eq!(got.trim_start_matches('*').trim(), want.trim(), "comment of {name}");
            }
        }
    }

    /// The Python package names the statuses it tests for (`OK = 0`,
    /// `ERR_OUT_OF_MEMORY = 100`, ...): each must be a status of the table,
    /// with the table's number.
    #[test]
    fn python_status_constants_match_the_table() {
        let module = include_str!("../../python/npualloc/_lib.py");
        let mut seen = 0;
        for line in module.lines() {
            let Some((name, value)) = line.split_once(" = ") else { continue };
            if !(name == "OK" || name.starts_with("ERR_")) {
                continue;
            }
            let c_name = format!("NPUALLOC_{name}");
            let status = npualloc_status::all().into_iter().find(|s| s.name() == c_name);
            let status = status.unwrap_or_else(|| panic!("python/npualloc/_lib.py: {name} is not a status"));
            assert_eq!(value.trim().parse::<i32>(), Ok(status as i32), "python/npualloc/_lib.py: {line}");
            seen += 1;
        }
        assert!(seen >= 2, "no status constants found in python/npualloc/_lib.py");
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
                Error::RuntimeUnavailable(RuntimeError::Unavailable {
                    path: "p".into(),
                    reason: "r".into(),
                    origin: crate::runtime::loader::LibrarySource::Search,
                }),
                NPUALLOC_ERR_RUNTIME_UNAVAILABLE,
            ),
            (Error::Internal("i".into()), NPUALLOC_ERR_INTERNAL),
        ];
        for (err, status) in cases {
            assert_eq!(npualloc_status::from(&err), status, "{err}");
        }
    }
}
