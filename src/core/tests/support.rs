//! Core tests, all through the emulator linked into the test binary.

use crate::core::*;
use crate::runtime::Runtime;
use ascendcl::{
    aclemu_fail_nth, aclemu_get_usage, aclemu_set_device_memory, aclemu_stream_hold, aclemu_stream_release,
    aclemu_usage,
};
use std::sync::{Mutex, MutexGuard};

/// The emulator's state is process-wide: tests that use it run one at a time.
pub(crate) fn emu_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) const DEV: i32 = 1;

pub(crate) fn usage(device: i32) -> aclemu_usage {
    // SAFETY: aclemu_usage is plain integers, for which all zeroes is a value.
    let mut u: aclemu_usage = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out-pointer.
    assert_eq!(unsafe { aclemu_get_usage(device, &mut u) }, 0);
    u
}

pub(crate) fn set_capacity(bytes: u64) {
    // SAFETY: plain values.
    assert_eq!(unsafe { aclemu_set_device_memory(DEV, bytes) }, 0);
}

pub(crate) fn fail_nth(name: &str, n: i32) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a valid C string.
    assert_eq!(unsafe { aclemu_fail_nth(c.as_ptr(), n) }, 0);
}

pub(crate) fn allocator(config: &str) -> DeviceAllocator {
    DeviceAllocator::with_runtime(Config::parse(config).unwrap(), DEV, Runtime::emulated()).unwrap()
}

pub(crate) fn finish(a: DeviceAllocator) {
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    let u = usage(DEV);
    assert_eq!((u.malloc_count, u.malloc_bytes, u.events), (0, 0, 0), "emulator reports leaks");
}

pub(crate) fn fill(addr: usize, len: usize, byte: u8) {
    // SAFETY: the emulator's device memory is host memory; the block is live and at least len bytes.
    unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) }
}

pub(crate) fn check_fill(addr: usize, len: usize, byte: u8) -> bool {
    // SAFETY: as in `fill`.
    let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    s.iter().all(|&b| b == byte)
}

pub(crate) fn new_stream(a: &DeviceAllocator) -> Stream {
    let rt = a.runtime().clone();
    rt.on_device(DEV, || rt.create_stream()).unwrap()
}

pub(crate) fn drop_stream(a: &DeviceAllocator, s: Stream) {
    let rt = a.runtime().clone();
    rt.on_device(DEV, || rt.destroy_stream(s)).unwrap()
}

#[test]
fn a_stream_the_runtime_does_not_know_is_refused_changing_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("");
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    let gone = new_stream(&a);
    drop_stream(&a, gone);
    let bogus = Stream::from_raw(0x5eed_0000 as crate::sys::aclrtStream);
    let before = a.stats().unwrap();
    for s in [bogus, gone] {
        let e = a.malloc(4096, s).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("not a live stream")), "{e}");
        let e = a.record_stream(p, s).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("not a live stream")), "{e}");
    }
    assert_eq!(a.stats().unwrap(), before, "nothing changed");
    assert_eq!(a.streams_served(), 1, "no slot was given to a bad stream");
    // A live stream met for the first time passes the check, once.
    let s = new_stream(&a);
    let q = a.malloc(4096, s).unwrap();
    a.record_stream(p, s).unwrap();
    assert_eq!(a.streams_served(), 2);
    a.free(q).unwrap();
    a.free(p).unwrap();
    drop_stream(&a, s);
    finish(a);
}

#[test]
fn same_stream_reuse_is_immediate() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(1000, Stream::DEFAULT).unwrap();
    assert_eq!(p % 512, 0);
    a.free(p).unwrap();
    let q = a.malloc(1000, Stream::DEFAULT).unwrap();
    assert_eq!(p, q, "a freed block is reused at once on its stream");
    let s = a.stats().unwrap();
    assert_eq!((s.num_allocs, s.num_frees, s.num_device_mallocs), (2, 1, 1));
    assert_eq!((s.allocated_bytes, s.requested_bytes, s.active_blocks), (1024, 1000, 1));
    assert_eq!(s.reserved_bytes, policy::SMALL_BUFFER as u64);
    a.free(q).unwrap();
    finish(a);
}

#[test]
fn split_and_coalesce_restore_one_free_block() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    // No reuse lists: every free coalesces at once.
    let a = allocator("expandable_segments:false,reuse_cache_mb:0");
    let ptrs: Vec<usize> = (0..8).map(|i| a.malloc(512 * (i + 1), Stream::DEFAULT).unwrap()).collect();
    assert_eq!(a.stats().unwrap().segments, 1, "small blocks pack into one 2 MiB segment");
    for w in ptrs.windows(2) {
        assert!(w[1] > w[0]);
    }
    for &i in &[1usize, 5, 0, 7, 3, 2, 6, 4] {
        a.free(ptrs[i]).unwrap();
        a.check_invariants().unwrap();
    }
    let s = a.stats().unwrap();
    assert_eq!(s.largest_free_block, policy::SMALL_BUFFER as u64, "all pieces merged back");
    assert_eq!(s.allocated_bytes, 0);
    finish(a);
}

#[test]
fn pools_get_their_segment_sizes() {
    let _g = emu_lock();
    set_capacity(1 << 32);
    let a = allocator("expandable_segments:false");
    let big = a.malloc((11 << 20) + 1, Stream::DEFAULT).unwrap();
    let mid = a.malloc(3 << 20, Stream::DEFAULT).unwrap();
    let small = a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.reserved_bytes, (12 + 20 + 2) << 20);
    assert_eq!(a.segment_of(big).unwrap().1, 12 << 20, "10 MiB and up: rounded to 2 MiB");
    assert_eq!(a.segment_of(mid).unwrap().1, 20 << 20);
    assert_eq!(a.segment_of(small).unwrap().1, 2 << 20);
    let mid2 = a.malloc(5 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().segments, 3, "the 20 MiB segment serves a second mid-size request");
    for p in [small, mid, big, mid2] {
        a.free(p).unwrap();
    }
    finish(a);
}

#[test]
fn other_streams_do_not_reuse_freed_blocks() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream(&a);
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(4096, s1).unwrap();
    let info = a.query(q).unwrap();
    assert_eq!(info.stream, s1);
    assert_ne!(a.segment_of(q).unwrap().0, p & !((2 << 20) - 1), "stream s1 got its own segment");
    assert_eq!(a.stats().unwrap().segments, 2);
    a.free(q).unwrap();
    a.teardown().unwrap();
    drop_stream(&a, s1);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn record_stream_defers_reuse_until_the_event_completes() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream(&a);
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    // SAFETY: s1 is a live emulator stream.
    assert_eq!(unsafe { aclemu_stream_hold(s1.raw()) }, 0);
    a.free(p).unwrap();
    assert!(matches!(a.free(p), Err(Error::UnknownPointer(m)) if m.contains("already freed")));
    let q = a.malloc(8192, Stream::DEFAULT).unwrap();
    assert_ne!(p, q, "the block waits for s1's event");
    a.free(q).unwrap();
    let snap = a.snapshot_json().unwrap();
    assert!(snap.contains("pending-free"));
    // SAFETY: as above.
    assert_eq!(unsafe { aclemu_stream_release(s1.raw()) }, 0);
    a.empty_cache().unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.reserved_bytes, 0, "after the event completed the segment was free and released");
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(&a, s1);
    let u = usage(DEV);
    assert_eq!((u.malloc_count, u.events), (0, 0));
}

#[test]
fn a_cross_stream_free_that_can_neither_record_nor_wait_changes_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream(&a);
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    let before = a.stats().unwrap();
    // No event on s1, and no waiting for it either: reusing the block could
    // race s1's work, so the free is refused and the block stays live.
    fail_nth("aclrtRecordEvent", 1);
    fail_nth("aclrtSynchronizeStream", 1);
    assert!(matches!(a.free(p), Err(e @ Error::Runtime { .. }) if e.to_string().contains("stays allocated")));
    assert_eq!(a.stats().unwrap(), before);
    assert_eq!(a.query(p).unwrap().addr, p);
    a.check_invariants().unwrap();
    // Freed for real once the runtime answers again; it waits for s1.
    // SAFETY: s1 is a live emulator stream.
    assert_eq!(unsafe { aclemu_stream_hold(s1.raw()) }, 0);
    a.free(p).unwrap();
    assert_ne!(a.malloc(8192, Stream::DEFAULT).inspect(|&q| a.free(q).unwrap()).unwrap(), p);
    // SAFETY: as above.
    assert_eq!(unsafe { aclemu_stream_release(s1.raw()) }, 0);
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(&a, s1);
    let u = usage(DEV);
    assert_eq!((u.malloc_count, u.events), (0, 0));
}

#[test]
fn an_event_that_could_not_be_recorded_is_kept_for_reuse() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream(&a);
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    // The record fails (the free waits for s1 instead); destroying the
    // unrecorded event would fail too.
    fail_nth("aclrtRecordEvent", 1);
    fail_nth("aclrtDestroyEvent", 1);
    a.free(p).unwrap();
    fail_nth("aclrtDestroyEvent", 0);
    assert_eq!(usage(DEV).events, 1, "the event is held, in the pool");
    a.teardown().unwrap();
    drop_stream(&a, s1);
    assert_eq!(usage(DEV).events, 0, "teardown destroyed it");
}

#[test]
fn teardown_leaves_memory_a_stream_it_could_not_wait_for_may_still_use() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let (s1, s2) = (new_stream(&a), new_stream(&a));
    let p = a.malloc(4096, s1).unwrap();
    let q = a.malloc(4096, s2).unwrap();
    let (busy_base, _) = a.segment_of(p).unwrap();
    // SAFETY: s1 is a live emulator stream.
    assert_eq!(unsafe { aclemu_stream_hold(s1.raw()) }, 0);
    // Teardown synchronizes s1 first (it was met first): that wait fails.
    fail_nth("aclrtSynchronizeStream", 1);
    let e = a.teardown().expect_err("a failed wait is reported");
    assert!(e.to_string().contains("left allocated"), "{e}");
    // s1's segment is still there; s2's (synchronized) was returned.
    assert_eq!(usage(DEV).malloc_count, 1);
    let _ = q;
    // SAFETY: as above.
    assert_eq!(unsafe { aclemu_stream_release(s1.raw()) }, 0);
    let rt = a.runtime().clone();
    rt.on_device(DEV, || rt.free(busy_base)).unwrap();
    drop_stream(&a, s1);
    drop_stream(&a, s2);
    assert_eq!(usage(DEV).malloc_count, 0);
}

#[test]
fn empty_cache_syncs_only_streams_that_used_the_memory() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream(&a);
    let s2 = new_stream(&a);
    let p = a.malloc(4096, s1).unwrap();
    let q = a.malloc(4096, s2).unwrap();
    a.free(p).unwrap();
    let before = usage(DEV).syncs;
    a.empty_cache().unwrap();
    assert_eq!(usage(DEV).syncs - before, 1, "only s1's segment was free, so only s1 was synchronized");
    assert_eq!(a.stats().unwrap().segments, 1);
    a.free(q).unwrap();
    a.teardown().unwrap();
    drop_stream(&a, s1);
    drop_stream(&a, s2);
}

#[test]
fn oom_ladder_releases_cache_then_fails_cleanly() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(40 << 20, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    let q = a.malloc(50 << 20, Stream::DEFAULT).unwrap();
    let s = a.stats().unwrap();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_device_frees, 1, "the cached 40 MiB segment was released to make room");
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    let Error::OutOfMemory(msg) = &err else { panic!("expected OOM, got {err:?}") };
    for needle in [
        "cannot allocate 30.00 MiB (31457280 bytes, rounded to 31457280) on device",
        "reports ",
        " free of 64.00 MiB.",
        "This allocator holds 50.00 MiB: 50.00 MiB allocated, 0.00 MiB cached in free blocks, \
         0.00 MiB cached as unmapped physical handles, 0.00 MiB freed but waiting for other streams' work",
        "Tried: releasing cached memory.",
        "Last failure: aclrtMalloc failed with ACL_ERROR_RT_MEMORY_ALLOCATION (207001).",
    ] {
        assert!(msg.contains(needle), "OOM message lacks '{needle}': {msg}");
    }
    assert!(!msg.contains("does not hold"), "nothing else holds memory on this device: {msg}");
    assert_eq!(a.stats().unwrap().num_ooms, 1);
    a.check_invariants().unwrap();
    a.free(q).unwrap();
    let r = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    a.free(r).unwrap();
    finish(a);
    set_capacity(1 << 30);
}

#[test]
fn injected_device_failure_is_retried() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    fail_nth("aclrtMalloc", 1);
    let p = a.malloc(4096, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().num_alloc_retries, 1);
    fail_nth("aclrtMalloc", 1);
    fail_nth("aclrtMalloc", 0);
    a.free(p).unwrap();
    finish(a);
}

#[test]
fn memory_fraction_caps_reserved_memory() {
    let _g = emu_lock();
    set_capacity(100 << 20);
    let a = allocator("per_process_memory_fraction:0.5");
    let p = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    let err = a.malloc(30 << 20, Stream::DEFAULT).unwrap_err();
    assert!(matches!(&err, Error::OutOfMemory(m) if m.contains("memory fraction")), "{err}");
    a.set_memory_fraction(1.0).unwrap();
    let q = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    assert!(a.set_memory_fraction(0.0).is_err());
    a.free(p).unwrap();
    a.free(q).unwrap();
    finish(a);
    set_capacity(1 << 30);
}

#[test]
fn bad_input_changes_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(2048, Stream::DEFAULT).unwrap();
    let before = a.stats().unwrap();
    assert!(matches!(a.malloc(0, Stream::DEFAULT), Err(Error::InvalidArgument(_))));
    assert!(matches!(a.malloc(usize::MAX, Stream::DEFAULT), Err(Error::InvalidArgument(_))));
    assert!(matches!(a.free(0xdead_0000), Err(Error::UnknownPointer(m)) if m.contains("did not allocate")));
    assert!(matches!(a.free(p + 512), Err(Error::UnknownPointer(m)) if m.contains("inside the block")));
    assert!(matches!(a.record_stream(p + 512, Stream(7)), Err(Error::UnknownPointer(_))));
    assert_eq!(a.stats().unwrap(), before);
    let info = a.query(p + 100).unwrap();
    assert_eq!((info.addr, info.size, info.requested), (p, 2048, 2048));
    a.free(p).unwrap();
    assert!(matches!(a.free(p), Err(Error::UnknownPointer(m)) if m.contains("already freed")));
    assert!(a.query(p).is_err());
    finish(a);
}

#[test]
fn teardown_with_live_blocks_reports_and_releases_them() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    a.malloc(1 << 20, Stream::DEFAULT).unwrap();
    a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    let report = a.teardown().unwrap();
    assert_eq!(report, TeardownReport { live_blocks: 2, live_bytes: (1 << 20) + (30 << 20) });
    assert_eq!(usage(DEV).malloc_count, 0);
    assert!(matches!(a.malloc(1, Stream::DEFAULT), Err(Error::Internal(_))));
}

#[test]
fn max_split_size_keeps_oversize_blocks_whole() {
    let _g = emu_lock();
    set_capacity(1 << 32);
    let a = allocator("expandable_segments:false,max_split_size_mb:64");
    let big = a.malloc(100 << 20, Stream::DEFAULT).unwrap();
    a.free(big).unwrap();
    let small = a.malloc(30 << 20, Stream::DEFAULT).unwrap();
    assert_ne!(a.segment_of(small).unwrap().0, big, "an oversize block is not split for a small request");
    let again = a.malloc(90 << 20, Stream::DEFAULT).unwrap();
    assert_eq!(again, big, "an oversize request reuses an oversize block within 20 MiB");
    a.free(small).unwrap();
    a.free(again).unwrap();
    finish(a);
}

/// A tiny deterministic generator (xorshift), so failures replay.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // Xorshift never leaves zero: keep the state odd.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(crate) fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
}

const FAULTS: [&str; 6] =
    ["aclrtMalloc", "aclrtFree", "aclrtRecordEvent", "aclrtMallocPhysical", "aclrtMapMem", "aclrtUnmapMem"];

const CONFIGS: [&str; 6] = [
    "expandable_segments:false",
    "expandable_segments:false,max_split_size_mb:24",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:true",
    "expandable_segments:true,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
];

#[test]
fn model_based_random_sequences() {
    let _g = emu_lock();
    for seed in 1..=36u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let capacity = [48u64 << 20, 96 << 20, 1 << 30][rng.below(3) as usize];
        set_capacity(capacity);
        let a = allocator(CONFIGS[rng.below(CONFIGS.len() as u64) as usize]);
        let streams: Vec<Stream> =
            std::iter::once(Stream::DEFAULT).chain((0..rng.below(3)).map(|_| new_stream(&a))).collect();
        // Reference model: live blocks with their requested size and fill byte.
        let mut live: Vec<(usize, usize, u8)> = Vec::new();
        for step in 0..400 {
            match rng.below(10) {
                0..=4 => {
                    let size = match rng.below(4) {
                        0 => 1 + rng.below(4096) as usize,
                        1 => 1 + rng.below(1 << 20) as usize,
                        2 => (1 << 20) + rng.below(9 << 20) as usize,
                        _ => (10 << 20) + rng.below(30 << 20) as usize,
                    };
                    if rng.below(20) == 0 {
                        fail_nth(FAULTS[rng.below(FAULTS.len() as u64) as usize], 1 + rng.below(2) as i32);
                    }
                    let stream = streams[rng.below(streams.len() as u64) as usize];
                    let before = a.stats().unwrap();
                    match a.malloc(size, stream) {
                        Ok(p) => {
                            for &(q, qs, _) in &live {
                                assert!(p + size <= q || q + qs <= p, "seed {seed} step {step}: overlap");
                            }
                            let byte = (step % 251) as u8;
                            fill(p, size.min(4096), byte);
                            live.push((p, size, byte));
                        }
                        // An injected non-OOM runtime failure surfaces as a
                        // runtime error; either way nothing may have changed.
                        Err(Error::OutOfMemory(_) | Error::Runtime { .. }) => {
                            let after = a.stats().unwrap();
                            assert_eq!(after.allocated_bytes, before.allocated_bytes);
                            assert_eq!(after.active_blocks, before.active_blocks);
                        }
                        Err(e) => panic!("seed {seed} step {step}: unexpected {e}"),
                    }
                }
                5..=7 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let (p, size, byte) = live.swap_remove(i);
                    assert!(check_fill(p, size.min(4096), byte), "seed {seed} step {step}: data corrupted");
                    a.free(p).unwrap();
                }
                8 if !live.is_empty() => {
                    let (p, _, _) = live[rng.below(live.len() as u64) as usize];
                    a.record_stream(p, streams[rng.below(streams.len() as u64) as usize]).unwrap();
                }
                9 => {
                    let _ = a.empty_cache();
                }
                _ => {}
            }
            a.check_invariants().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            let s = a.stats().unwrap();
            assert_eq!(s.requested_bytes, live.iter().map(|l| l.1 as u64).sum::<u64>());
        }
        for f in FAULTS {
            fail_nth(f, 0);
        }
        for (p, size, byte) in live.drain(..) {
            assert!(check_fill(p, size.min(4096), byte));
            a.free(p).unwrap();
        }
        a.teardown().unwrap();
        for s in streams.into_iter().skip(1) {
            drop_stream(&a, s);
        }
        let u = usage(DEV);
        assert_eq!(
            (u.malloc_count, u.events, u.physical_count, u.mapped_bytes, u.reserved_ranges),
            (0, 0, 0, 0, 0),
            "seed {seed}: leaks"
        );
    }
    set_capacity(1 << 30);
}

#[test]
fn two_threads_stress() {
    let _g = emu_lock();
    set_capacity(8 << 30);
    let a = std::sync::Arc::new(allocator("expandable_segments:false"));
    let streams = [new_stream(&a), new_stream(&a)];
    let ops = 50_000; // per thread: 100k operations in all
    let handles: Vec<_> = (0..2u8)
        .map(|t| {
            let a = a.clone();
            let stream = streams[t as usize];
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t as u64);
                let mut live: Vec<(usize, usize)> = Vec::new();
                for _ in 0..ops {
                    if live.len() < 64 && (live.is_empty() || rng.below(2) == 0) {
                        let limit = if rng.below(8) == 0 { 4 << 20 } else { 64 << 10 };
                        let size = 1 + rng.below(limit) as usize;
                        let p = a.malloc(size, stream).unwrap();
                        fill(p, size, 0xA0 + t);
                        live.push((p, size));
                    } else {
                        let (p, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
                        assert!(check_fill(p, size, 0xA0 + t), "thread {t}: corruption");
                        a.free(p).unwrap();
                    }
                }
                for (p, _) in live {
                    a.free(p).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = a.stats().unwrap();
    assert_eq!(s.num_allocs, s.num_frees);
    assert_eq!((s.allocated_bytes, s.active_blocks), (0, 0));
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    for s in streams {
        drop_stream(&a, s);
    }
    assert_eq!(usage(DEV).malloc_count, 0);
    set_capacity(1 << 30);
}
