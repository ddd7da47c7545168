//! The torch_npu pluggable-allocator entry points. `torch_npu.npu.NPUPluggableAllocator(path,
//! "npualloc_pluggable_malloc", "npualloc_pluggable_free")` and its optional hooks call these with a device id instead
//! of an allocator handle, so they share one process-wide allocator per device, created on first use from
//! `NPUALLOC_CONF`; a creation failure is remembered (not retried) and reported by every later call for that device.
//! A hook's failure is visible only as NULL or through `npualloc_last_error()`, which torch never reads, so refused
//! frees and failed hooks also print one line on stderr.

use super::handle::{npualloc_allocator, Allocator, Handle};
use super::status::npualloc_status;
use crate::config::Config;
use crate::core::DeviceAllocator;
use crate::error::{Error, Result};
use crate::runtime::Stream;
use crate::sys::aclrtStream;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many devices the pluggable entry points can serve (ids 0 to this - 1).
pub const NPUALLOC_PLUGGABLE_MAX_DEVICES: usize = 64;

/// A device's allocator as a never-destroyed C handle (`Allocator::into_raw_process_wide`) and the allocator behind it.
type Slot = OnceLock<Result<(Handle, &'static Allocator)>>;

static SLOTS: [Slot; NPUALLOC_PLUGGABLE_MAX_DEVICES] = [const { OnceLock::new() }; NPUALLOC_PLUGGABLE_MAX_DEVICES];

/// The device count `npualloc_pluggable_init` was given; 0: not called.
static DEVICE_COUNT: AtomicUsize = AtomicUsize::new(0);

fn check_device(device: c_int) -> Result<usize> {
    let limit = match DEVICE_COUNT.load(Ordering::Acquire) {
        0 => NPUALLOC_PLUGGABLE_MAX_DEVICES,
        n => n,
    };
    usize::try_from(device).ok().filter(|&d| d < limit).ok_or_else(|| {
        // `limit` is at least 1: init refuses a device count of 0.
        Error::InvalidArgument(format!("device {device} is not in 0 to {}", limit - 1))
    })
}

/// The allocator of `device`, created from `NPUALLOC_CONF` on first use.
pub(crate) fn allocator(device: c_int) -> Result<&'static DeviceAllocator> {
    created_slot(device).map(|(_, a)| &a.core)
}

fn created_slot(device: c_int) -> Result<&'static (Handle, &'static Allocator)> {
    let created = SLOTS[check_device(device)?].get_or_init(|| {
        let core = Config::from_env().and_then(|c| DeviceAllocator::new(c, device))?;
        Allocator::into_raw_process_wide(core)
    });
    created.as_ref().map_err(|e| e.clone())
}

/// The allocator of `device` if one was created successfully.
pub(crate) fn existing(device: c_int) -> Result<Option<&'static DeviceAllocator>> {
    Ok(SLOTS[check_device(device)?].get().and_then(|r| r.as_ref().ok()).map(|(_, a)| &a.core))
}

/// Every allocator created successfully so far.
fn created() -> impl Iterator<Item = &'static DeviceAllocator> {
    SLOTS.iter().filter_map(|s| s.get().and_then(|r| r.as_ref().ok())).map(|(_, a)| &a.core)
}

fn report(hook: &str, e: &Error) {
    eprintln!("npualloc: {hook}: {e}");
}

/// torch_npu's allocation hook: `size` bytes on `device` for work on `stream` (NULL: the device's default stream).
/// Returns the device address, or NULL with the thread's last error set (out of memory, bad device, the device's
/// allocator could not be created). Size 0 returns NULL and is not an error.
///
/// # Safety
/// `stream` is NULL or a stream of `device` (it is checked with the runtime).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pluggable_malloc(size: usize, device: c_int, stream: aclrtStream) -> *mut c_void {
    ffi_boundary!(fallible "npualloc_pluggable_malloc", std::ptr::null_mut(), {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        let a = allocator(device)?;
        Ok(a.malloc(size, Stream::from_raw(stream))? as *mut c_void)
    })
}

/// torch_npu's free hook: frees `ptr`, returned by `npualloc_pluggable_malloc` for `device`; `size` and `stream` are
/// not needed. NULL is a no-op (the device is not checked then either). A pointer this device's allocator does not own
/// (another device's, unknown, already freed) changes nothing: the last error says why and a line goes to stderr.
///
/// # Safety
/// `ptr` is NULL or came from `npualloc_pluggable_malloc` for `device`, and nothing but work already queued on its
/// streams uses the block after this call. `ptr` itself is only looked up, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pluggable_free(ptr: *mut c_void, size: usize, device: c_int, stream: aclrtStream) {
    let _ = size;
    let _ = stream;
    ffi_boundary!(fallible "npualloc_pluggable_free", (), {
        if ptr.is_null() {
            return Ok(());
        }
        let unknown =
            || Error::UnknownPointer(format!("free of {ptr:p} on device {device}, which has allocated nothing"));
        existing(device)
            .and_then(|a| a.ok_or_else(unknown))
            .and_then(|a| a.free(ptr as usize))
            .inspect_err(|e| report("free refused", e))
    })
}

/// torch_npu's init hook: the process will use devices `0..device_count`; later calls naming another device fail.
/// Allocators are still created on a device's first use. A count outside 1..=64 is refused (last error and stderr);
/// calling it again replaces the count.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_pluggable_init(device_count: c_int) {
    ffi_boundary!(fallible "npualloc_pluggable_init", (), {
        let n = usize::try_from(device_count).ok().filter(|n| (1..=NPUALLOC_PLUGGABLE_MAX_DEVICES).contains(n));
        let n = n.ok_or_else(|| {
            Error::InvalidArgument(format!("device_count {device_count} is not in 1..={NPUALLOC_PLUGGABLE_MAX_DEVICES}"))
        });
        DEVICE_COUNT.store(n.inspect_err(|e| report("init", e))?, Ordering::Release);
        Ok(())
    })
}

/// torch_npu's empty-cache hook: returns every cached, unused segment of every device's allocator to the runtime.
/// The first error is recorded as the last error; with `check_error` true, errors are also printed on stderr.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_pluggable_empty_cache(check_error: bool) {
    ffi_boundary!(fallible "npualloc_pluggable_empty_cache", (), {
        created()
            .map(|a| a.empty_cache().map(drop).inspect_err(|e| if check_error { report("empty_cache", e) }))
            .fold(Ok(()), Result::and)
    })
}

/// torch_npu's memory-fraction hook: caps `device`'s allocator at `fraction` of the device memory (in [0, 1], as
/// torch_npu allows; 0 lets it reserve nothing more), creating the allocator if needed. A bad fraction or device
/// changes nothing: last error and stderr.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_pluggable_set_memory_fraction(fraction: f64, device: c_int) {
    ffi_boundary!(fallible "npualloc_pluggable_set_memory_fraction", (), {
        // Checked first: a refused fraction must not create the allocator.
        crate::core::check_memory_fraction(fraction)
            .and_then(|()| allocator(device))
            .and_then(|a| a.set_memory_fraction(fraction))
            .inspect_err(|e| report("set_memory_fraction", e))
    })
}

/// torch_npu's base-allocation hook: for a pointer into a live block of any device's pluggable allocator, writes the
/// size of the segment holding it to `*size` and returns the segment's base address. Returns NULL (nothing written,
/// last error set) for NULL `size` or a pointer no allocator owns.
///
/// # Safety
/// `size` is NULL or valid for writing one `size_t`. `ptr` is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pluggable_base_alloc(ptr: *mut c_void, size: *mut usize) -> *mut c_void {
    ffi_boundary!(fallible "npualloc_pluggable_base_alloc", std::ptr::null_mut(), {
        let out = try_out!(size, "size");
        let Some((base, len)) = created().find_map(|a| a.segment_of(ptr as usize).ok()) else {
            return Err(Error::UnknownPointer(format!("{ptr:p} is not inside a live block of any device")));
        };
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(len) };
        Ok(base as *mut c_void)
    })
}

/// torch_npu's reset-peak hook: resets the peak statistics of `device`'s allocator, if created. A bad device: last
/// error and stderr. torch_npu 2.13 and later call it as `void(c10::DeviceIndex)` (`int8_t`), older releases as
/// `void(int)`, so only the low byte of `device` is read, as a signed 8-bit value: a caller passing an `int8_t` may
/// leave the upper bits of the register or stack slot undefined.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_pluggable_reset_peak_stats(device: c_int) {
    ffi_boundary!(fallible "npualloc_pluggable_reset_peak_stats", (), {
        // The `c10::DeviceIndex` (`int8_t`) in the low byte.
        existing(c_int::from((device & 0xff) as u8 as i8))
            .and_then(|a| a.map_or(Ok(()), DeviceAllocator::reset_peak_stats))
            .inspect_err(|e| report("reset_peak_stats", e))
    })
}

/// Test access: the statistics of `device`'s pluggable allocator.
pub fn stats(device: c_int) -> Result<Option<crate::core::Stats>> {
    existing(device)?.map(|a| a.stats()).transpose()
}

/// The process-wide allocator the pluggable entry points use for `device` (created on first use as they do), as a
/// handle for the whole C API: statistics, record/erase stream, hooks and snapshots of the memory torch_npu allocates.
/// `npualloc_destroy` refuses it: it lives until the process exits. Returns NPUALLOC_ERR_INVALID_ARGUMENT for NULL
/// `out` or a device outside the range `npualloc_pluggable_init` set (0..64 before it); a creation failure is that of
/// `npualloc_create`, returned again by every later call for the device.
///
/// # Safety
/// `out` is NULL or valid for writing one handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_pluggable_allocator(
    device: c_int,
    out: *mut *mut npualloc_allocator,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_pluggable_allocator", {
        let out = try_out!(out, "out");
        let (handle, _) = created_slot(device)?;
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(handle.as_ptr()) };
        Ok(())
    })
}
