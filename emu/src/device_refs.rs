//! Device references (docs/runtime-behaviour.md "Devices and contexts"):
//! `aclrtSetDevice` adds one, `aclrtResetDevice` drops one, and a device's
//! primary context lives while they are above 0
//! (`Runtime::PrimaryContextRetain` / `PrimaryContextRelease`,
//! src/runtime/core/src/runtime.cc; 04_device_management.md, aclrtResetDevice:
//! "each call decrements the count; only at 0 are the device's resources
//! released"). At 0 the primary context goes with the streams created in
//! it; once no created context holds the device either, its aclrtMalloc
//! memory is released too (`Runtime::DeviceRelease` deletes the device
//! when its last context lets go). Resetting a device with no reference
//! left is 507007 (`RT_ERROR_CONTEXT_DEL`). `aclemu_device_refs` reports
//! the count for tests.

use crate::context::{self, Current};
use crate::device;
use crate::error::{AclResult, ACL_ERROR_RT_CONTEXT_RELEASE_ERROR};
use crate::faults::Api;
use crate::ffi::acl_entry;
use crate::queue::engine;
use crate::usage;

fn set(device_id: i32) -> AclResult<()> {
    device::get(device_id)?;
    {
        let mut reg = context::registry();
        let st = &mut reg.devices[device_id as usize];
        st.refs += 1;
        if st.primary.is_none() {
            reg.new_primary(device_id);
        }
    }
    context::set_current(Current::Primary(device_id));
    Ok(())
}

fn reset(device_id: i32) -> AclResult<()> {
    device::get(device_id)?;
    let (streams, unheld) = {
        let mut reg = context::registry();
        let st = &mut reg.devices[device_id as usize];
        if st.refs == 0 {
            return Err(ACL_ERROR_RT_CONTEXT_RELEASE_ERROR);
        }
        st.refs -= 1;
        if st.refs > 0 {
            return Ok(());
        }
        let primary = st.primary.take();
        let streams = primary.map(|id| reg.remove(id)).unwrap_or_default();
        (streams, reg.unheld(device_id))
    };
    // The thread keeps pointing at the device's primary slot, which is now
    // empty: its current context is gone until the device is set again.
    release(device_id, &streams, unheld);
    Ok(())
}

/// Destroys `streams` (created in a context just removed) after finishing
/// their work; with `unheld`, also finishes the device's default stream and
/// releases its aclrtMalloc memory. Called without the context lock.
pub fn release(device_id: i32, streams: &[u64], unheld: bool) {
    {
        let mut eng = engine();
        for &s in streams {
            let dev = eng.destroy_stream(s);
            usage::sub(&usage::of(dev).streams, 1);
        }
        if unheld {
            eng.finish_device(device_id);
        }
    }
    if unheld {
        crate::memory::release_device(device_id);
    }
}

/// Sets the calling thread's current device and adds a reference to it.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDevice(device_id: i32) -> crate::aclError {
    acl_entry!(Api::SetDevice, { set(device_id) })
}

/// Drops one reference to a device; at 0 its primary context, the streams
/// created in it and (once no created context holds it) its memory go.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetDevice(device_id: i32) -> crate::aclError {
    acl_entry!(Api::ResetDevice, { reset(device_id) })
}

/// Test control: how many `aclrtSetDevice` references `device` has, or -1
/// for a device id that does not exist.
#[unsafe(no_mangle)]
pub extern "C" fn aclemu_device_refs(device: i32) -> i64 {
    std::panic::catch_unwind(|| {
        device::get(device).ok()?;
        i64::try_from(context::registry().devices[device as usize].refs).ok()
    })
    .ok()
    .flatten()
    .unwrap_or(-1)
}
