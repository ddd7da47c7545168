//! The out-of-memory ladder's step that frees cached pages also releases
//! the reservations kept after a refused release: the request is tried
//! again when that step gave anything back, whether the bytes were handles
//! or address space, and whatever a kept reservation refused again says.

use super::support::{allocator, emu_lock, fail_nth, fault_pending, set_capacity, Baseline, GIB, MIB};
use crate::runtime::Stream;

const RELEASE: &str = "aclrtReleaseMemAddress";
const FREE_PHYS: &str = "aclrtFreePhysical";

/// One test's hold on the emulator; its controls are put back when the
/// test ends, even by a panic.
struct Guard {
    _lock: super::support::EmuGuard,
    _base: Baseline,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: plain values.
        unsafe { ascendcl::aclemu_misalign_reservations(0) };
        fail_nth(RELEASE, 0);
        fail_nth(FREE_PHYS, 0);
        set_capacity(1 << 30);
    }
}

/// On a device of `capacity` bytes, an allocator with 1 GiB pages holding
/// a 100 MiB block, whose first (misaligned) reservation's release was
/// refused: that reservation is kept, charged, for `free_cached`.
fn with_a_kept_reservation(capacity: usize) -> (Guard, crate::core::DeviceAllocator, usize) {
    let lock = emu_lock();
    set_capacity(capacity as u64);
    let g = Guard { _lock: lock, _base: Baseline::take() };
    let a = allocator("page_size:1g");
    // SAFETY: plain value.
    unsafe { ascendcl::aclemu_misalign_reservations(1) };
    fail_nth(RELEASE, 1);
    let p = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(fault_pending(RELEASE), 0, "the misaligned reservation's release was not refused");
    (g, a, p)
}

fn scenario(refuse_in_ladder: bool) -> Result<usize, String> {
    let (_g, a, p) = with_a_kept_reservation(2 * GIB);
    let x = a.malloc(GIB, Stream::DEFAULT).unwrap();
    a.free(x).unwrap();
    // empty_cache: the kept reservation refused again, the freed 1 GiB
    // handle's free refused once: it stays cached.
    fail_nth(RELEASE, 1);
    fail_nth(FREE_PHYS, 1);
    assert!(a.empty_cache().is_err());
    assert_eq!((fault_pending(RELEASE), fault_pending(FREE_PHYS)), (0, 0));
    let (_, cached) = a.own_accounting();
    assert_eq!(cached, GIB, "no 1 GiB handle in the cache");
    if refuse_in_ladder {
        // The ladder's first release is the new, empty small range's
        // (ReleaseCached); the second is the kept reservation's.
        fail_nth(RELEASE, 2);
    }
    // A small-pool request: the cached 1 GiB-page handle does not fit it,
    // and the device is full until the ladder frees that handle.
    let r = a.malloc(MIB, Stream::DEFAULT).map_err(|e| e.to_string());
    fail_nth(RELEASE, 0);
    if let Ok(q) = r {
        a.free(q).unwrap();
    }
    a.free(p).unwrap();
    let _ = a.teardown();
    r
}

#[test]
fn control_without_a_second_refusal_the_small_request_succeeds() {
    scenario(false).unwrap();
}

#[test]
fn a_kept_reservation_refused_again_does_not_stop_the_retry() {
    if let Err(e) = scenario(true) {
        panic!("the request failed although the ladder freed a 1 GiB handle: {e}");
    }
}

/// The kept reservation holds address-space budget that a second stream's
/// range needs; the ladder's FreeCachedPages step releases it (no bytes of
/// memory), and the request is tried again and fits.
fn budget_scenario(release_kept_first: bool) -> Result<(), String> {
    use crate::core::backing::expandable::budget;
    let (_g, a, p) = with_a_kept_reservation(4 * GIB);
    if release_kept_first {
        // What the ladder's FreeCachedPages does, done beforehand.
        a.empty_cache().unwrap();
    }
    // Room for a 1 GiB range only once the kept reservation (len bytes) goes.
    let room = if release_kept_first { GIB + GIB / 2 } else { GIB / 2 };
    let saved = budget::limit();
    budget::set_limit(budget::reserved() + room);
    let s2 = super::support::new_stream();
    let r = a.malloc(100 * MIB, s2).map_err(|e| e.to_string());
    budget::set_limit(saved);
    if let Ok(q) = r {
        a.free(q).unwrap();
    }
    a.free(p).unwrap();
    let _ = a.teardown();
    super::support::drop_stream(s2);
    r.map(|_| ())
}

#[test]
fn control_budget_with_the_kept_reservation_already_released() {
    budget_scenario(true).unwrap();
}

#[test]
fn the_ladder_retries_after_releasing_a_kept_reservation() {
    if let Err(e) = budget_scenario(false) {
        panic!("the request failed although the ladder released the kept reservation: {e}");
    }
}
