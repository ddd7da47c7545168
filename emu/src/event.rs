//! Events: create, record, query, synchronize, wait and destroy.
//!
//! An event belongs to the device current at creation. Recording enqueues a
//! marker on the stream, so the event completes once the work queued before
//! it did (and the marker itself, which a held stream keeps pending). Query
//! reports `aclrtEventRecordedStatus` (NOT_READY = 0, COMPLETE = 1 - the
//! opposite of `aclrtEventStatus`). Unknown or destroyed handles give 107017.
//!
//! The runtime's rules (RB "Events and streams"):
//! - events of `aclrtCreateEvent` and `aclrtCreateEventWithFlag` are "old
//!   mode": NOT_READY until first recorded;
//! - `aclrtCreateEventWithFlag` refuses the flags 0 and 0x40 (107000);
//! - `aclrtStreamWaitEvent` on an event without SYNC gives 207000, on a
//!   never-recorded one 107000;
//! - at most 65536 SYNC events live per device (207007 beyond);
//! - `aclrtCreateEventExWithFlag` events are COMPLETE until first recorded,
//!   a wait before that is a no-op, and they do not count against the
//!   limit; their flags are runtime event flags (`check_ex_flags`);
//! - completion may be reported late: with `ACLEMU_EVENT_LAG=<n>` or
//!   `aclemu_set_event_lag(n)` the first n queries after an event's work
//!   completed still say NOT_READY (the threaded runtime reads host-side
//!   record state); synchronizing on the event, its stream or its device
//!   ends the lag;
//! - an event recorded on a capturing stream is captured (`capture`): its
//!   query and synchronize give 107028 until the capture ends;
//! - IPC events (`aclrtCreateEventExWithFlag(ACL_EVENT_IPC)`, or opened by
//!   `aclrtIpcOpenEventHandle`) are recorded and waited on through a slot
//!   other processes share (`ipc::event`): only the latest record counts,
//!   one never recorded is complete, they may not be recorded or waited on
//!   in a capture (207000), and any process holding one may record it.

use crate::capture::ACL_ERROR_RT_EVENT_CAPTURED;
use crate::device;
use crate::error::{
    require, AclResult, ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    ACL_ERROR_RT_NO_EVENT_RESOURCE, ACL_ERROR_RT_PARAM_INVALID,
};
use crate::faults::Api;
use crate::ffi::{acl_entry, emu_entry, handle, write_out, Kind};
use crate::ipc::event::{self as ipc_event, EventSlot, HANDLE_SIZE};
use crate::queue::{engine, Engine, Work};
use crate::usage;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;

pub const ACL_EVENT_SYNC: u32 = 0x1;
const ACL_EVENT_IPC: u32 = 0x40;
/// Every documented event flag bit (docs/acl-api.md §3).
const KNOWN_FLAGS: u32 = 0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x40;
/// Live SYNC events per device on A2/A3 (docs 07).
const MAX_SYNC_EVENTS: usize = 65536;

/// Queries that still report NOT_READY after an event's work completed.
static LAG: LazyLock<AtomicU32> = LazyLock::new(|| {
    let lag = std::env::var("ACLEMU_EVENT_LAG").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    AtomicU32::new(lag)
});

/// Queries that report NOT_READY after a new record's work completed.
pub fn lag() -> u32 {
    LAG.load(Ordering::Relaxed)
}

/// True while completion is reported late (synchronize calls then end the
/// lag of the events they cover).
pub fn lag_on() -> bool {
    lag() > 0
}

pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: u32 = 0;
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: u32 = 1;

unsafe fn create(event: *mut *mut c_void, flags: u32) -> AclResult<()> {
    require(!event.is_null() && flags & !KNOWN_FLAGS == 0)?;
    let dev = device::current()?;
    let mut eng = engine();
    if flags & ACL_EVENT_SYNC != 0 && eng.sync_events(dev) >= MAX_SYNC_EVENTS {
        return Err(ACL_ERROR_RT_NO_EVENT_RESOURCE);
    }
    let id = eng.create_event(dev, flags, false, flags & ACL_EVENT_SYNC != 0);
    drop(eng);
    usage::add(&usage::of(dev).events, 1);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(event, handle(Kind::Event, id)) }
}

/// The flags `aclrtCreateEventExWithFlag` takes as runtime event flags:
/// DDSYNC_NS 0x1, STREAM_MARK 0x2, DDSYNC 0x4, TIME_LINE 0x8, IPC 0x40;
/// MC2 0x10, EXTERNAL 0x20 and IPC only alone (`ApiErrorDecorator::EventCreateEx`).
const EX_FLAGS: u32 = 0x1 | 0x2 | 0x4 | 0x8 | 0x40;
const EX_ALONE: [u32; 3] = [0x10, 0x20, 0x40];
/// Runtime flags whose events streams can wait for (`IsEventWithoutWaitTask`
/// is false): DDSYNC_NS, DDSYNC, EXTERNAL, IPC.
const EX_WAITABLE: u32 = 0x1 | 0x4 | 0x20 | 0x40;

/// The runtime's checks of an `aclrtCreateEventExWithFlag` flag.
fn check_ex_flags(flag: u32) -> AclResult<()> {
    if EX_ALONE.iter().any(|&alone| flag & alone != 0 && flag & !alone != 0) {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    if flag & EX_FLAGS == 0 || flag > EX_FLAGS {
        return Err(ACL_ERROR_RT_PARAM_INVALID);
    }
    Ok(())
}

unsafe fn create_ex(event: *mut *mut c_void, flag: u32) -> AclResult<()> {
    require(!event.is_null())?;
    check_ex_flags(flag)?;
    let dev = device::current()?;
    // `IpcEvent::Setup` makes the shared memory at creation.
    let ipc = if flag == ACL_EVENT_IPC { Some(ipc_event::create()?) } else { None };
    let id = add_event(dev, flag, ipc);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(event, handle(Kind::Event, id)) }
}

/// Adds an event of the runtime's newer kind on `dev`; an IPC event with
/// its shared slot.
fn add_event(dev: i32, flag: u32, ipc: Option<EventSlot>) -> u64 {
    let mut eng = engine();
    let id = eng.create_event(dev, flag, true, flag & EX_WAITABLE != 0);
    eng.event_mut(id).ipc = ipc.map(|slot| (slot, 0));
    drop(eng);
    usage::add(&usage::of(dev).events, 1);
    id
}

/// The shared slot of IPC event `id`, if it is one.
fn ipc_slot(eng: &Engine, id: u64) -> Option<EventSlot> {
    eng.event(id).ipc.as_ref().map(|(slot, _)| slot.clone())
}

/// The stream position of IPC event `id`'s latest record when this
/// process made it (a wait or synchronize can then run that stream).
fn local_latest(eng: &Engine, id: u64, latest: u64) -> Option<(u64, u64)> {
    let rec = eng.event(id);
    match rec.ipc {
        Some((_, n)) if n == latest => rec.at,
        _ => None,
    }
}

unsafe fn ipc_get_handle(event: *mut c_void, out: *mut IpcEventHandle) -> AclResult<()> {
    require(!out.is_null() && !event.is_null())?;
    let eng = engine();
    let id = eng.event_id(event)?;
    // `ApiImplEvent::IpcGetEventHandle`: "Only IPC events are supported".
    let slot = ipc_slot(&eng, id).ok_or(ACL_ERROR_RT_PARAM_INVALID)?;
    drop(eng);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, IpcEventHandle { reserved: slot.handle() }) }
}

unsafe fn ipc_open(shared: IpcEventHandle, event: *mut *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let dev = device::current()?;
    let slot = ipc_event::open(&shared.reserved)?;
    let id = add_event(dev, ACL_EVENT_IPC, Some(slot));
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(event, handle(Kind::Event, id)) }
}

/// `aclrtIpcEventHandle`: 64 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcEventHandle {
    pub reserved: [u8; HANDLE_SIZE],
}

fn record(event: *mut c_void, stream: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let key = eng.resolve(stream)?;
    // "Event recording": a stream of another context is 107003.
    crate::context::check_stream(key)?;
    if let Some(slot) = ipc_slot(&eng, id) {
        // `ApiErrorDecorator::EventRecord`: no IPC event in a capture.
        if eng.capture.is_capturing(key) {
            return Err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
        }
        let n = slot.slot.record();
        let seq = eng.submit(key, Work::Signal { slot: slot.slot, n });
        let rec = eng.event_mut(id);
        rec.at = Some((key, seq));
        rec.ipc.as_mut().expect("an IPC event").1 = n;
        return Ok(());
    }
    if eng.capture.is_capturing(key) {
        // Captured: recorded into the model, not at the stream's end.
        eng.submit(key, Work::Record { event: id });
        return Ok(());
    }
    let seq = eng.submit(key, Work::Marker);
    let rec = eng.event_mut(id);
    rec.at = Some((key, seq));
    rec.lag_left = lag();
    Ok(())
}

unsafe fn query(event: *mut c_void, status: *mut u32) -> AclResult<()> {
    require(!event.is_null() && !status.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    if let Some(slot) = ipc_slot(&eng, id) {
        // `IpcEventQuery`: the latest record only; none is complete.
        eng.poll_remote();
        let done = slot.slot.reached(slot.slot.latest());
        drop(eng);
        let value = if done { ACL_EVENT_RECORDED_STATUS_COMPLETE } else { ACL_EVENT_RECORDED_STATUS_NOT_READY };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        return unsafe { write_out(status, value) };
    }
    if eng.capture.event_captured(id) {
        return Err(ACL_ERROR_RT_EVENT_CAPTURED);
    }
    // Work queued behind another process's IPC event record may run now.
    eng.poll_remote();
    // Old-mode events: NOT_READY until first recorded; Ex events COMPLETE.
    let rec = eng.event(id);
    let mut done = rec.at.map_or(rec.ex, |(key, seq)| eng.is_done(key, seq));
    let rec = eng.event_mut(id);
    if done && rec.lag_left > 0 {
        rec.lag_left -= 1;
        done = false;
    }
    drop(eng);
    let value = if done { ACL_EVENT_RECORDED_STATUS_COMPLETE } else { ACL_EVENT_RECORDED_STATUS_NOT_READY };
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(status, value) }
}

fn synchronize(event: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    if let Some(slot) = ipc_slot(&eng, id) {
        // `IpcEventSync`: waits for the latest record, made here or in
        // another process.
        let latest = slot.slot.latest();
        if let Some((key, seq)) = local_latest(&eng, id, latest) {
            eng.finish(key, seq);
        }
        let dev = eng.event(id).device;
        drop(eng);
        usage::add(&usage::of(dev).syncs, 1);
        // This process's streams go on while it waits (the record may
        // wait for one of them).
        if !crate::queue::wait_remote(&slot.slot, latest, || engine().poll_remote()) {
            return Err(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
        }
        return Ok(());
    }
    if eng.capture.event_captured(id) {
        return Err(ACL_ERROR_RT_EVENT_CAPTURED);
    }
    let rec = eng.event(id);
    let (dev, at) = (rec.device, rec.at);
    if let Some((key, seq)) = at {
        eng.finish(key, seq);
    }
    eng.event_mut(id).lag_left = 0;
    usage::add(&usage::of(dev).syncs, 1);
    Ok(())
}

fn stream_wait(stream: *mut c_void, event: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let key = eng.resolve(stream)?;
    // `ApiImpl::StreamWaitEvent` checks the stream's context too.
    crate::context::check_stream(key)?;
    if let Some(slot) = ipc_slot(&eng, id) {
        // `ApiErrorDecorator::StreamWaitEvent`: no IPC event in a capture.
        if eng.capture.is_capturing(key) {
            return Err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
        }
        eng.poll_remote();
        // `IpcEventWait`: nothing to wait for when the latest record
        // finished or there is none.
        let latest = slot.slot.latest();
        if slot.slot.reached(latest) {
            return Ok(());
        }
        match local_latest(&eng, id, latest) {
            Some((stream, seq)) => eng.submit(key, Work::Wait { stream, seq }),
            None => eng.submit(key, Work::RemoteWait { slot: slot.slot, n: latest }),
        };
        return Ok(());
    }
    let rec = eng.event(id);
    // [doc] events created with a flag but without ACL_EVENT_SYNC (Ex
    // events: without a waitable flag) cannot be waited on (the runtime:
    // not supported).
    if !rec.waitable {
        return Err(ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    }
    // `Event::Wait`: "has not been recorded"; an Ex event is complete then.
    let (wait_on, seq) = match rec.at {
        Some(at) => at,
        None if rec.ex => return Ok(()),
        None => return Err(ACL_ERROR_RT_PARAM_INVALID),
    };
    {
        if !eng.is_done(wait_on, seq) {
            eng.submit(key, Work::Wait { stream: wait_on, seq });
        }
    }
    Ok(())
}

fn destroy(event: *mut c_void) -> AclResult<()> {
    require(!event.is_null())?;
    let mut eng = engine();
    let id = eng.event_id(event)?;
    let rec = eng.remove_event(id).ok_or(ACL_ERROR_INVALID_PARAM)?;
    drop(eng);
    usage::sub(&usage::of(rec.device).events, 1);
    if let Some((slot, _)) = rec.ipc {
        ipc_event::release(slot);
    }
    Ok(())
}

/// Creates an event (waitable, like ACL_EVENT_SYNC) on the current device.
///
/// # Safety
/// `event` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut *mut c_void) -> crate::aclError {
    acl_entry!(Api::CreateEvent, {
        // SAFETY: forwarded caller contract.
        unsafe { create(event, ACL_EVENT_SYNC) }
    })
}

/// Creates an event with flags; unknown flag bits give 100000, the flags 0
/// and ACL_EVENT_IPC alone 107000. Without ACL_EVENT_SYNC the event cannot
/// be waited on.
///
/// # Safety
/// `event` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut *mut c_void, flag: u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateEventWithFlag, {
        if flag == 0 || flag == ACL_EVENT_IPC {
            return Err(ACL_ERROR_RT_PARAM_INVALID);
        }
        // SAFETY: forwarded caller contract.
        unsafe { create(event, flag) }
    })
}

/// Creates an event of the runtime's newer kind: COMPLETE until first
/// recorded, no limit on how many live, waitable when `flag` has DDSYNC_NS,
/// DDSYNC, EXTERNAL or IPC. Bad flags give 107000; IPC (alone) makes an
/// event other processes can open (`aclrtIpcGetEventHandle`).
///
/// # Safety
/// `event` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventExWithFlag(event: *mut *mut c_void, flag: u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateEventExWithFlag, { unsafe { create_ex(event, flag) } })
}

/// Records the event at the current end of `stream` (NULL = default stream).
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordEvent(event: *mut c_void, stream: *mut c_void) -> crate::aclError {
    acl_entry!(Api::RecordEvent, { record(event, stream) })
}

/// Reports NOT_READY (0) or COMPLETE (1).
///
/// # Safety
/// `status` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventStatus(event: *mut c_void, status: *mut u32) -> crate::aclError {
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
/// An event lacking ACL_EVENT_SYNC gives 207000, a never-recorded one 107000.
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEvent(stream: *mut c_void, event: *mut c_void) -> crate::aclError {
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

/// Writes the handle by which another process opens IPC event `event`
/// (`aclrtIpcOpenEventHandle`); 107000 for an event that is not one.
///
/// # Safety
/// `handle` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcGetEventHandle(event: *mut c_void, handle: *mut IpcEventHandle) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::IpcGetEventHandle, { unsafe { ipc_get_handle(event, handle) } })
}

/// Opens another process's IPC event on the current device: the new event
/// waits for and makes records of the same event. 507899 when the handle
/// names no live IPC event of another process.
///
/// # Safety
/// `event` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcOpenEventHandle(handle: IpcEventHandle, event: *mut *mut c_void) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::IpcOpenEventHandle, { unsafe { ipc_open(handle, event) } })
}

/// Test control: the first `queries` queries of an event after its work
/// completed report NOT_READY (0 turns the lag off). Applies to later
/// records. Always 0.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_set_event_lag(queries: u32) -> i32 {
    emu_entry!({
        LAG.store(queries, Ordering::Relaxed);
        Ok(())
    })
}
