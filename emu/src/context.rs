//! Contexts: each device's primary context and explicitly created ones,
//! the thread's current context, and the context each created stream
//! belongs to.
//!
//! What the runtime does (see docs/runtime-behaviour.md
//! "Devices and contexts"; `ApiImpl::SetDevice`, `ContextCreate`, `ContextSetCurrent`,
//! `ContextGetCurrent`, `ContextDestroy` in src/runtime/api/impl/api_impl.cc):
//! - `aclrtSetDevice` makes the thread's current context the device's
//!   primary context slot (not a fixed context: the slot is refilled when
//!   the device is set again after a full reset). `device_refs` counts it.
//! - `aclrtCreateContext` makes a new context on the device and makes it
//!   current; it holds the device (its memory lives on) but is not a
//!   `aclrtSetDevice` reference.
//! - `aclrtSetCurrentContext` makes any live context current, which also
//!   decides the current device; `aclrtGetCurrentContext` answers the
//!   explicit context, else the primary one of the set device, else 107002.
//! - `aclrtDestroyContext` refuses a primary context; destroying the
//!   thread's own current context leaves the thread with none.
//! - A stream belongs to the context current at its creation; calls that
//!   check it (record, wait, destroy, 2D async copy, overflow switch) refuse a stream of another context
//!   with 107003 (`COND_RETURN_AND_MSG_INVALID_CONTEXT_STREAM_WITH_FUNC_DESC`).
//!
//! One lock guards all of it. It is taken after the engine lock, never
//! before: nothing here calls into the engine while holding it.

use crate::device;
use crate::error::{require, AclResult, ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_STREAM_CONTEXT};
use crate::faults::Api;
use crate::ffi::{acl_entry, handle, handle_id, lock, write_out, Kind};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// What a thread has current.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Current {
    None,
    /// The primary context slot of a device (after `aclrtSetDevice`).
    Primary(i32),
    /// A context set explicitly (created, or set by handle).
    Explicit(u64),
}

struct Ctx {
    device: i32,
    primary: bool,
}

/// Per device: `aclrtSetDevice` references, the primary context while they
/// are above 0, and how many created contexts are alive.
#[derive(Default)]
pub struct DeviceState {
    pub refs: u64,
    pub primary: Option<u64>,
    pub created: u32,
}

pub struct Registry {
    contexts: HashMap<u64, Ctx>,
    next: u64,
    pub devices: Vec<DeviceState>,
    /// Created streams and their context.
    streams: HashMap<u64, u64>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| {
    Mutex::new(Registry {
        contexts: HashMap::new(),
        next: 1,
        devices: (0..device::count()).map(|_| DeviceState::default()).collect(),
        streams: HashMap::new(),
    })
});

pub fn registry() -> MutexGuard<'static, Registry> {
    lock(&REGISTRY)
}

thread_local! {
    static CURRENT: Cell<Current> = const { Cell::new(Current::None) };
}

pub fn set_current(current: Current) {
    CURRENT.with(|c| c.set(current));
}

fn get_current() -> Current {
    CURRENT.with(Cell::get)
}

impl Registry {
    /// A new primary context for `device` (its references went 0 -> 1).
    pub fn new_primary(&mut self, device: i32) -> u64 {
        let id = self.insert(Ctx { device, primary: true });
        self.devices[device as usize].primary = Some(id);
        id
    }

    fn insert(&mut self, ctx: Ctx) -> u64 {
        let id = self.next;
        self.next += 1;
        self.contexts.insert(id, ctx);
        id
    }

    /// Removes context `id`; returns the created streams it owned.
    pub fn remove(&mut self, id: u64) -> Vec<u64> {
        self.contexts.remove(&id);
        let owned: Vec<u64> = self.streams.iter().filter(|&(_, &c)| c == id).map(|(&s, _)| s).collect();
        for s in &owned {
            self.streams.remove(s);
        }
        owned
    }

    /// The thread's current context and its device, if it is alive.
    fn resolve(&self, current: Current) -> Option<(u64, i32)> {
        match current {
            Current::None => None,
            Current::Primary(d) => self.devices.get(d as usize)?.primary.map(|id| (id, d)),
            Current::Explicit(id) => self.contexts.get(&id).map(|c| (id, c.device)),
        }
    }

    /// True when nothing holds `device` any more (no set reference, no
    /// created context): its memory and streams go.
    pub fn unheld(&self, device: i32) -> bool {
        let st = &self.devices[device as usize];
        st.refs == 0 && st.created == 0
    }
}

/// The thread's current context id and device, or 107002.
pub fn current() -> AclResult<(u64, i32)> {
    let current = get_current();
    if current == Current::None {
        return Err(ACL_ERROR_RT_CONTEXT_NULL);
    }
    registry().resolve(current).ok_or(ACL_ERROR_RT_CONTEXT_NULL)
}

/// Records that created stream `stream` belongs to context `ctx`.
pub fn adopt_stream(stream: u64, ctx: u64) {
    registry().streams.insert(stream, ctx);
}

/// Forgets a destroyed stream.
pub fn forget_stream(stream: u64) {
    registry().streams.remove(&stream);
}

/// 107003 unless `stream` (an engine key) belongs to the current context.
/// Default streams (NULL handles) always belong to it.
pub fn check_stream(stream: u64) -> AclResult<()> {
    let (ctx, _) = current()?;
    match registry().streams.get(&stream) {
        Some(&owner) if owner != ctx => Err(ACL_ERROR_RT_STREAM_CONTEXT),
        _ => Ok(()),
    }
}

unsafe fn create(context: *mut *mut c_void, device_id: i32) -> AclResult<()> {
    require(!context.is_null())?;
    device::get(device_id)?;
    let id = {
        let mut reg = registry();
        reg.devices[device_id as usize].created += 1;
        reg.insert(Ctx { device: device_id, primary: false })
    };
    set_current(Current::Explicit(id));
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(context, handle(Kind::Context, id)) }
}

fn destroy(context: *mut c_void) -> AclResult<()> {
    require(!context.is_null())?;
    let id = handle_id(Kind::Context, context).ok_or(ACL_ERROR_RT_CONTEXT_NULL)?;
    let (device, streams, unheld) = {
        let mut reg = registry();
        let ctx = reg.contexts.get(&id).ok_or(ACL_ERROR_RT_CONTEXT_NULL)?;
        // "Primary context cannot be destroyed explicitly".
        if ctx.primary {
            return Err(ACL_ERROR_RT_CONTEXT_NULL);
        }
        let device = ctx.device;
        let streams = reg.remove(id);
        reg.devices[device as usize].created -= 1;
        (device, streams, reg.unheld(device))
    };
    if get_current() == Current::Explicit(id) {
        set_current(Current::None);
    }
    crate::device_refs::release(device, &streams, unheld);
    Ok(())
}

fn set(context: *mut c_void) -> AclResult<()> {
    require(!context.is_null())?;
    let id = handle_id(Kind::Context, context).ok_or(ACL_ERROR_RT_CONTEXT_NULL)?;
    if !registry().contexts.contains_key(&id) {
        return Err(ACL_ERROR_RT_CONTEXT_NULL);
    }
    set_current(Current::Explicit(id));
    Ok(())
}

unsafe fn get(context: *mut *mut c_void) -> AclResult<()> {
    require(!context.is_null())?;
    let (id, _) = current()?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { write_out(context, handle(Kind::Context, id)) }
}

/// Creates a context on `deviceId` and makes it the thread's current one.
///
/// # Safety
/// `context` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateContext(context: *mut *mut c_void, deviceId: i32) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::CreateContext, { unsafe { create(context, deviceId) } })
}

/// Destroys a created context with its streams (107002 for a primary or
/// unknown context).
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyContext(context: *mut c_void) -> crate::aclError {
    acl_entry!(Api::DestroyContext, { destroy(context) })
}

/// Makes a live context the thread's current one (and so its device).
///
/// # Safety
/// Plain handle argument; no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetCurrentContext(context: *mut c_void) -> crate::aclError {
    acl_entry!(Api::SetCurrentContext, { set(context) })
}

/// The thread's current context: the one set or created, else the set
/// device's primary context; 107002 without either.
///
/// # Safety
/// `context` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetCurrentContext(context: *mut *mut c_void) -> crate::aclError {
    // SAFETY: forwarded caller contract.
    acl_entry!(Api::GetCurrentContext, { unsafe { get(context) } })
}
