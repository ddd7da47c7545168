//! A reservation the expandable backing cannot use (1 GiB pages need a
//! range at a 1 GiB boundary; the runtime only promises 2 MiB) is given
//! back and a padded one taken (`reserve_aligned`). When the runtime refuses
//! to give it back, the reservation stays recorded and charged to the
//! process's address-space budget, and the request goes on; `free_cached`
//! (empty_cache, the OOM ladder, forget_stream, teardown) tries the release
//! again. Teardown tries a range's own refused release once more the same
//! way.

use super::support::{allocator, emu_lock, fail_nth, fault_pending, set_capacity, teardown_clean, Baseline, GIB, MIB};
use crate::core::backing::expandable::budget;
use crate::runtime::Stream;

const RELEASE: &str = "aclrtReleaseMemAddress";

/// One test's hold on the emulator on a 4 GiB device: the process's
/// reservations and budget charge when it began, and the emulator's
/// controls put back when it ends, even by a panic.
struct Scene {
    base: Baseline,
    before: usize,
    _lock: super::support::EmuGuard,
}

impl Scene {
    fn new() -> Self {
        let lock = emu_lock();
        set_capacity(4 << 30);
        Scene { base: Baseline::take(), before: budget::reserved(), _lock: lock }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        misalign(0);
        fail_nth(RELEASE, 0);
        set_capacity(1 << 30);
    }
}

/// The next `n` reservations above 512 MiB start 2 MiB past a 1 GiB boundary.
fn misalign(n: u32) {
    // SAFETY: plain values.
    assert_eq!(unsafe { ascendcl::aclemu_misalign_reservations(n) }, 0);
}

/// Budget charged now beyond `before`.
fn charged_since(before: usize) -> usize {
    budget::reserved() - before
}

/// An allocator with 1 GiB pages whose first large range came back off a
/// 1 GiB boundary and whose release was refused, holding a 100 MiB block:
/// (allocator, block, bytes of the range).
fn with_refused_release(base: &Baseline, before: usize) -> (crate::core::DeviceAllocator, usize, usize) {
    let a = allocator("page_size:1g");
    misalign(1);
    fail_nth(RELEASE, 1);
    let p =
        a.malloc(100 * MIB, Stream::DEFAULT).unwrap_or_else(|e| panic!("a refused release failed the request: {e}"));
    assert_eq!(fault_pending(RELEASE), 0, "the misaligned reservation was never released");
    let (range, len) = a.segment_of(p).unwrap();
    assert_eq!(range % GIB, 0, "the range is not at a 1 GiB boundary");
    // The refused reservation and the padded one are both held, and both
    // charged: the first `len` bytes, the second `len` and its padding.
    assert_eq!(base.vmm().reserved_ranges, 2);
    assert_eq!(charged_since(before), 2 * len + GIB);
    (a, p, len)
}

#[test]
fn a_reservation_whose_release_was_refused_goes_at_teardown() {
    let sc = Scene::new();
    let (base, before) = (&sc.base, sc.before);
    let (a, p, _) = with_refused_release(base, before);
    a.free(p).unwrap();
    teardown_clean(a, base);
    assert_eq!(charged_since(before), 0, "the budget still charges a released reservation");
}

/// Whatever the request made of the refusal, teardown leaves nothing
/// reserved and nothing charged (a forgotten reservation would stay held
/// and charged for the process's life).
#[test]
fn after_a_refused_release_teardown_leaves_nothing_reserved() {
    let sc = Scene::new();
    let (base, before) = (&sc.base, sc.before);
    let a = allocator("page_size:1g");
    misalign(1);
    fail_nth(RELEASE, 1);
    if let Ok(p) = a.malloc(100 * MIB, Stream::DEFAULT) {
        a.free(p).unwrap();
    }
    assert_eq!(fault_pending(RELEASE), 0, "the misaligned reservation was never released");
    let _ = a.teardown();
    assert_eq!(base.vmm().reserved_ranges, 0, "teardown left a reservation behind");
    assert_eq!(charged_since(before), 0, "the budget still charges what teardown released");
}

#[test]
fn a_reservation_whose_release_was_refused_goes_at_empty_cache() {
    let sc = Scene::new();
    let (base, before) = (&sc.base, sc.before);
    let (a, p, len) = with_refused_release(base, before);
    // With the block live only the kept reservation can go.
    a.empty_cache().unwrap();
    assert_eq!(base.vmm().reserved_ranges, 1);
    assert_eq!(charged_since(before), len + GIB, "the kept reservation is still charged");
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(base.vmm().reserved_ranges, 0);
    assert_eq!(charged_since(before), 0);
    teardown_clean(a, base);
}

#[test]
fn a_release_refused_twice_stays_charged_until_teardown() {
    let sc = Scene::new();
    let (base, before) = (&sc.base, sc.before);
    let (a, p, len) = with_refused_release(base, before);
    // The block is live: the kept reservation's is empty_cache's one release.
    fail_nth(RELEASE, 1);
    assert!(a.empty_cache().is_err(), "a release refused again is not reported");
    assert_eq!(fault_pending(RELEASE), 0);
    assert_eq!(base.vmm().reserved_ranges, 2);
    assert_eq!(charged_since(before), 2 * len + GIB, "the budget dropped a reservation still held");
    a.free(p).unwrap();
    teardown_clean(a, base);
    assert_eq!(charged_since(before), 0);
}

/// A range whose release teardown's first try is refused is tried again
/// before teardown returns: nothing stays reserved or charged.
#[test]
fn teardown_tries_a_refused_range_release_again() {
    let sc = Scene::new();
    let (base, before) = (&sc.base, sc.before);
    let a = allocator("");
    let p = a.malloc(100 * MIB, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    assert_eq!(base.vmm().reserved_ranges, 1);
    fail_nth(RELEASE, 1);
    teardown_clean(a, base);
    assert_eq!(fault_pending(RELEASE), 0, "teardown released nothing");
    assert_eq!(charged_since(before), 0);
}
