//! Blocks of fixed segments on one stream: reuse, split and coalesce, the
//! segment size each pool gets, blocks past `max_split_size`, and refused
//! input.

use super::support::{allocator, emu_lock, finish, set_capacity};
use crate::core::*;

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
    assert_eq!(s.reserved_bytes, alloc::policy::SMALL_BUFFER as u64);
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
    assert_eq!(s.largest_free_block, alloc::policy::SMALL_BUFFER as u64, "all pieces merged back");
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

#[test]
fn bad_input_changes_nothing() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let p = a.malloc(2048, Stream::DEFAULT).unwrap();
    let before = a.stats().unwrap();
    assert!(matches!(a.malloc(0, Stream::DEFAULT), Err(Error::InvalidArgument(_))));
    assert!(matches!(a.malloc(usize::MAX, Stream::DEFAULT), Err(Error::InvalidArgument(_))));
    // The size check is one compare (0 wraps around): each end of the
    // refused range gets its own message (the largest supported request
    // passes it: below).
    let max = crate::core::alloc::policy::MAX_REQUEST;
    assert!(matches!(a.malloc(0, Stream::DEFAULT), Err(Error::InvalidArgument(m)) if m.contains("size is 0")));
    assert!(matches!(a.malloc(max, Stream::DEFAULT), Err(Error::InvalidArgument(m)) if m.contains("exceeds")));
    assert!(matches!(a.free(0xdead_0000), Err(Error::UnknownPointer(m)) if m.contains("did not allocate")));
    assert!(matches!(a.free(p + 512), Err(Error::UnknownPointer(m)) if m.contains("inside the block")));
    assert!(matches!(a.record_stream(p + 512, Stream(7)), Err(Error::UnknownPointer(_))));
    assert_eq!(a.stats().unwrap(), before);
    let info = a.query(p + 100).unwrap();
    assert_eq!((info.addr, info.size, info.requested), (p, 2048, 2048));
    a.free(p).unwrap();
    assert!(matches!(a.free(p), Err(Error::UnknownPointer(m)) if m.contains("already freed")));
    assert!(a.query(p).is_err());
    // One byte under the refused range: past the size check, refused for
    // lack of memory.
    assert!(matches!(a.malloc(max - 1, Stream::DEFAULT), Err(Error::OutOfMemory(_))));
    finish(a);
}
