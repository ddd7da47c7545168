//! Address space over many streams (Note [address-space budget]): ranges
//! sized within the per-reservation cap and a process-wide budget, released
//! by `forget_stream`, `empty_cache` and the OOM ladder when they hold
//! nothing, and a shortage reported as one of address space.

use super::support::{allocator, check_fill, drop_stream, emu_lock, fill, new_stream, set_capacity, Baseline, MIB};
use crate::core::backing::expandable::budget;
use crate::error::Error;
use crate::runtime::Stream;

/// Puts the process-wide budget back when a test ends, even by a panic.
struct BudgetGuard;

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        budget::set_limit(budget::DEFAULT_BUDGET);
        set_capacity(1 << 30);
    }
}

/// Sets the budget to what is reserved now plus `room`.
fn budget_room(room: usize) -> BudgetGuard {
    budget::set_limit(budget::reserved() + room);
    BudgetGuard
}

/// 500 streams, one after another, each allocating a large and a small
/// block, freeing them, forgetting the stream and destroying it, on one
/// allocator of a 64 GiB device: each stream's ranges go back with it, so
/// address space never runs out (it did at the 41st stream when each
/// stream's ranges stayed for the allocator's life).
#[test]
fn five_hundred_streams_come_and_go_on_a_64_gib_device() {
    let _g = emu_lock();
    let _b = BudgetGuard;
    set_capacity(64 << 30);
    let base = Baseline::take();
    let a = allocator("");
    for i in 0..500 {
        let s = new_stream();
        let big = a.malloc(256 * MIB, s).unwrap_or_else(|e| panic!("stream {i}: {e}"));
        let small = a.malloc(4096, s).unwrap_or_else(|e| panic!("stream {i}: {e}"));
        assert!(base.vmm().reserved_ranges <= 2, "stream {i}: ranges of earlier streams are still reserved");
        a.free(big).unwrap();
        a.free(small).unwrap();
        a.forget_stream(s).unwrap();
        let v = base.vmm();
        assert_eq!((v.reserved_ranges, v.physical_count), (0, 0), "stream {i}: forget_stream kept its memory");
        drop_stream(s);
    }
    let s = a.stats().unwrap();
    assert_eq!((s.reserved_bytes, s.segments, s.address_space_bytes), (0, 0, 0));
    assert_eq!((s.num_allocs, s.num_frees), (1000, 1000));
    assert_eq!(budget::reserved(), 0, "the budget still counts released ranges");
    // Each stream took over the entry the one before it retired.
    assert_eq!(a.streams_served(), 1, "forgotten streams kept their entries");
    super::support::teardown_clean(a, &base);
}

/// 64 streams live at once, each holding a 256 MiB and a 4 KiB block, on a
/// 64 GiB device: 128 ranges fit the address space (a range sized to a
/// multiple of the device per stream would not), and every reservation
/// stays within the driver's 128 GiB cap.
#[test]
fn sixty_four_streams_live_at_once_each_with_two_blocks() {
    let _g = emu_lock();
    let _b = BudgetGuard;
    set_capacity(64 << 30);
    let base = Baseline::take();
    let a = allocator("");
    let mut live = Vec::new();
    for i in 0..64 {
        let s = new_stream();
        let big = a.malloc(256 * MIB, s).unwrap_or_else(|e| panic!("stream {i}: {e}"));
        let small = a.malloc(4096, s).unwrap_or_else(|e| panic!("stream {i}: {e}"));
        fill(big, 4096, i as u8);
        live.push((s, big, small));
    }
    assert_eq!(base.vmm().reserved_ranges, 128);
    let snap = a.snapshot().unwrap();
    assert_eq!(snap.segments.len(), 128);
    for seg in &snap.segments {
        assert!(seg.size <= budget::MAX_RESERVATION, "a range of {} bytes passes the cap", seg.size);
    }
    assert!(budget::reserved() <= budget::limit());
    for (i, &(s, big, small)) in live.iter().enumerate() {
        assert!(check_fill(big, 4096, i as u8), "stream {i}: a block lost its data");
        a.free(big).unwrap();
        a.free(small).unwrap();
        a.forget_stream(s).unwrap();
        drop_stream(s);
    }
    assert_eq!(base.vmm().reserved_ranges, 0);
    super::support::teardown_clean(a, &base);
}

/// `forget_stream` keeps live blocks valid: their range stays, the block
/// is freed as usual afterwards, and `empty_cache` then releases the range.
/// A stream never served, and one forgotten twice, are no error.
#[test]
fn forgotten_stream_keeps_its_live_blocks() {
    let _g = emu_lock();
    let _b = BudgetGuard;
    set_capacity(1 << 30);
    let base = Baseline::take();
    let a = allocator("");
    let s = new_stream();
    let kept = a.malloc(8 * MIB, s).unwrap();
    let gone = a.malloc(8 * MIB, s).unwrap();
    let small = a.malloc(512, s).unwrap();
    fill(kept, 8 * MIB, 0x5A);
    a.free(gone).unwrap();
    a.free(small).unwrap();
    a.forget_stream(s).unwrap();
    // The large range holds the live block; the small one went. The entry
    // stays (it has a live block): another stream gets one of its own.
    assert_eq!(base.vmm().reserved_ranges, 1);
    let other = new_stream();
    let o = a.malloc(512, other).unwrap();
    assert_eq!(a.streams_served(), 2);
    a.free(o).unwrap();
    a.forget_stream(other).unwrap();
    drop_stream(other);
    assert!(check_fill(kept, 8 * MIB, 0x5A), "forget_stream lost a live block's data");
    assert_eq!(a.query(kept).unwrap().stream, s);
    a.check_invariants().unwrap();
    a.forget_stream(s).unwrap();
    a.forget_stream(Stream(0xdead_0000)).unwrap();
    a.free(kept).unwrap();
    assert_eq!(base.vmm().reserved_ranges, 1, "a free alone releases no range");
    a.empty_cache().unwrap();
    let v = base.vmm();
    assert_eq!((v.reserved_ranges, v.physical_count), (0, 0), "empty_cache kept a range that holds nothing");
    // A later use of the stream starts afresh (in the entry `other` retired).
    let again = a.malloc(MIB, s).unwrap();
    assert_eq!(base.vmm().reserved_ranges, 1);
    assert_eq!(a.query(again).unwrap().stream, s);
    a.free(again).unwrap();
    a.forget_stream(s).unwrap();
    drop_stream(s);
    assert_eq!(a.streams_served(), 2);
    super::support::teardown_clean(a, &base);
}

/// When the process-wide budget has no room for another range, the
/// failure says address space ran out (how many ranges, how much), not
/// that memory did; once other streams' blocks are freed, the OOM ladder
/// releases their ranges and the request succeeds.
#[test]
fn out_of_address_space_says_so_then_the_ladder_releases_empty_ranges() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let base = Baseline::take();
    let _b = budget_room(64 * MIB);
    let a = allocator("");
    let mut live: Vec<(Stream, usize)> = Vec::new();
    let err = loop {
        assert!(live.len() < 200, "a 64 MiB budget took 200 ranges");
        let s = new_stream();
        match a.malloc(2 * MIB, s) {
            Ok(p) => live.push((s, p)),
            Err(e) => {
                drop_stream(s);
                break e;
            }
        }
    };
    assert!(live.len() >= 2, "only {} streams got a range", live.len());
    let m = err.to_string();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err:?}");
    let head = format!("address space exhausted: {} ranges of ", live.len());
    for part in [head.as_str(), "reserved by this allocator on device 1", "could not be reserved", "forget_stream"] {
        assert!(m.contains(part), "missing {part:?} in: {m}");
    }
    assert!(!m.contains("cannot allocate"), "reported as a memory shortage: {m}");
    // Half the streams free their blocks but are not forgotten: the ladder
    // unmaps their pages, releases their emptied ranges, and a new stream
    // gets one.
    let half = live.len() / 2;
    for &(_, p) in &live[..half] {
        a.free(p).unwrap();
    }
    let ranges = base.vmm().reserved_ranges;
    let retries = a.stats().unwrap().num_alloc_retries;
    let s = new_stream();
    let p = a.malloc(2 * MIB, s).unwrap_or_else(|e| panic!("the ladder released no range: {e}"));
    assert!(base.vmm().reserved_ranges < ranges, "the ladder released no range");
    assert_eq!(a.stats().unwrap().num_alloc_retries, retries + 1);
    a.free(p).unwrap();
    a.forget_stream(s).unwrap();
    drop_stream(s);
    for &(s, p) in &live {
        if !live[..half].iter().any(|&(_, q)| q == p) {
            a.free(p).unwrap();
        }
        a.forget_stream(s).unwrap();
        drop_stream(s);
    }
    super::support::teardown_clean(a, &base);
}

/// An allocator that serves two streams at most serves any number of them
/// one after another once each is forgotten; a third live one is refused
/// with a message that names forget_stream.
#[test]
fn a_full_stream_table_takes_streams_that_replace_forgotten_ones() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let base = Baseline::take();
    let rt = crate::runtime::Runtime::emulated();
    let config = crate::config::Config::parse("").unwrap();
    let a = crate::core::DeviceAllocator::build(config, super::support::DEV, rt, 2).unwrap();
    let keep = new_stream();
    let k = a.malloc(4096, keep).unwrap();
    for i in 0..20 {
        let s = new_stream();
        let p = a.malloc(3 * MIB, s).unwrap_or_else(|e| panic!("stream {i}: {e}"));
        assert_eq!(a.query(p).unwrap().stream, s);
        let extra = new_stream();
        let m = a.malloc(64, extra).unwrap_err().to_string();
        assert!(m.contains("forget_stream"), "{m}");
        drop_stream(extra);
        a.free(p).unwrap();
        a.forget_stream(s).unwrap();
        drop_stream(s);
        assert_eq!(a.streams_served(), 2);
    }
    // The kept stream's block was never touched.
    assert_eq!(a.query(k).unwrap().stream, keep);
    a.free(k).unwrap();
    a.forget_stream(keep).unwrap();
    drop_stream(keep);
    super::support::teardown_clean(a, &base);
}

/// A device larger than one reservation may be: the large range stays
/// within 128 GiB, its alignment padding for 1 GiB pages included.
#[test]
fn ranges_stay_within_the_reservation_cap() {
    let _g = emu_lock();
    let _b = BudgetGuard;
    set_capacity(200 << 30);
    let base = Baseline::take();
    for config in ["", "page_size:1g"] {
        let a = allocator(config);
        let p = a.malloc(64 * MIB, Stream::DEFAULT).unwrap_or_else(|e| panic!("{config}: {e}"));
        let (_, len) = a.segment_of(p).unwrap();
        assert!((64 << 30..=budget::MAX_RESERVATION).contains(&len), "{config}: a range of {len} bytes");
        // More than one reservation holds: out of memory, nothing reserved.
        let ranges = base.vmm().reserved_ranges;
        let e = a.malloc(budget::MAX_RESERVATION, Stream::DEFAULT).unwrap_err();
        assert!(matches!(&e, Error::OutOfMemory(m) if m.contains("more than one reservation")), "{config}: {e}");
        assert_eq!(base.vmm().reserved_ranges, ranges);
        a.free(p).unwrap();
        super::support::teardown_clean(a, &base);
    }
}

/// Threads create, use, forget and destroy streams at once on an allocator
/// that serves as many streams as there are threads: retiring and taking
/// over entries never leaves one stream without shards or two streams in
/// one entry, and every block maps back to the stream that allocated it.
#[test]
fn threads_forgetting_streams_at_once_share_the_entries() {
    const THREADS: usize = 4;
    let _g = emu_lock();
    set_capacity(1 << 30);
    let base = Baseline::take();
    let rt = crate::runtime::Runtime::emulated();
    let config = crate::config::Config::parse("").unwrap();
    let a = crate::core::DeviceAllocator::build(config, super::support::DEV, rt, THREADS).unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let a = &a;
            scope.spawn(move || {
                for i in 0..40 {
                    let s = new_stream();
                    let big = a.malloc((t + 1) * MIB, s).unwrap_or_else(|e| panic!("thread {t} round {i}: {e}"));
                    let small = a.malloc(100 + t, s).unwrap();
                    fill(big, 64, t as u8);
                    for p in [big, small] {
                        assert_eq!(a.query(p).unwrap().stream, s, "thread {t} round {i}");
                    }
                    assert!(check_fill(big, 64, t as u8), "thread {t} round {i}: another stream wrote here");
                    a.free(big).unwrap();
                    a.free(small).unwrap();
                    a.forget_stream(s).unwrap();
                    drop_stream(s);
                }
            });
        }
    });
    assert!(a.streams_served() <= THREADS);
    assert_eq!(base.vmm().reserved_ranges, 0);
    super::support::teardown_clean(a, &base);
}
