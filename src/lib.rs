//! npualloc: a caching device-memory allocator for Huawei Ascend NPUs.
//!
//! Layers, each using only those above it in this list:
//! - `sys`: raw ACL types from bindgen (only `runtime` uses them).
//! - `runtime`: the ACL runtime loaded at run time, with safe wrappers.
//! - `core`, `config`, `memcpy2d`: the allocator itself, safe Rust.
//! - `ffi`: the `extern "C"` shims; the only place with exported symbols.
//! - `trace`: allocation traces, recorded (config key `trace`). Reading and replaying them lives in the
//!   `npualloc-tools` crate (`tools/`), so the C library carries only the allocator and its recorder.
pub mod addr_hash;
pub mod config;
pub mod core;
pub mod error;
pub mod ffi;
pub mod memcpy2d;
pub mod runtime;
pub mod sys;
pub mod trace;

#[cfg(test)]
extern crate ascendcl as _;
