//! Core tests, all through the emulator linked into the test binary.

mod expandable;
mod history;
mod pieces;
mod random;
mod reuse;
pub(crate) mod support;
