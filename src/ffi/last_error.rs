//! The thread-local last-error message behind `npualloc_last_error()`: one byte buffer per thread, NUL-terminated when
//! non-empty and reused, so recording an error allocates only for a message longer than any before it on that thread.
//! A pointer handed to C stays valid until the next npualloc call on the same thread records or clears a message.
//!
//! The buffer is a `thread_local!` with a destructor (it owns heap memory); glibc keeps a shared library loaded while
//! threads that registered such destructors live, so `dlclose` of npualloc does not unload it under them.

use super::status::npualloc_status;
use crate::error::Error;
use std::cell::RefCell;
use std::ffi::c_char;

thread_local! {
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

const EMPTY: &[u8] = b"\0";

/// Runs `f` on this thread's buffer, if it can be borrowed.
fn edit(f: impl FnOnce(&mut Vec<u8>)) {
    // During thread teardown the buffer may be gone already; then nobody is left to read a message.
    let _ = LAST_ERROR.try_with(|cell| cell.try_borrow_mut().map(|mut buf| f(&mut buf)));
}

/// Records `msg` as this thread's last error (interior NUL bytes become '?').
pub(crate) fn set_last_error(msg: &str) {
    edit(|buf| {
        buf.clear();
        buf.extend(msg.bytes().map(|b| if b == 0 { b'?' } else { b }));
        buf.push(0);
    });
}

/// Forgets this thread's last error (`npualloc_last_error()` returns "" again), keeping the buffer's capacity.
pub(crate) fn clear_last_error() {
    edit(Vec::clear);
}

/// Records `err` (its `Display` text) and returns the status it maps to.
pub(crate) fn fail(err: Error) -> npualloc_status {
    set_last_error(&err.to_string());
    npualloc_status::from(&err)
}

/// Runs `f` on this thread's message, NUL included; None when there is none or the buffer cannot be borrowed.
fn read<R>(f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    LAST_ERROR.try_with(|cell| cell.try_borrow().ok().filter(|buf| !buf.is_empty()).map(|buf| f(&buf))).ok().flatten()
}

/// This thread's last error as a Rust string ("" when there is none).
pub fn last_error_message() -> String {
    read(|buf| String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned()).unwrap_or_default()
}

/// The message recorded by the most recent failing npualloc call on this thread, or "" when there is none. Every
/// function that returns a status clears it when it starts, so after `NPUALLOC_OK` it is "" (unless the function
/// documents a note it leaves on success, such as `npualloc_destroy` reporting live blocks). Never returns NULL. The
/// string belongs to the library: do not free it; it stays valid until the next npualloc call on this thread, so copy
/// it to keep it. Each thread has its own message; this call does not change it.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_last_error() -> *const c_char {
    ffi_boundary!("npualloc_last_error", EMPTY.as_ptr().cast(), {
        // The pointer outlives the borrow: only later npualloc calls on this thread change the buffer.
        read(|buf| buf.as_ptr().cast::<c_char>()).unwrap_or(EMPTY.as_ptr().cast())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn c_last_error() -> String {
        // SAFETY: npualloc_last_error never returns NULL and always NUL-terminates.
        unsafe { CStr::from_ptr(npualloc_last_error()) }.to_str().unwrap().to_owned()
    }

    #[test]
    fn empty_until_set_then_cleared() {
        std::thread::spawn(|| {
            assert_eq!(c_last_error(), "");
            set_last_error("first");
            assert_eq!(c_last_error(), "first");
            set_last_error("a\0b");
            assert_eq!(c_last_error(), "a?b");
            clear_last_error();
            assert_eq!(c_last_error(), "");
            assert_eq!(last_error_message(), "");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn buffer_is_reused() {
        std::thread::spawn(|| {
            set_last_error(&"x".repeat(100));
            let first = npualloc_last_error();
            set_last_error("short");
            assert_eq!(npualloc_last_error(), first, "a shorter message reuses the buffer");
            assert_eq!(c_last_error(), "short");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn per_thread() {
        set_last_error("main thread");
        std::thread::spawn(|| assert_eq!(c_last_error(), "")).join().unwrap();
        assert_eq!(last_error_message(), "main thread");
    }

    #[test]
    fn fail_records_and_maps() {
        let call = crate::runtime::AclCallError { function: "aclrtMallocPhysical", code: 207001 };
        let status = fail(Error::runtime(call, "mapping a page"));
        assert_eq!(status, npualloc_status::NPUALLOC_ERR_RUNTIME);
        let msg = last_error_message();
        assert!(msg.contains("aclrtMallocPhysical") && msg.contains("207001"), "{msg}");
    }
}
