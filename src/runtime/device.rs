//! Devices, device memory, streams, events and 2D copies.

use super::{check, AclCallError, Event, Runtime, Stream};
use crate::sys;
use std::os::raw::c_void;

impl Runtime {
    /// The calling thread's current device, if one is set.
    pub fn current_device(&self) -> Option<i32> {
        let mut dev = -1i32;
        // SAFETY: dev is a valid out-pointer for the call.
        let code = unsafe { (self.api.aclrtGetDevice)(&mut dev) };
        (code == sys::ACL_SUCCESS).then_some(dev)
    }

    pub fn set_device(&self, device: i32) -> Result<(), AclCallError> {
        // SAFETY: plain value argument.
        check("aclrtSetDevice", unsafe { (self.api.aclrtSetDevice)(device) })
    }

    /// How many devices the runtime reports; `None` without the call or when it fails.
    pub fn device_count(&self) -> Option<u32> {
        let count_fn = self.api.aclrtGetDeviceCount?;
        let mut count = 0u32;
        // SAFETY: count is a valid out-pointer.
        let code = unsafe { count_fn(&mut count) };
        (code == sys::ACL_SUCCESS).then_some(count)
    }

    /// Free and total bytes of the current device's HBM.
    pub fn mem_info(&self) -> Result<(usize, usize), AclCallError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are valid.
        check("aclrtGetMemInfo", unsafe { (self.api.aclrtGetMemInfo)(sys::ACL_HBM_MEM, &mut free, &mut total) })?;
        Ok((free, total))
    }

    /// `aclrtMalloc` with huge pages first (what PyTorch on NPU uses).
    pub fn malloc(&self, size: usize) -> Result<usize, AclCallError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: ptr is a valid out-pointer; size was checked non-zero by the caller.
        check("aclrtMalloc", unsafe { (self.api.aclrtMalloc)(&mut ptr, size, sys::ACL_MEM_MALLOC_HUGE_FIRST) })?;
        Ok(ptr as usize)
    }

    /// `aclrtFree`. Does not wait for queued work: callers sync first.
    pub fn free(&self, ptr: usize) -> Result<(), AclCallError> {
        // SAFETY: ptr came from `malloc` and is freed once.
        check("aclrtFree", unsafe { (self.api.aclrtFree)(ptr as *mut c_void) })
    }

    pub fn create_stream(&self) -> Result<Stream, AclCallError> {
        let mut s: sys::aclrtStream = std::ptr::null_mut();
        // SAFETY: s is a valid out-pointer.
        check("aclrtCreateStream", unsafe { (self.api.aclrtCreateStream)(&mut s) })?;
        Ok(Stream::from_raw(s))
    }

    pub fn destroy_stream(&self, stream: Stream) -> Result<(), AclCallError> {
        // SAFETY: the stream handle is passed through; the runtime validates it.
        check("aclrtDestroyStream", unsafe { (self.api.aclrtDestroyStream)(stream.raw()) })
    }

    /// Waits for `stream`'s queued work. A capturing stream (ACL graphs) fails with ACL_ERROR_RT_STREAM_CAPTURED
    /// without reaching the runtime, which would refuse it too and lose the capture.
    pub fn synchronize_stream(&self, stream: Stream) -> Result<(), AclCallError> {
        // A failed capture query leaves the answer to the synchronize itself.
        if matches!(self.is_capturing(stream), Ok(true)) {
            return Err(AclCallError { function: "aclrtSynchronizeStream", code: sys::ACL_ERROR_RT_STREAM_CAPTURED });
        }
        // SAFETY: as above.
        check("aclrtSynchronizeStream", unsafe { (self.api.aclrtSynchronizeStream)(stream.raw()) })
    }

    /// True if `stream` is in capture (`aclmdlRICaptureGetInfo` says ACTIVE or INVALIDATED). False for the
    /// default stream (it cannot capture) and without the call; an unknown handle is the runtime's error.
    pub fn is_capturing(&self, stream: Stream) -> Result<bool, AclCallError> {
        let Some(get_info) = self.api.aclmdlRICaptureGetInfo else { return Ok(false) };
        if stream == Stream::DEFAULT {
            return Ok(false);
        }
        let mut status: sys::aclmdlRICaptureStatus = sys::ACL_MODEL_RI_CAPTURE_STATUS_NONE;
        let mut model: sys::aclmdlRI = std::ptr::null_mut();
        // SAFETY: the runtime validates the handle; both out-pointers are valid.
        check("aclmdlRICaptureGetInfo", unsafe { get_info(stream.raw(), &mut status, &mut model) })?;
        Ok(status != sys::ACL_MODEL_RI_CAPTURE_STATUS_NONE)
    }

    /// Checks that `stream` names a live stream (`aclrtStreamQuery`, which does not wait). `Ok(false)`: the
    /// runtime lacks the call, nothing was checked.
    pub fn check_stream(&self, stream: Stream) -> Result<bool, AclCallError> {
        Ok(self.query_stream(stream)?.is_some())
    }

    /// `Some(true)` if work on `stream` is unfinished, `Some(false)` if idle, `None` if the runtime lacks
    /// `aclrtStreamQuery` or the stream is capturing (the runtime refuses to query it: Note [capture]). Does not wait.
    pub fn stream_busy(&self, stream: Stream) -> Result<Option<bool>, AclCallError> {
        if self.api.aclrtStreamQuery.is_none() || self.is_capturing(stream).unwrap_or(false) {
            return Ok(None);
        }
        Ok(self.query_stream(stream)?.map(|status| status == sys::ACL_STREAM_STATUS_NOT_READY))
    }

    /// `aclrtStreamQuery`'s status of `stream`; `None` without the call.
    fn query_stream(&self, stream: Stream) -> Result<Option<sys::aclrtStreamStatus>, AclCallError> {
        let Some(query) = self.api.aclrtStreamQuery else { return Ok(None) };
        let mut status: sys::aclrtStreamStatus = sys::ACL_STREAM_STATUS_COMPLETE;
        // SAFETY: the runtime validates the handle; status is a valid out-pointer.
        check("aclrtStreamQuery", unsafe { query(stream.raw(), &mut status) })?;
        Ok(Some(status))
    }

    /// An event usable for queries and stream waits.
    pub fn create_event(&self) -> Result<Event, AclCallError> {
        let mut e: sys::aclrtEvent = std::ptr::null_mut();
        // SAFETY: e is a valid out-pointer.
        check("aclrtCreateEventWithFlag", unsafe {
            (self.api.aclrtCreateEventWithFlag)(&mut e, sys::ACL_EVENT_SYNC as u32)
        })?;
        Ok(Event(e as usize))
    }

    pub fn record_event(&self, event: Event, stream: Stream) -> Result<(), AclCallError> {
        // SAFETY: handles are passed through; the runtime validates them.
        check("aclrtRecordEvent", unsafe { (self.api.aclrtRecordEvent)(event.0 as sys::aclrtEvent, stream.raw()) })
    }

    /// True once all work captured by the event's last record has finished.
    pub fn event_complete(&self, event: Event) -> Result<bool, AclCallError> {
        let mut status: sys::aclrtEventRecordedStatus = sys::ACL_EVENT_RECORDED_STATUS_NOT_READY;
        // SAFETY: status is a valid out-pointer.
        check("aclrtQueryEventStatus", unsafe {
            (self.api.aclrtQueryEventStatus)(event.0 as sys::aclrtEvent, &mut status)
        })?;
        // aclrtEventRecordedStatus, where COMPLETE is 1 (the reverse of the deprecated aclrtEventStatus).
        Ok(status == sys::ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    pub fn synchronize_event(&self, event: Event) -> Result<(), AclCallError> {
        // SAFETY: handle passed through.
        check("aclrtSynchronizeEvent", unsafe { (self.api.aclrtSynchronizeEvent)(event.0 as sys::aclrtEvent) })
    }

    pub fn destroy_event(&self, event: Event) -> Result<(), AclCallError> {
        // SAFETY: handle passed through.
        check("aclrtDestroyEvent", unsafe { (self.api.aclrtDestroyEvent)(event.0 as sys::aclrtEvent) })
    }

    /// `aclrtMallocHost`: `size` bytes of pinned host memory.
    pub fn malloc_host(&self, size: usize) -> Result<usize, AclCallError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: p is a valid out-pointer.
        check("aclrtMallocHost", unsafe { (self.api.aclrtMallocHost)(&mut p, size) })?;
        Ok(p as usize)
    }

    /// `aclrtFreeHost` of memory from [`Runtime::malloc_host`].
    pub fn free_host(&self, ptr: usize) -> Result<(), AclCallError> {
        // SAFETY: ptr came from malloc_host and is freed once.
        check("aclrtFreeHost", unsafe { (self.api.aclrtFreeHost)(ptr as *mut c_void) })
    }

    /// A 2D copy after the caller has validated the arguments: `aclrtMemcpy2d` without a stream, else
    /// `aclrtMemcpy2dAsync` enqueued on `stream` (`Some(Stream::DEFAULT)` is the default stream, still async).
    /// # Safety
    /// The regions must be valid for the copy the arguments describe, and with a stream stay valid until the copy
    /// completes on it.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn memcpy2d(
        &self,
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: u32,
        stream: Option<Stream>,
    ) -> Result<(), AclCallError> {
        // SAFETY: forwarded from the caller's contract.
        let (function, code) = unsafe {
            match stream {
                None => ("aclrtMemcpy2d", (self.api.aclrtMemcpy2d)(dst, dpitch, src, spitch, width, height, kind)),
                Some(s) => (
                    "aclrtMemcpy2dAsync",
                    (self.api.aclrtMemcpy2dAsync)(dst, dpitch, src, spitch, width, height, kind, s.raw()),
                ),
            }
        };
        check(function, code)
    }
}
