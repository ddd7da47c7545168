//! A wake that fails part-way frees the handles it took; when the runtime
//! refuses to free one, the handle is still held: the backing keeps it with
//! its cached handles, counted reserved, and `empty_cache` or teardown frees
//! it later (`Sleeps::free_wake_handles`). Dropping it leaked the device memory
//! with every counter saying it was gone.

use super::support::{check_accounting, emu_lock, fail_nth, fault_pending, host_usage, Baseline, Vmm};
use super::wake::{asleep_in_runs, read_back_and_finish, refused};
use crate::core::*;
use crate::error::Error;

/// What `unfreed_wake` leaves: the allocator, its stream, the blocks
/// (address, size, fill byte), the bytes of the handle kept, and what the
/// emulator held asleep.
type Unfreed = (DeviceAllocator, Stream, Vec<(usize, usize, u8)>, usize, Vmm);

/// Blocks asleep, then a wake stopped by its ninth map whose undo has its
/// first handle free refused.
fn unfreed_wake(base: &Baseline) -> Unfreed {
    let (a, s, off, blocks) = asleep_in_runs();
    let (asleep, host) = (base.vmm(), host_usage());
    let cached = a.own_accounting().1;
    fail_nth("aclrtMapMem", 9);
    fail_nth("aclrtFreePhysical", 1);
    let got = a.wake();
    let pending = (fault_pending("aclrtMapMem"), fault_pending("aclrtFreePhysical"));
    fail_nth("aclrtMapMem", 0);
    fail_nth("aclrtFreePhysical", 0);
    assert_eq!(pending, (0, 0), "both failures fired");
    match got {
        Err(Error::OutOfMemory(m)) => assert!(m.contains("refused") && m.contains("nothing changed"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(a.is_asleep() && refused(&a, off, s), "still asleep");
    assert_eq!(host_usage(), host, "the host copies are kept");
    // One handle more than asleep is held, unmapped.
    let now = base.vmm();
    assert_eq!((now.physical_count, now.mapped_bytes), (asleep.physical_count + 1, asleep.mapped_bytes));
    let kept = (now.physical_bytes - asleep.physical_bytes) as usize;
    assert!(kept > 0);
    // The allocator counts it: cached, reserved, a live handle.
    assert_eq!(a.own_accounting().1, cached + kept, "the handle that could not be freed is cached");
    check_accounting(&a, base, None, "after the refused free");
    (a, s, blocks, kept, asleep)
}

#[test]
fn a_handle_a_failed_wake_could_not_free_is_kept_and_freed_by_empty_cache() {
    let _g = emu_lock();
    let base = Baseline::take();
    let (a, s, blocks, kept, asleep) = unfreed_wake(&base);
    assert!(a.empty_cache().unwrap() >= kept, "empty_cache gives the kept handle back");
    assert_eq!(base.vmm(), asleep, "the device holds what it held asleep");
    check_accounting(&a, &base, None, "after empty_cache");
    a.wake().expect("the next wake succeeds");
    assert!(!a.is_asleep());
    check_accounting(&a, &base, None, "woken");
    read_back_and_finish(a, &base, s, &blocks, "");
}

#[test]
fn a_handle_a_failed_wake_could_not_free_goes_back_at_teardown() {
    let _g = emu_lock();
    let base = Baseline::take();
    let (host_before, _) = host_usage();
    let (a, s, _, _, _) = unfreed_wake(&base);
    super::support::teardown_clean(a, &base);
    assert_eq!(host_usage().0, host_before, "the host copies are freed too");
    super::support::drop_stream(s);
}
