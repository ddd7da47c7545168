//! Streams: create/destroy/synchronize/query, device synchronize, and the
//! test controls `aclemu_stream_hold` / `aclemu_stream_release`.
//!
//! A stream belongs to the device current when it was created. NULL means the
//! current device's default stream where ACL allows it. Unknown or destroyed
//! handles give 107017 ACL_ERROR_RT_INVALID_HANDLE. A violation involving a
//! stream (Note [pins]) makes its next synchronize or release return 507000,
//! and the next device synchronize of its device. Query, synchronize and
//! destroy of a capturing stream give 107027 (`capture`).

use crate::device;
use crate::error::{require, AclResult, ACL_ERROR_RT_INTERNAL_ERROR};
use crate::faults::Api;
use crate::ffi::{acl_entry, emu_entry, handle, write_out, Kind};
use crate::queue::engine;
use crate::usage;
use std::ffi::c_void;

/// Creates a stream in the current context; returns its engine key.
pub fn create_in_current() -> AclResult<u64> {
    let (ctx, dev) = crate::context::current()?;
    let id = engine().create_stream(dev);
    crate::context::adopt_stream(id, ctx);
    usage::add(&usage::of(dev).streams, 1);
    Ok(id)
}

unsafe fn create(stream: *mut *mut c_void) -> AclResult<()> {
    require(!stream.is_null())?;
    let id = create_in_current()?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(stream, handle(Kind::Stream, id)) }
}

fn destroy(stream: *mut c_void) -> AclResult<()> {
    require(!stream.is_null())?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    // The runtime destroys only streams of the current context.
    crate::context::check_stream(key)?;
    refuse_capturing(&eng, key)?;
    let dev = eng.destroy_stream(key);
    drop(eng);
    crate::context::forget_stream(key);
    crate::stream_config::forget(key);
    usage::sub(&usage::of(dev).streams, 1);
    Ok(())
}

/// 107027 while the stream captures (the runtime's stream query,
/// synchronize and destroy checks; `capture`).
pub(crate) fn refuse_capturing(eng: &crate::queue::Engine, key: u64) -> AclResult<()> {
    if eng.capture.is_capturing(key) {
        Err(crate::capture::ACL_ERROR_RT_STREAM_CAPTURED)
    } else {
        Ok(())
    }
}

/// 507000 if a violation involved the stream since it was last reported.
fn report(faulted: bool) -> AclResult<()> {
    if faulted {
        Err(ACL_ERROR_RT_INTERNAL_ERROR)
    } else {
        Ok(())
    }
}

fn synchronize(stream: *mut c_void) -> AclResult<()> {
    // `ApiImpl::StreamSynchronize` needs a current context (of any device:
    // it switches to the stream's and back); without one, 107002.
    crate::context::current()?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    refuse_capturing(&eng, key)?;
    finish(&mut eng, key)
}

/// Finishes stream `key`'s queued work (held or not), counts a sync and
/// reports a violation; a stream whose flags make the runtime return at
/// once (`stream_config::returns_at_once`) is left as it is.
pub fn finish(eng: &mut crate::queue::Engine, key: u64) -> AclResult<()> {
    if crate::stream_config::returns_at_once(key) {
        return Ok(());
    }
    eng.finish(key, u64::MAX);
    if crate::event::lag_on() {
        eng.clear_lag(|_, s| s == key);
    }
    let dev = eng.device_of(key);
    usage::add(&usage::of(dev).syncs, 1);
    report(eng.take_fault(key))?;
    crate::uce::report(dev)
}

/// aclrtStreamStatus: COMPLETE 0, NOT_READY 1.
const STREAM_STATUS_COMPLETE: u32 = 0;
const STREAM_STATUS_NOT_READY: u32 = 1;

unsafe fn query(stream: *mut c_void, status: *mut u32) -> AclResult<()> {
    require(!status.is_null())?;
    // `ApiImpl::StreamQuery`: a current context is needed, not the stream's.
    crate::context::current()?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    refuse_capturing(&eng, key)?;
    // Work queued behind another process's IPC event record may run now.
    eng.poll_remote();
    let idle = eng.is_idle(key);
    drop(eng);
    let value = if idle { STREAM_STATUS_COMPLETE } else { STREAM_STATUS_NOT_READY };
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(status, value) }
}

fn synchronize_device() -> AclResult<()> {
    let dev = device::current()?;
    let mut eng = engine();
    finish_device(&mut eng, dev)
}

/// Finishes the queued work of every stream of `dev`, counts a sync and
/// reports a violation.
pub fn finish_device(eng: &mut crate::queue::Engine, dev: i32) -> AclResult<()> {
    eng.finish_device(dev);
    if crate::event::lag_on() {
        eng.clear_lag(|eng, s| eng.device_of(s) == dev);
    }
    usage::add(&usage::of(dev).syncs, 1);
    report(eng.take_device_faults(dev))?;
    crate::uce::report(dev)
}

fn set_held(stream: *mut c_void, held: bool) -> AclResult<()> {
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    eng.set_held(key, held);
    if held {
        Ok(())
    } else {
        report(eng.take_fault(key))
    }
}

/// Creates a stream on the current device (107002 without one).
///
/// # Safety
/// `stream` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut *mut c_void) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateStream, { unsafe { create(stream) } })
}

/// Destroys a stream after finishing its queued work. Allocator
/// registrations on it stay, as in the runtime.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStream(stream: *mut c_void) -> crate::aclError {
    acl_entry!(Api::DestroyStream, { destroy(stream) })
}

/// Finishes the stream's queued work (held or not) and counts a sync;
/// 507000 if a violation involved the stream since it was last reported,
/// 107027 while it captures.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeStream(stream: *mut c_void) -> crate::aclError {
    acl_entry!(Api::SynchronizeStream, { synchronize(stream) })
}

/// Whether the stream (NULL = default stream) has queued work:
/// COMPLETE (0) or NOT_READY (1); 107017 for an unknown handle.
///
/// # Safety
/// `status` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamQuery(stream: *mut c_void, status: *mut u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::StreamQuery, { unsafe { query(stream, status) } })
}

/// Finishes the queued work of every stream of the current device and
/// counts a sync; 507000 if a violation involved one of them.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeDevice() -> crate::aclError {
    acl_entry!(Api::SynchronizeDevice, { synchronize_device() })
}

/// Test control: later work on `stream` (NULL = default stream) stays
/// queued until released or synchronized. 0 on success.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_stream_hold(stream: *mut c_void) -> i32 {
    emu_entry!({ set_held(stream, true) })
}

/// Test control: ends a hold; the stream's queued work completes (once any
/// event it waits for completes). 0 on success; 507000 if a violation
/// involved the stream since it was last reported.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_stream_release(stream: *mut c_void) -> i32 {
    emu_entry!({ set_held(stream, false) })
}
