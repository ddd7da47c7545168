//! Anonymous host mappings that stand in for device and pinned memory.
//!
//! MAP_NORESERVE means only pages that are written cost host memory, so a
//! 64 GiB device budget fits on a small machine.

use std::ffi::c_void;

/// Rounds `len` up to whole pages (4 KiB is enough: mmap rounds further).
pub fn page_round(len: usize) -> Option<usize> {
    len.checked_add(4095).map(|n| n & !4095)
}

/// Maps `len` bytes of zeroed read-write memory; `None` if the host refuses.
pub fn map_rw(len: usize) -> Option<*mut c_void> {
    // SAFETY: a fresh anonymous mapping touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p)
}

/// Maps `len` bytes of the file `fd` from `offset`, shared: every mapping
/// of those bytes, in this process or another, sees the same memory.
/// `None` if the host refuses.
pub fn map_file(fd: std::os::fd::RawFd, offset: u64, len: usize) -> Option<*mut c_void> {
    let offset = libc::off_t::try_from(offset).ok()?;
    // SAFETY: a fresh mapping at an address the kernel picks touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, offset)
    };
    (p != libc::MAP_FAILED).then_some(p)
}

/// Unmaps a range returned by `map_rw` (or any range this crate mapped).
///
/// # Safety
/// Nothing may use the range afterwards.
pub unsafe fn unmap(ptr: *mut c_void, len: usize) {
    // SAFETY: the caller owns the range and gives it up.
    let rc = unsafe { libc::munmap(ptr, len) };
    debug_assert_eq!(rc, 0, "munmap of an emulator range failed");
}
