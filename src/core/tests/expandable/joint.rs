//! One reservation per stream (Note [one reservation per stream]): a
//! stream's two pools grow with one `aclrtReserveMemAddress`, each in its
//! own part, and the region goes back once, when neither part is in use.
//! Counted with the emulator's own call counters.

use super::{
    allocator, budget, check_accounting, check_fill, drop_stream, emu_lock, fail_nth, fill, new_stream, set_capacity,
    teardown_clean, Baseline, DEV, GIB, MIB, PAGE,
};
use crate::core::backing::expandable::budget as va_budget;
use crate::runtime::Stream;

const EXP_2M: &str = "expandable_segments:true,page_size:2m";
const RESERVE: &str = "aclrtReserveMemAddress";
const RELEASE: &str = "aclrtReleaseMemAddress";

/// Calls of the ACL function `name` so far in this process.
fn calls(name: &str) -> i64 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a valid C string.
    unsafe { ascendcl::aclemu_call_count(c.as_ptr()) }
}

/// Reservation calls since a test's start: (reserves, releases).
struct Calls(i64, i64);

impl Calls {
    fn take() -> Self {
        Calls(calls(RESERVE), calls(RELEASE))
    }

    fn since(&self) -> (i64, i64) {
        (calls(RESERVE) - self.0, calls(RELEASE) - self.1)
    }
}

/// A stream whose small and large pools both grow reserves once: the large
/// pool's part first, the small pool's right after it, each the size a
/// range of its own had (the device and a sixteenth of it). Two calls
/// before.
#[test]
fn a_streams_two_pools_grow_with_one_reservation() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator(EXP_2M);
    let rt = a.runtime().clone();
    let (_, total) = rt.on_device(DEV, || rt.mem_info()).unwrap();
    let n = Calls::take();
    let small = a.malloc(4096, Stream::DEFAULT).unwrap();
    let large = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(n.since(), (1, 0), "two pools of one stream reserved more than once");
    assert_eq!(base.vmm().reserved_ranges, 1);
    assert_eq!(a.shared_reservations(), 1);
    let (large_base, large_len) = a.segment_of(large).unwrap();
    let (small_base, small_len) = a.segment_of(small).unwrap();
    let round = |n: usize| n.div_ceil(PAGE) * PAGE;
    assert_eq!((large_len, small_len), (round(total), round(total / 16)), "parts sized unlike ranges of their own");
    assert_eq!(small_base, large_base + large_len, "the small part does not follow the large one");
    let s = a.stats().unwrap();
    assert_eq!((s.segments, s.address_space_bytes as usize), (2, large_len + small_len), "a range per pool, as before");
    // Another stream gets one of its own, and each pool's later growth
    // inside its part makes no reservation.
    let other = new_stream();
    let o_small = a.malloc(512, other).unwrap();
    let o_large = a.malloc(5 * MIB, other).unwrap();
    let more = a.malloc(7 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(n.since(), (2, 0));
    assert_eq!(a.shared_reservations(), 2);
    check_accounting(&a, &base, None, "two streams");
    for p in [small, large, o_small, o_large, more] {
        a.free(p).unwrap();
    }
    a.forget_stream(other).unwrap();
    drop_stream(other);
    assert_eq!(n.since(), (2, 1), "the forgotten stream's region went back other than once");
    teardown_clean(a, &base);
    assert_eq!(n.since(), (2, 2), "teardown released the remaining region other than once");
}

/// `empty_cache` of one pool while the other holds memory keeps the region:
/// no release, the other pool's block intact and growing, and the emptied
/// pool's next range is its part again, with no call. Once both are empty
/// the region goes back exactly once, with the budget's charge.
#[test]
fn emptying_one_pool_keeps_the_region_for_the_other() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let charged = va_budget::reserved();
    let a = allocator(EXP_2M);
    let n = Calls::take();
    let large = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    let small = a.malloc(4096, Stream::DEFAULT).unwrap();
    let small_part = a.segment_of(small).unwrap();
    fill(large, 3 * MIB, 0x6B);
    a.free(small).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(n.since(), (1, 0), "empty_cache released a region the large pool still uses");
    assert_eq!(base.vmm().reserved_ranges, 1);
    assert_eq!(a.stats().unwrap().segments, 1, "the emptied small range stayed in its pool");
    assert!(a.query(small).is_err(), "a pointer into the emptied part is still known");
    assert!(check_fill(large, 3 * MIB, 0x6B), "the large pool's block lost its data");
    let grown = a.malloc(9 * MIB, Stream::DEFAULT).unwrap();
    let again = a.malloc(4096, Stream::DEFAULT).unwrap();
    assert_eq!(a.segment_of(again).unwrap(), small_part, "the small pool's next range is not its part");
    assert_eq!(n.since(), (1, 0), "taking the part back reserved");
    check_accounting(&a, &base, None, "one part emptied and taken again");
    for p in [large, grown, again] {
        a.free(p).unwrap();
    }
    a.empty_cache().unwrap();
    assert_eq!(n.since(), (1, 1), "both parts empty: one release");
    assert_eq!((base.vmm().reserved_ranges, a.shared_reservations()), (0, 0));
    assert_eq!(va_budget::reserved(), charged, "the region's charge stayed in the budget");
    a.empty_cache().unwrap();
    assert_eq!(n.since(), (1, 1));
    teardown_clean(a, &base);
    assert_eq!(n.since(), (1, 1), "teardown released a region again");
}

/// A refused reservation fails the request with the runtime's error and
/// changes nothing (no range, no record, no charge); the next request
/// reserves the region and the other pool joins it with no call. A refused
/// release of the region keeps it (the part goes back to its pool, a
/// pointer into it still known), and the next `empty_cache` releases it.
#[test]
fn refused_reserve_or_release_changes_nothing() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let charged = va_budget::reserved();
    let a = allocator(EXP_2M);
    let n = Calls::take();
    fail_nth(RESERVE, 1);
    let e = a.malloc(4096, Stream::DEFAULT).unwrap_err();
    assert!(e.to_string().contains("aclrtReserveMemAddress"), "{e}");
    let s = a.stats().unwrap();
    assert_eq!((s.segments, s.address_space_bytes, s.reserved_bytes), (0, 0, 0));
    assert_eq!((a.shared_reservations(), base.vmm().reserved_ranges), (0, 0));
    assert_eq!(va_budget::reserved(), charged, "a refused reservation stayed charged");
    a.check_invariants().unwrap();
    let small = a.malloc(4096, Stream::DEFAULT).unwrap();
    let large = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(n.since(), (2, 0), "one refused and one made: the large pool joined with no call");
    let large_part = a.segment_of(large).unwrap();
    a.free(small).unwrap();
    a.free(large).unwrap();
    fail_nth(RELEASE, 1);
    // The first part to go makes no call; the second one's release of the
    // region is refused, and its range stays in its pool.
    let e = a.empty_cache().unwrap_err();
    assert!(e.to_string().contains("releasing an address range"), "{e}");
    assert_eq!(n.since(), (2, 1));
    assert_eq!((a.shared_reservations(), base.vmm().reserved_ranges), (1, 1));
    assert_eq!(a.stats().unwrap().segments, 1, "the refused part left its pool");
    a.check_invariants().unwrap();
    let p = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(a.segment_of(p).unwrap(), large_part, "the large pool's next range is not its part");
    assert_eq!(n.since(), (2, 1), "the kept region served the request");
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(n.since(), (2, 2));
    assert_eq!((a.shared_reservations(), base.vmm().reserved_ranges), (0, 0));
    assert_eq!(va_budget::reserved(), charged);
    teardown_clean(a, &base);
}

/// When the budget's share cannot hold both parts at their usual size, a
/// stream reserves its ranges one by one, each as large as before: the
/// fallbacks of a tight address space are unchanged.
#[test]
fn a_tight_budget_reserves_ranges_one_by_one() {
    let _g = emu_lock();
    let base = Baseline::take();
    budget(GIB);
    let a = allocator(EXP_2M);
    let rt = a.runtime().clone();
    let (_, total) = rt.on_device(DEV, || rt.mem_info()).unwrap();
    let round = |n: usize| n.div_ceil(PAGE) * PAGE;
    // A share (a sixteenth of what is left) that holds the large range
    // alone, not both.
    let share = round(total) + round(total / 16) / 2;
    va_budget::set_limit(va_budget::reserved() + 16 * share + 15);
    let n = Calls::take();
    let large = a.malloc(3 * MIB, Stream::DEFAULT);
    let small = a.malloc(4096, Stream::DEFAULT);
    va_budget::set_limit(va_budget::DEFAULT_BUDGET);
    let (large, small) = (large.unwrap(), small.unwrap());
    assert_eq!(n.since(), (2, 0), "a tight budget shared a reservation");
    assert_eq!(a.shared_reservations(), 0);
    assert_eq!(a.segment_of(large).unwrap().1, round(total));
    a.free(large).unwrap();
    a.free(small).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(n.since(), (2, 2), "ranges of their own go back one by one");
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}
