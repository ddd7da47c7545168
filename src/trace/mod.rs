//! Allocation traces in the acl-trace v1 format: one event per line (`a`, `f`, `u`, `w`; see `format`),
//! usually gzipped. `parse` reads and validates one, `record` writes one from a live allocator (config key `trace`).

pub mod format;
pub mod parse;
pub mod record;

pub use format::{Op, Trace};
pub use parse::{parse_file, parse_reader, parse_str, LineError, ParseError};
pub use record::TraceRecorder;
