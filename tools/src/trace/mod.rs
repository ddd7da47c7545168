//! Reading acl-trace v1 files (the format: `npualloc::trace`): `format` holds the events and what a replay asks of
//! them, `parse` reads and validates a file.

pub mod format;
pub mod parse;

pub use format::{Op, Trace, HEADER};
pub use parse::{parse_file, parse_reader, parse_str, LineError, ParseError};
