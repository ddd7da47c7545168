//! The C ABI: the only module with exported (`#[unsafe(no_mangle)]`) symbols.
//!
//! Conventions every export follows (README "API conventions" repeats them for users; `include/npualloc.h` is
//! generated from the doc comments here):
//! - No panic unwinds into C ([`ffi_boundary!`](crate::ffi_boundary)): a caught panic becomes
//!   `NPUALLOC_ERR_INTERNAL` (or the function's documented fallback value) and a last-error message.
//! - A failed call returns an [`npualloc_status`], changes nothing, writes no out-parameter, and records a
//!   message that [`npualloc_last_error`] returns on the same thread. Out-parameters come last.
//! - A NULL where a value is required is `NPUALLOC_ERR_INVALID_ARGUMENT` naming the parameter
//!   ([`try_ref!`](crate::try_ref) and friends); destructors accept NULL, and freeing NULL is a successful
//!   no-op at every free, as with C's `free`.
//! - A handle (an allocator, a desc's binding) is checked on every use against a registry of live handles
//!   ([`handle`]), never read through: NULL, any other value and a destroyed handle are refused with
//!   `NPUALLOC_ERR_INVALID_ARGUMENT` and a message (by a desc callback, with NULL or nothing, and the message).
//! - Everything is thread-safe unless its doc comment says otherwise.
//!
//! Shims stay thin: they check pointers, convert types and call safe code, mapping [`crate::error::Error`] to a
//! status with `last_error::fail`.

#[macro_use]
pub mod boundary;
pub mod allocator;
pub mod desc;
pub mod forget;
pub mod handle;
pub mod history;
pub mod hooks;
pub mod ipc;
pub mod last_error;
pub mod memcpy;
pub mod pluggable;
pub mod plugin;
pub mod pools;
pub mod sleep;
pub mod stats;
pub mod status;
pub mod version;

pub use last_error::npualloc_last_error;
pub use status::{npualloc_status, npualloc_status_name};
pub use version::{npualloc_abi_version, npualloc_version, NPUALLOC_ABI_VERSION};
