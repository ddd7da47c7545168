//! The drop-in `aclrtAllocatorDesc`: registration on streams and the four callbacks GE's executors call. A block
//! handle is the block's device address, so `npualloc_desc_get_addr` is O(1) and cannot crash on a bad handle.

use super::handle::{self, npualloc_allocator, Allocator, Handle, HandleKind, Kind, Registration, Registry};
use super::last_error::set_last_error;
use super::status::npualloc_status;
use crate::error::{Error, Result};
use crate::runtime::{DescCallbacks, Stream};
use crate::sys::aclrtStream;
use std::collections::HashMap;
use std::ffi::c_void;

/// What a desc's `obj` names (registered in `BINDINGS`): the allocator's handle and the stream its blocks belong to.
pub struct Binding {
    allocator: Handle,
    stream: Stream,
}

static BINDINGS: Registry<Binding> = Registry::new();

impl HandleKind for Binding {
    const KIND: Kind = Kind::Binding;
    const NOUN: &'static str = "binding";
    #[inline]
    fn registry() -> &'static Registry<Self> {
        &BINDINGS
    }
}

impl Binding {
    /// The binding's allocator, checked like any handle: a binding that outlived its allocator is refused on every
    /// callback, also once the allocator's slot issued another handle.
    #[inline]
    fn allocator(&self) -> Result<&Allocator> {
        // SAFETY: the allocator is not destroyed while a callback runs: npualloc_destroy unregisters its descs first,
        // and a host calling a binding's callbacks uses the allocator, which no thread may do during its destroy.
        unsafe { handle::borrow::<Allocator>(self.allocator) }.map_err(|e| match e {
            Error::InvalidArgument(m) if m.contains("destroyed") => Error::InvalidArgument(format!(
                "the binding's allocator {:p} was destroyed; destroy a binding before its allocator",
                self.allocator
            )),
            e => e,
        })
    }
}

/// Registers the allocator on `stream` through an `aclrtAllocatorDesc` with all four callbacks set; blocks the runtime
/// allocates through it belong to `stream`. Registering a stream twice is OK. Register before the first op on the
/// stream: after an op ran with nothing registered, GE keeps its own allocator for that stream, and a later
/// registration returns NPUALLOC_OK but has no effect; when work is already queued on the stream, the call succeeds
/// and leaves a message starting with "warning:" in `npualloc_last_error()`. Returns NPUALLOC_ERR_INVALID_ARGUMENT for
/// a NULL stream (the runtime cannot apply an allocator to the default stream), a stream the runtime does not know or
/// one of another device; NPUALLOC_ERR_RUNTIME if an ACL call failed. A failed call registers and creates nothing.
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_register(a: *mut npualloc_allocator, stream: aclrtStream) -> npualloc_status {
    ffi_boundary!(status "npualloc_register", {
        let allocator = try_live!(a);
        if stream.is_null() {
            return Err(Error::InvalidArgument(
                "stream must not be NULL: the runtime cannot apply an allocator to the default stream".into(),
            ));
        }
        let stream = Stream::from_raw(stream);
        let mut regs = allocator.registrations.lock().unwrap_or_else(|e| e.into_inner());
        if regs.contains_key(&stream) {
            return Ok(());
        }
        allocator.core.check_stream(stream)?;
        let rt = allocator.core.runtime();
        let binding = handle::register(Binding { allocator: Handle::of(a), stream })?;
        let callbacks = DescCallbacks {
            obj: binding.as_ptr(),
            alloc: npualloc_desc_alloc,
            free: npualloc_desc_free,
            alloc_advise: npualloc_desc_alloc_advise,
            get_addr: npualloc_desc_get_addr,
        };
        let registered = rt.create_desc(&callbacks).and_then(|desc| {
            rt.register_desc(stream, desc).map(|()| desc).inspect_err(|_| {
                let _ = rt.destroy_desc(desc);
            })
        });
        let desc = registered.map_err(|e| {
            // SAFETY: binding was registered above and never shared.
            drop(unsafe { handle::destroy::<Binding>(binding) });
            Error::runtime(e, "registering the allocator on a stream")
        })?;
        regs.insert(stream, Registration { desc, binding });
        // GE keeps its own allocator for a stream that ran an op before anything was registered
        // (docs/runtime-behaviour.md "How GE uses a registered allocator"); queued work is our one sign of it.
        if let Ok(Some(true)) = rt.on_device(allocator.core.device(), || rt.stream_busy(stream)) {
            set_last_error(&format!(
                "warning: registered on stream {:#x}, but work is already queued on it: if an op ran on \
                 the stream before this call, GE keeps its own allocator for it and this registration \
                 has no effect; register before the first op on the stream",
                stream.raw() as usize
            ));
        }
        Ok(())
    })
}

/// Unregisters the allocator from `stream` and destroys that desc; an unknown stream is OK. If the runtime refuses to
/// unregister, nothing changes: the stream keeps the allocator (and its callbacks stay valid).
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_unregister(a: *mut npualloc_allocator, stream: aclrtStream) -> npualloc_status {
    ffi_boundary!(status "npualloc_unregister", {
        let allocator = try_live!(a);
        let stream = Stream::from_raw(stream);
        let mut regs = allocator.registrations.lock().unwrap_or_else(|e| e.into_inner());
        if !regs.contains_key(&stream) {
            return Ok(());
        }
        release(allocator, stream, &mut regs)
    })
}

/// Unregisters `stream`. The runtime keeps calling the binding until `aclrtAllocatorUnregister` succeeds, so the
/// registration is dropped only then; a desc the runtime then fails to destroy is left to it and reported.
fn release(allocator: &Allocator, stream: Stream, regs: &mut HashMap<Stream, Registration>) -> Result<()> {
    let rt = allocator.core.runtime();
    rt.unregister_desc(stream).map_err(|e| Error::runtime(e, "unregistering the allocator (it stays registered)"))?;
    let reg = regs.remove(&stream).expect("a registered stream");
    let destroyed = rt.destroy_desc(reg.desc);
    // SAFETY: made by npualloc_register, and unreachable from the runtime once unregistered.
    let _ = unsafe { handle::destroy::<Binding>(reg.binding) };
    if let Err(e) = destroyed {
        let msg = format!("npualloc: the stream is unregistered, but its allocator descriptor was not destroyed: {e}");
        eprintln!("{msg}");
        set_last_error(&msg);
    }
    Ok(())
}

/// Unregisters every stream (for destroy); a stream the runtime refuses keeps its registration (first error returned).
pub(crate) fn unregister_all(allocator: &Allocator) -> Result<()> {
    let mut regs = allocator.registrations.lock().unwrap_or_else(|e| e.into_inner());
    let streams: Vec<Stream> = regs.keys().copied().collect();
    streams.into_iter().map(|stream| release(allocator, stream, &mut regs)).fold(Ok(()), Result::and)
}

/// The desc's allocation callback: allocates `size` bytes on the binding's stream and returns a block handle, or NULL
/// with the thread's last error set.
///
/// # Safety
/// `binding` is NULL or a live binding from `npualloc_register` or `npualloc_binding_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_desc_alloc(binding: *mut c_void, size: usize) -> *mut c_void {
    ffi_boundary!(fallible "npualloc_desc_alloc", std::ptr::null_mut(), {
        // SAFETY: the runtime passes back the obj we registered.
        unsafe { desc_malloc(binding, size) }
    })
}

/// The body of both allocation callbacks.
///
/// # Safety
/// As [`handle::borrow`]: `binding` is not destroyed during the call.
unsafe fn desc_malloc(binding: *mut c_void, size: usize) -> Result<*mut c_void> {
    // SAFETY: forwarded to the caller.
    let b = unsafe { handle::borrow::<Binding>(Handle::of(binding)) }?;
    Ok(b.allocator()?.core.malloc(size, b.stream)? as *mut c_void)
}

/// The desc's free callback: frees a block handle. A NULL block is a no-op (the binding is still checked). An unknown
/// or already freed block changes nothing; the error goes to stderr and the last error.
///
/// # Safety
/// `binding` as for `npualloc_desc_alloc`. `block` is only looked up, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_desc_free(binding: *mut c_void, block: *mut c_void) {
    ffi_boundary!(fallible "npualloc_desc_free", (), {
        // SAFETY: as in npualloc_desc_alloc.
        let b = unsafe { handle::borrow::<Binding>(Handle::of(binding)) }?;
        if block.is_null() {
            return Ok(());
        }
        b.allocator()?.core.free(block as usize).inspect_err(|e| eprintln!("npualloc: desc free refused: {e}"))
    })
}

/// The desc's advise callback: like alloc; `addr_hint` (may be NULL) is a wish for an address and is not promised.
///
/// # Safety
/// `binding` as for `npualloc_desc_alloc`. `addr_hint` is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_desc_alloc_advise(
    binding: *mut c_void,
    size: usize,
    addr_hint: *mut c_void,
) -> *mut c_void {
    let _ = addr_hint;
    ffi_boundary!(fallible "npualloc_desc_alloc_advise", std::ptr::null_mut(), {
        // SAFETY: as in npualloc_desc_alloc.
        unsafe { desc_malloc(binding, size) }
    })
}

/// The desc's address callback: the device address of a block handle (the handle itself). O(1).
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_desc_get_addr(block: *mut c_void) -> *mut c_void {
    ffi_boundary!("npualloc_desc_get_addr", std::ptr::null_mut(), { block })
}

/// Makes a binding (the `obj` for a host-built desc or GE's external allocator shim) whose blocks belong to `stream`
/// (NULL: default stream). Destroy it with `npualloc_binding_destroy` before destroying the allocator; the callbacks
/// refuse a binding whose allocator was destroyed (NULL, or nothing freed, and a last error saying so). Returns
/// NPUALLOC_ERR_INVALID_ARGUMENT for a NULL `binding` or a stream the runtime does not know.
///
/// # Safety
/// `a` is NULL or a live handle; `binding` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_binding_create(
    a: *mut npualloc_allocator,
    stream: aclrtStream,
    binding: *mut *mut c_void,
) -> npualloc_status {
    ffi_boundary!(status "npualloc_binding_create", {
        let allocator = try_live!(a);
        let out = try_out!(binding, "binding");
        let stream = Stream::from_raw(stream);
        allocator.core.check_stream(stream)?;
        let b = handle::register(Binding { allocator: Handle::of(a), stream })?;
        // SAFETY: out was checked non-NULL and aligned.
        unsafe { out.write(b.as_ptr()) };
        Ok(())
    })
}

/// Destroys a binding made by `npualloc_binding_create`. NULL is a no-op.
///
/// # Safety
/// `binding` is NULL or a live binding from `npualloc_binding_create` that no desc registered with the runtime names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_binding_destroy(binding: *mut c_void) -> npualloc_status {
    ffi_boundary!(status "npualloc_binding_destroy", {
        if binding.is_null() {
            return Ok(());
        }
        // SAFETY: no other thread uses the binding any more (the caller's contract); anything else is refused.
        unsafe { handle::destroy::<Binding>(Handle::of(binding)) }.map(drop)
    })
}
