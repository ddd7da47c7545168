//! The JSON snapshot adds up, and the stats struct grows the `struct_size`
//! way, on the ACL emulator (built by `cargo build --workspace`):
//! - the segments' sizes add up to `segment_bytes`, which with
//!   `cached_handle_bytes` is `reserved_bytes`; each segment's blocks add up
//!   to its size and lie inside its address range; active blocks add up to
//!   `allocated_bytes` (and requested), pending-free ones to
//!   `pending_free_bytes`; an expandable range lists only mapped memory;
//! - the snapshot's "stats" object holds exactly the struct's fields, with
//!   the struct's values;
//! - in fixed and expandable mode, with live, cached and pending blocks,
//!   and again after a refused request;
//! - a caller with the first, smaller `npualloc_stats` gets its fields
//!   filled and nothing past them written.

mod common;

use common::*;
use npualloc::ffi::npualloc_status::*;
use npualloc::ffi::stats::{
    npualloc_get_kind_stats, npualloc_get_stats, npualloc_snapshot_json, npualloc_stats, npualloc_string_free,
    NPUALLOC_LARGE_BLOCKS, NPUALLOC_SMALL_BLOCKS, NPUALLOC_STATS_VERSION,
};
use npualloc::runtime::Stream;
use serde_json::Value;
use std::ffi::{c_char, CStr};

const DEVICE: i32 = 3;
const MIB: usize = 1 << 20;

/// The emulator's usage counters are per device: one test at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn snapshot(a: Handle) -> Value {
    let mut json: *mut c_char = std::ptr::null_mut();
    // SAFETY: a live handle and a valid out-pointer.
    assert_eq!(unsafe { npualloc_snapshot_json(a, &mut json) }, NPUALLOC_OK);
    // SAFETY: a NUL-terminated string from the library, freed right after.
    let text = unsafe { CStr::from_ptr(json) }.to_str().expect("UTF-8").to_string();
    // SAFETY: returned by npualloc_snapshot_json.
    unsafe { npualloc_string_free(json) };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"))
}

/// The statistics fields of `s` by name, read through the table's order.
fn fields(s: &npualloc_stats) -> Vec<(&'static str, u64)> {
    let names = npualloc::core::Stats::FIELDS;
    assert_eq!(std::mem::size_of::<npualloc_stats>(), 8 + 8 * names.len());
    // SAFETY: npualloc_stats is repr(C): two u32 then one u64 per field
    // (checked by the library's own layout test and the size above).
    let values = unsafe { std::slice::from_raw_parts((s as *const npualloc_stats).cast::<u64>().add(1), names.len()) };
    names.iter().copied().zip(values.iter().copied()).collect()
}

fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// Checks that the snapshot of `a` adds up and agrees with its stats;
/// returns the stats.
fn check_adds_up(a: Handle, label: &str) -> npualloc_stats {
    let s = stats(a);
    let doc = snapshot(a);
    let st = doc.get("stats").and_then(Value::as_object).expect("stats object");
    let want = fields(&s);
    assert_eq!(st.len(), want.len(), "{label}: stats keys {:?}", st.keys().collect::<Vec<_>>());
    for (name, value) in &want {
        assert_eq!(st.get(*name).and_then(Value::as_u64), Some(*value), "{label}: stats.{name}");
    }
    let (mut held, mut space, mut active, mut requested, mut pending, mut count) = (0, 0, 0, 0, 0, 0);
    for seg in doc["segments"].as_array().expect("segments") {
        let (base, size, range) = (num(seg, "address"), num(seg, "size"), num(seg, "address_space_bytes"));
        held += size;
        space += range;
        let expandable = seg["expandable"].as_bool().expect("expandable");
        if !expandable {
            // An aclrtMalloc result only 64-byte aligned (ACLEMU_MALLOC_ALIGN=random)
            // loses its head up to the next 512-byte boundary: held, not tiled.
            assert!(range <= size && size - range <= 512, "{label}: alignment slack of a fixed segment: {seg}");
        }
        let mut at = base;
        let mut sum = 0;
        for b in seg["blocks"].as_array().expect("blocks") {
            let (addr, bytes) = (num(b, "address"), num(b, "size"));
            assert!(
                bytes > 0 && addr >= at && addr + bytes <= base + range,
                "{label}: block {b} in segment at {base:#x}"
            );
            at = addr + bytes;
            sum += bytes;
            match b["state"].as_str() {
                Some("active") => {
                    active += bytes;
                    requested += num(b, "requested");
                    count += 1;
                }
                Some("pending-free") => pending += bytes,
                Some("cached") => {}
                other => panic!("{label}: block state {other:?}"),
            }
        }
        // Blocks tile what a segment maps (expandable) or its aligned span (fixed).
        let tiled = if expandable { size } else { range };
        assert_eq!(sum, tiled, "{label}: the blocks of segment {base:#x} add up to its size");
    }
    assert_eq!(held, s.segment_bytes, "{label}: segment sizes vs segment_bytes");
    assert_eq!(s.segment_bytes + s.cached_handle_bytes, s.reserved_bytes, "{label}: reserved_bytes");
    assert_eq!(space, s.address_space_bytes, "{label}: address_space_bytes");
    assert_eq!(
        (active, requested, count),
        (s.allocated_bytes, s.requested_bytes, s.active_blocks),
        "{label}: active blocks"
    );
    assert_eq!(pending, s.pending_free_bytes, "{label}: pending-free blocks");
    s
}

fn scenario(config: &str) {
    let e = emu();
    e.set_capacity(DEVICE, 256 * MIB as u64);
    e.rt.set_device(DEVICE).expect("set device");
    let other = e.create_stream(DEVICE);
    let a = create(config, DEVICE).unwrap_or_else(|(st, m)| panic!("{config}: {st:?} {m}"));
    let label = |what: &str| format!("{config}, {what}");

    let mut live = Vec::new();
    for (i, size) in [1000usize, 3 * MIB, 700 * 1024, 9 * MIB + 17, 20 * MIB, 512, 6 * MIB].into_iter().enumerate() {
        live.push((i, malloc(a, size, Stream::DEFAULT).unwrap()));
    }
    check_adds_up(a, &label("all live"));

    // Cached blocks: every other one freed.
    for &(_, p) in live.iter().filter(|(i, _)| i % 2 == 1) {
        assert_eq!(free(a, p), NPUALLOC_OK);
    }
    live.retain(|(i, _)| i % 2 == 0);
    check_adds_up(a, &label("some freed"));

    // Pending: used on a held stream, then freed.
    e.hold(other);
    let used = live.pop().unwrap().1;
    assert_eq!(record_stream(a, used, other), NPUALLOC_OK);
    assert_eq!(free(a, used), NPUALLOC_OK);
    let s = check_adds_up(a, &label("one pending"));
    assert!(s.pending_free_bytes > 0, "{}: nothing pending: {s:?}", label(""));

    // A refused request; the held stream keeps its pending block.
    let (st, msg) = malloc(a, 400 * MIB, Stream::DEFAULT).unwrap_err();
    assert_eq!(st, NPUALLOC_ERR_OUT_OF_MEMORY, "{msg}");
    let s = check_adds_up(a, &label("after a refused request"));
    assert!(s.num_ooms >= 1);
    e.release(other);

    // Unmapped handles in the cache (expandable): after empty_cache there
    // are none; a fresh growth after freeing a large block may leave some.
    for (_, p) in live.drain(..) {
        assert_eq!(free(a, p), NPUALLOC_OK);
    }
    check_adds_up(a, &label("all freed"));
    assert_eq!(empty_cache(a), NPUALLOC_OK);
    let s = check_adds_up(a, &label("emptied"));
    assert_eq!((s.reserved_bytes, s.segment_bytes, s.cached_handle_bytes), (0, 0, 0), "{}", label("emptied"));
    assert_eq!(destroy(a), NPUALLOC_OK);
    e.destroy_stream(DEVICE, other);
}

#[test]
fn fixed_segments_snapshot_adds_up() {
    let _g = serial();
    scenario("expandable_segments:false");
}

#[test]
fn expandable_snapshot_adds_up_and_lists_only_mapped_memory() {
    let _g = serial();
    scenario("expandable_segments:true");
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let p = malloc(a, 5 * MIB, Stream::DEFAULT).unwrap();
    let s = check_adds_up(a, "expandable, one block");
    // The range reserves far more address space than it maps.
    assert!(s.address_space_bytes > 8 * s.segment_bytes, "{s:?}");
    let doc = snapshot(a);
    let seg = &doc["segments"][0];
    assert!(num(seg, "size") < 64 * MIB as u64 && num(seg, "address_space_bytes") > 64 * MIB as u64, "{seg}");
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}

/// The first `npualloc_stats` ended at `largest_free_block`.
const FIRST_STRUCT_SIZE: usize = std::mem::offset_of!(npualloc_stats, num_physical_mallocs);

#[test]
fn a_caller_with_the_smaller_first_struct_gets_its_fields_and_nothing_more() {
    let _g = serial();
    let a = create("expandable_segments:true", DEVICE).unwrap();
    let p = malloc(a, 3 * MIB, Stream::DEFAULT).unwrap();
    let full = stats(a);
    assert_eq!(full.version, NPUALLOC_STATS_VERSION);
    assert!(full.num_physical_mallocs > 0 && full.segment_bytes > 0, "{full:?}");

    const MARK: u64 = 0xdead_beef_dead_beef;
    let mut raw = [MARK; std::mem::size_of::<npualloc_stats>() / 8];
    raw[0] = FIRST_STRUCT_SIZE as u64; // struct_size (low half), version 0
    let out = raw.as_mut_ptr().cast::<npualloc_stats>();
    // SAFETY: `raw` is large and aligned enough for the struct; the call
    // writes at most struct_size bytes.
    assert_eq!(unsafe { npualloc_get_stats(a, out) }, NPUALLOC_OK);
    // SAFETY: initialised above; every bit pattern is a valid npualloc_stats.
    let got = unsafe { out.read() };
    assert_eq!(got.struct_size as usize, FIRST_STRUCT_SIZE);
    assert_eq!(got.version, NPUALLOC_STATS_VERSION);
    assert_eq!(
        (got.allocated_bytes, got.reserved_bytes, got.largest_free_block),
        (full.allocated_bytes, full.reserved_bytes, full.largest_free_block)
    );
    for (i, &word) in raw.iter().enumerate().skip(FIRST_STRUCT_SIZE / 8) {
        assert_eq!(word, MARK, "word {i} past the caller's struct_size was written");
    }

    // A size that ends inside a field: only whole fields are written, and
    // struct_size says how many bytes were.
    let mut raw = [MARK; std::mem::size_of::<npualloc_stats>() / 8];
    raw[0] = (FIRST_STRUCT_SIZE + 5) as u64;
    let out = raw.as_mut_ptr().cast::<npualloc_stats>();
    // SAFETY: as above.
    assert_eq!(unsafe { npualloc_get_stats(a, out) }, NPUALLOC_OK);
    // SAFETY: as above.
    assert_eq!(unsafe { out.read() }.struct_size as usize, FIRST_STRUCT_SIZE);
    for (i, &word) in raw.iter().enumerate().skip(FIRST_STRUCT_SIZE / 8) {
        assert_eq!(word, MARK, "word {i}, a field cut by struct_size, was written");
    }

    // Too small for the header: refused, nothing written.
    let word = 4u64 | (77 << 32); // struct_size 4, version 77
    let mut tiny = [word];
    // SAFETY: 8 aligned bytes; a struct_size below the header is refused
    // before anything past struct_size is touched.
    let st = unsafe { npualloc_get_stats(a, tiny.as_mut_ptr().cast()) };
    assert_eq!(st, NPUALLOC_ERR_INVALID_ARGUMENT);
    assert_eq!(tiny, [word]);
    assert_eq!(free(a, p), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}

#[test]
fn kind_stats_split_the_blocks_and_refuse_another_kind_changing_nothing() {
    let _g = serial();
    let a = create("expandable_segments:false", DEVICE).unwrap();
    let small = malloc(a, 3000, Stream::DEFAULT).unwrap();
    let large = malloc(a, 5 * MIB, Stream::DEFAULT).unwrap();
    let kind = |k: i32| {
        let mut s = npualloc_stats { struct_size: std::mem::size_of::<npualloc_stats>() as u32, ..Default::default() };
        // SAFETY: a live handle and a full struct.
        let st = unsafe { npualloc_get_kind_stats(a, k, &mut s) };
        (st, s)
    };
    let ((st0, s0), (st1, s1)) = (kind(NPUALLOC_SMALL_BLOCKS), kind(NPUALLOC_LARGE_BLOCKS));
    assert_eq!((st0, st1), (NPUALLOC_OK, NPUALLOC_OK));
    assert_eq!(s0.allocated_bytes, query(a, small).unwrap().size);
    assert_eq!(s1.allocated_bytes, query(a, large).unwrap().size);
    assert_eq!((s0.active_blocks, s1.active_blocks, s0.version), (1, 1, NPUALLOC_STATS_VERSION));
    let (st, s) = kind(2);
    assert_eq!((st, s.version, s.allocated_bytes), (NPUALLOC_ERR_INVALID_ARGUMENT, 0, 0), "nothing written");
    let msg = npualloc::ffi::last_error::last_error_message();
    assert!(msg.contains("NPUALLOC_SMALL_BLOCKS (0) or NPUALLOC_LARGE_BLOCKS (1)"), "{msg}");
    assert_eq!(free(a, small), NPUALLOC_OK);
    assert_eq!(free(a, large), NPUALLOC_OK);
    assert_eq!(destroy(a), NPUALLOC_OK);
}
