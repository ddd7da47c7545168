//! Tests of how big a fresh physical handle is (Note [sizing a fresh
//! handle]): the rule itself, and, through the emulator, that it reads the
//! free memory the device reports (other users of the device included) only
//! when a fresh handle is made.

use super::support::{
    allocator, budget, check_accounting, emu_lock, fail_nth, fault_pending, finish, set_capacity, teardown_clean,
    Baseline, GIB, MIB,
};
use crate::core::backing::expandable::{FreeMemory, GrowthView, PieceRule, REFRESH_EVERY};
use crate::core::*;

fn view(free: usize, allocated_peak: usize) -> GrowthView {
    GrowthView { free, allocated_peak }
}

#[test]
fn fresh_handle_size_follows_free_memory_and_allocated_bytes() {
    let rule = PieceRule::for_config(&crate::config::Config::default());
    let roomy = 64 * GIB;
    // Nothing allocated yet on a roomy device: the 32 MiB start.
    assert_eq!(rule.fresh_bytes(view(roomy, 0)), 32 * MIB);
    assert_eq!(rule.fresh_bytes(view(roomy, 10 * MIB)), 32 * MIB);
    // Half of the peak of allocated bytes, up to 48 MiB.
    assert_eq!(rule.fresh_bytes(view(roomy, 80 * MIB)), 40 * MIB);
    // 600 MiB allocated: 48 MiB, whatever is reserved (reserved bytes
    // count what is mapped ahead, which must not feed the next size).
    assert_eq!(rule.fresh_bytes(view(roomy, 600 * MIB)), 48 * MIB);
    // Past 3.5 GiB allocated, a 32nd of it, up to 1 GiB.
    assert_eq!(rule.fresh_bytes(view(roomy, 6 * GIB)), 192 * MIB);
    assert_eq!(rule.fresh_bytes(view(roomy, 40 * GIB)), GIB);
    // What the device reports free bounds it, whoever holds the rest: a
    // 128th of it...
    assert_eq!(rule.fresh_bytes(view(2 * GIB, 600 * MIB)), 16 * MIB);
    // (a 32nd of it past 3.5 GiB allocated)
    assert_eq!(rule.fresh_bytes(view(4 * GIB, 40 * GIB)), 128 * MIB);
    // ...down to the 4 MiB floor, even with nothing left.
    assert_eq!(rule.fresh_bytes(view(256 * MIB, 600 * MIB)), 4 * MIB);
    assert_eq!(rule.fresh_bytes(view(0, 0)), 4 * MIB);
    assert!(rule.ahead && rule.reads_free_memory(), "the default maps ahead and asks the device");
    // A headroom keeps 4 MiB handles, maps nothing ahead, asks nothing.
    let headroom = PieceRule::for_config(&crate::config::Config::parse("reserved_headroom:0.02").unwrap());
    assert_eq!((headroom.fresh_bytes(view(roomy, 0)), headroom.ahead), (4 * MIB, false));
    assert!(!headroom.reads_free_memory());
    assert_eq!(PieceRule::fixed(2 * MIB).fresh_bytes(view(roomy, GIB)), 2 * MIB);
}

#[test]
fn a_fresh_handle_is_sized_from_what_other_users_of_the_device_leave() {
    // An 8 GiB device of which another allocator of the process holds all
    // but 256 MiB: a 128th of what is free is under the floor, so a 10 MiB
    // request maps 4 MiB handles (three, the last mapped ahead). Estimated
    // from the device's size less this allocator's own reserved bytes, the
    // first handle would be 32 MiB.
    let _g = emu_lock();
    let base = Baseline::take();
    budget(8 * GIB);
    let other = allocator("expandable_segments:false");
    let held = other.malloc(8 * GIB - 256 * MIB, Stream::DEFAULT).unwrap();
    let a = allocator("");
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_physical_mallocs, s.reserved_bytes), (3, 12 * MIB as u64));
    check_accounting(&a, &base, None, "after a growth beside another user");
    // The other user leaves: the next growth sees a roomy device again and
    // maps the 32 MiB start.
    other.free(held).unwrap();
    other.empty_cache().unwrap();
    let q = a.malloc(20 * MIB, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.num_physical_mallocs, s.reserved_bytes), (4, 44 * MIB as u64));
    check_accounting(&a, &base, None, "after a growth on the emptied device");
    a.free(p).unwrap();
    a.free(q).unwrap();
    teardown_clean(a, &base);
    finish(other);
    set_capacity(1 << 30);
}

#[test]
fn one_answer_sizes_a_few_handles_only_while_the_device_is_roomy() {
    let free = FreeMemory::default();
    let asks = std::cell::Cell::new(0);
    let ask = |bytes: usize| {
        asks.set(asks.get() + 1);
        bytes
    };
    // Roomy (60 GiB free, the share binds below 6 GiB): the first handle
    // asks; the next seven use that answer less what was reserved since.
    assert_eq!(free.get(0, 6 * GIB, || ask(60 * GIB)), 60 * GIB);
    for k in 1..REFRESH_EVERY as usize {
        assert_eq!(free.get(k * 48 * MIB, 6 * GIB, || ask(0)), 60 * GIB - k * 48 * MIB);
    }
    assert_eq!(asks.get(), 1);
    // The eighth since the answer asks again: another process may have
    // taken memory meanwhile.
    assert_eq!(free.get(GIB, 6 * GIB, || ask(20 * GIB)), 20 * GIB);
    assert_eq!(asks.get(), 2);
    // 20 GiB is more than twice 6 GiB: reused. Once what is left is under
    // twice the binding point, every handle asks.
    assert_eq!(free.get(GIB, 6 * GIB, || ask(0)), 20 * GIB);
    assert_eq!(free.get(GIB, 16 * GIB, || ask(11 * GIB)), 11 * GIB);
    assert_eq!(free.get(GIB, 16 * GIB, || ask(10 * GIB)), 10 * GIB);
    assert_eq!(asks.get(), 4);
    // After a refused handle the next one asks, however roomy it looked.
    assert_eq!(free.get(GIB, MIB, || ask(0)), 10 * GIB);
    free.forget();
    assert_eq!(free.get(GIB, MIB, || ask(GIB)), GIB);
    assert_eq!(asks.get(), 5);
}

#[test]
fn free_memory_is_asked_only_when_a_fresh_handle_is_made() {
    // aclrtGetMemInfo calls counted with an armed failure far away.
    const FAR: i32 = 1_000_000;
    let queries = || FAR - fault_pending("aclrtGetMemInfo");
    let _g = emu_lock();
    let base = Baseline::take();
    budget(64 * GIB);
    let a = allocator("");
    fail_nth("aclrtGetMemInfo", FAR);
    let p = a.malloc(10 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(queries(), 1, "one query for the first handle");
    // Mapped ahead: 12 MiB more fit the 32 MiB handle; then cache hits,
    // and the small pool's first handle, sized from the same answer.
    let q = a.malloc(12 * MIB, Stream::DEFAULT).unwrap();
    for _ in 0..1000 {
        let x = a.malloc(3 * MIB, Stream::DEFAULT).unwrap();
        a.free(x).unwrap();
        let y = a.malloc(4096, Stream::DEFAULT).unwrap();
        a.free(y).unwrap();
    }
    assert_eq!(a.stats().unwrap().num_physical_mallocs, 2);
    assert_eq!(queries(), 1, "no query on a cache hit");
    // On the roomy device one answer sizes eight fresh handles.
    let mut kept: Vec<usize> = (0..10).map(|_| a.malloc(40 * MIB, Stream::DEFAULT).unwrap()).collect();
    let handles = a.stats().unwrap().num_physical_mallocs as i32;
    assert!(handles > 10, "{handles} handles");
    assert_eq!(queries(), (handles + REFRESH_EVERY as i32 - 1) / REFRESH_EVERY as i32);
    // Another user takes all but 2 GiB (the share binds below 6 GiB). The
    // last answer is stale until its eight handles are used up; from the
    // next answer on, every fresh handle asks.
    budget(2 * GIB);
    let asked = queries();
    while queries() == asked {
        kept.push(a.malloc(40 * MIB, Stream::DEFAULT).unwrap());
        assert!(kept.len() < 40, "the stale answer was never refreshed");
    }
    let (before, asked) = (a.stats().unwrap().num_physical_mallocs as i32, queries());
    kept.extend((0..3).map(|_| a.malloc(40 * MIB, Stream::DEFAULT).unwrap()));
    let made = a.stats().unwrap().num_physical_mallocs as i32 - before;
    assert!(made >= 2, "{made} handles");
    assert_eq!(queries() - asked, made);
    // A failed query is not an error: the handle is sized from the device's
    // size less what is reserved.
    fail_nth("aclrtGetMemInfo", 1);
    kept.push(a.malloc(40 * MIB, Stream::DEFAULT).unwrap());
    assert_eq!(fault_pending("aclrtGetMemInfo"), 0, "the growth asked, and was refused");
    fail_nth("aclrtGetMemInfo", 0);
    check_accounting(&a, &base, None, "after growths with and without the query");
    for x in kept.into_iter().chain([p, q]) {
        a.free(x).unwrap();
    }
    teardown_clean(a, &base);
    set_capacity(1 << 30);
}
