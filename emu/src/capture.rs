//! Stream capture (ACL graphs): `aclmdlRICaptureBegin` / `End` / `GetInfo`
//! / `ThreadExchangeMode`, and the captured model's `aclmdlRIExecuteAsync`
//! and `aclmdlRIDestroy`.
//!
//! Between begin and end, work submitted to the stream (ops, queued 2D
//! copies, event records, waits) is recorded into the model instead of
//! queued; the stream's work queued before the begin runs as usual. Each
//! execute appends a copy of the recorded work to the execute stream,
//! where it runs (pins, violation checks) like work launched there directly.
//! An event recorded during capture is "captured": synchronizing or
//! querying it gives 107028 until the capture ends; each execute records it
//! at its place on the execute stream.
//!
//! The runtime's rules (docs/runtime-behaviour.md "Stream capture"):
//! - begin: NULL stream 100000, mode outside 0..=2 107000, a stream already
//!   capturing 107027;
//! - query, synchronize and destroy of a capturing stream, and executing a
//!   model on one: 107027;
//! - end: a stream not capturing 107029; from another thread than the begin
//!   (unless RELAXED) 107038, and the capture is dropped;
//! - get-info: NULL stream, or both outputs NULL, 100000; status NONE (0)
//!   and a NULL model when not capturing, ACTIVE (1) and the model when it is;
//! - synchronous calls (`aclrtMemcpy2d`) while a capture is active on the
//!   device: 107030 unless the capture modes allow them (`sync_call_allowed`);
//!   with `ACLEMU_PAGEABLE_COPY=sync` (where the runtime turns pageable
//!   async copies into synchronous ones) such a copy on a capturing stream
//!   gives 107000.
//!
//! Not modelled: captures spanning several streams (another stream waiting
//! on a captured event joins the capture in the runtime; here the wait is
//! recorded as an ordinary wait), invalidation of a capture by a refused
//! call, task groups and updates, sub-graphs.

use crate::error::{require, AclResult, ACL_ERROR_RT_INVALID_HANDLE};
use crate::faults::Api;
use crate::ffi::{acl_entry, handle, handle_id, write_out, Kind};
use crate::queue::{engine, Work};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::thread::ThreadId;

/// aclmdlRICaptureMode.
pub const MODE_GLOBAL: u32 = 0;
pub const MODE_THREAD_LOCAL: u32 = 1;
pub const MODE_RELAXED: u32 = 2;
/// No capture (the runtime's RT_STREAM_CAPTURE_MODE_MAX).
const MODE_NONE: u32 = 3;

/// aclmdlRICaptureStatus.
pub const STATUS_NONE: u32 = 0;
pub const STATUS_ACTIVE: u32 = 1;

pub const ACL_ERROR_RT_MODEL_CAPTURED: i32 = 107_026;
pub const ACL_ERROR_RT_STREAM_CAPTURED: i32 = 107_027;
pub const ACL_ERROR_RT_EVENT_CAPTURED: i32 = 107_028;
pub const ACL_ERROR_RT_STREAM_NOT_CAPTURED: i32 = 107_029;
pub const ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: i32 = 107_030;
pub const ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD: i32 = 107_038;

thread_local! {
    /// The thread's exchange mode (`aclmdlRICaptureThreadExchangeMode`);
    /// GLOBAL by default, as in the runtime.
    static EXCHANGE: Cell<u32> = const { Cell::new(MODE_GLOBAL) };
}

/// One capture in progress on a stream.
struct Active {
    model: u64,
    mode: u32,
    device: i32,
    thread: ThreadId,
    /// Events recorded on the stream since the begin.
    events: Vec<u64>,
}

/// A captured model: the work to replay, and whether capture still adds to it.
struct Model {
    work: Vec<Work>,
    open: bool,
}

/// The captures and models of the process; part of the queue engine.
#[derive(Default)]
pub struct Captures {
    active: HashMap<u64, Active>,
    models: HashMap<u64, Model>,
    next_model: u64,
}

impl Captures {
    /// True if any stream is capturing (one test on every submit).
    #[inline]
    pub fn any(&self) -> bool {
        !self.active.is_empty()
    }

    /// True if stream `key` is capturing.
    pub fn is_capturing(&self, key: u64) -> bool {
        self.active.contains_key(&key)
    }

    /// The model stream `key` captures into, if it is capturing.
    pub fn model_of(&self, key: u64) -> Option<u64> {
        self.active.get(&key).map(|a| a.model)
    }

    /// Records `work` for stream `key` if it is capturing; gives it back
    /// otherwise.
    pub fn record(&mut self, key: u64, work: Work) -> Option<Work> {
        let Some(a) = self.active.get_mut(&key) else { return Some(work) };
        if let Work::Record { event } = work {
            a.events.push(event);
        }
        let model = self.models.get_mut(&a.model).expect("an active capture has its model");
        model.work.push(work);
        None
    }

    /// True if `event` was recorded by a capture still in progress.
    pub fn event_captured(&self, event: u64) -> bool {
        self.active.values().any(|a| a.events.contains(&event))
    }

    /// Starts capturing stream `key` of `device`.
    pub fn begin(&mut self, key: u64, device: i32, mode: u32) -> AclResult<u64> {
        if mode > MODE_RELAXED {
            return Err(crate::error::ACL_ERROR_RT_PARAM_INVALID);
        }
        if self.active.contains_key(&key) {
            return Err(ACL_ERROR_RT_STREAM_CAPTURED);
        }
        self.next_model += 1;
        let model = self.next_model;
        self.models.insert(model, Model { work: Vec::new(), open: true });
        let thread = std::thread::current().id();
        self.active.insert(key, Active { model, mode, device, thread, events: Vec::new() });
        Ok(model)
    }

    /// Ends the capture of stream `key`; returns its model.
    pub fn end(&mut self, key: u64) -> AclResult<u64> {
        let a = self.active.get(&key).ok_or(ACL_ERROR_RT_STREAM_NOT_CAPTURED)?;
        let wrong_thread = a.thread != std::thread::current().id() && a.mode != MODE_RELAXED;
        let a = self.active.remove(&key).expect("checked above");
        if wrong_thread {
            // The runtime clears the capture model on this error.
            self.models.remove(&a.model);
            return Err(ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD);
        }
        self.models.get_mut(&a.model).expect("an active capture has its model").open = false;
        Ok(a.model)
    }

    /// The recorded work of a finished model, for an execute.
    pub fn replay(&self, model: u64) -> AclResult<Vec<Work>> {
        let m = self.models.get(&model).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
        if m.open {
            return Err(ACL_ERROR_RT_MODEL_CAPTURED);
        }
        Ok(m.work.clone())
    }

    /// Destroys a finished model (work already queued by an execute stays).
    pub fn destroy(&mut self, model: u64) -> AclResult<()> {
        let m = self.models.get(&model).ok_or(ACL_ERROR_RT_INVALID_HANDLE)?;
        if m.open {
            return Err(ACL_ERROR_RT_MODEL_CAPTURED);
        }
        self.models.remove(&model);
        Ok(())
    }

    /// True if a model with this id exists.
    pub fn has_model(&self, model: u64) -> bool {
        self.models.contains_key(&model)
    }

    /// Whether a synchronous call on `device` is allowed on this thread
    /// (the runtime's `Context::IsCaptureModeSupport`): the strictest mode
    /// of the device's captures and of this thread's captures, against the
    /// thread's exchange mode.
    pub fn sync_call_allowed(&self, device: i32) -> bool {
        let me = std::thread::current().id();
        let context = self.active.values().filter(|a| a.device == device).map(|a| a.mode).min().unwrap_or(MODE_NONE);
        if context == MODE_NONE {
            return true;
        }
        let thread = self.active.values().filter(|a| a.thread == me).map(|a| a.mode).min().unwrap_or(MODE_NONE);
        match EXCHANGE.with(Cell::get) {
            MODE_RELAXED => true,
            MODE_GLOBAL => !(context == MODE_GLOBAL || thread == MODE_THREAD_LOCAL),
            MODE_THREAD_LOCAL => !(thread == MODE_GLOBAL || thread == MODE_THREAD_LOCAL),
            _ => true,
        }
    }
}

/// Sets the calling thread's exchange mode; returns the previous one.
pub fn exchange_mode(mode: u32) -> AclResult<u32> {
    if mode > MODE_RELAXED {
        return Err(crate::error::ACL_ERROR_RT_PARAM_INVALID);
    }
    Ok(EXCHANGE.with(|m| m.replace(mode)))
}

unsafe fn begin(stream: *mut c_void, mode: u32) -> AclResult<()> {
    require(!stream.is_null())?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    let device = eng.device_of(key);
    eng.capture.begin(key, device, mode)?;
    Ok(())
}

unsafe fn get_info(stream: *mut c_void, status: *mut u32, model: *mut *mut c_void) -> AclResult<()> {
    let no_output = status.is_null() && model.is_null();
    require(!stream.is_null() && !no_output)?;
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    let found = eng.capture.model_of(key);
    drop(eng);
    let (value, handle_out) = match found {
        Some(id) => (STATUS_ACTIVE, handle(Kind::Model, id)),
        None => (STATUS_NONE, std::ptr::null_mut()),
    };
    if !status.is_null() {
        // SAFETY: non-NULL; the caller promises it is writable.
        unsafe { write_out(status, value)? };
    }
    if !model.is_null() {
        // SAFETY: as above.
        unsafe { write_out(model, handle_out)? };
    }
    Ok(())
}

unsafe fn end(stream: *mut c_void, model: *mut *mut c_void) -> AclResult<()> {
    require(!stream.is_null())?;
    if model.is_null() {
        return Err(crate::error::ACL_ERROR_RT_PARAM_INVALID);
    }
    let mut eng = engine();
    let key = eng.resolve(stream)?;
    let id = eng.capture.end(key)?;
    drop(eng);
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(model, handle(Kind::Model, id)) }
}

/// The model a C handle names, or 107017.
fn model_id(eng: &crate::queue::Engine, model: *mut c_void) -> AclResult<u64> {
    handle_id(Kind::Model, model).filter(|&id| eng.capture.has_model(id)).ok_or(ACL_ERROR_RT_INVALID_HANDLE)
}

fn execute(model: *mut c_void, stream: *mut c_void) -> AclResult<()> {
    require(!model.is_null())?;
    let mut eng = engine();
    let id = model_id(&eng, model)?;
    let key = eng.resolve(stream)?;
    eng.execute(id, key)
}

fn destroy(model: *mut c_void) -> AclResult<()> {
    require(!model.is_null())?;
    let mut eng = engine();
    let id = model_id(&eng, model)?;
    eng.capture.destroy(id)
}

/// Starts capturing the work submitted to `stream` into a new model.
/// `mode`: GLOBAL 0, THREAD_LOCAL 1, RELAXED 2. NULL stream 100000, bad mode
/// 107000, a stream already capturing 107027.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureBegin(stream: *mut c_void, mode: u32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CaptureBegin, { unsafe { begin(stream, mode) } })
}

/// Reports whether `stream` captures: status NONE (0) and a NULL model, or
/// ACTIVE (1) and the model. Either output may be NULL, not both (100000).
///
/// # Safety
/// `status` and `model` must each be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureGetInfo(
    stream: *mut c_void,
    status: *mut u32,
    model: *mut *mut c_void,
) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CaptureGetInfo, { unsafe { get_info(stream, status, model) } })
}

/// Ends the capture of `stream` and returns its model. 107029 if the stream
/// is not capturing; 107038 from another thread than the begin (unless
/// RELAXED), which drops the capture.
///
/// # Safety
/// `model` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureEnd(stream: *mut c_void, model: *mut *mut c_void) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CaptureEnd, { unsafe { end(stream, model) } })
}

/// Swaps the calling thread's capture exchange mode with `*mode`.
///
/// # Safety
/// `mode` must be NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureThreadExchangeMode(mode: *mut u32) -> crate::aclError {
    acl_entry!(Api::CaptureThreadExchangeMode, {
        require(!mode.is_null())?;
        // SAFETY: checked non-NULL; the caller promises it is readable.
        let wanted = unsafe { mode.read() };
        let old = exchange_mode(wanted)?;
        // SAFETY: as above, and writable.
        unsafe { write_out(mode, old) }
    })
}

/// Queues the model's recorded work on `stream` (NULL = default stream).
/// 107027 if `stream` is capturing; 107017 for an unknown model.
///
/// # Safety
/// Plain handle arguments; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIExecuteAsync(model: *mut c_void, stream: *mut c_void) -> crate::aclError {
    acl_entry!(Api::ExecuteAsync, { execute(model, stream) })
}

/// Destroys a captured model; work its executes queued still runs.
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDestroy(model: *mut c_void) -> crate::aclError {
    acl_entry!(Api::ModelDestroy, { destroy(model) })
}
