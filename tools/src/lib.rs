//! npualloc-tools: what is built on the allocator but is not part of it.
//!
//! - `replay`: replays allocation traces through allocator configurations on
//!   the ACL emulator (the `npualloc-replay` command, the benchmarks and the
//!   examples use it), with its table, JSON and SVG writers.
//! - `interleave`: merges traces into one, as if their programs shared a
//!   device (the `npualloc-interleave` command).
//! - `trace`: reads and validates the acl-trace v1 files the allocator records.
//!
//! Kept out of the library crate so that `libnpualloc.so` carries only the
//! allocator, and so that the tools may use crates the library must not
//! depend on.

pub mod interleave;
pub mod replay;
pub mod trace;

// The replay modules name the allocator's modules from the crate root, as
// they did when they lived in the library crate.
use npualloc::{config, core, error, runtime};
