//! Allocation traces in the acl-trace v1 format.
//!
//! A trace is a text file of one event per line (`a`, `f`, `u`, `w`), usually
//! gzip-compressed; see `format` for the lines. `parse` reads and validates
//! one, `record` writes one from a live allocator (config key `trace`).

pub mod format;
pub mod parse;
pub mod record;

pub use format::{Op, Trace};
pub use parse::{parse_file, parse_reader, parse_str, LineError, ParseError};
pub use record::TraceRecorder;
