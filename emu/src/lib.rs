//! acl-emu: the AscendCL (ACL) memory ABI on host memory.
//!
//! Built as `libascendcl.so` (cdylib) exporting the real ACL symbol names, so
//! npualloc loads it with dlopen exactly as it would load CANN's library, and
//! as an rlib whose root re-exports the same functions for Rust tests.
//! Every call follows docs/acl-api.md: the same aclError for the same
//! mistake, and the same rejections.
//!
//! Modules, one concern each:
//! - `device`: device count, capacity (`ACLEMU_DEVICE_COUNT`, default 8;
//!   `ACLEMU_DEVICE_MEMORY`, default 64 GiB), thread-local current device,
//!   aclrtGetMemInfo, `aclemu_set_device_memory`.
//! - `context`: primary and created contexts, the thread's current one,
//!   each created stream's context. `device_refs`: aclrtSetDevice /
//!   aclrtResetDevice reference counts and what reaching 0 releases
//!   (`aclemu_device_refs`).
//! - `memory`: aclrtMalloc/Free/MallocHost/FreeHost.
//! - `queue`: stream work queues and event positions; `stream`, `event`:
//!   their ACL calls and the hold/release test controls.
//! - `device_info`: aclrtGetDeviceCount, aclrtGetSocName, the CANN
//!   version queries (`ACLEMU_SOC_NAME`).
//! - `stream_config`: streams with a priority and flags, forced destroy,
//!   synchronize with a timeout, per-stream settings.
//! - `memcpy`: 1D copies and memsets (queued on the stream for the async
//!   calls). `last_error`: the thread's last error and its message.
//! - `settings`: the float-overflow mode and op timeouts (kept, checked).
//! - `copy`: 2D copies. `vmm`: reserve/physical/map/unmap on one sparse
//!   memfd per device (`ranges` allocates within it); aclrtMalloc's
//!   blocks live in the same memfd.
//! - `ipc`: memory shared with other processes of the host, by key
//!   (aclrtMalloc blocks) and by shareable handle (physical handles).
//! - `allocator_desc`: the aclrtAllocator* family; `run_op`: the graph-engine
//!   driver `aclemu_run_op`, and `aclemu_launch` (an op on named ranges).
//! - `faults`: `aclemu_fail_nth`, `aclemu_fault_pending` (fault injection only).
//!   `calls`: `aclemu_call_count`, `aclemu_thread_call_count` (how often each
//!   function was called, for measurements). `usage`: `aclemu_get_usage`,
//!   `aclemu_host_usage` (pinned host memory).
//! - `cost`: per-function latencies (`ACLEMU_COST`, `aclemu_set_cost`).
//! - `api`: the exported function names those per-function controls take.
//! - `violation`: memory misused under queued work (`aclemu_violations`,
//!   `aclemu_set_violation_abort`).
//! - `capture`: stream capture into models (aclmdlRICapture*, aclmdlRIExecuteAsync,
//!   aclmdlRIDestroy): captured work is recorded, and runs at each execute.
//! - `ffi`: panic boundary, out-pointers, handles; `error`: the codes.
//!
//! Handles (streams, events, descs, physical handles) are tagged ids, never
//! dereferenced, validated against registries: a bad handle is an error
//! (107017 for streams/events/physical handles, 100000 for descs).
//! State is process-global; the current context (and so device) is per thread.

// ACL's C names are kept verbatim.
#![allow(non_snake_case)]
#![deny(unsafe_op_in_unsafe_fn)]

mod allocator_desc;
mod api;
mod calls;
mod capture;
mod context;
mod copy;
mod cost;
mod device;
mod device_info;
mod device_refs;
pub mod error;
mod event;
mod faults;
mod ffi;
mod host_map;
mod init;
mod ipc;
mod last_error;
mod memcpy;
mod memory;
mod queue;
mod ranges;
mod run_op;
mod settings;
mod stream;
mod stream_config;
mod uce;
mod usage;
mod violation;
mod vmm;

pub use error::aclError;

pub use allocator_desc::{
    aclrtAllocatorAllocAdviseFunc, aclrtAllocatorAllocFunc, aclrtAllocatorCreateDesc, aclrtAllocatorDestroyDesc,
    aclrtAllocatorFreeFunc, aclrtAllocatorGetAddrFromBlockFunc, aclrtAllocatorGetByStream, aclrtAllocatorRegister,
    aclrtAllocatorSetAllocAdviseFuncToDesc, aclrtAllocatorSetAllocFuncToDesc, aclrtAllocatorSetFreeFuncToDesc,
    aclrtAllocatorSetGetAddrFromBlockFuncToDesc, aclrtAllocatorSetObjToDesc, aclrtAllocatorUnregister,
};
pub use calls::{aclemu_call_count, aclemu_thread_call_count};
pub use capture::{
    aclmdlRICaptureBegin, aclmdlRICaptureEnd, aclmdlRICaptureGetInfo, aclmdlRICaptureThreadExchangeMode,
    aclmdlRIDestroy, aclmdlRIExecuteAsync,
};
pub use context::{aclrtCreateContext, aclrtDestroyContext, aclrtGetCurrentContext, aclrtSetCurrentContext};
pub use copy::{aclrtMemcpy2d, aclrtMemcpy2dAsync};
pub use cost::aclemu_set_cost;
pub use device::{aclemu_set_device_memory, aclrtGetDevice, aclrtGetMemInfo};
pub use device_info::{aclrtGetDeviceCount, aclrtGetSocName, aclsysGetCANNVersion, aclsysGetVersionStr};
pub use device_refs::{aclemu_device_refs, aclrtResetDevice, aclrtSetDevice};
pub use event::{
    aclemu_set_event_lag, aclrtCreateEvent, aclrtCreateEventExWithFlag, aclrtCreateEventWithFlag, aclrtDestroyEvent,
    aclrtIpcGetEventHandle, aclrtIpcOpenEventHandle, aclrtQueryEventStatus, aclrtRecordEvent, aclrtStreamWaitEvent,
    aclrtSynchronizeEvent, IpcEventHandle, ACL_EVENT_RECORDED_STATUS_COMPLETE, ACL_EVENT_RECORDED_STATUS_NOT_READY,
};
pub use faults::{aclemu_fail_nth, aclemu_fault_pending};
pub use init::{aclFinalize, aclInit};
pub use ipc::{
    aclrtDeviceGetBareTgid, aclrtIpcMemClose, aclrtIpcMemGetExportKey, aclrtIpcMemImportByKey, aclrtIpcMemSetImportPid,
    aclrtMemExportToShareableHandle, aclrtMemImportFromShareableHandle, aclrtMemSetPidToShareableHandle,
};
pub use last_error::{aclGetRecentErrMsg, aclrtGetLastError, aclrtPeekAtLastError};
pub use memcpy::{aclrtMemcpy, aclrtMemcpyAsync, aclrtMemset, aclrtMemsetAsync};
pub use memory::{aclrtFree, aclrtFreeHost, aclrtMalloc, aclrtMallocAlign32, aclrtMallocHost};
pub use run_op::{aclemu_launch, aclemu_run_op, aclemu_span};
pub use settings::{
    aclrtGetDeviceSatMode, aclrtSetDeviceSatMode, aclrtSetOpExecuteTimeOut, aclrtSetOpExecuteTimeOutV2,
    aclrtSetOpWaitTimeout,
};
pub use stream::{
    aclemu_stream_hold, aclemu_stream_release, aclrtCreateStream, aclrtDestroyStream, aclrtStreamQuery,
    aclrtSynchronizeDevice, aclrtSynchronizeStream,
};
pub use stream_config::{
    aclrtCreateStreamWithConfig, aclrtDestroyStreamForce, aclrtGetStreamOverflowSwitch, aclrtSetStreamFailureMode,
    aclrtSetStreamOverflowSwitch, aclrtStreamGetId, aclrtSynchronizeDeviceWithTimeout,
    aclrtSynchronizeStreamWithTimeout,
};
pub use uce::{aclemu_inject_uce, aclrtGetMemUceInfo, aclrtMemUceRepair, MemUceInfo};
pub use usage::{aclemu_get_usage, aclemu_host_usage, aclemu_usage};
pub use violation::{aclemu_set_violation_abort, aclemu_violations};
pub use vmm::{
    aclemu_misalign_reservations, aclrtFreePhysical, aclrtMallocPhysical, aclrtMapMem,
    aclrtMemGetAllocationGranularity, aclrtMemLocation, aclrtPhysicalMemProp, aclrtReleaseMemAddress,
    aclrtReserveMemAddress, aclrtUnmapMem,
};
