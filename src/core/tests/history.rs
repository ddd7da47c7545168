//! Memory history and the PyTorch-format snapshot through a real allocator
//! on the emulator.

use super::support::{
    allocator, drop_stream, emu_lock, finish, hold_stream, new_stream, release_stream, set_capacity, DEV,
};
use crate::core::report::history::Action;
use crate::core::report::pytorch_snapshot::Value;
use crate::core::*;

fn actions(a: &DeviceAllocator) -> Vec<(Action, usize)> {
    a.history().iter().map(|e| (e.action, e.addr)).collect()
}

fn int(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_int).unwrap_or_else(|| panic!("no integer {key}"))
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_list).unwrap_or_else(|| panic!("no list {key}"))
}

#[test]
fn off_records_nothing_and_on_records_each_step_of_a_fixed_segment() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false,reuse_cache_mb:0");
    let p = a.malloc(3 << 20, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    assert!(a.history().is_empty(), "history is off by default");

    a.record_history(100);
    let p = a.malloc(3 << 20, Stream::DEFAULT).unwrap();
    a.free(p).unwrap();
    a.empty_cache().unwrap();
    let seg = a.history().first().map(|e| e.addr);
    assert_eq!(
        actions(&a),
        [
            (Action::Alloc, p),
            (Action::FreeRequested, p),
            (Action::FreeCompleted, p),
            (Action::SegmentFree, seg.unwrap())
        ]
    );
    let q = a.malloc(1000, Stream::DEFAULT).unwrap();
    let ev = a.history();
    let tail: Vec<_> = ev[ev.len() - 2..].iter().map(|e| (e.action, e.size)).collect();
    assert_eq!(tail[0].0, Action::SegmentAlloc, "a new segment comes before the block cut from it");
    assert_eq!(tail[1], (Action::Alloc, 1000), "alloc entries carry the size asked for");
    assert!(ev.windows(2).all(|w| w[0].time_us <= w[1].time_us));

    a.record_history(0);
    assert!(a.history().is_empty());
    a.free(q).unwrap();
    assert!(a.history().is_empty());
    finish(a);
}

#[test]
fn a_free_other_streams_use_completes_when_their_work_does() {
    let _g = emu_lock();
    set_capacity(1 << 30);
    let a = allocator("expandable_segments:false");
    a.record_history(100);
    let s1 = new_stream();
    let p = a.malloc(8192, Stream::DEFAULT).unwrap();
    a.record_stream(p, s1).unwrap();
    hold_stream(s1);
    a.free(p).unwrap();
    let pending = a.pytorch_snapshot().unwrap();
    let states: Vec<_> = list(&pending, "segments")
        .iter()
        .flat_map(|s| list(s, "blocks"))
        .map(|b| b.get("state").and_then(Value::as_str).unwrap().to_string())
        .collect();
    assert!(states.iter().any(|s| s == "active_pending_free"), "{states:?}");
    assert_eq!(a.history().iter().filter(|e| e.addr == p && e.action == Action::FreeCompleted).count(), 0);
    release_stream(s1);
    a.empty_cache().unwrap();
    // The block starts its segment: segment events share its address.
    let all: Vec<_> = a.history().iter().filter(|e| e.addr == p).map(|e| e.action).collect();
    assert_eq!(
        all,
        [Action::SegmentAlloc, Action::Alloc, Action::FreeRequested, Action::FreeCompleted, Action::SegmentFree]
    );
    a.teardown().unwrap();
    drop_stream(s1);
}

#[test]
fn an_oom_is_recorded_with_the_device_free_bytes() {
    let _g = emu_lock();
    set_capacity(64 << 20);
    let a = allocator("expandable_segments:false");
    a.record_history(10);
    assert!(matches!(a.malloc(1 << 30, Stream::DEFAULT), Err(Error::OutOfMemory(_))));
    let last = *a.history().last().unwrap();
    assert_eq!((last.action, last.size), (Action::Oom, 1 << 30));
    assert!(last.device_free > 0 && last.device_free <= 64 << 20, "{}", last.device_free);
    let doc = a.pytorch_snapshot().unwrap();
    let trace = list(&doc, "device_traces")[DEV_INDEX].as_list().unwrap();
    let oom = trace.iter().find(|e| e.get("action").and_then(Value::as_str) == Some("oom")).unwrap();
    assert_eq!(int(oom, "device_free"), last.device_free as i64);
    let snap = trace.last().unwrap();
    assert_eq!(snap.get("action").and_then(Value::as_str), Some("snapshot"));
    finish(a);
}

const DEV_INDEX: usize = DEV as usize;

/// Allocates a mix of sizes on two streams, frees every third, and checks
/// the PyTorch-format snapshot against the allocator's statistics.
fn snapshot_matches_stats(config: &str, expandable: bool) {
    let _g = emu_lock();
    set_capacity(4 << 30);
    let a = allocator(config);
    a.record_history(1 << 20);
    let s1 = new_stream();
    let mut live = Vec::new();
    for i in 0..60usize {
        let size = [512, 4000, 700_000, 3 << 20, 25 << 20][i % 5] + i;
        let stream = if i % 2 == 0 { Stream::DEFAULT } else { s1 };
        live.push(a.malloc(size, stream).unwrap());
    }
    for (i, p) in live.iter().enumerate() {
        if i % 3 == 0 {
            a.free(*p).unwrap();
        }
    }
    let stats = a.stats().unwrap();
    let doc = a.pytorch_snapshot().unwrap();
    let segments = list(&doc, "segments");
    let total: i64 = segments.iter().map(|s| int(s, "total_size")).sum();
    let cached = a.own_accounting().1 as i64;
    assert_eq!(total + cached, stats.reserved_bytes as i64, "segments hold what is reserved");
    let allocated: i64 = segments.iter().map(|s| int(s, "allocated_size")).sum();
    assert_eq!(allocated, stats.allocated_bytes as i64);
    let requested: i64 = segments.iter().map(|s| int(s, "requested_size")).sum();
    assert_eq!(requested, stats.requested_bytes as i64);
    let mut active_blocks = 0;
    for s in segments {
        assert_eq!(s.get("is_expandable"), Some(&Value::Bool(expandable)));
        assert_eq!(int(s, "device"), DEV as i64);
        let blocks = list(s, "blocks");
        let mut at = int(s, "address");
        for b in blocks {
            assert_eq!(int(b, "address"), at, "blocks tile their segment");
            at += int(b, "size");
            if b.get("state").and_then(Value::as_str) == Some("active_allocated") {
                active_blocks += 1;
                assert!(int(b, "requested_size") <= int(b, "size"));
            }
        }
        assert_eq!(at, int(s, "address") + int(s, "total_size"));
    }
    assert_eq!(active_blocks, stats.active_blocks);
    if !expandable {
        assert_eq!(segments.len() as u64, stats.segments);
    }
    // The history holds every step: allocs minus frees is what is live.
    let trace = list(&doc, "device_traces")[DEV_INDEX].as_list().unwrap();
    let count = |name: &str| trace.iter().filter(|e| e.get("action").and_then(Value::as_str) == Some(name)).count();
    assert_eq!(count("alloc") - count("free_completed"), stats.active_blocks as usize);
    let grow = if expandable { ("segment_map", "segment_unmap") } else { ("segment_alloc", "segment_free") };
    let grown: i64 =
        trace.iter().filter(|e| e.get("action").and_then(Value::as_str) == Some(grow.0)).map(|e| int(e, "size")).sum();
    assert_eq!(count(grow.1), 0);
    assert_eq!(grown, total, "{} events add up to the segments", grow.0);
    assert!(list(&doc, "device_traces")[..DEV_INDEX].iter().all(|t| t.as_list() == Some(&[])));
    // JSON of the same document parses back to the same shape (spot check).
    let json = doc.to_json();
    assert!(json.starts_with("{\"segments\":[{\"device\":"));
    assert!(json.contains("\"segment_pool_id\":[0,0]"));
    for p in live.iter().enumerate().filter(|(i, _)| i % 3 != 0).map(|(_, p)| *p) {
        a.free(p).unwrap();
    }
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    drop_stream(s1);
}

#[test]
fn snapshot_of_fixed_segments_matches_the_stats() {
    snapshot_matches_stats("expandable_segments:false", false);
}

#[test]
fn snapshot_of_expandable_ranges_matches_the_stats() {
    snapshot_matches_stats("expandable_segments:true", true);
}
