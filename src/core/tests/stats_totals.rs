//! The statistics torch_npu's `memory_stats()` needs beyond live figures:
//! cumulative bytes handed out and obtained, blocks waiting for other
//! streams, inactive split blocks as torch_npu counts them (cached pieces
//! of fixed segments of more than one block) and `max_split_size`.

use super::support::{allocator, drop_stream, emu_lock, finish, hold_stream, new_stream, release_stream, set_capacity};
use crate::core::*;

const MIB: usize = 1 << 20;

#[test]
fn totals_count_every_byte_handed_out_and_obtained() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        let a = allocator(config);
        let mut handed_out = 0u64;
        for size in [3000, 5 * MIB, 600_000, 3000, 40 * MIB] {
            let p = a.malloc(size, Stream::DEFAULT).unwrap();
            handed_out += a.query(p).unwrap().size as u64;
            a.free(p).unwrap();
        }
        let s = a.stats().unwrap();
        assert_eq!(s.allocated_bytes_total, handed_out, "{config}: each allocation's rounded bytes, reuse included");
        assert_eq!(s.allocated_bytes, 0);
        let before = s.reserved_bytes_total;
        assert!(before >= s.reserved_bytes_peak && s.reserved_bytes_peak > 0, "{config}: {s:?}");
        a.empty_cache().unwrap();
        let s = a.stats().unwrap();
        assert_eq!(s.reserved_bytes, 0, "{config}");
        assert_eq!(s.reserved_bytes_total, before, "{config}: giving back obtains nothing");
        // Obtained again after the cache went back: the total goes on.
        let p = a.malloc(5 * MIB, Stream::DEFAULT).unwrap();
        let s = a.stats().unwrap();
        assert_eq!(s.reserved_bytes_total, before + s.reserved_bytes, "{config}");
        a.free(p).unwrap();
        finish(a);
    }
}

#[test]
fn inactive_split_blocks_are_free_pieces_of_shared_fixed_segments() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    // One small segment: [x][y][rest], the rest a free piece of a split segment.
    let x = a.malloc(3000, Stream::DEFAULT).unwrap();
    let y = a.malloc(600_000, Stream::DEFAULT).unwrap();
    let (xs, ys) = (a.query(x).unwrap().size as u64, a.query(y).unwrap().size as u64);
    let s = a.stats().unwrap();
    let seg = s.segment_bytes;
    assert_eq!((s.inactive_split_blocks, s.inactive_split_bytes), (1, seg - xs - ys));
    a.free(x).unwrap();
    let s = a.stats().unwrap();
    assert_eq!(
        (s.inactive_split_blocks, s.inactive_split_bytes),
        (2, seg - ys),
        "x's block (held for reuse) is a second piece"
    );
    a.free(y).unwrap();
    let s = a.stats().unwrap();
    assert_eq!(
        (s.inactive_split_blocks, s.inactive_split_bytes),
        (3, seg),
        "held for reuse, the pieces stay apart until a growth or empty_cache merges them"
    );
    a.empty_cache().unwrap();
    // A segment of one block is not split, live or cached.
    let z = a.malloc(30 * MIB, Stream::DEFAULT).unwrap();
    assert_eq!(a.stats().unwrap().segment_bytes, a.query(z).unwrap().size as u64, "a segment of its own");
    a.free(z).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.inactive_split_blocks, s.inactive_split_bytes), (0, 0));
    finish(a);
    let a = allocator("expandable_segments:true");
    let x = a.malloc(3000, Stream::DEFAULT).unwrap();
    let _y = a.malloc(600_000, Stream::DEFAULT).unwrap();
    a.free(x).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.inactive_split_blocks, s.inactive_split_bytes), (0, 0), "torch_npu counts no expandable piece");
    a.free(_y).unwrap();
    finish(a);
}

#[test]
fn blocks_waiting_for_other_streams_are_counted_until_they_come_back() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    let s1 = new_stream();
    let p = a.malloc(8 * MIB, Stream::DEFAULT).unwrap();
    let q = a.malloc(4 * MIB, Stream::DEFAULT).unwrap(); // the same (large) pool
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.pending_free_blocks, s.pending_free_bytes, s.active_blocks), (1, 8 * MIB as u64, 1));
    release_stream(s1);
    a.free(q).unwrap();
    let s = a.stats().unwrap();
    assert_eq!((s.pending_free_blocks, s.pending_free_bytes), (0, 0), "back at the next free");
    finish(a);
    drop_stream(s1);
}

#[test]
fn max_split_size_is_the_configured_limit_or_none() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    assert_eq!(a.stats().unwrap().max_split_size, u64::MAX, "no limit: PyTorch's -1 as a signed number");
    finish(a);
    let a = allocator("expandable_segments:false,max_split_size_mb:40");
    assert_eq!(a.stats().unwrap().max_split_size, 40 << 20);
    finish(a);
}
