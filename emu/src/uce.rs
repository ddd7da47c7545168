//! Uncorrectable memory errors (UCE): `aclrtGetMemUceInfo`,
//! `aclrtMemUceRepair`, and the test control `aclemu_inject_uce`.
//!
//! On a card, a task that reads a failed HBM address fails, and the error
//! reaches the host at the next synchronize as `ACL_ERROR_RT_DEVICE_MEM_ERROR`
//! (507053); `aclrtGetMemUceInfo` then lists the failed ranges of the
//! device until `aclrtMemUceRepair` repairs them. torch_npu reads the list
//! on that error (`checkUceErrAndRepair`, NPUException.cpp) and asks its
//! allocator which ranges it holds (`check_uce_in_memory`).
//!
//! The runtime's checks (RT `src/acl/aclrt_impl/event.cpp`,
//! `aclrtGetMemUceInfoImpl`, `aclrtMemUceRepairImpl`): NULL pointers are
//! 100000, an array shorter than the list is 100000; a repair of more than
//! `RT_MAX_RECORD_PA_NUM_PER_DEV` (20, `pkg_inc/runtime/runtime/event.h`;
//! its message says 128) entries, or whose reserved words are not zero in
//! their first 14 bytes (a `memcmp` of `UCE_INFO_RESERVED_SIZE` bytes), is
//! 100000, before the device is checked; a repair drops the device's whole
//! list (`ApiImpl::MemUceRepair`, `GlobalContainer::DeleteMemUceInfo`).
//! The emulator keeps up to 20 ranges per device; an injected range makes
//! the device's next synchronize (of a stream or of the device) fail once
//! with 507053, after it finished the work.

use crate::api::Api;
use crate::error::{require, AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_INVALID_DEVICEID};
use crate::ffi::{acl_entry, emu_entry, lock, write_out};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// `ACL_ERROR_RT_DEVICE_MEM_ERROR`.
pub const ACL_ERROR_RT_DEVICE_MEM_ERROR: crate::aclError = 507_053;
/// `RT_MAX_RECORD_PA_NUM_PER_DEV`.
const MAX_RANGES: usize = 20;
/// `UCE_INFO_RESERVED_SIZE`: the reserved words, and the bytes of them the
/// repair compares with zero.
const RESERVED: usize = 14;

/// `aclrtMemUceInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemUceInfo {
    pub addr: *mut std::ffi::c_void,
    pub len: usize,
    pub reserved: [usize; RESERVED],
}

/// Failed ranges per device, and whether the next synchronize reports one.
struct Device {
    ranges: Vec<(usize, usize)>,
    pending: bool,
}

static DEVICES: Mutex<Vec<Device>> = Mutex::new(Vec::new());
/// Some device has an error to report (so a synchronize costs one load).
static ANY_PENDING: AtomicBool = AtomicBool::new(false);

fn check_device(device: i32) -> AclResult<usize> {
    let count = crate::device::count();
    usize::try_from(device).ok().filter(|&d| d < count).ok_or(ACL_ERROR_RT_INVALID_DEVICEID)
}

fn with_device<T>(device: usize, f: impl FnOnce(&mut Device) -> T) -> T {
    let mut all = lock(&DEVICES);
    if all.len() <= device {
        all.resize_with(device + 1, || Device { ranges: Vec::new(), pending: false });
    }
    f(&mut all[device])
}

/// The synchronize of `device` that finished its work: 507053 once after
/// an error was injected.
pub fn report(device: i32) -> AclResult<()> {
    if !ANY_PENDING.load(Ordering::Acquire) {
        return Ok(());
    }
    let Ok(d) = usize::try_from(device) else { return Ok(()) };
    let failed = with_device(d, |dev| std::mem::take(&mut dev.pending));
    let mut all = lock(&DEVICES);
    ANY_PENDING.store(all.iter_mut().any(|d| d.pending), Ordering::Release);
    drop(all);
    if failed {
        Err(ACL_ERROR_RT_DEVICE_MEM_ERROR)
    } else {
        Ok(())
    }
}

unsafe fn get_info(device: i32, array: *mut MemUceInfo, size: usize, ret: *mut usize) -> AclResult<()> {
    require(!array.is_null() && !ret.is_null())?;
    let d = check_device(device)?;
    let ranges = with_device(d, |dev| dev.ranges.clone());
    if size < ranges.len() {
        return Err(ACL_ERROR_INVALID_PARAM);
    }
    for (i, &(addr, len)) in ranges.iter().enumerate() {
        let info = MemUceInfo { addr: addr as *mut _, len, reserved: [0; RESERVED] };
        // SAFETY: `array` holds `size` entries (the caller's promise), and
        // i < ranges.len() <= size.
        unsafe { write_out(array.add(i), info)? };
    }
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(ret, ranges.len()) }
}

unsafe fn repair(device: i32, array: *const MemUceInfo, size: usize) -> AclResult<()> {
    require(!array.is_null() && size <= MAX_RANGES)?;
    // SAFETY: `array` holds `size` entries (the caller's promise).
    let infos = unsafe { std::slice::from_raw_parts(array, size) };
    let zero_head = |i: &MemUceInfo| i.reserved.iter().flat_map(|w| w.to_ne_bytes()).take(RESERVED).all(|b| b == 0);
    require(infos.iter().all(zero_head))?;
    let d = check_device(device)?;
    with_device(d, |dev| dev.ranges.clear());
    Ok(())
}

/// Lists the device's failed memory ranges (`retSize` of them) in `array`
/// of `arraySize` entries.
///
/// # Safety
/// `array` must be NULL or hold `arraySize` writable entries; `retSize`
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemUceInfo(
    deviceId: i32,
    memUceInfoArray: *mut MemUceInfo,
    arraySize: usize,
    retSize: *mut usize,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::GetMemUceInfo, { unsafe { get_info(deviceId, memUceInfoArray, arraySize, retSize) } })
}

/// Repairs the listed ranges: they leave the device's list.
///
/// # Safety
/// `array` must be NULL or hold `arraySize` readable entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemUceRepair(
    deviceId: i32,
    memUceInfoArray: *const MemUceInfo,
    arraySize: usize,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::MemUceRepair, { unsafe { repair(deviceId, memUceInfoArray, arraySize) } })
}

/// Test control: an uncorrectable error at `len` bytes from `addr` on
/// `device`: listed by `aclrtGetMemUceInfo`, and reported (507053) by the
/// device's next synchronize. 0, or 100000 for a bad device, a zero
/// length or a full list.
///
/// # Safety
/// No pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_inject_uce(device: i32, addr: usize, len: usize) -> i32 {
    emu_entry!({
        let d = check_device(device).map_err(|_| ACL_ERROR_INVALID_PARAM)?;
        require(len > 0 && addr.checked_add(len).is_some())?;
        with_device(d, |dev| -> AclResult<()> {
            require(dev.ranges.len() < MAX_RANGES)?;
            dev.ranges.push((addr, len));
            dev.pending = true;
            Ok(())
        })?;
        ANY_PENDING.store(true, Ordering::Release);
        Ok(())
    })
}
