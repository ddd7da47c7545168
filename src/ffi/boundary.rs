//! The panic boundary and the pointer checks every export uses.
//!
//! **The rule:** the whole body of every `#[unsafe(no_mangle)]` function is the argument of one `ffi_boundary!`
//! call, nothing before or after it (`tests/ffi_boundary.rs` checks this). A panic unwinding out of an `extern "C"`
//! function aborts the process, and an allocator plugin must never take its host down, so the boundary catches the
//! panic, records `internal error: panic in <function>: <message>` as the thread's last error and returns
//! `NPUALLOC_ERR_INTERNAL`, or the function's documented fallback (NULL, nothing). The default panic hook still prints
//! the panic to stderr, which is what a user reporting the bug needs.
//!
//! Three forms, by what the function returns:
//! - `ffi_boundary!(status "npualloc_x", { ... })`: the body is a `Result<(), Error>` block; `Ok` becomes
//!   `NPUALLOC_OK`, `Err` is recorded and mapped by `last_error::fail`.
//! - `ffi_boundary!(fallible "npualloc_x", fallback, { ... })`: the body is a `Result<T, Error>` block; `Err` is
//!   recorded and `fallback` returned.
//! - `ffi_boundary!("npualloc_x", fallback, { ... })`: the body cannot fail and yields `T`; `fallback` is returned
//!   only after a panic.
//!
//! The two fallible forms clear the thread's last error first, so a successful call leaves "" behind. The body runs in
//! a closure: `return` inside it returns from the closure, which is the function's result. Inside a fallible body,
//! `try_live!` turns a handle argument into its allocator. `try_ref!`, `try_out!` and `try_str!` (and, in tests, `try_mut!`) turn a NULL (or misaligned, or non-UTF-8)
//! argument into `Error::InvalidArgument` naming the parameter.

use super::last_error::{clear_last_error, fail, set_last_error};
use super::status::npualloc_status;
use crate::error::{Error, Result};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs an export's body; see the module docs for the three forms.
#[macro_export]
#[doc(hidden)]
macro_rules! ffi_boundary {
    (status $name:literal, $body:block) => {
        $crate::ffi::boundary::catch($name, || -> $crate::error::Result<()> { $body })
            .err()
            .unwrap_or($crate::ffi::status::npualloc_status::NPUALLOC_OK)
    };
    (fallible $name:literal, $fallback:expr, $body:block) => {
        $crate::ffi::boundary::catch($name, || $body).unwrap_or($fallback)
    };
    ($name:literal, $fallback:expr, $body:block) => {
        $crate::ffi::boundary::run_infallible($name, $fallback, || $body)
    };
}

/// `&T` from a pointer argument valid for reads when non-NULL, or an early `Err(InvalidArgument)` naming it.
#[macro_export]
#[doc(hidden)]
macro_rules! try_ref {
    ($ptr:expr, $param:literal) => {{
        let ptr = $ptr;
        $crate::ffi::boundary::check_ptr(ptr, $param)?;
        // SAFETY: non-NULL and aligned (checked above); the caller's contract says it points to a live value.
        unsafe { &*ptr }
    }};
}

/// The allocator behind handle argument `$a`, or an early `Err(InvalidArgument)` for anything but a live handle.
#[macro_export]
#[doc(hidden)]
macro_rules! try_live {
    ($a:expr) => {
        // SAFETY: every export's contract: the handle is not destroyed during the call.
        unsafe { $crate::ffi::handle::Allocator::from_handle($a) }?
    };
}

/// `&mut T` from a pointer argument, or an early `Err(InvalidArgument)` (used by tests only).
#[cfg(test)]
#[macro_export]
#[doc(hidden)]
macro_rules! try_mut {
    ($ptr:expr, $param:literal) => {{
        let ptr = $ptr;
        $crate::ffi::boundary::check_ptr(ptr.cast_const(), $param)?;
        // SAFETY: as for try_ref!, and the caller grants exclusive access.
        unsafe { &mut *ptr }
    }};
}

/// An out-parameter, checked non-NULL and aligned but left raw: the memory
/// may be uninitialised, and it is written (`out.write(v)`) only on success.
#[macro_export]
#[doc(hidden)]
macro_rules! try_out {
    ($ptr:expr, $param:literal) => {{
        let ptr = $ptr;
        $crate::ffi::boundary::check_ptr(ptr.cast_const(), $param)?;
        ptr
    }};
}

/// `&str` from a `const char *` argument, or an early `Err(InvalidArgument)` for NULL or text that is not UTF-8.
#[macro_export]
#[doc(hidden)]
macro_rules! try_str {
    ($ptr:expr, $param:literal) => {{
        let ptr: *const ::std::ffi::c_char = $ptr;
        $crate::ffi::boundary::check_ptr(ptr, $param)?;
        // SAFETY: non-NULL; the caller's contract says it is NUL-terminated.
        $crate::ffi::boundary::utf8(unsafe { ::std::ffi::CStr::from_ptr(ptr) }, $param)?
    }};
}

/// NULL and alignment check shared by the `try_*!` macros.
#[doc(hidden)]
#[inline]
pub fn check_ptr<T>(ptr: *const T, param: &str) -> Result<()> {
    if ptr.is_null() {
        Err(Error::InvalidArgument(format!("{param} must not be NULL")))
    } else if !ptr.is_aligned() {
        Err(Error::InvalidArgument(format!("{param} ({ptr:p}) is not aligned to {} bytes", std::mem::align_of::<T>())))
    } else {
        Ok(())
    }
}

#[doc(hidden)]
pub fn utf8<'a>(s: &'a std::ffi::CStr, param: &str) -> Result<&'a str> {
    s.to_str().map_err(|e| Error::InvalidArgument(format!("{param} is not valid UTF-8: {e}")))
}

/// The `n` values at `ptr` (NULL allowed when `n` is 0), or `Err(InvalidArgument)` naming `param` for a NULL or
/// misaligned `ptr`, or for a count too large for memory ("{param}: {n} {noun} is more than memory can hold").
///
/// # Safety
/// A non-NULL `ptr` points to `n` readable `T`.
pub(crate) unsafe fn slice_arg<'a, T>(ptr: *const T, n: usize, param: &str, noun: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    check_ptr(ptr, param)?;
    if n > isize::MAX as usize / std::mem::size_of::<T>() {
        return Err(Error::InvalidArgument(format!("{param}: {n} {noun} is more than memory can hold")));
    }
    // SAFETY: non-NULL, aligned and of a size memory can hold (checked above); readable by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

#[doc(hidden)]
#[inline]
pub fn run_infallible<T>(name: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let _ = record_panic(name, payload);
        fallback
    })
}

/// The two fallible forms: clears the last error, runs `body`, and records an `Err` or a panic as the last error.
#[doc(hidden)]
#[inline]
pub fn catch<T>(name: &'static str, body: impl FnOnce() -> Result<T>) -> std::result::Result<T, npualloc_status> {
    clear_last_error();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(fail(err)),
        Err(payload) => Err(record_panic(name, payload)),
    }
}

/// Records a caught panic and returns `NPUALLOC_ERR_INTERNAL`.
#[cold]
fn record_panic(name: &'static str, payload: Box<dyn Any + Send>) -> npualloc_status {
    let message =
        payload.downcast_ref::<&str>().copied().or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    let text =
        Error::Internal(format!("panic in {name}: {}", message.unwrap_or("a panic payload that is not a string")));
    // Dropping a payload runs arbitrary code that could panic again, outside any catch; leaking it is the lesser risk.
    std::mem::forget(payload);
    set_last_error(&text.to_string());
    npualloc_status::NPUALLOC_ERR_INTERNAL
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::last_error::{last_error_message, set_last_error};
    use npualloc_status::*;
    use std::ffi::{c_char, c_void};

    #[test]
    fn status_form() {
        set_last_error("stale");
        assert_eq!(ffi_boundary!(status "npualloc_test_ok", { Ok(()) }), NPUALLOC_OK);
        assert_eq!(last_error_message(), "", "a status call clears the last error");

        let st = ffi_boundary!(status "npualloc_test_err", {
            Err(Error::OutOfMemory("no room for 4096 bytes".into()))
        });
        assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY);
        assert_eq!(last_error_message(), "out of memory: no room for 4096 bytes");

        let st = ffi_boundary!(status "npualloc_test_panic", { panic!("boom {}", 7) });
        assert_eq!(st, NPUALLOC_ERR_INTERNAL);
        assert_eq!(last_error_message(), "internal error: panic in npualloc_test_panic: boom 7");
    }

    #[test]
    fn fallible_and_infallible_forms() {
        let p: *mut c_void = ffi_boundary!(fallible "npualloc_test_alloc", std::ptr::null_mut(), {
            Err(Error::InvalidArgument("size must not be 0".into()))
        });
        assert!(p.is_null());
        assert_eq!(last_error_message(), "invalid argument: size must not be 0");

        let n = ffi_boundary!(fallible "npualloc_test_value", 0u32, { Ok(5u32) });
        assert_eq!((n, last_error_message().as_str()), (5, ""));

        set_last_error("kept");
        let v = ffi_boundary!("npualloc_test_get", 0u32, { 3u32 });
        assert_eq!((v, last_error_message().as_str()), (3, "kept"), "infallible calls keep the message");

        let v = ffi_boundary!("npualloc_test_get", 0u32, { panic!("static str") });
        assert_eq!(v, 0);
        assert_eq!(last_error_message(), "internal error: panic in npualloc_test_get: static str");

        let v = ffi_boundary!("npualloc_test_any", 1u8, { std::panic::panic_any(42u64) });
        assert_eq!(v, 1);
        assert!(last_error_message().contains("not a string"));
    }

    fn takes_ptrs(r: *const u64, m: *mut u64, out: *mut u64, s: *const c_char) -> npualloc_status {
        ffi_boundary!(status "npualloc_test_ptrs", {
            let r = try_ref!(r, "r");
            let m = try_mut!(m, "m");
            let out = try_out!(out, "out");
            let s = try_str!(s, "s");
            *m += *r + s.len() as u64;
            // SAFETY: checked by try_out!.
            unsafe { out.write(*m) };
            Ok(())
        })
    }

    #[test]
    fn pointer_checks_name_the_parameter() {
        let r = 1u64;
        let mut m = 10u64;
        let mut out = 0u64;
        let s = c"abc";
        assert_eq!(takes_ptrs(&r, &mut m, &mut out, s.as_ptr()), NPUALLOC_OK);
        assert_eq!((m, out), (14, 14));

        out = 0;
        assert_eq!(takes_ptrs(std::ptr::null(), &mut m, &mut out, s.as_ptr()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(last_error_message(), "invalid argument: r must not be NULL");
        assert_eq!(takes_ptrs(&r, &mut m, std::ptr::null_mut(), s.as_ptr()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(last_error_message(), "invalid argument: out must not be NULL");
        assert_eq!(takes_ptrs(&r, &mut m, &mut out, std::ptr::null()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert_eq!(last_error_message(), "invalid argument: s must not be NULL");
        assert_eq!((m, out), (14, 0), "nothing written on failure");

        let bytes = [0u8; 16];
        let misaligned = bytes.as_ptr().wrapping_add(1).cast::<u64>();
        assert_eq!(takes_ptrs(misaligned, &mut m, &mut out, s.as_ptr()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().contains("r (0x") && last_error_message().contains("not aligned"));

        let bad = [0xffu8, 0];
        assert_eq!(takes_ptrs(&r, &mut m, &mut out, bad.as_ptr().cast()), NPUALLOC_ERR_INVALID_ARGUMENT);
        assert!(last_error_message().starts_with("invalid argument: s is not valid UTF-8"));
    }
}
