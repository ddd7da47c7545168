//! A growth that fails part-way (a physical allocation, a map or the
//! device's capacity at its n-th new page) leaves nothing half mapped.

use super::*;

/// One mid-growth failure: `prepare` makes the request's growth fail at its
/// n-th new page, then the request runs and everything is checked.
fn growth_failure_case(config: &str, fault: &str, n: usize, first_on_range: bool) {
    const K: usize = 5;
    let what = format!("{fault} failing at new page {n}, first_on_range={first_on_range}");
    let base = Baseline::take();
    budget(GIB);
    let a = paged(config);
    // With x: [0, 3) MiB, the request [3, 13) MiB shares page 1 and needs
    // pages 2..=6 (five new). Without x: [0, 10) MiB needs pages 0..=4.
    let x = (!first_on_range).then(|| a.malloc(3 * MIB, Stream::DEFAULT).unwrap());
    if let Some(x) = x {
        fill(x, 3 * MIB, 0x11);
    }
    let held_pages = if first_on_range { 0 } else { 2 };
    let before = a.stats().unwrap();
    assert_eq!(before.num_physical_mallocs as usize, held_pages);

    let ranges_before = usage(DEV).reserved_ranges;
    match fault {
        "capacity" => budget((n - 1) * PAGE),
        f => fail_nth(f, n as i32),
    }
    let r = a.malloc(10 * MIB, Stream::DEFAULT);
    check_accounting(&a, &base, Some(PAGE), &what);
    let s = a.stats().unwrap();
    let (mapped, _) = a.own_accounting();
    match &r {
        Ok(p) => {
            assert_ne!(fault, "capacity", "{what}: the device had no room, yet the request succeeded");
            assert_eq!(s.allocated_bytes, before.allocated_bytes + 10 * MIB as u64, "{what}");
            assert_eq!(mapped, (held_pages + K) * PAGE, "{what}: mapped pages");
            assert_eq!(
                s.num_physical_mallocs as usize,
                held_pages + K,
                "{what}: pages obtained before the failure must be reused, not leaked into the cache"
            );
            assert_eq!(s.reserved_bytes as usize, (held_pages + K) * PAGE, "{what}");
            fill(*p, 10 * MIB, 0x22);
        }
        Err(e) => {
            assert!(matches!(e, Error::OutOfMemory(_) | Error::Runtime { .. }), "{what}: {e}");
            assert_eq!(s.allocated_bytes, before.allocated_bytes, "{what}: a failed call changed allocated bytes");
            assert_eq!(s.active_blocks, before.active_blocks, "{what}");
            assert_eq!(mapped, held_pages * PAGE, "{what}: pages left mapped after a failed growth");
            assert_eq!(
                usage(DEV).reserved_ranges,
                ranges_before,
                "{what}: a failed request kept an address range it reserved"
            );
        }
    }
    if fault == "capacity" {
        assert!(matches!(r, Err(Error::OutOfMemory(_))), "{what}: {r:?}");
    }
    if let Some(x) = x {
        assert!(check_fill(x, 3 * MIB, 0x11), "{what}: the neighbour's data changed");
    }
    // The fault has cleared: a fresh request succeeds.
    for f in ["aclrtMallocPhysical", "aclrtMapMem"] {
        fail_nth(f, 0);
    }
    budget(GIB);
    let q = a.malloc(10 * MIB, Stream::DEFAULT).unwrap_or_else(|e| panic!("{what}: retry after the fault: {e}"));
    fill(q, 10 * MIB, 0x33);
    check_accounting(&a, &base, Some(PAGE), &format!("{what}, after the retry"));
    let s = a.stats().unwrap();
    // q needs five new pages whatever r did ([13, 23) shares page 6 with r,
    // [10, 20) starts on a page boundary).
    let live_pages = held_pages + K + if r.is_ok() { K } else { 0 };
    assert_eq!(s.reserved_bytes as usize, live_pages * PAGE, "{what}: after the retry");
    let obtained = s.num_physical_mallocs as usize;
    if fault == "capacity" {
        // The ladder freed the n - 1 pages of the first attempt, obtained
        // them again for its retry, and the failed request gave those back:
        // nothing of it stayed reserved.
        assert_eq!((obtained, s.num_physical_frees as usize), (live_pages + 2 * (n - 1), 2 * (n - 1)), "{what}");
    } else if r.is_ok() {
        assert_eq!(
            (obtained, s.num_physical_frees),
            (live_pages, 0),
            "{what}: pages of the failed attempt were not reused"
        );
    } else {
        // A request that failed for good gave back what it obtained: the
        // n - 1 pages mapped before the fault, and the one whose map failed.
        let taken = if fault == "aclrtMapMem" { n } else { n - 1 };
        assert_eq!(
            (obtained, s.num_physical_frees as usize),
            (live_pages + taken, taken),
            "{what}: pages of the failed attempt were not given back"
        );
    }
    if let Ok(p) = r {
        assert!(check_fill(p, 10 * MIB, 0x22), "{what}");
        a.free(p).unwrap();
    }
    a.free(q).unwrap();
    if let Some(x) = x {
        a.free(x).unwrap();
    }
    teardown_clean(a, &base);
}

#[test]
fn failed_growth_leaves_no_half_mapped_state() {
    let _g = emu_lock();
    for first_on_range in [false, true] {
        for fault in ["aclrtMallocPhysical", "aclrtMapMem", "capacity"] {
            for n in 1..=5 {
                growth_failure_case(EXP_2M, fault, n, first_on_range);
            }
        }
    }
    set_capacity(1 << 30);
}
