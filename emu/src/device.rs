//! Emulated devices: how many there are, each one's memory capacity, and the
//! thread's current device (thread-local, like an ACL context).
//!
//! Capacity is a budget, not a reservation: memory is consumed only where it
//! is written, so multi-GiB traces replay on a small host.

use crate::error::{
    AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_DEVICEID,
    ACL_ERROR_RT_MEMORY_ALLOCATION,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, emu_entry, write_out};
use crate::usage::Counters;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const DEFAULT_DEVICE_COUNT: usize = 8;
const DEFAULT_CAPACITY: u64 = 64 << 30;

/// One emulated device.
pub struct Device {
    /// Bytes that may be charged; changed at run time by tests.
    capacity: AtomicU64,
    /// Bytes charged by live aclrtMalloc blocks and physical handles.
    used: AtomicU64,
    /// What `aclemu_get_usage` reports.
    pub usage: Counters,
}

impl Device {
    /// Charges `bytes` against the capacity, or fails with 207001.
    pub fn charge(&self, bytes: u64) -> AclResult<()> {
        let cap = self.capacity.load(Ordering::Acquire);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= cap)
            })
            .map(|_| ())
            .map_err(|_| ACL_ERROR_RT_MEMORY_ALLOCATION)
    }

    /// Returns bytes charged earlier.
    pub fn uncharge(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    pub fn free_bytes(&self) -> u64 {
        self.capacity()
            .saturating_sub(self.used.load(Ordering::Acquire))
    }
}

static DEVICES: OnceLock<Box<[Device]>> = OnceLock::new();

fn devices() -> &'static [Device] {
    DEVICES.get_or_init(|| {
        let count = std::env::var("ACLEMU_DEVICE_COUNT")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&n| n > 0 && n <= 1024)
            .unwrap_or(DEFAULT_DEVICE_COUNT);
        let capacity = std::env::var("ACLEMU_DEVICE_MEMORY")
            .ok()
            .and_then(|s| parse_size(&s))
            .unwrap_or(DEFAULT_CAPACITY);
        (0..count)
            .map(|_| Device {
                capacity: AtomicU64::new(capacity),
                used: AtomicU64::new(0),
                usage: Counters::default(),
            })
            .collect()
    })
}

/// Parses `8g`, `512m`, `64k`, `1t` or plain bytes (case-insensitive, an
/// optional trailing `b`/`ib` is allowed).
pub fn parse_size(text: &str) -> Option<u64> {
    let s = text.trim().to_ascii_lowercase();
    let s = s
        .strip_suffix("ib")
        .or_else(|| s.strip_suffix('b'))
        .unwrap_or(&s);
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
    usize::try_from(id)
        .ok()
        .and_then(|i| devices().get(i))
        .ok_or(ACL_ERROR_RT_INVALID_DEVICEID)
}

thread_local! {
    /// The thread's current device, -1 when none is set.
    static CURRENT: Cell<i32> = const { Cell::new(-1) };
}

/// The thread's current device id, or 107002 when none is set.
pub fn current() -> AclResult<i32> {
    let id = CURRENT.with(Cell::get);
    if id < 0 {
        Err(ACL_ERROR_RT_CONTEXT_NULL)
    } else {
        Ok(id)
    }
}

/// The thread's current device id, if any (for bookkeeping that needs no device).
pub fn current_or(default: i32) -> i32 {
    current().unwrap_or(default)
}

/// Sets the calling thread's current device.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDevice(device_id: i32) -> crate::aclError {
    acl_entry!(Api::SetDevice, {
        get(device_id)?;
        CURRENT.with(|c| c.set(device_id));
        Ok(())
    })
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

/// Releases the thread's hold on a device. The emulator only clears the
/// thread's current device (if it is this one): streams and events live on
/// until destroyed, so leaks stay visible in `aclemu_get_usage`.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetDevice(device_id: i32) -> crate::aclError {
    acl_entry!(Api::ResetDevice, {
        get(device_id)?;
        CURRENT.with(|c| {
            if c.get() == device_id {
                c.set(-1);
            }
        });
        Ok(())
    })
}

/// HBM attrs report the device budget; DDR attrs report 0/0 (the emulated
/// device has no DDR, and the docs say a missing attr gives 0/0).
fn is_hbm_info_attr(attr: u32) -> AclResult<bool> {
    match attr {
        0 | 2 | 3 | 6 | 7 => Ok(false),
        1 | 4 | 5 | 8..=17 => Ok(true),
        _ => Err(ACL_ERROR_INVALID_PARAM),
    }
}

/// Free and total bytes of the current device's memory.
///
/// # Safety
/// `free` and `total` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemInfo(
    attr: u32,
    free: *mut usize,
    total: *mut usize,
) -> crate::aclError {
    acl_entry!(Api::GetMemInfo, {
        if free.is_null() || total.is_null() {
            return Err(ACL_ERROR_INVALID_PARAM);
        }
        let hbm = is_hbm_info_attr(attr)?;
        let dev = get(current()?)?;
        let (f, t) = if hbm {
            (dev.free_bytes(), dev.capacity())
        } else {
            (0, 0)
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
