//! What the random sequences share: request sizes, fault arming, and the
//! test's own runtime calls.

use super::super::support::{fail_nth, hold_stream, release_stream, Rng};
use crate::core::Stream;
use crate::runtime::AclCallError;

/// Bytes at the start of each block filled with its pattern.
pub(super) const FILLED: usize = 4096;
/// Bytes each queued copy reads.
pub(super) const COPY_LEN: usize = 512;
/// Tries of the test's own runtime calls: an armed fault fires once, so the
/// second try succeeds.
pub(super) const TRIES: usize = 2;

pub(in crate::core::tests) const FAULTS: [&str; 13] = [
    "aclrtSynchronizeStream",
    "aclrtSynchronizeEvent",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtRecordEvent",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtCreateEventWithFlag",
    "aclrtFreePhysical",
    "aclrtQueryEventStatus",
];

/// A request size from each pool: small, up to 1 MiB, mid-size, large.
pub(in crate::core::tests) fn random_size(rng: &mut Rng) -> usize {
    match rng.below(4) {
        0 => 1 + rng.below(4096) as usize,
        1 => 1 + rng.below(1 << 20) as usize,
        2 => (1 << 20) + rng.below(9 << 20) as usize,
        _ => (10 << 20) + rng.below(30 << 20) as usize,
    }
}

/// One time in `one_in`, arms a fault of a random runtime function one to
/// three calls ahead.
pub(super) fn maybe_arm_fault(rng: &mut Rng, one_in: u64) {
    if rng.below(one_in) == 0 {
        let function = FAULTS[rng.index(FAULTS.len())];
        fail_nth(function, 1 + rng.below(3) as i32);
    }
}

pub(in crate::core::tests) fn disarm_faults() {
    for function in FAULTS {
        fail_nth(function, 0);
    }
}

pub(super) fn overlaps(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a < b + b_len && b < a + a_len
}

/// Runs one of the test's own runtime calls, which an armed fault may hit.
pub(super) fn retried<T>(what: &str, call: impl Fn() -> Result<T, AclCallError>) -> T {
    let mut result = call();
    for _ in 1..TRIES {
        result = result.or_else(|_| call());
    }
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Holds (or releases) a stream's later work in the emulator.
pub(super) fn set_held(stream: Stream, held: bool) {
    if held {
        hold_stream(stream)
    } else {
        release_stream(stream)
    }
}
