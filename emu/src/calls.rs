//! Call counters: how often each exported ACL function was called, for
//! measurements (`aclemu_call_count`, `aclemu_thread_call_count`).
//!
//! Both counts only grow: a reader takes the difference of two readings, so
//! readers never disturb each other (fault injection's armed counts are
//! for fault injection only). The thread's count sees only the calls made
//! on the calling thread, so two measurements on two threads at once stay
//! exact. Every call is counted, failed or refused ones included.

use crate::api::{Api, COUNT};
use std::cell::Cell;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};

/// Calls per function, process-wide.
static TOTAL: [AtomicU64; COUNT] = [const { AtomicU64::new(0) }; COUNT];

thread_local! {
    /// Calls per function made on this thread.
    static MINE: [Cell<u64>; COUNT] = const { [const { Cell::new(0) }; COUNT] };
}

/// Counts one call of `api`.
pub fn note(api: Api) {
    TOTAL[api as usize].fetch_add(1, Ordering::Relaxed);
    // A call from a thread-local destructor after this thread's counters
    // are gone still counts process-wide.
    let _ = MINE.try_with(|m| {
        let c = &m[api as usize];
        c.set(c.get() + 1);
    });
}

/// Reads a count of the function named `function`; -1 for NULL or unknown.
///
/// # Safety
/// `function` must be NULL or a NUL-terminated string.
unsafe fn read(function: *const c_char, count: fn(Api) -> u64) -> i64 {
    let run = || {
        // SAFETY: NULL or NUL-terminated per the contract above.
        match unsafe { Api::by_c_name(function) } {
            Some(api) => i64::try_from(count(api)).unwrap_or(i64::MAX),
            None => -1,
        }
    };
    std::panic::catch_unwind(run).unwrap_or(-1)
}

/// Calls of the ACL function named `function` so far in this process (every
/// thread). -1 for an unknown or NULL name.
///
/// # Safety
/// `function` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_call_count(function: *const c_char) -> i64 {
    // SAFETY: the caller's contract is read's.
    unsafe { read(function, |api| TOTAL[api as usize].load(Ordering::Relaxed)) }
}

/// Calls of the ACL function named `function` made so far on the calling
/// thread. -1 for an unknown or NULL name; 0 once the thread's counters are
/// gone (a call from a thread-local destructor at thread exit).
///
/// # Safety
/// `function` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_thread_call_count(function: *const c_char) -> i64 {
    // SAFETY: the caller's contract is read's.
    unsafe { read(function, |api| MINE.try_with(|m| m[api as usize].get()).unwrap_or(0)) }
}
