//! Fixtures shared by the core tests: the emulator's controls and counters,
//! allocators on it, streams, data patterns, and the VMM accounting the
//! expandable tests compare against.
//!
//! The emulator's state is process-wide, so a test takes `emu_lock()` before
//! it touches any of it.

use crate::config::Config;
use crate::core::DeviceAllocator;
use crate::runtime::{Runtime, Stream};
use ascendcl::{
    aclemu_fail_nth, aclemu_fault_pending, aclemu_get_usage, aclemu_set_device_memory, aclemu_set_violation_abort,
    aclemu_stream_hold, aclemu_stream_release, aclemu_usage, aclemu_violations,
};
use std::sync::{Mutex, MutexGuard};

pub(crate) const MIB: usize = 1 << 20;
pub(crate) const GIB: usize = 1 << 30;
/// The small pool's page, and the large pool's with `page_size:2m`.
pub(crate) const PAGE: usize = 2 * MIB;

/// The device every core test runs on.
pub(crate) const DEV: i32 = 1;

/// The emulator's state is process-wide: tests that use it run one at a time.
///
/// Every violation aborts the test process at the call that made it (the
/// emulator's `aclemu_set_violation_abort`): no core test misuses memory
/// under queued work on purpose. When the guard drops at the end of a test
/// that did not panic, the emulator must hold on `DEV` what it held when the
/// test began: the same device memory, physical handles, mappings, reserved
/// ranges, events, descs and streams, and no violation was recorded.
pub(crate) fn emu_lock() -> EmuGuard {
    static LOCK: Mutex<()> = Mutex::new(());
    let lock = LOCK.lock().unwrap_or_else(|e| {
        EARLIER_FAILURE.store(true, std::sync::atomic::Ordering::Relaxed);
        e.into_inner()
    });
    // SAFETY: plain value.
    unsafe { aclemu_set_violation_abort(1) };
    EmuGuard { _lock: lock, at_start: held(), violations: violations() }
}

/// Set once a test panicked holding the emulator: what it left behind may
/// fail the checks of the tests after it.
static EARLIER_FAILURE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a failed check adds when an earlier test failed holding the emulator.
fn earlier_failure() -> &'static str {
    if EARLIER_FAILURE.load(std::sync::atomic::Ordering::Relaxed) {
        " (a test that failed earlier may have left this behind: see the first failure)"
    } else {
        ""
    }
}

/// A test's turn at the emulator; see [`emu_lock`].
pub(crate) struct EmuGuard {
    _lock: MutexGuard<'static, ()>,
    at_start: aclemu_usage,
    violations: i64,
}

impl Drop for EmuGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        assert_eq!(
            held(),
            self.at_start,
            "at the end of the test: the emulator holds what the test began without{}",
            earlier_failure()
        );
        assert_eq!(violations(), self.violations, "the emulator recorded violations during the test (see stderr)");
    }
}

/// What the emulator holds on `DEV` (every counter but the running count of
/// synchronizations).
fn held() -> aclemu_usage {
    aclemu_usage { syncs: 0, ..usage(DEV) }
}

fn violations() -> i64 {
    // SAFETY: no arguments.
    unsafe { aclemu_violations() }
}

/// The emulator's counters for `device`.
pub(crate) fn usage(device: i32) -> aclemu_usage {
    // SAFETY: aclemu_usage is plain integers, for which all zeroes is a value.
    let mut u: aclemu_usage = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out-pointer.
    assert_eq!(unsafe { aclemu_get_usage(device, &mut u) }, 0);
    u
}

/// Nothing is left in the emulator: no device memory, event, physical
/// handle, mapping or reserved range.
pub(crate) fn assert_emulator_empty(what: &str) {
    assert_emulator_gave_back(what);
}

pub(crate) fn set_capacity(bytes: u64) {
    // SAFETY: plain values.
    assert_eq!(unsafe { aclemu_set_device_memory(DEV, bytes) }, 0);
}

/// Makes the `n`th next call of the runtime function `name` fail (0 disarms).
pub(crate) fn fail_nth(name: &str, n: i32) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a valid C string.
    assert_eq!(unsafe { aclemu_fail_nth(c.as_ptr(), n) }, 0);
}

/// Calls of `name` left before its armed failure (0: none armed, or fired).
pub(crate) fn fault_pending(name: &str) -> i32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a valid C string.
    unsafe { aclemu_fault_pending(c.as_ptr()) }
}

pub(crate) fn allocator(config: &str) -> DeviceAllocator {
    DeviceAllocator::with_runtime(Config::parse(config).unwrap(), DEV, Runtime::emulated()).unwrap()
}

/// Checks the invariants, tears down, and expects no device memory or event
/// left in the emulator.
pub(crate) fn finish(a: DeviceAllocator) {
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    assert_emulator_gave_back("after teardown");
}

/// After a teardown: no device memory, physical handle, mapping, reserved
/// range, event or desc left on `DEV`, and no violation. (Streams belong to
/// the test, which may destroy them after its allocator; the guard of
/// [`emu_lock`] checks them at the end of the test.)
pub(crate) fn assert_emulator_gave_back(what: &str) {
    let u = usage(DEV);
    let left = aclemu_usage { syncs: 0, streams: 0, ..u };
    assert_eq!(left, aclemu_usage::default(), "{what}: the emulator reports leaks{}", earlier_failure());
    assert_eq!(violations(), 0, "{what}: the emulator recorded violations (see stderr)");
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

// Streams live in the emulator, not in an allocator: they may be destroyed
// after the allocator that used them was torn down.

/// A stream of DEV's primary context, made the way a host makes one: with
/// DEV set on its thread (a stream made inside `on_device` alone goes when
/// that switch's paired reset drops DEV's last reference).
pub(crate) fn new_stream() -> Stream {
    let rt = Runtime::emulated();
    rt.set_device(DEV).unwrap();
    rt.create_stream().unwrap()
}

pub(crate) fn drop_stream(s: Stream) {
    let rt = Runtime::emulated();
    rt.on_device(DEV, || rt.destroy_stream(s)).unwrap()
}

/// Holds the stream's later work (copies, event records) until `release_stream`.
pub(crate) fn hold_stream(s: Stream) {
    // SAFETY: s is a live emulator stream the test created.
    assert_eq!(unsafe { aclemu_stream_hold(s.raw()) }, 0);
}

/// Lets the stream's held work run.
pub(crate) fn release_stream(s: Stream) {
    // SAFETY: as in `hold_stream`.
    assert_eq!(unsafe { aclemu_stream_release(s.raw()) }, 0);
}

/// Queues a device-to-host copy of `dst.len()` bytes at `src` on `stream`.
pub(crate) fn queue_copy_out(a: &DeviceAllocator, dst: &mut [u8], src: usize, stream: Stream) {
    let rt = a.runtime().clone();
    let kind = crate::memcpy2d::ACL_MEMCPY_DEVICE_TO_HOST as u32;
    let len = dst.len();
    // SAFETY: the caller keeps dst alive until the copy ran (it synchronizes
    // the stream or waits for an event recorded after it); src is a live block
    // of at least len bytes.
    rt.on_device(DEV, || unsafe {
        rt.memcpy2d(dst.as_mut_ptr().cast(), len, src as *const _, len, len, 1, kind, Some(stream))
    })
    .unwrap();
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

/// The emulator's VMM counters relative to a test's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vmm {
    pub(crate) physical_count: i64,
    pub(crate) physical_bytes: i64,
    pub(crate) mapped_bytes: i64,
    pub(crate) reserved_ranges: i64,
}

/// The emulator's counters when a test started, so that it compares only
/// what it did itself.
pub(crate) struct Baseline(pub(crate) aclemu_usage);

impl Baseline {
    pub(crate) fn take() -> Self {
        Baseline(usage(DEV))
    }

    pub(crate) fn vmm(&self) -> Vmm {
        let (u, b) = (usage(DEV), &self.0);
        let d = |now: u64, then: u64| now as i64 - then as i64;
        Vmm {
            physical_count: d(u.physical_count, b.physical_count),
            physical_bytes: d(u.physical_bytes, b.physical_bytes),
            mapped_bytes: d(u.mapped_bytes, b.mapped_bytes),
            reserved_ranges: d(u.reserved_ranges, b.reserved_ranges),
        }
    }

    pub(crate) fn syncs(&self) -> u64 {
        usage(DEV).syncs - self.0.syncs
    }
}

/// Gives the device `bytes` of room on top of what it already holds.
pub(crate) fn budget(bytes: usize) {
    let u = usage(DEV);
    set_capacity(u.malloc_bytes + u.physical_bytes + bytes as u64);
}

/// Accounting that must hold after any call, failed or not: the emulator
/// maps exactly what the allocator thinks it maps, holds exactly the
/// physical memory the allocator counts as reserved, and mapped + cached
/// pages are that reserved memory.
/// `page`: the one page size in use, if only one is.
pub(crate) fn check_accounting(a: &DeviceAllocator, base: &Baseline, page: Option<usize>, what: &str) {
    a.check_invariants().unwrap_or_else(|e| panic!("{what}: {e}"));
    let s = a.stats().unwrap();
    let emu = base.vmm();
    let (mapped, cached) = a.own_accounting();
    if let Some(page) = page {
        let by_count = ((s.num_maps - s.num_unmaps) as usize * page) as i64;
        assert_eq!(emu.mapped_bytes, by_count, "{what}: emulator mapped bytes vs maps - unmaps");
    }
    // A moved handle's old address is mapped too, until a reclaim.
    let retired = a.retired_bytes();
    assert_eq!(emu.mapped_bytes, (mapped + retired) as i64, "{what}: emulator mapped bytes vs the allocator's ranges");
    assert_eq!(emu.physical_bytes, s.reserved_bytes as i64, "{what}: emulator physical bytes vs reserved");
    assert_eq!((mapped + cached) as u64, s.reserved_bytes, "{what}: mapped + cached vs reserved");
    assert_eq!(
        emu.physical_count,
        (s.num_physical_mallocs - s.num_physical_frees) as i64,
        "{what}: live handles vs physical mallocs - frees"
    );
}

/// Teardown, then nothing of ours may be left in the emulator.
pub(crate) fn teardown_clean(a: DeviceAllocator, base: &Baseline) {
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    let zero = Vmm { physical_count: 0, physical_bytes: 0, mapped_bytes: 0, reserved_ranges: 0 };
    assert_eq!(base.vmm(), zero, "teardown left VMM resources behind");
    let u = usage(DEV);
    assert_eq!((u.malloc_count - base.0.malloc_count, u.events - base.0.events), (0, 0), "teardown leaked");
}

/// Live aclrtMallocHost memory of the process: (bytes, blocks).
pub(crate) fn host_usage() -> (u64, u64) {
    let (mut bytes, mut count) = (0u64, 0u64);
    // SAFETY: both are valid out-pointers.
    assert_eq!(unsafe { ascendcl::aclemu_host_usage(&mut bytes, &mut count) }, 0);
    (bytes, count)
}
