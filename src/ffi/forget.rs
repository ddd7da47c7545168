//! `npualloc_forget_stream` and its pluggable equivalent: a stream's cached memory and address ranges go back.

use super::handle::npualloc_allocator;
use super::status::npualloc_status;
use crate::runtime::Stream;
use crate::sys::aclrtStream;
use std::ffi::c_int;

/// The host is about to destroy `stream`: the memory the allocator caches for it and its address ranges go back
/// to the device (after synchronizing the streams that used that memory). Its live blocks stay valid and are
/// freed as usual; a later use of the stream starts afresh. Hosts that create streams over their lifetime call
/// it before `aclrtDestroyStream`, or address space runs out after some tens of streams. Statuses: OK (nothing
/// changes for a stream the allocator never served); INVALID_ARGUMENT for a destroyed `a`; the runtime's failure
/// when memory could not be given back (what could, was).
///
/// # Safety
/// `a` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npualloc_forget_stream(a: *mut npualloc_allocator, stream: aclrtStream) -> npualloc_status {
    ffi_boundary!(status "npualloc_forget_stream", {
        try_live!(a).core.forget_stream(Stream::from_raw(stream)).map(|_| ())
    })
}

/// `npualloc_forget_stream` for the pluggable entry points' process-wide allocator of `device`; a device whose
/// allocator was never created has nothing to forget (OK, nothing is created). Statuses: OK; INVALID_ARGUMENT
/// for a device outside the range `npualloc_pluggable_init` set (0..64 before it); as `npualloc_forget_stream`
/// otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn npualloc_pluggable_forget_stream(device: c_int, stream: aclrtStream) -> npualloc_status {
    ffi_boundary!(status "npualloc_pluggable_forget_stream", {
        super::pluggable::existing(device)?.map_or(Ok(()), |a| a.forget_stream(Stream::from_raw(stream)).map(drop))
    })
}
