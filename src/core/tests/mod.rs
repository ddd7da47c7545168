//! Core tests, all through the emulator linked into the test binary; the
//! fixtures they share are in `support`.

mod address_space;
mod blocks;
mod config_effect;
mod erase;
mod expandable;
mod growth_rule;
mod history;
mod hooks;
mod out_of_memory;
mod peaks;
mod pieces;
mod pools;
mod random;
mod reuse;
mod sleep;
mod streams;
pub(crate) mod support;
mod teardown;
mod wake;
