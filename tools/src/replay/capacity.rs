//! The smallest device capacity at which a trace replays without an OOM.
//!
//! Bisection between the trace's peak requested bytes (never enough: every
//! device allocation costs more than it holds) and a capacity that is shown
//! to fit, to max(1 MiB, 0.5%). Each probe stops at its first OOM. The answer
//! is the smallest capacity that was seen to fit; an allocator whose success
//! is not monotonic in capacity could fit somewhere below it too.

use super::emulator::DEFAULT_CAPACITY;
use super::{Runner, Spec};

const MIB: u64 = 1 << 20;

pub(super) fn bisect(runner: &Runner<'_>, peak_reserved: u64, say: &mut dyn FnMut(&str)) -> Result<u64, String> {
    let mut probes = 0;
    let mut fits = |capacity: u64| -> Result<bool, String> {
        probes += 1;
        say(&format!("min capacity probe {probes}: {} MiB", capacity / MIB));
        let r = runner.run(&Spec { capacity, stop_on_oom: true, ..Spec::default() })?;
        Ok(r.outcome.completed)
    };
    let mut lo = runner.trace.peak_requested;
    if lo >= DEFAULT_CAPACITY {
        return Err(format!("asks for more than {} MiB at once", DEFAULT_CAPACITY / MIB));
    }
    // Headroom over the unconstrained peak for the emulator's per-allocation padding.
    let mut hi = peak_reserved.max(lo).saturating_add(peak_reserved / 64 + MIB).min(DEFAULT_CAPACITY);
    while !fits(hi)? {
        lo = hi;
        if hi >= DEFAULT_CAPACITY {
            return Err(format!("does not fit in {} MiB", hi / MIB));
        }
        hi = hi.saturating_mul(2).min(DEFAULT_CAPACITY);
    }
    while hi - lo > MIB.max(lo / 200) {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}
