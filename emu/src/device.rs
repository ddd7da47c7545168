//! Emulated devices: how many there are, each one's memory capacity, and the
//! thread's current device (its current context's, see `context`).
//!
//! Capacity is a budget, not a reservation: memory is consumed only where it
//! is written, so multi-GiB traces replay on a small host. What is charged
//! is counted per page pool (huge, normal, 1 GiB), which `aclrtGetMemInfo`
//! reports pool by pool (RB: `MemGetInfoEx`): free memory is shared, so each
//! pool reports the device's free bytes, and as total what it holds plus
//! those; `ACL_HBM_MEM`, the huge and the normal pool together, reports the
//! capacity less the 1 GiB pool as total.
//!
//! The process has one finite address window that every device's
//! aclrtMalloc and reservations share: the driver hands all of them out of
//! one SVM range (`svm_define.h`: `DEVMM_SVM_MEM_START` 16 TiB,
//! `DEVMM_MAX_MAPPED_RANGE` 8 TiB, of which `DEVMM_NORMAL_ADDR_SIZE`, 5.25
//! TiB, is left once the DVPP and read-only heaps are carved out).
//! `ACLEMU_ADDRESS_SPACE=<size>`, default 5.25 TiB; running out gives 207001.

use crate::error::{AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_INVALID_DEVICEID, ACL_ERROR_RT_MEMORY_ALLOCATION};
use crate::faults::Api;
use crate::ffi::{acl_entry, emu_entry, write_out};
use crate::usage::Counters;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const DEFAULT_DEVICE_COUNT: usize = 8;
const DEFAULT_CAPACITY: u64 = 64 << 30;
/// `DEVMM_NORMAL_ADDR_SIZE`: 8 TiB less 2 TiB of DVPP heaps, 256 GiB and
/// 512 GiB of read-only heaps.
const DEFAULT_ADDRESS_SPACE: u64 = (8 << 40) - (2 << 40) - (256 << 30) - (512 << 30);

/// The page pools of a device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagePool {
    /// 2 MiB pages.
    Huge = 0,
    /// 4 KiB pages.
    Normal = 1,
    /// 1 GiB pages.
    Giant = 2,
}

/// One emulated device.
pub struct Device {
    /// Bytes that may be charged; changed at run time by tests.
    capacity: AtomicU64,
    /// Bytes charged by live aclrtMalloc blocks and physical handles.
    used: AtomicU64,
    /// `used`, split by `PagePool`.
    pool_used: [AtomicU64; 3],
    /// What `aclemu_get_usage` reports.
    pub usage: Counters,
}

/// Adds `bytes` to `counter` unless the sum would pass `limit`.
fn take_within(counter: &AtomicU64, bytes: u64, limit: u64) -> AclResult<()> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|&total| total <= limit)
        })
        .map(|_| ())
        .map_err(|_| ACL_ERROR_RT_MEMORY_ALLOCATION)
}

/// Takes `bytes` of the process's address window, or fails with 207001.
/// The window belongs to no device, so this needs none current.
pub fn take_address(bytes: u64) -> AclResult<()> {
    devices();
    take_within(&ADDRESS_USED, bytes, ADDRESS_SPACE.get().copied().unwrap_or(DEFAULT_ADDRESS_SPACE))
}

/// Returns address space taken earlier.
pub fn return_address(bytes: u64) {
    ADDRESS_USED.fetch_sub(bytes, Ordering::AcqRel);
}

impl Device {
    /// Charges `bytes` of `pool` against the capacity, or fails with 207001.
    pub fn charge(&self, bytes: u64, pool: PagePool) -> AclResult<()> {
        take_within(&self.used, bytes, self.capacity.load(Ordering::Acquire))?;
        self.pool_used[pool as usize].fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Returns bytes charged earlier.
    pub fn uncharge(&self, bytes: u64, pool: PagePool) {
        self.pool_used[pool as usize].fetch_sub(bytes, Ordering::AcqRel);
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn pool(&self, pool: PagePool) -> u64 {
        self.pool_used[pool as usize].load(Ordering::Acquire)
    }

    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    pub fn free_bytes(&self) -> u64 {
        self.capacity().saturating_sub(self.used.load(Ordering::Acquire))
    }
}

static DEVICES: OnceLock<Box<[Device]>> = OnceLock::new();
/// The process's address window (set with the devices) and what is taken.
static ADDRESS_SPACE: OnceLock<u64> = OnceLock::new();
static ADDRESS_USED: AtomicU64 = AtomicU64::new(0);

fn devices() -> &'static [Device] {
    DEVICES.get_or_init(|| {
        let count = std::env::var("ACLEMU_DEVICE_COUNT")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&n| n > 0 && n <= 1024)
            .unwrap_or(DEFAULT_DEVICE_COUNT);
        let capacity =
            std::env::var("ACLEMU_DEVICE_MEMORY").ok().and_then(|s| parse_size(&s)).unwrap_or(DEFAULT_CAPACITY);
        let address_space =
            std::env::var("ACLEMU_ADDRESS_SPACE").ok().and_then(|s| parse_size(&s)).unwrap_or(DEFAULT_ADDRESS_SPACE);
        let _ = ADDRESS_SPACE.set(address_space);
        (0..count)
            .map(|_| Device {
                capacity: AtomicU64::new(capacity),
                used: AtomicU64::new(0),
                pool_used: Default::default(),
                usage: Counters::default(),
            })
            .collect()
    })
}

/// Parses `8g`, `512m`, `64k`, `1t` or plain bytes (case-insensitive, an
/// optional trailing `b`/`ib` is allowed).
pub fn parse_size(text: &str) -> Option<u64> {
    let s = text.trim().to_ascii_lowercase();
    let s = s.strip_suffix("ib").or_else(|| s.strip_suffix('b')).unwrap_or(&s);
    let (digits, shift) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 10),
        'm' => (&s[..s.len() - 1], 20),
        'g' => (&s[..s.len() - 1], 30),
        't' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The number of emulated devices.
pub fn count() -> usize {
    devices().len()
}

/// Device `id`, or 107001.
pub fn get(id: i32) -> AclResult<&'static Device> {
    usize::try_from(id).ok().and_then(|i| devices().get(i)).ok_or(ACL_ERROR_RT_INVALID_DEVICEID)
}

/// The thread's current device id (its current context's device), or
/// 107002 when it has no live context (`context`).
pub fn current() -> AclResult<i32> {
    crate::context::current().map(|(_, device)| device)
}

/// The thread's current device id, if any (for bookkeeping that needs no device).
pub fn current_or(default: i32) -> i32 {
    current().unwrap_or(default)
}

/// Reports the calling thread's current device (107002 if none is set).
///
/// # Safety
/// `device_id` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDevice(device_id: *mut i32) -> crate::aclError {
    acl_entry!(Api::GetDevice, {
        if device_id.is_null() {
            return Err(ACL_ERROR_INVALID_PARAM);
        }
        let id = current()?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(device_id, id) }
    })
}

/// Which pools an `aclrtGetMemInfo` attr reports; empty for the DDR attrs
/// (the emulated device has no DDR, and the docs say a missing attr gives
/// 0/0).
fn info_pools(attr: u32) -> AclResult<&'static [PagePool]> {
    use PagePool::*;
    match attr {
        0 | 2 | 3 | 6 | 7 => Ok(&[]),
        1 => Ok(&[Huge, Normal]),
        4 | 8 | 13 | 16 => Ok(&[Huge]),
        5 | 9 | 12 | 15 => Ok(&[Normal]),
        10 | 11 | 14 | 17 => Ok(&[Giant]),
        _ => Err(ACL_ERROR_INVALID_PARAM),
    }
}

/// Free and total bytes of the current device's memory.
///
/// # Safety
/// `free` and `total` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemInfo(attr: u32, free: *mut usize, total: *mut usize) -> crate::aclError {
    acl_entry!(Api::GetMemInfo, {
        if free.is_null() || total.is_null() {
            return Err(ACL_ERROR_INVALID_PARAM);
        }
        let pools = info_pools(attr)?;
        let dev = get(current()?)?;
        let avail = dev.free_bytes();
        let (f, t) = match pools {
            [] => (0, 0),
            // Huge and normal pools: the device without its 1 GiB pages.
            [_, _] => (avail, dev.capacity().saturating_sub(dev.pool(PagePool::Giant))),
            [pool] => (avail, dev.pool(*pool).saturating_add(avail)),
            _ => unreachable!("one or two pools per attr"),
        };
        let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        // SAFETY: both checked non-NULL; the caller promises they are writable.
        unsafe {
            write_out(free, clamp(f))?;
            write_out(total, clamp(t))
        }
    })
}

/// Sets a device's capacity at run time. Allowed below current usage: later
/// allocations then fail until enough is freed. 0, or 107001 for a bad id.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_set_device_memory(device: i32, bytes: u64) -> i32 {
    emu_entry!({
        get(device)?.capacity.store(bytes, Ordering::Release);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("8g"), Some(8 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size(" 2GiB "), Some(2 << 30));
        assert_eq!(parse_size("4kb"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999t"), None);
    }
}
