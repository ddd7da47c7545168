//! Allocation traces in the acl-trace v1 format, usually gzipped; `record` writes one from a live allocator (config
//! key `trace`). The replay tools read them (`npualloc-tools`, `trace`).
//!
//! | line | event |
//! |---|---|
//! | `a <id> <bytes> <stream>` | allocate `bytes` (> 0) on stream number `stream`, call it `id` |
//! | `f <id>` | free `id` (stream-ordered on its allocation stream) |
//! | `u <id> <stream>` | work on `stream` also uses `id` (record_stream) |
//! | `w <stream>` | the host waits for all work queued on `stream` |
//!
//! Ids are unique within a file (never reused); streams are small integers, 0 being the first. Lines starting
//! with `#` are comments; the first is [`HEADER`].

pub mod record;

pub use record::TraceRecorder;

/// The first line of every acl-trace v1 file.
pub const HEADER: &str = "# acl-trace v1";
