//! `npualloc_forget_stream` through the C API on the ACL emulator (built by
//! `cargo build --workspace`), on its default 64 GiB device: streams created,
//! used and forgotten one after another never run out of address space, a
//! mix of 48 live streams with a large and a small block each fits, and
//! `empty_cache` releases the ranges that hold nothing.

mod common;

use common::*;
use npualloc::ffi::forget::{npualloc_forget_stream, npualloc_pluggable_forget_stream};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::{self, *};
use npualloc::runtime::Stream;
use std::ffi::c_void;
use std::ptr::null_mut;

const DEVICE: i32 = 0;
const MIB: usize = 1 << 20;

fn forget(a: Handle, s: Stream) -> npualloc_status {
    // SAFETY: a live handle (or NULL, refused); the stream is only passed through.
    unsafe { npualloc_forget_stream(a, s.raw()) }
}

#[test]
fn streams_come_and_go_through_the_c_api() {
    let e = emu();
    let base = e.usage(DEVICE);
    let a = create("", DEVICE).unwrap();
    // 100 streams one after another: the 41st used to fail.
    for i in 0..100 {
        let s = e.create_stream(DEVICE);
        let big = malloc(a, 256 * MIB, s).unwrap_or_else(|(st, m)| panic!("stream {i}: {st:?} {m}"));
        let small = malloc(a, 4096, s).unwrap_or_else(|(st, m)| panic!("stream {i}: {st:?} {m}"));
        assert_eq!((free(a, big), free(a, small)), (NPUALLOC_OK, NPUALLOC_OK));
        assert_eq!(forget(a, s), NPUALLOC_OK, "{}", last_error_message());
        assert_eq!(e.usage(DEVICE).reserved_ranges, base.reserved_ranges, "stream {i}: its ranges stayed");
        e.destroy_stream(DEVICE, s);
    }
    // 48 streams live at once with a 256 MiB and a 4 KiB block each (this
    // mix used to stop at 24).
    let mut live = Vec::new();
    for i in 0..48 {
        let s = e.create_stream(DEVICE);
        let big = malloc(a, 256 * MIB, s).unwrap_or_else(|(st, m)| panic!("stream {i}: {st:?} {m}"));
        let small = malloc(a, 4096, s).unwrap_or_else(|(st, m)| panic!("stream {i}: {st:?} {m}"));
        live.push((s, big, small));
    }
    for &(s, big, small) in &live {
        assert_eq!((free(a, big), free(a, small)), (NPUALLOC_OK, NPUALLOC_OK));
        // Not forgotten: empty_cache gives their ranges back.
        let _ = s;
    }
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    let u = e.usage(DEVICE);
    assert_eq!((u.reserved_ranges, u.physical_count), (base.reserved_ranges, base.physical_count));
    assert_eq!(stats(a).segments, 0);
    for (s, _, _) in live {
        // An unknown-to-the-allocator or already emptied stream is OK.
        assert_eq!(forget(a, s), NPUALLOC_OK);
        e.destroy_stream(DEVICE, s);
    }
    assert_eq!(forget(a, Stream::from_raw(0x1234 as *mut c_void)), NPUALLOC_OK);
    assert_eq!(forget(null_mut(), Stream::DEFAULT), NPUALLOC_ERR_INVALID_ARGUMENT);
    assert!(last_error_message().contains("NULL"), "{}", last_error_message());
    assert_eq!(destroy(a), NPUALLOC_OK);
    // The pluggable allocator of a device never used: nothing to forget,
    // nothing created; a device out of range is refused.
    assert_eq!(npualloc_pluggable_forget_stream(3, null_mut()), NPUALLOC_OK);
    assert_eq!(npualloc_pluggable_forget_stream(-1, null_mut()), NPUALLOC_ERR_INVALID_ARGUMENT);
    assert!(e.usage(DEVICE).is_clean(), "{:?}", e.usage(DEVICE));
}
