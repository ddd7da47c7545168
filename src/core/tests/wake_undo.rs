//! A wake that fails part-way and whose undo then fails to unmap a page
//! (two faults: the map or copy that stops the wake, then an unmap of its
//! undo): the page stays mapped with its handle, kept by its range and
//! counted reserved; the state says what is mapped; the error says what
//! happened; the next wake unmaps and frees it first and succeeds, and a
//! teardown while still asleep gives it back (`expandable/sleep.rs`).

use super::support::{check_accounting, emu_lock, fail_nth, fault_pending, host_usage, Baseline, Vmm, PAGE};
use super::wake::{asleep_in_runs, read_back_and_finish, refused};
use crate::core::*;
use crate::error::Error;

/// What `stuck_wake` leaves: the allocator, its stream, the offload pool,
/// the blocks (address, size, fill byte) and what the emulator holds.
type Stuck = (DeviceAllocator, Stream, u64, Vec<(usize, usize, u8)>, Vmm);

/// Blocks asleep, and a wake stopped by the `stop_nth` call of `stop`
/// whose undo has its `unmap_nth` unmap refused.
fn stuck_wake(base: &Baseline, stop: &str, stop_nth: i32, unmap_nth: i32) -> Stuck {
    let (a, s, off, blocks) = asleep_in_runs();
    let (asleep, host) = (base.vmm(), host_usage());
    let what = format!("{stop} #{stop_nth}, unmap #{unmap_nth}");
    fail_nth(stop, stop_nth);
    fail_nth("aclrtUnmapMem", unmap_nth);
    let got = a.wake();
    let pending = (fault_pending(stop), fault_pending("aclrtUnmapMem"));
    fail_nth(stop, 0);
    fail_nth("aclrtUnmapMem", 0);
    assert_eq!(pending, (0, 0), "{what}: both failures fired");
    match got {
        Err(Error::Internal(m)) => {
            assert!(m.contains("stays mapped") && m.contains("Still asleep"), "{what}: {m}");
            assert!(m.contains("next wake or teardown"), "{what}: {m}");
        }
        other => panic!("{what}: {other:?}"),
    }
    assert!(a.is_asleep(), "{what}: still asleep");
    assert!(refused(&a, off, s) && refused(&a, 0, s), "{what}: the pools still sleep");
    // One page stays mapped, its handle held and counted reserved; the host
    // copies are all kept.
    let now = base.vmm();
    assert_eq!(
        (now.mapped_bytes, now.physical_count, now.physical_bytes),
        (asleep.mapped_bytes + PAGE as i64, asleep.physical_count + 1, asleep.physical_bytes + PAGE as i64),
        "{what}: one page left mapped"
    );
    assert_eq!(host_usage(), host, "{what}: the host copies are kept");
    check_accounting(&a, base, None, &what);
    (a, s, off, blocks, now)
}

#[test]
fn the_next_wake_frees_a_page_an_undo_left_mapped() {
    let _g = emu_lock();
    for (stop, stop_nth, unmap_nth) in
        [("aclrtMapMem", 9, 1), ("aclrtMapMem", 9, 4), ("aclrtMemcpy2d", 3, 1), ("aclrtMemcpy2d", 3, 2)]
    {
        let base = Baseline::take();
        let (a, s, _, blocks, _) = stuck_wake(&base, stop, stop_nth, unmap_nth);
        a.wake().unwrap_or_else(|e| panic!("{stop} #{stop_nth}: the next wake succeeds: {e}"));
        assert!(!a.is_asleep());
        check_accounting(&a, &base, None, "woken");
        read_back_and_finish(a, &base, s, &blocks, &format!("{stop} #{stop_nth}: "));
    }
}

#[test]
fn a_page_that_still_cannot_be_unmapped_keeps_the_next_wake_from_changing_anything() {
    let _g = emu_lock();
    let base = Baseline::take();
    let (a, s, off, blocks, stuck) = stuck_wake(&base, "aclrtMapMem", 9, 1);
    let host = host_usage();
    fail_nth("aclrtUnmapMem", 1);
    let got = a.wake();
    fail_nth("aclrtUnmapMem", 0);
    match got {
        Err(Error::Internal(m)) => assert!(m.contains("cannot wake") && m.contains("nothing changed"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(a.is_asleep() && refused(&a, off, s));
    assert_eq!((base.vmm(), host_usage()), (stuck, host), "the refused retry changed nothing");
    check_accounting(&a, &base, None, "retry refused");
    a.wake().expect("the wake after that succeeds");
    read_back_and_finish(a, &base, s, &blocks, "");
}

#[test]
fn teardown_while_asleep_gives_back_a_page_an_undo_left_mapped() {
    let _g = emu_lock();
    let base = Baseline::take();
    let (host_before, _) = host_usage();
    let (a, s, _, _, _) = stuck_wake(&base, "aclrtMemcpy2d", 3, 1);
    super::support::teardown_clean(a, &base);
    assert_eq!(host_usage().0, host_before, "the host copies are freed too");
    super::support::drop_stream(s);
}
