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

#[test]
fn each_pool_kinds_figures_add_up_to_the_allocators() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        let a = allocator(config);
        let s1 = new_stream();
        let small: Vec<usize> = [3000, 700, 600_000].iter().map(|&n| a.malloc(n, Stream::DEFAULT).unwrap()).collect();
        let large: Vec<usize> = [5 * MIB, 3 * MIB].iter().map(|&n| a.malloc(n, s1).unwrap()).collect();
        a.free(small[1]).unwrap();
        a.free(large[1]).unwrap();
        let (all, k) = (a.stats().unwrap(), [PoolKind::Small, PoolKind::Large].map(|k| a.kind_stats(k).unwrap()));
        let sum = |f: fn(&Stats) -> u64| f(&k[0]) + f(&k[1]);
        assert_eq!(sum(|s| s.allocated_bytes), all.allocated_bytes, "{config}");
        assert_eq!(sum(|s| s.requested_bytes), all.requested_bytes, "{config}");
        assert_eq!(sum(|s| s.active_blocks), all.active_blocks, "{config}");
        assert_eq!(sum(|s| s.num_allocs), all.num_allocs, "{config}");
        assert_eq!(sum(|s| s.num_frees), all.num_frees, "{config}");
        assert_eq!(sum(|s| s.allocated_bytes_total), all.allocated_bytes_total, "{config}");
        assert_eq!(sum(|s| s.segments), all.segments, "{config}");
        assert_eq!(sum(|s| s.segment_bytes), all.segment_bytes, "{config}");
        assert_eq!(sum(|s| s.inactive_split_bytes), all.inactive_split_bytes, "{config}");
        let rounded = |p: usize| a.query(p).unwrap().size as u64;
        assert_eq!(k[0].allocated_bytes, rounded(small[0]) + rounded(small[2]), "{config}: the small blocks");
        assert_eq!(k[1].allocated_bytes, rounded(large[0]), "{config}: the large block");
        assert_eq!((k[0].active_blocks, k[1].active_blocks), (2, 1), "{config}");
        // Peaks: the kinds' sums when the total peaked (all five live).
        assert_eq!(k[0].allocated_bytes_peak + k[1].allocated_bytes_peak, all.allocated_bytes_peak, "{config}");
        assert!(k[1].allocated_bytes_peak > k[1].allocated_bytes, "{config}: the freed 3 MiB counted in the peak");
        assert_eq!(k[0].reserved_bytes, k[0].segment_bytes, "{config}: a kind's reserved memory is its segments'");
        // After a reset, each kind's peak is its current figure.
        a.reset_peak_stats().unwrap();
        for kind in [PoolKind::Small, PoolKind::Large] {
            let s = a.kind_stats(kind).unwrap();
            assert_eq!(s.allocated_bytes_peak, s.allocated_bytes, "{config}");
        }
        for p in [small[0], small[2]] {
            a.free(p).unwrap();
        }
        a.free(large[0]).unwrap();
        finish(a);
        drop_stream(s1);
    }
}
