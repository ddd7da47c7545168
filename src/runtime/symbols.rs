//! The one list of ACL functions npualloc calls, and the table it yields.
//!
//! Required functions exist in every CANN release we support; a library that
//! lacks one is refused. Optional ones turn a feature off when missing: the
//! virtual-memory family (expandable segments) and `aclrtAllocatorGetByStream`
//! (absent before ACL 1.17).

use crate::sys::*;
use std::os::raw::{c_char, c_void};

macro_rules! acl_symbols {
    (
        required { $($req:ident : fn($($ra:ty),*) -> $rr:ty;)* }
        optional { $($opt:ident : fn($($oa:ty),*) -> $or:ty;)* }
    ) => {
        /// Typed pointers to every ACL function npualloc calls.
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub struct AclApi {
            $(pub $req: unsafe extern "C" fn($($ra),*) -> $rr,)*
            $(pub $opt: Option<unsafe extern "C" fn($($oa),*) -> $or>,)*
        }

        /// Names of the functions a usable libascendcl must export.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($req)),*];
        /// Names of the functions whose absence only turns a feature off.
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$(stringify!($opt)),*];

        impl AclApi {
            /// Resolves every symbol through `lookup`, which returns the
            /// address of a symbol or NULL. Fails with the first missing
            /// required name.
            ///
            /// # Safety
            /// Every non-NULL address `lookup` returns must be a function with
            /// the ACL signature of that name.
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
                    $($opt: {
                        let p = lookup(stringify!($opt));
                        // SAFETY: as above; NULL stays None.
                        (!p.is_null()).then(|| unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oa),*) -> $or>(p)
                        })
                    },)*
                })
            }

            /// The table filled from the ACL symbols linked into this binary
            /// (the emulator's rlib in unit tests). Assigning the bindgen
            /// prototypes to the table's fields is also the compile-time proof
            /// that the table's types match the headers.
            #[cfg(test)]
            pub(crate) fn linked() -> Self {
                AclApi {
                    $($req: crate::sys::$req,)*
                    $($opt: Some(crate::sys::$opt),)*
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
        aclrtAllocatorGetByStream: fn(aclrtStream, *mut aclrtAllocatorDesc, *mut aclrtAllocator,
            *mut aclrtAllocatorAllocFunc, *mut aclrtAllocatorFreeFunc,
            *mut aclrtAllocatorAllocAdviseFunc, *mut aclrtAllocatorGetAddrFromBlockFunc) -> aclError;
        aclrtReserveMemAddress: fn(*mut *mut c_void, usize, usize, *mut c_void, u64) -> aclError;
        aclrtReleaseMemAddress: fn(*mut c_void) -> aclError;
        aclrtMallocPhysical: fn(*mut aclrtDrvMemHandle, usize, *const aclrtPhysicalMemProp, u64) -> aclError;
        aclrtFreePhysical: fn(aclrtDrvMemHandle) -> aclError;
        aclrtMapMem: fn(*mut c_void, usize, usize, aclrtDrvMemHandle, u64) -> aclError;
        aclrtUnmapMem: fn(*mut c_void) -> aclError;
        aclrtMemGetAllocationGranularity: fn(*mut aclrtPhysicalMemProp, aclrtMemGranularityOptions, *mut usize) -> aclError;
        // Validates stream handles the allocator meets for the first time.
        aclrtStreamQuery: fn(aclrtStream, *mut aclrtStreamStatus) -> aclError;
    }
}

/// The functions expandable segments need; all are optional symbols.
pub const VMM_SYMBOLS: &[&str] = &[
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMallocPhysical",
    "aclrtFreePhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtMemGetAllocationGranularity",
];
