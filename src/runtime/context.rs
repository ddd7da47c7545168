//! Device switches through contexts, without leaking device references.
//!
//! `aclrtSetDevice` adds a device reference that only `aclrtResetDevice` drops, and makes the device's primary
//! context current in place of any the thread had set (docs/runtime-behaviour.md, "Devices and contexts"). So one
//! reference is held per device while an allocator of it lives ([`Runtime::hold_device`], released by
//! [`DeviceHold`]), on the primary context, not a created one: streams the host made after `aclrtSetDevice`
//! belong to it, and the runtime refuses a stream of another context when an event is recorded on it.
//! [`Runtime::on_device`] switches with `aclrtSetCurrentContext`, which adds no reference, and back; as the
//! runtime refuses `aclrtSetCurrentContext(NULL)`, a thread that had no context keeps the device's (which holds
//! no reference). A device with no hold (a query before an allocator exists) is switched with a paired
//! `aclrtSetDevice` / `aclrtResetDevice`; a runtime without the context calls uses `aclrtSetDevice` both ways.

use super::{check, AclCallError, Runtime, Stream};
use crate::sys;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

/// An `aclrtContext` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context(usize);

impl Context {
    pub fn raw(self) -> sys::aclrtContext {
        self.0 as sys::aclrtContext
    }
}

/// Held devices with their primary context and hold count, process-wide (allocators of one library may each
/// have their own `Runtime`): keyed by the library (its `aclrtSetDevice` address) and the device.
type Holds = HashMap<(usize, i32), (Context, usize)>;

static HOLDS: LazyLock<Mutex<Holds>> = LazyLock::new(Default::default);

/// One allocator's hold on its device; releasing the last one is `aclrtResetDevice`.
pub struct DeviceHold {
    rt: Arc<Runtime>,
    device: i32,
}

impl Drop for DeviceHold {
    fn drop(&mut self) {
        self.rt.release_device(self.device);
    }
}

impl Runtime {
    fn holds(&self) -> MutexGuard<'static, Holds> {
        HOLDS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This library's key in `HOLDS`.
    fn library(&self) -> usize {
        self.api.aclrtSetDevice as usize
    }

    /// The thread's current context; `None` without one (or without the call).
    pub fn current_context(&self) -> Option<Context> {
        self.get_current_context().ok()
    }

    fn get_current_context(&self) -> Result<Context, AclCallError> {
        const NAME: &str = "aclrtGetCurrentContext";
        let get = self
            .api
            .aclrtGetCurrentContext
            .ok_or(AclCallError { function: NAME, code: sys::ACL_ERROR_FEATURE_UNSUPPORTED })?;
        let mut ctx: sys::aclrtContext = std::ptr::null_mut();
        // SAFETY: ctx is a valid out-pointer.
        check(NAME, unsafe { get(&mut ctx) })?;
        if ctx.is_null() {
            return Err(AclCallError { function: NAME, code: sys::ACL_ERROR_RT_CONTEXT_NULL });
        }
        Ok(Context(ctx as usize))
    }

    fn set_current_context(&self, ctx: Context) -> Result<(), AclCallError> {
        let Some(set) = self.api.aclrtSetCurrentContext else {
            return Err(AclCallError { function: "aclrtSetCurrentContext", code: sys::ACL_ERROR_FEATURE_UNSUPPORTED });
        };
        // SAFETY: the handle came from aclrtGetCurrentContext; the runtime validates it.
        check("aclrtSetCurrentContext", unsafe { set(ctx.raw()) })
    }

    fn reset_device(&self, device: i32) -> Result<(), AclCallError> {
        // SAFETY: plain value argument.
        check("aclrtResetDevice", unsafe { (self.api.aclrtResetDevice)(device) })
    }

    /// Takes a reference to `device` while the returned hold lives; the thread's context stays as it was.
    pub fn hold_device(self: &Arc<Self>, device: i32) -> Result<DeviceHold, AclCallError> {
        if self.features.contexts {
            let mut holds = self.holds();
            if let Some((_, n)) = holds.get_mut(&(self.library(), device)) {
                *n += 1;
            } else {
                let saved = self.current_context();
                self.set_device(device)?;
                let primary = self.get_current_context().inspect_err(|_| {
                    // Give the reference back: nothing is held on failure.
                    let _ = self.reset_device(device);
                })?;
                if let Some(prev) = saved.filter(|&p| p != primary) {
                    let _ = self.set_current_context(prev);
                }
                holds.insert((self.library(), device), (primary, 1));
            }
        }
        Ok(DeviceHold { rt: self.clone(), device })
    }

    fn release_device(&self, device: i32) {
        if !self.features.contexts {
            return;
        }
        let mut holds = self.holds();
        let Some((_, n)) = holds.get_mut(&(self.library(), device)) else { return };
        *n -= 1;
        if *n == 0 {
            holds.remove(&(self.library(), device));
            // Failing here only means the runtime is going away.
            let _ = self.reset_device(device);
        }
    }

    /// The primary context of a held device.
    fn held_context(&self, device: i32) -> Option<Context> {
        self.holds().get(&(self.library(), device)).map(|&(ctx, _)| ctx)
    }

    /// Runs `f` with `device` current, then puts the thread's context back; reference counts end as before.
    pub fn on_device<T>(&self, device: i32, f: impl FnOnce() -> Result<T, AclCallError>) -> Result<T, AclCallError> {
        if !self.features.contexts {
            return self.on_device_by_set(device, f);
        }
        let saved = self.current_context();
        match self.held_context(device) {
            Some(ctx) if saved == Some(ctx) => f(),
            Some(ctx) => self.switched(saved, ctx, f),
            None => {
                self.set_device(device)?;
                let result = f();
                if let Some(prev) = saved {
                    let _ = self.set_current_context(prev);
                }
                let _ = self.reset_device(device);
                result
            }
        }
    }

    /// `on_device` without the context calls: `aclrtSetDevice` there and back (each adds a reference).
    fn on_device_by_set<T>(&self, device: i32, f: impl FnOnce() -> Result<T, AclCallError>) -> Result<T, AclCallError> {
        let previous = self.current_device();
        if previous != Some(device) {
            self.set_device(device)?;
        }
        let result = f();
        if let Some(prev) = previous.filter(|&p| p != device) {
            let _ = self.set_device(prev);
        }
        result
    }

    /// Whether `stream` belongs to the current context (no runtime call names a stream's device). Asked with
    /// `aclrtGetStreamOverflowSwitch`, a getter without side effects that the runtime refuses with 107003 for a
    /// stream of another context (`ApiImpl::GetStreamOverflowSwitch`). `None`: the runtime lacks the call.
    pub fn stream_in_current_context(&self, stream: Stream) -> Result<Option<bool>, AclCallError> {
        let Some(get) = self.api.aclrtGetStreamOverflowSwitch else { return Ok(None) };
        let mut flag = 0u32;
        // SAFETY: the runtime validates the handle; flag is a valid out-pointer.
        match check("aclrtGetStreamOverflowSwitch", unsafe { get(stream.raw(), &mut flag) }) {
            Ok(()) => Ok(Some(true)),
            Err(e) if e.code == sys::ACL_ERROR_RT_STREAM_CONTEXT => Ok(Some(false)),
            Err(e) => Err(e),
        }
    }

    /// The held devices whose context `stream` belongs to (for messages).
    pub fn held_device_of(&self, stream: Stream) -> Option<i32> {
        let lib = self.library();
        let held: Vec<(i32, Context)> =
            self.holds().iter().filter(|(k, _)| k.0 == lib).map(|(&(_, d), &(c, _))| (d, c)).collect();
        held.into_iter().find_map(|(d, c)| {
            let found = self.switched(self.current_context(), c, || self.stream_in_current_context(stream));
            matches!(found, Ok(Some(true))).then_some(d)
        })
    }

    /// Runs `f` with `ctx` current, then makes `saved` current again (if any).
    fn switched<T>(
        &self,
        saved: Option<Context>,
        ctx: Context,
        f: impl FnOnce() -> Result<T, AclCallError>,
    ) -> Result<T, AclCallError> {
        self.set_current_context(ctx)?;
        let result = f();
        if let Some(prev) = saved {
            // Fails only if the runtime is going away; the caller needs `f`'s result either way.
            let _ = self.set_current_context(prev);
        }
        result
    }
}
