//! The segment counts of `npualloc_stats` (version 3) agree with each
//! other on the ACL emulator, in fixed and expandable mode: `segments` is
//! `num_segments_created - num_segments_released`, `segments_peak`
//! remembers segments given back until `npualloc_reset_peak_stats`, and an
//! expandable range counts as made and given back although it makes no
//! aclrtMalloc (what the torch_npu bridge's `segment.*` figures rely on).

mod common;

use common::*;
use npualloc::ffi::npualloc_status::*;
use npualloc::ffi::stats::{npualloc_reset_peak_stats, npualloc_stats};
use npualloc::runtime::Stream;

const DEVICE: i32 = 5;
const MIB: usize = 1 << 20;

fn agree(s: &npualloc_stats, what: &str) {
    assert_eq!(s.num_segments_created - s.num_segments_released, s.segments, "{what}: {s:?}");
    assert!(s.segments_peak >= s.segments, "{what}: {s:?}");
}

fn check(config: &str, expandable: bool) {
    let a = create(config, DEVICE).unwrap();
    let start = stats(a);
    assert_eq!((start.segments, start.num_segments_created, start.segments_peak), (0, 0, 0), "{config}");
    // A small and two large blocks: at least a small and a large segment.
    let ps: Vec<usize> = [3000, 4 * MIB, 64 * MIB].iter().map(|&n| malloc(a, n, Stream::DEFAULT).unwrap()).collect();
    let live = stats(a);
    agree(&live, config);
    assert!(live.segments >= 2, "{config}: {live:?}");
    assert_eq!(live.segments_peak, live.segments, "{config}: nothing was given back yet");
    if expandable {
        assert_eq!(live.num_device_mallocs, 0, "{config}: ranges are not aclrtMalloc'ed");
    } else {
        assert_eq!(live.num_segments_created, live.num_device_mallocs, "{config}");
    }
    for p in ps {
        assert_eq!(free(a, p), NPUALLOC_OK);
    }
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    let emptied = stats(a);
    agree(&emptied, config);
    assert!(emptied.segments < live.segments, "{config}: empty_cache gave segments back: {emptied:?}");
    assert_eq!(emptied.segments_peak, live.segments, "{config}: the peak remembers them");
    assert_eq!(emptied.num_segments_created, live.num_segments_created, "{config}");
    // SAFETY: a live handle.
    assert_eq!(unsafe { npualloc_reset_peak_stats(a) }, NPUALLOC_OK);
    let reset = stats(a);
    assert_eq!(reset.segments_peak, reset.segments, "{config}: reset_peak_stats");
    assert_eq!(destroy(a), NPUALLOC_OK);
}

#[test]
fn fixed_segments_counts_agree() {
    check("expandable_segments:false", false);
}

#[test]
fn expandable_ranges_count_as_segments() {
    check("expandable_segments:true", true);
}
