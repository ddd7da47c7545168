//! The one list of ACL functions npualloc calls, and the table it yields. Required functions exist in every
//! supported CANN release; a library lacking one is refused. Optional ones come in feature groups: a feature is
//! on only when every function of its group exists ([`AclApi::features`]).

use crate::sys::*;
use std::os::raw::{c_char, c_void};

macro_rules! acl_symbols {
    (
        required { $($req:ident : fn($($ra:ty),*) -> $rr:ty;)* }
        optional {
            $(
                $(#[doc = $fdoc:literal])*
                $feature:ident { $($opt:ident : fn($($oa:ty),*) -> $or:ty;)* }
            )*
        }
    ) => {
        /// Typed pointers to every ACL function npualloc calls.
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub struct AclApi {
            $(pub $req: unsafe extern "C" fn($($ra),*) -> $rr,)*
            $($(pub $opt: Option<unsafe extern "C" fn($($oa),*) -> $or>,)*)*
        }

        /// Names of the functions a usable libascendcl must export.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($req)),*];
        /// Names of the functions whose absence only turns a feature off.
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$($(stringify!($opt)),*),*];

        /// The optional features a runtime has: each is true when every function of its group was found.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct AclFeatures {
            $($(#[doc = $fdoc])* pub $feature: bool,)*
        }

        impl AclApi {
            pub fn features(&self) -> AclFeatures {
                AclFeatures { $($feature: true $(&& self.$opt.is_some())*,)* }
            }

            pub fn missing_optional(&self) -> Vec<&'static str> {
                let all = [$($((stringify!($opt), self.$opt.is_none())),*),*];
                all.into_iter().filter(|&(_, missing)| missing).map(|(name, _)| name).collect()
            }

            /// Resolves every symbol via `lookup` (address or NULL); fails with the first missing required name.
            /// # Safety
            /// Every non-NULL address `lookup` returns must be a function with the ACL signature of that name.
            pub(crate) unsafe fn resolve(
                mut lookup: impl FnMut(&str) -> *mut c_void,
            ) -> Result<Self, &'static str> {
                Ok(AclApi {
                    $($req: {
                        let p = lookup(stringify!($req));
                        if p.is_null() {
                            return Err(stringify!($req));
                        }
                        // SAFETY: the caller guarantees the symbol has this ACL signature.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ra),*) -> $rr>(p) }
                    },)*
                    $($($opt: {
                        let p = lookup(stringify!($opt));
                        // SAFETY: as above; NULL stays None.
                        (!p.is_null()).then(|| unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oa),*) -> $or>(p)
                        })
                    },)*)*
                })
            }

            /// The table of the ACL symbols linked into this binary (the emulator's rlib in unit tests); assigning
            /// the bindgen prototypes to its fields proves at compile time that its types match the headers.
            #[cfg(test)]
            pub(crate) fn linked() -> Self {
                AclApi {
                    $($req: crate::sys::$req,)*
                    $($($opt: Some(crate::sys::$opt),)*)*
                }
            }
        }
    };
}

acl_symbols! {
    required {
        aclInit: fn(*const c_char) -> aclError;
        aclFinalize: fn() -> aclError;
        aclrtSetDevice: fn(i32) -> aclError;
        aclrtGetDevice: fn(*mut i32) -> aclError;
        aclrtResetDevice: fn(i32) -> aclError;
        aclrtGetMemInfo: fn(aclrtMemAttr, *mut usize, *mut usize) -> aclError;
        aclrtMalloc: fn(*mut *mut c_void, usize, aclrtMemMallocPolicy) -> aclError;
        aclrtFree: fn(*mut c_void) -> aclError;
        aclrtMallocHost: fn(*mut *mut c_void, usize) -> aclError;
        aclrtFreeHost: fn(*mut c_void) -> aclError;
        aclrtCreateStream: fn(*mut aclrtStream) -> aclError;
        aclrtDestroyStream: fn(aclrtStream) -> aclError;
        aclrtSynchronizeStream: fn(aclrtStream) -> aclError;
        aclrtCreateEvent: fn(*mut aclrtEvent) -> aclError;
        aclrtCreateEventWithFlag: fn(*mut aclrtEvent, u32) -> aclError;
        aclrtRecordEvent: fn(aclrtEvent, aclrtStream) -> aclError;
        aclrtQueryEventStatus: fn(aclrtEvent, *mut aclrtEventRecordedStatus) -> aclError;
        aclrtSynchronizeEvent: fn(aclrtEvent) -> aclError;
        aclrtDestroyEvent: fn(aclrtEvent) -> aclError;
        aclrtStreamWaitEvent: fn(aclrtStream, aclrtEvent) -> aclError;
        aclrtMemcpy2d: fn(*mut c_void, usize, *const c_void, usize, usize, usize, aclrtMemcpyKind) -> aclError;
        aclrtMemcpy2dAsync: fn(*mut c_void, usize, *const c_void, usize, usize, usize, aclrtMemcpyKind, aclrtStream) -> aclError;
        aclrtAllocatorCreateDesc: fn() -> aclrtAllocatorDesc;
        aclrtAllocatorDestroyDesc: fn(aclrtAllocatorDesc) -> aclError;
        aclrtAllocatorSetObjToDesc: fn(aclrtAllocatorDesc, aclrtAllocator) -> aclError;
        aclrtAllocatorSetAllocFuncToDesc: fn(aclrtAllocatorDesc, aclrtAllocatorAllocFunc) -> aclError;
        aclrtAllocatorSetFreeFuncToDesc: fn(aclrtAllocatorDesc, aclrtAllocatorFreeFunc) -> aclError;
        aclrtAllocatorSetAllocAdviseFuncToDesc: fn(aclrtAllocatorDesc, aclrtAllocatorAllocAdviseFunc) -> aclError;
        aclrtAllocatorSetGetAddrFromBlockFuncToDesc: fn(aclrtAllocatorDesc, aclrtAllocatorGetAddrFromBlockFunc) -> aclError;
        aclrtAllocatorRegister: fn(aclrtStream, aclrtAllocatorDesc) -> aclError;
        aclrtAllocatorUnregister: fn(aclrtStream) -> aclError;
    }
    optional {
        /// `aclrtAllocatorGetByStream` (absent before ACL 1.17).
        allocator_by_stream {
            aclrtAllocatorGetByStream: fn(aclrtStream, *mut aclrtAllocatorDesc, *mut aclrtAllocator,
                *mut aclrtAllocatorAllocFunc, *mut aclrtAllocatorFreeFunc,
                *mut aclrtAllocatorAllocAdviseFunc, *mut aclrtAllocatorGetAddrFromBlockFunc) -> aclError;
        }
        /// The virtual-memory family behind expandable segments.
        vmm {
            aclrtReserveMemAddress: fn(*mut *mut c_void, usize, usize, *mut c_void, u64) -> aclError;
            aclrtReleaseMemAddress: fn(*mut c_void) -> aclError;
            aclrtMallocPhysical: fn(*mut aclrtDrvMemHandle, usize, *const aclrtPhysicalMemProp, u64) -> aclError;
            aclrtFreePhysical: fn(aclrtDrvMemHandle) -> aclError;
            aclrtMapMem: fn(*mut c_void, usize, usize, aclrtDrvMemHandle, u64) -> aclError;
            aclrtUnmapMem: fn(*mut c_void) -> aclError;
            aclrtMemGetAllocationGranularity: fn(*mut aclrtPhysicalMemProp, aclrtMemGranularityOptions, *mut usize) -> aclError;
        }
        /// `aclrtStreamQuery`, which validates stream handles the allocator meets for the first time.
        stream_query {
            aclrtStreamQuery: fn(aclrtStream, *mut aclrtStreamStatus) -> aclError;
        }
        /// `aclmdlRICaptureGetInfo`: whether a stream captures (ACL graphs), so it is never queried or synchronized.
        capture_info {
            aclmdlRICaptureGetInfo: fn(aclrtStream, *mut aclmdlRICaptureStatus, *mut aclmdlRI) -> aclError;
        }
        /// Context switches that add no device reference (`Runtime::on_device`).
        contexts {
            aclrtGetCurrentContext: fn(*mut aclrtContext) -> aclError;
            aclrtSetCurrentContext: fn(aclrtContext) -> aclError;
        }
        /// `aclrtGetStreamOverflowSwitch`: whether a stream belongs to the current context (107003 if not).
        stream_context {
            aclrtGetStreamOverflowSwitch: fn(aclrtStream, *mut u32) -> aclError;
        }
        /// `aclrtGetDeviceCount`, which names the valid device ids in a refusal of an unknown one.
        device_count {
            aclrtGetDeviceCount: fn(*mut u32) -> aclError;
        }
        /// Sharing `aclrtMalloc` memory with other processes by key (fixed segments' `npualloc_ipc_export`).
        ipc_key {
            aclrtIpcMemGetExportKey: fn(*mut c_void, usize, *mut c_char, usize, u64) -> aclError;
            aclrtIpcMemImportByKey: fn(*mut *mut c_void, *const c_char, u64) -> aclError;
            aclrtIpcMemClose: fn(*const c_char) -> aclError;
        }
        /// Sharing physical handles with other processes (expandable segments' `npualloc_ipc_export`).
        ipc_handle {
            aclrtMemExportToShareableHandle: fn(aclrtDrvMemHandle, aclrtMemHandleType, u64, *mut u64) -> aclError;
            aclrtMemImportFromShareableHandle: fn(u64, i32, *mut aclrtDrvMemHandle) -> aclError;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_is_on_only_with_its_whole_group() {
        let full = AclApi::linked();
        let all_on = AclFeatures {
            allocator_by_stream: true,
            vmm: true,
            stream_query: true,
            capture_info: true,
            contexts: true,
            stream_context: true,
            device_count: true,
            ipc_key: true,
            ipc_handle: true,
        };
        assert_eq!(full.features(), all_on);
        assert!(full.missing_optional().is_empty());

        let mut api = full;
        api.aclrtMapMem = None;
        assert_eq!(api.features(), AclFeatures { vmm: false, ..all_on });
        assert_eq!(api.missing_optional(), ["aclrtMapMem"]);

        api.aclrtStreamQuery = None;
        api.aclrtAllocatorGetByStream = None;
        api.aclmdlRICaptureGetInfo = None;
        assert_eq!(
            api.features(),
            AclFeatures { allocator_by_stream: false, vmm: false, stream_query: false, capture_info: false, ..all_on }
        );
        assert_eq!(
            api.missing_optional(),
            ["aclrtAllocatorGetByStream", "aclrtMapMem", "aclrtStreamQuery", "aclmdlRICaptureGetInfo"]
        );
        assert_eq!(OPTIONAL_SYMBOLS.len(), 19, "every optional function belongs to one group");
    }
}
