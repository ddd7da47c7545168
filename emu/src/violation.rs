//! Violations: memory misused while queued work still uses it.
//!
//! Note [pins]: from launch until it runs, an op of `aclemu_run_op` pins the
//! device ranges of its blocks and a queued 2D copy pins its device-side
//! extents. A violation is recorded when
//! - another stream writes into a pinned range: an op at its launch (where
//!   the emulator writes its pattern) or a copy when it runs, unless the
//!   write is ordered after the pinning work (the writer's stream waits for
//!   it) or the pinning work is ordered after the write;
//! - a pinned range is freed with `aclrtFree` or unmapped with
//!   `aclrtUnmapMem` (on a card both release memory at once, under queued
//!   work; the release of a physical handle always follows its last unmap);
//! - queued work runs on memory that is no longer allocated or mapped (the
//!   work is then skipped: a copy there would fault the host).
//!
//! Each violation is counted process-wide (`aclemu_violations`), described
//! on stderr, and flags the streams involved, whose next
//! `aclrtSynchronizeStream`, `aclrtSynchronizeDevice` or
//! `aclemu_stream_release` then returns 507000, as a device reports a
//! failed kernel at the next synchronization. Host-side writes cannot be
//! seen and are not modelled.
//!
//! A test suite wants more than a count: `ACLEMU_VIOLATIONS=abort` (read at
//! the first violation) or `aclemu_set_violation_abort(1)` makes the first
//! violation print its description and the stack of the call that made it,
//! then abort the process, so the test fails at the call, not at a later
//! synchronize whose 507000 a recovery path may discard. Misuse shows only where the emulator's order
//! of execution exposes it: work on a stream that is not held runs at
//! launch and pins nothing, so tests hold a stream to catch a race.

use crate::queue::{any_pinned, engine};
use crate::{memory, vmm};
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};

/// A byte range `[start, end)`.
pub type Span = (usize, usize);

static COUNT: AtomicI64 = AtomicI64::new(0);

/// What a violation does beyond counting: `UNSET` until the first question
/// (then the environment decides), `COUNT_ONLY` or `ABORT`.
static MODE: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = 0;
const COUNT_ONLY: u8 = 1;
const ABORT: u8 = 2;

/// The variable that turns every violation into an abort.
const ENV: &str = "ACLEMU_VIOLATIONS";

fn aborts() -> bool {
    match MODE.load(Ordering::Acquire) {
        UNSET => {
            let from_env = match std::env::var(ENV) {
                Ok(v) if v.trim() == "abort" => ABORT,
                _ => COUNT_ONLY,
            };
            // A concurrent aclemu_set_violation_abort wins over the environment.
            let _ = MODE.compare_exchange(UNSET, from_env, Ordering::AcqRel, Ordering::Acquire);
            MODE.load(Ordering::Acquire) == ABORT
        }
        mode => mode == ABORT,
    }
}

/// True if two ranges share a byte.
pub fn overlap(a: Span, b: Span) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

/// True if every range lies in live aclrtMalloc memory or live mappings.
/// Called under the engine lock (which is taken before the memory locks).
pub fn still_device_memory(spans: &[Span]) -> bool {
    spans.iter().all(|&span| memory::covers(span) || vmm::mapped_covers(span))
}

/// Counts a violation and says what happened.
pub fn record(what: &str) {
    let n = COUNT.fetch_add(1, Ordering::AcqRel) + 1;
    eprintln!("acl-emu: violation {n}: {what}");
    if aborts() {
        let stack = std::backtrace::Backtrace::force_capture();
        eprintln!("acl-emu: aborting at the violation ({ENV}=abort or aclemu_set_violation_abort); the call that made it:\n{stack}");
        std::process::abort();
    }
}

/// Records a violation if queued work pins memory in `span`, which `call`
/// is releasing. Called with no memory lock held.
pub fn check_release(span: Span, call: &str) {
    if !any_pinned() {
        return;
    }
    let mut eng = engine();
    let streams = eng.pinned_by(span);
    if !streams.is_empty() {
        let what = format!("{call} released memory that queued work still uses");
        eng.violation(&streams, &what);
    }
}

/// Violations recorded so far, process-wide.
///
/// # Safety
/// No arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_violations() -> i64 {
    COUNT.load(Ordering::Acquire)
}

/// Makes every later violation abort the process (`abort` non-zero) or only
/// count (0), whatever `ACLEMU_VIOLATIONS` says. Returns the previous
/// setting: 1 if violations aborted, 0 if not.
///
/// # Safety
/// No pointer arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclemu_set_violation_abort(abort: i32) -> i32 {
    let before = aborts();
    MODE.store(if abort != 0 { ABORT } else { COUNT_ONLY }, Ordering::Release);
    i32::from(before)
}

#[cfg(test)]
mod tests {
    use super::overlap;

    #[test]
    fn spans_overlap_only_when_they_share_a_byte() {
        assert!(overlap((0, 10), (9, 20)));
        assert!(!overlap((0, 10), (10, 20)));
        assert!(overlap((5, 6), (0, 100)));
        assert!(!overlap((5, 5), (0, 100)));
    }
}
