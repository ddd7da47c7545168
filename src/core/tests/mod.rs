//! Core tests, all through the emulator linked into the test binary; the
//! fixtures they share are in `support`.

mod address_space;
mod ahead_pacing;
mod blocks;
mod config_effect;
mod deferred_reuse;
mod destroyed_pool_free;
mod erase;
mod expandable;
mod growth_rule;
mod history;
mod hooks;
mod invariant_checks;
mod out_of_memory;
mod peaks;
mod pieces;
mod pool_capture;
mod pool_captured_retired;
mod pool_counts_reuse;
mod pool_empty;
mod pool_retire;
mod pool_stats;
mod pools;
mod random;
mod range_release;
mod reuse;
mod routed_retired_entry;
mod sleep;
mod sleep_after_partial_wake;
mod sleep_race;
mod streams;
pub(crate) mod support;
mod teardown;
mod wake;
mod wake_race;
mod wake_undo;
mod wake_unfreed;
