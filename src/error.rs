//! The crate's error type. Each variant maps to one C status code.

use crate::runtime::{AclCallError, RuntimeError};

/// Everything that can go wrong, with a message a user can act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// NULL where a value is required, zero or overflowing size, bad enum, bad stream.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Unknown key, bad value or conflicting keys in a config string. The
    /// message says "entry", not "key": most reasons are a valid key's bad value.
    #[error("bad config entry '{key}': {reason}")]
    BadConfig { key: String, reason: String },
    /// A pointer or block this allocator does not own, or already freed.
    #[error("unknown pointer: {0}")]
    UnknownPointer(String),
    /// A 2D copy would touch bytes outside the allocation that owns its first byte.
    #[error("2D copy out of bounds: {0}")]
    CopyOutOfBounds(String),
    /// A valid request this runtime cannot do.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The device could not satisfy the request after every recovery step.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// An ACL call failed.
    #[error("{context}: {call}")]
    Runtime { call: AclCallError, context: String },
    /// libascendcl could not be loaded or lacks a required symbol.
    #[error(transparent)]
    RuntimeUnavailable(#[from] RuntimeError),
    /// A bug: a broken invariant or a caught panic.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// An ACL call failure with a word on what npualloc was doing.
    pub fn runtime(call: AclCallError, context: impl Into<String>) -> Self {
        Error::Runtime { call, context: context.into() }
    }

    pub fn bad_config(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::BadConfig { key: key.into(), reason: reason.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

// Every malloc and free returns a `Result<_, Error>`: a larger error makes
// the cache-hit path move and test more bytes on every call. A variant that
// needs more room boxes its fields.
const _: () = assert!(std::mem::size_of::<Error>() <= 56, "Error grew past 56 bytes");
