//! `npualloc_sleep` / `npualloc_wake` through the C API on the ACL emulator
//! (built by `cargo build --workspace`): the default pool keeps its blocks,
//! so sleep gives back the cached memory and nothing else, every block
//! reads back after wake, repeated calls are OK, and bad handles are
//! refused with a message, changing nothing.

mod common;

use common::*;
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::ffi::sleep::{npualloc_sleep, npualloc_wake};
use npualloc::runtime::Stream;

const DEVICE: i32 = 0;
const MIB: usize = 1 << 20;

fn sleep(a: Handle) -> npualloc_status {
    // SAFETY: a live handle, or NULL (refused).
    unsafe { npualloc_sleep(a) }
}

fn wake(a: Handle) -> npualloc_status {
    // SAFETY: as in `sleep`.
    unsafe { npualloc_wake(a) }
}

fn write(p: usize, len: usize, byte: u8) {
    // SAFETY: the emulator's device memory is host memory; p is a live block of len bytes.
    unsafe { std::ptr::write_bytes(p as *mut u8, byte, len) }
}

fn reads(p: usize, len: usize, byte: u8) -> bool {
    // SAFETY: as in `write`.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }.iter().all(|&b| b == byte)
}

#[test]
fn the_default_pool_keeps_its_blocks_and_gives_back_its_cache() {
    let e = emu();
    let base = e.usage(DEVICE);
    for config in ["expandable_segments:true", "expandable_segments:false"] {
        let a = create(config, DEVICE).unwrap();
        let live = malloc(a, 3 * MIB, Stream::DEFAULT).unwrap();
        write(live, 3 * MIB, 0x42);
        let cached = malloc(a, 40 * MIB, Stream::DEFAULT).unwrap();
        assert_eq!(free(a, cached), NPUALLOC_OK);
        assert!(stats(a).reserved_bytes > stats(a).allocated_bytes, "{config}: some memory is cached");
        assert_eq!(wake(a), NPUALLOC_OK, "{config}: wake while awake");
        assert_eq!(sleep(a), NPUALLOC_OK, "{config}: {}", last_error_message());
        let s = stats(a);
        assert!(s.reserved_bytes >= s.allocated_bytes && s.reserved_bytes < 40 * MIB as u64, "{config}: {s:?}");
        assert_eq!(sleep(a), NPUALLOC_OK, "{config}: sleep while asleep");
        // The default pool keeps: it serves requests while asleep.
        let more = malloc(a, MIB, Stream::DEFAULT).unwrap();
        assert_eq!(free(a, more), NPUALLOC_OK);
        assert!(reads(live, 3 * MIB, 0x42), "{config}: a kept block is untouched");
        assert_eq!(wake(a), NPUALLOC_OK, "{config}: {}", last_error_message());
        assert!(reads(live, 3 * MIB, 0x42));
        assert_eq!(free(a, live), NPUALLOC_OK);
        assert_eq!(destroy(a), NPUALLOC_OK);
    }
    let u = e.usage(DEVICE);
    assert_eq!(
        (u.physical_count, u.malloc_count, u.reserved_ranges),
        (base.physical_count, base.malloc_count, base.reserved_ranges)
    );
}

#[test]
fn bad_handles_are_refused() {
    let _e = emu();
    for (name, f) in [("npualloc_sleep", sleep as fn(Handle) -> npualloc_status), ("npualloc_wake", wake)] {
        assert_eq!(f(std::ptr::null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT, "{name}(NULL)");
        assert!(!last_error_message().is_empty(), "{name}(NULL) says why");
    }
    let a = create("", DEVICE).unwrap();
    assert_eq!(destroy(a), NPUALLOC_OK);
    // A destroyed handle is recognised (handles are checked, never read blindly).
    assert_eq!(sleep(a), NPUALLOC_ERR_INVALID_ARGUMENT);
    assert_eq!(wake(a), NPUALLOC_ERR_INVALID_ARGUMENT);
}
