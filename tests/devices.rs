//! Allocators on different devices (the emulator has `ACLEMU_DEVICE_COUNT`
//! of them, 8 by default) never hand out each other's memory, and a pointer
//! freed to (or recorded, or queried on) the wrong allocator is refused with
//! NPUALLOC_ERR_UNKNOWN_POINTER, leaving both allocators as they were.

mod common;

use common::{create, destroy, emu, free, malloc, query, record_stream, stats};
use npualloc::ffi::last_error::last_error_message;
use npualloc::ffi::npualloc_status::*;
use npualloc::runtime::Stream;

#[test]
fn two_devices_two_allocators_stay_apart() {
    let e = emu();
    let count: i32 = std::env::var("ACLEMU_DEVICE_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    assert!(count >= 2, "needs two emulated devices, ACLEMU_DEVICE_COUNT is {count}");
    let (d0, d1) = (2.min(count - 2), 3.min(count - 1));
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        let a = create(config, d0).unwrap();
        let b = create(config, d1).unwrap();
        let sizes = [1usize, 512, 4096, 100_000, 1 << 20, 3 << 20, 25 << 20];
        let mut blocks = Vec::new();
        for (i, &size) in sizes.iter().cycle().take(40).enumerate() {
            let (h, dev) = if i % 2 == 0 { (a, d0) } else { (b, d1) };
            let p = malloc(h, size, Stream::DEFAULT).unwrap_or_else(|e| panic!("malloc({size}) on {dev}: {e:?}"));
            let info = query(h, p).unwrap();
            blocks.push((h, p, info.size as usize));
        }
        // No block of one allocator overlaps a block of the other.
        let mut sorted = blocks.clone();
        sorted.sort_by_key(|&(_, p, _)| p);
        for w in sorted.windows(2) {
            assert!(w[0].1 + w[0].2 <= w[1].1, "{config}: blocks {:#x}+{} and {:#x} overlap", w[0].1, w[0].2, w[1].1);
        }
        let (before_a, before_b) = (stats(a), stats(b));
        for &(owner, p, size) in &blocks {
            let wrong = if owner == a { b } else { a };
            assert_eq!(free(wrong, p), NPUALLOC_ERR_UNKNOWN_POINTER, "{config}: free to the wrong allocator");
            assert!(last_error_message().contains("unknown pointer"), "{}", last_error_message());
            assert_eq!(record_stream(wrong, p, Stream::DEFAULT), NPUALLOC_ERR_UNKNOWN_POINTER);
            assert_eq!(query(wrong, p + size / 2).unwrap_err(), NPUALLOC_ERR_UNKNOWN_POINTER);
        }
        // State unchanged on both sides: same stats, and every block still its owner's.
        assert_eq!(format!("{:?}", stats(a)), format!("{before_a:?}"), "{config}");
        assert_eq!(format!("{:?}", stats(b)), format!("{before_b:?}"), "{config}");
        for &(owner, p, _) in &blocks {
            assert_eq!(query(owner, p).unwrap().addr as usize, p);
        }
        // Each device's memory is charged to that device only.
        let (ua, ub) = (e.usage(d0), e.usage(d1));
        assert!(ua.malloc_bytes + ua.physical_bytes >= stats(a).reserved_bytes, "{ua:?}");
        assert!(ub.malloc_bytes + ub.physical_bytes >= stats(b).reserved_bytes, "{ub:?}");
        for &(owner, p, _) in &blocks {
            assert_eq!(free(owner, p), NPUALLOC_OK, "{}", last_error_message());
        }
        assert_eq!((destroy(a), destroy(b)), (NPUALLOC_OK, NPUALLOC_OK));
        assert!(e.usage(d0).is_clean() && e.usage(d1).is_clean(), "{config}: {:?} {:?}", e.usage(d0), e.usage(d1));
    }
    // A device the emulator does not have is a bad argument at create,
    // naming the ids the runtime has.
    let (st, msg) = create("", count).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT, "{msg}");
    let range = format!("it has {count} device(s), 0 to {}", count - 1);
    assert!(msg.contains(&format!("device {count} is not a device of this runtime")) && msg.contains(&range), "{msg}");
}
