//! The ACL runtime as the allocator sees it: one table of function pointers loaded at run time (`loader`);
//! a failing call becomes an [`AclCallError`] naming the function and its aclError. Contracts (docs/acl-api.md):
//! - `aclrtMalloc` never synchronizes; `aclrtFree` does not wait for queued work (§5), so memory is freed
//!   only after the streams that used it are known complete.
//! - Out of memory is 207001 (`ACL_ERROR_RT_MEMORY_ALLOCATION`) from `aclrtMalloc` and `aclrtMallocPhysical` (§2).
//! - Calls that allocate act on the thread's current device, so they run inside [`Runtime::on_device`], which
//!   switches contexts without adding device references (`context`).

pub mod acl_error;
mod context;
mod desc;
mod device;
mod ipc;
pub mod loader;
pub mod symbols;
mod vmm;

pub use acl_error::AclErrorCode;
pub use context::{Context, DeviceHold};
pub use desc::DescCallbacks;
pub use ipc::KEY_LEN;
pub use symbols::{AclApi, AclFeatures};
pub use vmm::PhysicalHandle;

use crate::sys;
use std::sync::Arc;

/// A failed ACL call: which function, and the aclError it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{function} failed with {}", acl_error::AclErrorCode(*.code))]
pub struct AclCallError {
    pub function: &'static str,
    pub code: i32,
}

impl AclCallError {
    /// True for the codes the runtime uses for an unknown handle (for a stream: one already destroyed).
    pub fn is_invalid_handle(&self) -> bool {
        matches!(self.code, sys::ACL_ERROR_RT_INVALID_HANDLE | sys::ACL_ERROR_INVALID_RESOURCE_HANDLE)
    }

    /// True for the codes the runtime uses for exhausted device memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self.code,
            sys::ACL_ERROR_RT_MEMORY_ALLOCATION | sys::ACL_ERROR_RT_DEVICE_OOM | sys::ACL_ERROR_BAD_ALLOC
        )
    }
}

/// Why the ACL runtime could not be used at all.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// `origin` says where the path came from and what to change.
    #[error("cannot load the ACL runtime library '{path}': {reason}; {origin}")]
    Unavailable { path: String, reason: Box<str>, origin: loader::LibrarySource },
    #[error("the ACL runtime library '{path}' lacks the required function {symbol}")]
    MissingSymbol { path: String, symbol: &'static str },
}

/// An `aclrtStream` value (0 is the default stream), as plain data so allocator state stays `Send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Stream(pub usize);

impl Stream {
    pub const DEFAULT: Stream = Stream(0);
    pub fn raw(self) -> sys::aclrtStream {
        self.0 as sys::aclrtStream
    }
    pub fn from_raw(s: sys::aclrtStream) -> Self {
        Stream(s as usize)
    }
}

/// An `aclrtEvent` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Event(pub usize);

/// The loaded ACL runtime: a symbol table plus what it supports.
pub struct Runtime {
    api: AclApi,
    features: AclFeatures,
    source: String,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("source", &self.source).field("features", &self.features).finish()
    }
}

impl Runtime {
    /// Loads libascendcl (see `loader` for the search order).
    pub fn load(path: Option<&str>) -> Result<Arc<Runtime>, RuntimeError> {
        let lib = loader::load(path)?;
        Ok(Self::from_api(lib.api, &lib.path))
    }

    /// A runtime over an already resolved table.
    pub fn from_api(api: AclApi, source: &str) -> Arc<Runtime> {
        Arc::new(Runtime { features: api.features(), api, source: source.to_string() })
    }

    /// The emulator linked into this test binary.
    #[cfg(test)]
    pub fn emulated() -> Arc<Runtime> {
        Self::from_api(AclApi::linked(), "linked emulator")
    }

    /// The raw table, for the few callers that need a function directly.
    pub fn api(&self) -> &AclApi {
        &self.api
    }

    /// Whether the virtual-memory functions (expandable segments) exist.
    pub fn has_vmm(&self) -> bool {
        self.features.vmm
    }

    /// Where the table came from (a library path).
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Turns an aclError into a Result naming the function.
#[inline]
pub(crate) fn check(function: &'static str, code: sys::aclError) -> Result<(), AclCallError> {
    if code == sys::ACL_SUCCESS {
        Ok(())
    } else {
        Err(AclCallError { function, code })
    }
}
