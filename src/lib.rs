//! npualloc: a caching device-memory allocator for Huawei Ascend NPUs.
//!
//! Layers, each using only those above it in this list:
//! - `sys`: raw ACL types from bindgen (only `runtime` uses them).
//! - `runtime`: the ACL runtime loaded at run time, with safe wrappers.
//! - `core`, `config`, `memcpy2d`: the allocator itself, safe Rust.
//! - `ffi`: the `extern "C"` shims; the only place with exported symbols.
//! - `trace`, `replay`: allocation traces (record, parse) and their replay
//!   through an allocator configuration, for the tools and benchmarks.
pub mod addr_hash;
pub mod config;
pub mod core;
pub mod error;
pub mod ffi;
pub mod memcpy2d;
pub mod replay;
pub mod runtime;
pub mod sys;
pub mod trace;

#[cfg(test)]
extern crate ascendcl as _;
