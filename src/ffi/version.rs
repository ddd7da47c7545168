//! Library and ABI versions. The `NPUALLOC_VERSION_*` constants become macros in `include/npualloc.h`;
//! tests/header_current.rs checks them against Cargo.toml.

use std::ffi::c_char;

/// Major version of the library (semantic versioning).
pub const NPUALLOC_VERSION_MAJOR: u32 = 0;
/// Minor version of the library.
pub const NPUALLOC_VERSION_MINOR: u32 = 4;
/// Patch version of the library.
pub const NPUALLOC_VERSION_PATCH: u32 = 0;

/// The C ABI version this header describes; it changes only when an existing signature, struct layout or status
/// number changes. The SONAME is `libnpualloc.so.<NPUALLOC_ABI_VERSION>` (build.rs and CMakeLists.txt read the
/// number from this line).
pub const NPUALLOC_ABI_VERSION: u32 = 1;

const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library version as "MAJOR.MINOR.PATCH": static, never NULL, not to be freed. Does not change the
/// thread's last error.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_version() -> *const c_char {
    ffi_boundary!("npualloc_version", VERSION.as_ptr().cast(), { VERSION.as_ptr().cast() })
}

/// The C ABI version the loaded library implements; a host compiled against this header checks
/// `npualloc_abi_version() == NPUALLOC_ABI_VERSION` after loading it. Does not change the thread's last error.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_abi_version() -> u32 {
    ffi_boundary!("npualloc_abi_version", NPUALLOC_ABI_VERSION, { NPUALLOC_ABI_VERSION })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn constants_match_cargo_version() {
        let parts = [NPUALLOC_VERSION_MAJOR, NPUALLOC_VERSION_MINOR, NPUALLOC_VERSION_PATCH];
        let cargo = [env!("CARGO_PKG_VERSION_MAJOR"), env!("CARGO_PKG_VERSION_MINOR"), env!("CARGO_PKG_VERSION_PATCH")]
            .map(|p| p.parse::<u32>().unwrap());
        assert_eq!(parts, cargo, "update the NPUALLOC_VERSION_* constants to Cargo.toml's version");
        // SAFETY: npualloc_version returns a static NUL-terminated string.
        let c = unsafe { CStr::from_ptr(npualloc_version()) };
        assert_eq!(c.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        assert_eq!(npualloc_abi_version(), 1);
    }
}
