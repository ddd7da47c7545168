//! The `aclrtAllocatorDesc` family: building a desc and registering it on a stream.

use super::{check, AclCallError, Runtime, Stream};
use crate::sys;

/// The four callbacks and the object a desc carries.
#[derive(Clone, Copy)]
pub struct DescCallbacks {
    pub obj: sys::aclrtAllocator,
    pub alloc: unsafe extern "C" fn(sys::aclrtAllocator, usize) -> *mut std::os::raw::c_void,
    pub free: unsafe extern "C" fn(sys::aclrtAllocator, sys::aclrtAllocatorBlock),
    pub alloc_advise:
        unsafe extern "C" fn(sys::aclrtAllocator, usize, sys::aclrtAllocatorAddr) -> *mut std::os::raw::c_void,
    pub get_addr: unsafe extern "C" fn(sys::aclrtAllocatorBlock) -> *mut std::os::raw::c_void,
}

impl Runtime {
    /// Creates a desc with the object and all four callbacks set. The advise callback is always set: the
    /// runtime leaves unset ones uninitialised and GE's fallback for a NULL one deadlocks (docs/acl-api.md §6.3).
    pub fn create_desc(&self, cb: &DescCallbacks) -> Result<usize, AclCallError> {
        // SAFETY: no arguments.
        let desc = unsafe { (self.api.aclrtAllocatorCreateDesc)() };
        if desc.is_null() {
            return Err(AclCallError { function: "aclrtAllocatorCreateDesc", code: sys::ACL_ERROR_BAD_ALLOC });
        }
        // `set!(f, v)` checks `f(desc, v)`, naming `f` once.
        macro_rules! set {
            ($f:ident, $v:expr) => {
                check(stringify!($f), (self.api.$f)(desc, $v))
            };
        }
        let filled = (|| {
            // SAFETY: desc is live; the callbacks are valid extern "C" functions.
            unsafe {
                set!(aclrtAllocatorSetObjToDesc, cb.obj)?;
                set!(aclrtAllocatorSetAllocFuncToDesc, Some(cb.alloc))?;
                set!(aclrtAllocatorSetFreeFuncToDesc, Some(cb.free))?;
                set!(aclrtAllocatorSetAllocAdviseFuncToDesc, Some(cb.alloc_advise))?;
                set!(aclrtAllocatorSetGetAddrFromBlockFuncToDesc, Some(cb.get_addr))
            }
        })();
        filled.map(|()| desc as usize).inspect_err(|_| {
            let _ = self.destroy_desc(desc as usize);
        })
    }

    pub fn destroy_desc(&self, desc: usize) -> Result<(), AclCallError> {
        // SAFETY: desc came from create_desc and is destroyed once.
        check("aclrtAllocatorDestroyDesc", unsafe {
            (self.api.aclrtAllocatorDestroyDesc)(desc as sys::aclrtAllocatorDesc)
        })
    }

    pub fn register_desc(&self, stream: Stream, desc: usize) -> Result<(), AclCallError> {
        // SAFETY: desc is live; the runtime validates the stream.
        check("aclrtAllocatorRegister", unsafe {
            (self.api.aclrtAllocatorRegister)(stream.raw(), desc as sys::aclrtAllocatorDesc)
        })
    }

    pub fn unregister_desc(&self, stream: Stream) -> Result<(), AclCallError> {
        // SAFETY: the runtime validates the stream; unknown streams are a no-op.
        check("aclrtAllocatorUnregister", unsafe { (self.api.aclrtAllocatorUnregister)(stream.raw()) })
    }
}
