//! The names of the ACL functions the emulator exports, shared by the
//! per-function controls (fault injection, costs) that take a name from C.

use std::ffi::{c_char, CStr};

macro_rules! apis {
    ($($variant:ident = $name:literal,)*) => {
        /// Every ACL function the emulator exports.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Api { $($variant,)* }

        const NAMES: &[&str] = &[$($name,)*];
        pub const ALL: &[Api] = &[$(Api::$variant,)*];
    };
}

apis! {
    Init = "aclInit",
    Finalize = "aclFinalize",
    SetDevice = "aclrtSetDevice",
    GetDevice = "aclrtGetDevice",
    ResetDevice = "aclrtResetDevice",
    GetMemInfo = "aclrtGetMemInfo",
    Malloc = "aclrtMalloc",
    Free = "aclrtFree",
    MallocHost = "aclrtMallocHost",
    FreeHost = "aclrtFreeHost",
    CreateStream = "aclrtCreateStream",
    DestroyStream = "aclrtDestroyStream",
    SynchronizeStream = "aclrtSynchronizeStream",
    SynchronizeDevice = "aclrtSynchronizeDevice",
    StreamQuery = "aclrtStreamQuery",
    CreateEvent = "aclrtCreateEvent",
    CreateEventWithFlag = "aclrtCreateEventWithFlag",
    RecordEvent = "aclrtRecordEvent",
    QueryEventStatus = "aclrtQueryEventStatus",
    SynchronizeEvent = "aclrtSynchronizeEvent",
    DestroyEvent = "aclrtDestroyEvent",
    StreamWaitEvent = "aclrtStreamWaitEvent",
    Memcpy2d = "aclrtMemcpy2d",
    Memcpy2dAsync = "aclrtMemcpy2dAsync",
    ReserveMemAddress = "aclrtReserveMemAddress",
    ReleaseMemAddress = "aclrtReleaseMemAddress",
    MallocPhysical = "aclrtMallocPhysical",
    FreePhysical = "aclrtFreePhysical",
    MapMem = "aclrtMapMem",
    UnmapMem = "aclrtUnmapMem",
    MemGetAllocationGranularity = "aclrtMemGetAllocationGranularity",
    AllocatorCreateDesc = "aclrtAllocatorCreateDesc",
    AllocatorDestroyDesc = "aclrtAllocatorDestroyDesc",
    AllocatorSetObjToDesc = "aclrtAllocatorSetObjToDesc",
    AllocatorSetAllocFuncToDesc = "aclrtAllocatorSetAllocFuncToDesc",
    AllocatorSetFreeFuncToDesc = "aclrtAllocatorSetFreeFuncToDesc",
    AllocatorSetAllocAdviseFuncToDesc = "aclrtAllocatorSetAllocAdviseFuncToDesc",
    AllocatorSetGetAddrFromBlockFuncToDesc = "aclrtAllocatorSetGetAddrFromBlockFuncToDesc",
    AllocatorRegister = "aclrtAllocatorRegister",
    AllocatorUnregister = "aclrtAllocatorUnregister",
    AllocatorGetByStream = "aclrtAllocatorGetByStream",
    CaptureBegin = "aclmdlRICaptureBegin",
    CaptureGetInfo = "aclmdlRICaptureGetInfo",
    CaptureEnd = "aclmdlRICaptureEnd",
    CaptureThreadExchangeMode = "aclmdlRICaptureThreadExchangeMode",
    ExecuteAsync = "aclmdlRIExecuteAsync",
    ModelDestroy = "aclmdlRIDestroy",
    CreateContext = "aclrtCreateContext",
    DestroyContext = "aclrtDestroyContext",
    SetCurrentContext = "aclrtSetCurrentContext",
    GetCurrentContext = "aclrtGetCurrentContext",
    GetDeviceCount = "aclrtGetDeviceCount",
    GetSocName = "aclrtGetSocName",
    GetCANNVersion = "aclsysGetCANNVersion",
    GetVersionStr = "aclsysGetVersionStr",
    MallocAlign32 = "aclrtMallocAlign32",
    Memcpy = "aclrtMemcpy",
    MemcpyAsync = "aclrtMemcpyAsync",
    Memset = "aclrtMemset",
    MemsetAsync = "aclrtMemsetAsync",
    CreateStreamWithConfig = "aclrtCreateStreamWithConfig",
    DestroyStreamForce = "aclrtDestroyStreamForce",
    SynchronizeStreamWithTimeout = "aclrtSynchronizeStreamWithTimeout",
    SynchronizeDeviceWithTimeout = "aclrtSynchronizeDeviceWithTimeout",
    SetStreamOverflowSwitch = "aclrtSetStreamOverflowSwitch",
    GetStreamOverflowSwitch = "aclrtGetStreamOverflowSwitch",
    SetStreamFailureMode = "aclrtSetStreamFailureMode",
    StreamGetId = "aclrtStreamGetId",
    CreateEventExWithFlag = "aclrtCreateEventExWithFlag",
    GetLastError = "aclrtGetLastError",
    PeekAtLastError = "aclrtPeekAtLastError",
    GetRecentErrMsg = "aclGetRecentErrMsg",
    SetDeviceSatMode = "aclrtSetDeviceSatMode",
    GetDeviceSatMode = "aclrtGetDeviceSatMode",
    SetOpWaitTimeout = "aclrtSetOpWaitTimeout",
    SetOpExecuteTimeOut = "aclrtSetOpExecuteTimeOut",
    SetOpExecuteTimeOutV2 = "aclrtSetOpExecuteTimeOutV2",
    IpcMemGetExportKey = "aclrtIpcMemGetExportKey",
    IpcMemImportByKey = "aclrtIpcMemImportByKey",
    IpcMemClose = "aclrtIpcMemClose",
    IpcMemSetImportPid = "aclrtIpcMemSetImportPid",
    MemExportToShareableHandle = "aclrtMemExportToShareableHandle",
    MemImportFromShareableHandle = "aclrtMemImportFromShareableHandle",
    MemSetPidToShareableHandle = "aclrtMemSetPidToShareableHandle",
    IpcGetEventHandle = "aclrtIpcGetEventHandle",
    GetMemUceInfo = "aclrtGetMemUceInfo",
    MemUceRepair = "aclrtMemUceRepair",
    IpcOpenEventHandle = "aclrtIpcOpenEventHandle",
    DeviceGetBareTgid = "aclrtDeviceGetBareTgid",
}

/// How many functions `Api` names (the length of per-function tables).
pub const COUNT: usize = NAMES.len();

impl Api {
    /// The exact ACL name of the function.
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// The function called `name`, if the emulator exports it.
    pub fn by_name(name: &str) -> Option<Api> {
        NAMES.iter().position(|n| *n == name).map(|i| ALL[i])
    }

    /// The function a C string names; `None` for NULL or an unknown name.
    ///
    /// # Safety
    /// `name` must be NULL or a NUL-terminated string.
    pub unsafe fn by_c_name(name: *const c_char) -> Option<Api> {
        if name.is_null() {
            return None;
        }
        // SAFETY: non-NULL and NUL-terminated per the contract above.
        let name = unsafe { CStr::from_ptr(name) };
        name.to_str().ok().and_then(Api::by_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &api in ALL {
            assert_eq!(Api::by_name(api.name()), Some(api));
        }
        assert_eq!(Api::by_name("aclrtNope"), None);
        // SAFETY: NULL and a valid C string.
        unsafe {
            assert_eq!(Api::by_c_name(std::ptr::null()), None);
            assert_eq!(Api::by_c_name(c"aclrtMalloc".as_ptr()), Some(Api::Malloc));
        }
    }
}
