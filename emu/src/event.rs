//! Events: create, record, query, synchronize, wait and destroy.
//!
//! An event belongs to the device current at creation. Recording enqueues a
//! marker on the stream, so the event completes once the work queued before
//! it did (and the marker itself, which a held stream keeps pending). Query
//! reports `aclrtEventRecordedStatus` (NOT_READY = 0, COMPLETE = 1 - the
//! opposite of `aclrtEventStatus`); a never-recorded event is COMPLETE.
//! Unknown or destroyed handles give 107017.

use crate::device;
use crate::error::{require, AclResult, ACL_ERROR_INVALID_PARAM};
use crate::faults::Api;
use crate::ffi::{acl_entry, handle, write_out, Kind};
use crate::queue::{engine, Work};
use crate::usage;
use std::ffi::c_void;

pub const ACL_EVENT_SYNC: u32 = 0x1;
/// Every documented event flag bit (reference/acl-api.md §3).
const KNOWN_FLAGS: u32 = 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40;

pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: u32 = 0;
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: u32 = 1;

unsafe fn create(event: *mut *mut c_void, flags: u32) -> AclResult<()> {
    require(!event.is_null() && flags & !KNOWN_FLAGS == 0)?;
    let dev = device::current()?;
    let id = engine().create_event(dev, flags);
    usage::add(&usage::of(dev).events, 1);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(event, handle(Kind::Event, id)) }
}

fn record(event: *mut c_void, stream: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let key = eng.resolve(stream)?;
    let seq = eng.submit(key, Work::Marker);
    eng.event_mut(id).at = Some((key, seq));
    Ok(())
}

unsafe fn query(event: *mut c_void, status: *mut u32) -> AclResult<()> {
    require(!event.is_null() && !status.is_null())?;
    let eng = engine();
    let id = eng.event_id(event)?;
    let done = eng
        .event(id)
        .at
        .is_none_or(|(key, seq)| eng.is_done(key, seq));
    drop(eng);
    let value = if done {
        ACL_EVENT_RECORDED_STATUS_COMPLETE
    } else {
        ACL_EVENT_RECORDED_STATUS_NOT_READY
    };
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(status, value) }
}

fn synchronize(event: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let rec = eng.event(id);
    let (dev, at) = (rec.device, rec.at);
    if let Some((key, seq)) = at {
        eng.finish(key, seq);
    }
    usage::add(&usage::of(dev).syncs, 1);
    Ok(())
}

fn stream_wait(stream: *mut c_void, event: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let key = eng.resolve(stream)?;
    let rec = eng.event(id);
    // [doc] events created with a flag but without ACL_EVENT_SYNC cannot be
    // waited on.
    require(rec.flags & ACL_EVENT_SYNC != 0)?;
    if let Some((wait_on, seq)) = rec.at {
        if !eng.is_done(wait_on, seq) {
            eng.submit(
                key,
                Work::Wait {
                    stream: wait_on,
                    seq,
                },
            );
        }
    }
    Ok(())
}

fn destroy(event: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let rec = eng.remove_event(id).ok_or(ACL_ERROR_INVALID_PARAM)?;
    usage::sub(&usage::of(rec.device).events, 1);
    Ok(())
}

/// Creates an event (waitable, like ACL_EVENT_SYNC) on the current device.
///
/// # Safety
/// `event` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut *mut c_void) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateEvent, {
        unsafe { create(event, ACL_EVENT_SYNC) }
    })
}

/// Creates an event with flags; unknown flag bits give 100000. Without
/// ACL_EVENT_SYNC the event cannot be waited on.
///
/// # Safety
/// `event` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(
    event: *mut *mut c_void,
    flag: u32,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateEventWithFlag, { unsafe { create(event, flag) } })
}

/// Records the event at the current end of `stream` (NULL = default stream).
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordEvent(
    event: *mut c_void,
    stream: *mut c_void,
) -> crate::aclError {
    acl_entry!(Api::RecordEvent, { record(event, stream) })
}

/// Reports NOT_READY (0) or COMPLETE (1).
///
/// # Safety
/// `status` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventStatus(
    event: *mut c_void,
    status: *mut u32,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::QueryEventStatus, { unsafe { query(event, status) } })
}

/// Finishes the recorded stream's work up to the event and counts a sync.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeEvent(event: *mut c_void) -> crate::aclError {
    acl_entry!(Api::SynchronizeEvent, { synchronize(event) })
}

/// Makes later work on `stream` (NULL = default stream) wait for the event.
/// An event created with flags lacking ACL_EVENT_SYNC gives 100000.
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEvent(
    stream: *mut c_void,
    event: *mut c_void,
) -> crate::aclError {
    acl_entry!(Api::StreamWaitEvent, { stream_wait(stream, event) })
}

/// Destroys an event.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyEvent(event: *mut c_void) -> crate::aclError {
    acl_entry!(Api::DestroyEvent, { destroy(event) })
}
