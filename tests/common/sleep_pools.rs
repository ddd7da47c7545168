//! Wrappers the sleep, sleep_with and wake_with tests share: pools through
//! the C API, allocations routed to a pool, sleep and wake calls, and byte
//! patterns written to and read from emulated device memory.

use super::{free, malloc, Handle};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::pools::{npualloc_pool_begin, npualloc_pool_create, npualloc_pool_end};
use npualloc::ffi::sleep::{npualloc_sleep, npualloc_sleep_with, npualloc_wake, npualloc_wake_with};
use npualloc::runtime::Stream;

/// The emulator's counters and capacity are process-wide: the tests of one
/// binary that take this run one at a time.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn sleep(a: Handle) -> npualloc_status {
    // SAFETY: a live handle, or NULL (refused).
    unsafe { npualloc_sleep(a) }
}

pub fn wake(a: Handle) -> npualloc_status {
    // SAFETY: as in `sleep`.
    unsafe { npualloc_wake(a) }
}

pub fn sleep_with(a: Handle, offload: &[u64], discard: &[u64]) -> npualloc_status {
    // SAFETY: a live handle (or NULL, refused); each list is a slice of its own length.
    unsafe { npualloc_sleep_with(a, offload.as_ptr(), offload.len(), discard.as_ptr(), discard.len()) }
}

pub fn wake_with(a: Handle, pools: &[u64]) -> npualloc_status {
    // SAFETY: a live handle (or NULL, refused); the list is a slice of its own length.
    unsafe { npualloc_wake_with(a, pools.as_ptr(), pools.len()) }
}

/// A new pool of `config`; panics with the last error if it is refused.
pub fn pool(a: Handle, config: &str) -> u64 {
    let c = std::ffi::CString::new(config).unwrap();
    let mut id = 0u64;
    // SAFETY: a live handle, a C string and a valid out-pointer.
    let st = unsafe { npualloc_pool_create(a, c.as_ptr(), &mut id) };
    assert_eq!(st, NPUALLOC_OK, "{}", last_error_message());
    id
}

/// Begins (`on`) or ends the calling thread's route to `pool`.
pub fn route(a: Handle, pool: u64, on: bool) {
    // SAFETY: a live handle; a NULL stream routes the calling thread.
    let st = unsafe {
        if on {
            npualloc_pool_begin(a, pool, std::ptr::null_mut())
        } else {
            npualloc_pool_end(a, pool, std::ptr::null_mut())
        }
    };
    assert_eq!(st, NPUALLOC_OK, "{}", last_error_message());
}

/// Allocates `size` bytes from `pool` on the calling thread's route.
pub fn malloc_in(a: Handle, pool: u64, size: usize) -> Result<usize, (npualloc_status, String)> {
    route(a, pool, true);
    let got = malloc(a, size, Stream::DEFAULT);
    route(a, pool, false);
    got
}

/// Whether `pool` refuses allocations as asleep.
pub fn asleep(a: Handle, pool: u64) -> bool {
    match malloc_in(a, pool, 4096) {
        Err((st, m)) => st == NPUALLOC_ERR_INVALID_ARGUMENT && m.contains("asleep"),
        Ok(p) => {
            assert_eq!(free(a, p), NPUALLOC_OK);
            false
        }
    }
}

pub fn write(p: usize, len: usize, byte: u8) {
    // SAFETY: the emulator's device memory is host memory; p is a live block of len bytes.
    unsafe { std::ptr::write_bytes(p as *mut u8, byte, len) }
}

pub fn reads(p: usize, len: usize, byte: u8) -> bool {
    // SAFETY: as in `write`.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }.iter().all(|&b| b == byte)
}
