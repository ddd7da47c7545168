//! Streams beyond create/destroy/synchronize: creation with a priority and
//! flags, forced destruction, synchronization with a timeout, and the
//! per-stream settings torch_npu makes (overflow switch, failure mode, id).
//!
//! What the runtime does, from docs/runtime-behaviour.md
//! "Streams with a configuration":
//! - `aclrtCreateStreamWithConfig` (`aclrtCreateStreamWithConfigImpl`,
//!   src/acl/aclrt_impl/stream.cpp): NULL is 100000; the known ACL flag bits
//!   are translated, others dropped; the priority is clamped into [0, 7]
//!   (`ApiErrorDecorator::StreamCreate`).
//! - A synchronize of a stream created `ACL_STREAM_PERSISTENT` or
//!   `ACL_STREAM_DEVICE_USE_ONLY` returns at once, waiting for nothing
//!   (`ApiErrorDecorator::StreamSynchronize`).
//! - `aclrtSynchronizeStreamWithTimeout` / `aclrtSynchronizeDeviceWithTimeout`:
//!   a timeout below -1 is 107000 in the ACL layer, 0 is 107000 in the
//!   runtime (`StreamSynchronize`, `DeviceSynchronize`: "greater than or
//!   equal to -1 and not equal to 0"), -1 waits for ever; work that does not
//!   finish in time gives 507046 (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT). Queued
//!   emulator work takes no time, so only a held stream (`aclemu_stream_hold`),
//!   or work waiting for one, does not finish: with a timeout other than -1
//!   the call then returns 507046 and leaves the work queued; with -1 it
//!   forces the work through, as `aclrtSynchronizeStream` does.
//! - `aclrtDestroyStreamForce` (`rtStreamDestroyForce`): NULL is 100000; the
//!   stream goes without running its queued work, which is dropped (with
//!   its pins; streams waiting for it go on).
//! - `aclrtSetStreamOverflowSwitch`: a flag other than 0 or 1 is 100000
//!   (ACL layer); `aclrtGetStreamOverflowSwitch` answers the last one set
//!   (0 at first), 107003 for a stream of another context
//!   (`ApiImpl::GetStreamOverflowSwitch`); `aclrtSetStreamFailureMode` keeps the mode;
//!   `aclrtStreamGetId` answers the stream's id. NULL is the current
//!   device's default stream for all four (`GetCurStream`).
//!
//! Settings live in a map keyed by the stream's engine key. Its lock is
//! taken after the engine lock, never before.

use crate::error::{require, AclResult, ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT};
use crate::faults::Api;
use crate::ffi::{acl_entry, handle, lock, write_out, Kind};
use crate::queue::engine;
use crate::usage;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

/// The `ACL_STREAM_*` flags the emulator acts on; the others it keeps
/// (FAST_LAUNCH 0x1, FAST_SYNC 0x2, HUGE 0x8, CPU_SCHEDULE 0x10).
const ACL_STREAM_PERSISTENT: u32 = 0x4;
const ACL_STREAM_DEVICE_USE_ONLY: u32 = 0x20;
const KNOWN_FLAGS: u32 = 0x3f;
const LEAST_PRIORITY: u32 = 7;
/// Wait for ever.
const NO_TIMEOUT: i32 = -1;

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Settings {
    priority: u32,
    flags: u32,
    overflow: u32,
    failure_mode: u64,
}

static SETTINGS: LazyLock<Mutex<HashMap<u64, Settings>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn settings(key: u64) -> Settings {
    lock(&SETTINGS).get(&key).copied().unwrap_or_default()
}

fn update(key: u64, change: impl FnOnce(&mut Settings)) {
    change(lock(&SETTINGS).entry(key).or_default());
}

/// True if a synchronize of stream `key` returns without waiting.
pub fn returns_at_once(key: u64) -> bool {
    settings(key).flags & (ACL_STREAM_PERSISTENT | ACL_STREAM_DEVICE_USE_ONLY) != 0
}

/// Forgets a destroyed stream's settings.
pub fn forget(key: u64) {
    lock(&SETTINGS).remove(&key);
}

unsafe fn create(stream: *mut *mut c_void, priority: u32, flag: u32) -> AclResult<()> {
    require(!stream.is_null())?;
    let key = crate::stream::create_in_current()?;
    update(key, |s| {
        s.priority = priority.min(LEAST_PRIORITY);
        s.flags = flag & KNOWN_FLAGS;
    });
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(stream, handle(Kind::Stream, key)) }
}

fn destroy_force(stream: *mut c_void) -> AclResult<()> {
    require(!stream.is_null())?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    crate::context::check_stream(key)?;
    let dev = eng.discard_stream(key);
    drop(eng);
    crate::context::forget_stream(key);
    forget(key);
    usage::sub(&usage::of(dev).streams, 1);
    Ok(())
}

/// The ACL layer's and the runtime's checks of a timeout.
fn check_timeout(timeout: i32) -> AclResult<()> {
    if timeout < NO_TIMEOUT || timeout == 0 {
        Err(ACL_ERROR_RT_PARAM_INVALID)
    } else {
        Ok(())
    }
}

fn synchronize_stream(stream: *mut c_void, timeout: i32) -> AclResult<()> {
    check_timeout(timeout)?;
    // As `aclrtSynchronizeStream`: a current context is needed (107002).
    crate::context::current()?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    crate::stream::refuse_capturing(&eng, key)?;
    if timeout != NO_TIMEOUT && !returns_at_once(key) && !eng.drains_unforced(key) {
        return Err(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    }
    crate::stream::finish(&mut eng, key)
}

fn synchronize_device(timeout: i32) -> AclResult<()> {
    check_timeout(timeout)?;
    let dev = crate::device::current()?;
    let mut eng = engine();
    if timeout != NO_TIMEOUT && !eng.device_drains_unforced(dev) {
        return Err(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    }
    crate::stream::finish_device(&mut eng, dev)
}

/// The engine key of `stream` (NULL: the current default stream).
fn key_of(stream: *mut c_void) -> AclResult<u64> {
    engine().resolve(stream)
}

fn set_overflow(stream: *mut c_void, flag: u32) -> AclResult<()> {
    require(flag <= 1)?;
    let key = key_of(stream)?;
    update(key, |s| s.overflow = flag);
    Ok(())
}

unsafe fn get_overflow(stream: *mut c_void, flag: *mut u32) -> AclResult<()> {
    require(!flag.is_null())?;
    let key = key_of(stream)?;
    // `ApiImpl::GetStreamOverflowSwitch` refuses another context's stream.
    crate::context::check_stream(key)?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(flag, settings(key).overflow) }
}

fn set_failure_mode(stream: *mut c_void, mode: u64) -> AclResult<()> {
    let key = key_of(stream)?;
    update(key, |s| s.failure_mode = mode);
    Ok(())
}

unsafe fn stream_id(stream: *mut c_void, id: *mut i32) -> AclResult<()> {
    require(!id.is_null())?;
    let key = key_of(stream)?;
    let value = i32::try_from(key).map_err(|_| ACL_ERROR_RT_PARAM_INVALID)?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(id, value) }
}

/// Creates a stream with a priority (clamped to 0..=7) and `ACL_STREAM_*`
/// flags in the current context.
///
/// # Safety
/// `stream` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamWithConfig(
    stream: *mut *mut c_void,
    priority: u32,
    flag: u32,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateStreamWithConfig, { unsafe { create(stream, priority, flag) } })
}

/// Destroys a stream without running its queued work.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStreamForce(stream: *mut c_void) -> crate::aclError {
    acl_entry!(Api::DestroyStreamForce, { destroy_force(stream) })
}

/// `aclrtSynchronizeStream` with a timeout in ms (-1: none); 507046 when a
/// held stream keeps the work from finishing.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeStreamWithTimeout(stream: *mut c_void, timeout: i32) -> crate::aclError {
    acl_entry!(Api::SynchronizeStreamWithTimeout, { synchronize_stream(stream, timeout) })
}

/// `aclrtSynchronizeDevice` with a timeout in ms (-1: none); 507046 when a
/// held stream of the device keeps its work from finishing.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeDeviceWithTimeout(timeout: i32) -> crate::aclError {
    acl_entry!(Api::SynchronizeDeviceWithTimeout, { synchronize_device(timeout) })
}

/// Sets the stream's overflow-detection switch (0 or 1).
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamOverflowSwitch(stream: *mut c_void, flag: u32) -> crate::aclError {
    acl_entry!(Api::SetStreamOverflowSwitch, { set_overflow(stream, flag) })
}

/// The stream's overflow-detection switch.
///
/// # Safety
/// `flag` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamOverflowSwitch(stream: *mut c_void, flag: *mut u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::GetStreamOverflowSwitch, { unsafe { get_overflow(stream, flag) } })
}

/// Keeps the stream's failure mode (the emulator's work never fails).
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamFailureMode(stream: *mut c_void, mode: u64) -> crate::aclError {
    acl_entry!(Api::SetStreamFailureMode, { set_failure_mode(stream, mode) })
}

/// The stream's id.
///
/// # Safety
/// `streamId` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetId(stream: *mut c_void, streamId: *mut i32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::StreamGetId, { unsafe { stream_id(stream, streamId) } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(check_timeout(-2), Err(ACL_ERROR_RT_PARAM_INVALID));
        assert_eq!(check_timeout(0), Err(ACL_ERROR_RT_PARAM_INVALID));
        assert_eq!(check_timeout(-1), Ok(()));
        assert_eq!(check_timeout(1), Ok(()));
    }

    #[test]
    fn only_persistent_and_device_only_streams_return_at_once() {
        let key = u64::MAX - 7;
        for (flags, at_once) in
            [(0, false), (0x1 | 0x2, false), (ACL_STREAM_PERSISTENT, true), (ACL_STREAM_DEVICE_USE_ONLY, true)]
        {
            update(key, |s| s.flags = flags);
            assert_eq!(returns_at_once(key), at_once, "flags {flags:#x}");
        }
        forget(key);
        assert!(!returns_at_once(key));
    }
}
