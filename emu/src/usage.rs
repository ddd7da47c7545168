//! Per-device accounting that tests read through `aclemu_get_usage`.
//!
//! Counters are plain atomics bumped by the module that owns each resource;
//! a snapshot is not atomic across fields, which is fine for tests that read
//! it once their own work is finished.

use crate::device;
use crate::error::ACL_ERROR_INVALID_PARAM;
use crate::ffi::{emu_entry, write_out};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a device has live (and how often it was synchronized). Same layout
/// as `aclemu_usage` in `include/acl_emu.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct aclemu_usage {
    /// Live aclrtMalloc memory: bytes as charged (padded) and blocks.
    pub malloc_bytes: u64,
    pub malloc_count: u64,
    /// Live aclrtMallocPhysical handles, including freed-but-still-mapped ones.
    pub physical_bytes: u64,
    pub physical_count: u64,
    /// Bytes mapped with aclrtMapMem, and live reserved address ranges.
    pub mapped_bytes: u64,
    pub reserved_ranges: u64,
    /// Live created streams (not the default stream), events, allocator descs.
    pub streams: u64,
    pub events: u64,
    pub descs: u64,
    /// Stream, event and device synchronize calls so far.
    pub syncs: u64,
}

/// The live counters behind `aclemu_usage`.
#[derive(Default)]
pub struct Counters {
    pub malloc_bytes: AtomicU64,
    pub malloc_count: AtomicU64,
    pub physical_bytes: AtomicU64,
    pub physical_count: AtomicU64,
    pub mapped_bytes: AtomicU64,
    pub reserved_ranges: AtomicU64,
    pub streams: AtomicU64,
    pub events: AtomicU64,
    pub descs: AtomicU64,
    pub syncs: AtomicU64,
}

/// Adds `n` to a counter.
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Subtracts `n` from a counter.
pub fn sub(counter: &AtomicU64, n: u64) {
    counter.fetch_sub(n, Ordering::Relaxed);
}

/// The counters of device `id`; ids reaching here were validated earlier.
pub fn of(id: i32) -> &'static Counters {
    &device::get(id).expect("device id validated by the caller").usage
}

impl Counters {
    fn snapshot(&self) -> aclemu_usage {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        aclemu_usage {
            malloc_bytes: get(&self.malloc_bytes),
            malloc_count: get(&self.malloc_count),
            physical_bytes: get(&self.physical_bytes),
            physical_count: get(&self.physical_count),
            mapped_bytes: get(&self.mapped_bytes),
            reserved_ranges: get(&self.reserved_ranges),
            streams: get(&self.streams),
            events: get(&self.events),
            descs: get(&self.descs),
            syncs: get(&self.syncs),
        }
    }
}

/// Copies device `device`'s usage into `out`. 0, 100000 for NULL `out`,
/// 107001 for a bad device id.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_get_usage(device: i32, out: *mut aclemu_usage) -> i32 {
    emu_entry!({
        if out.is_null() {
            return Err(ACL_ERROR_INVALID_PARAM);
        }
        // Memory that other processes held and have let go of counts as
        // given back from now on.
        crate::ipc::reap();
        let snapshot = device::get(device)?.usage.snapshot();
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, snapshot) }
    })
}

/// Live aclrtMallocHost memory of the whole process (pinned host memory
/// belongs to no device): bytes (page-rounded) into `bytes`, blocks into
/// `count`. 0, 100000 for a NULL pointer.
///
/// # Safety
/// `bytes` and `count` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_host_usage(bytes: *mut u64, count: *mut u64) -> i32 {
    emu_entry!({
        if bytes.is_null() || count.is_null() {
            return Err(ACL_ERROR_INVALID_PARAM);
        }
        let (b, n) = crate::memory::host_usage();
        // SAFETY: both checked non-NULL; the caller promises they are writable.
        unsafe {
            write_out(bytes, b)?;
            write_out(count, n)
        }
    })
}
