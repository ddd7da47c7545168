//! Physical memory of one device: one sparse memfd, with each physical handle
//! a range of it. One file descriptor per device (not per handle) lets 100k
//! handles live at once; freeing punches a hole so the pages go back to the
//! host. The file grows (sparsely) when no free range fits.

use crate::ranges::RangeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const MIN_GROWTH: u64 = 1 << 30;

pub struct Pool {
    fd: OwnedFd,
    file_len: u64,
    free: RangeSet,
}

impl Pool {
    /// Creates the device's empty memfd; `None` if the host refuses.
    pub fn new(device: i32) -> Option<Pool> {
        let name = std::ffi::CString::new(format!("aclemu-hbm-{device}")).ok()?;
        // SAFETY: `name` is a valid C string; the new fd is owned below.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: memfd_create returned a fresh descriptor we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(Pool { fd, file_len: 0, free: RangeSet::default() })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reserves `size` bytes of the file; returns their offset.
    pub fn alloc(&mut self, size: u64) -> Option<u64> {
        if let Some(offset) = self.free.take(size) {
            return Some(offset);
        }
        let grow = size.max(self.file_len).max(MIN_GROWTH);
        let new_len = self.file_len.checked_add(grow)?;
        // SAFETY: plain syscall on our own descriptor.
        if unsafe { libc::ftruncate(self.fd.as_raw_fd(), i64::try_from(new_len).ok()?) } != 0 {
            return None;
        }
        self.free.insert(self.file_len, grow);
        self.file_len = new_len;
        self.free.take(size)
    }

    /// Returns a range and drops its pages.
    pub fn release(&mut self, offset: u64, size: u64) {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: plain syscall on our own descriptor; no mapping of this
        // range is live (the caller releases only unmapped handles).
        let rc = unsafe { libc::fallocate(self.fd.as_raw_fd(), mode, offset as i64, size as i64) };
        debug_assert_eq!(rc, 0, "punching a hole in the device memfd failed");
        self.free.insert(offset, size);
    }
}
