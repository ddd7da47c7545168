//! Shorter sequences of mallocs, frees, record_stream and empty_cache on up to
//! three streams, without held streams or copies, checked against a plain
//! list of live blocks with their fill bytes.

use super::super::support::{
    allocator, assert_emulator_empty, check_fill, drop_stream, fail_nth, fill, new_stream, set_capacity, Rng,
};
use crate::core::*;

/// What `model_based_random_sequences` draws from: fewer faults than
/// `run_seed` (those of getting and giving back memory, and event records)
/// and its own configs.
const MODEL_FAULTS: [&str; 6] =
    ["aclrtMalloc", "aclrtFree", "aclrtRecordEvent", "aclrtMallocPhysical", "aclrtMapMem", "aclrtUnmapMem"];

const MODEL_CONFIGS: [&str; 8] = [
    "expandable_segments:false",
    "expandable_segments:false,max_split_size_mb:24",
    "expandable_segments:false,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "expandable_segments:true",
    "expandable_segments:true,page_size:20m",
    "expandable_segments:true,per_process_memory_fraction:0.8",
    // Every growth may move a wholly free handle (on a roomy device: 8 GiB).
    "expandable_segments:true,map_ahead:false",
    "expandable_segments:true,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
];

/// One seed of `model_based_random_sequences`.
pub(super) fn run_model_seed(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let capacity = [48u64 << 20, 96 << 20, 1 << 30, 8 << 30][rng.below(4) as usize];
    set_capacity(capacity);
    let a = allocator(MODEL_CONFIGS[rng.below(MODEL_CONFIGS.len() as u64) as usize]);
    let streams: Vec<Stream> =
        std::iter::once(Stream::DEFAULT).chain((0..rng.below(3)).map(|_| new_stream())).collect();
    // Reference model: live blocks with their requested size and fill byte.
    let mut live: Vec<(usize, usize, u8)> = Vec::new();
    for step in 0..400 {
        match rng.below(10) {
            0..=4 => {
                let size = match rng.below(4) {
                    0 => 1 + rng.below(4096) as usize,
                    1 => 1 + rng.below(1 << 20) as usize,
                    2 => (1 << 20) + rng.below(9 << 20) as usize,
                    _ => (10 << 20) + rng.below(30 << 20) as usize,
                };
                if rng.below(20) == 0 {
                    fail_nth(MODEL_FAULTS[rng.below(MODEL_FAULTS.len() as u64) as usize], 1 + rng.below(2) as i32);
                }
                let stream = streams[rng.below(streams.len() as u64) as usize];
                let before = a.stats().unwrap();
                match a.malloc(size, stream) {
                    Ok(p) => {
                        for &(q, qs, _) in &live {
                            assert!(p + size <= q || q + qs <= p, "seed {seed} step {step}: overlap");
                        }
                        let byte = (step % 251) as u8;
                        fill(p, size.min(4096), byte);
                        live.push((p, size, byte));
                    }
                    // An injected non-OOM runtime failure surfaces as a
                    // runtime error; either way nothing may have changed.
                    Err(Error::OutOfMemory(_) | Error::Runtime { .. }) => {
                        let after = a.stats().unwrap();
                        assert_eq!(after.allocated_bytes, before.allocated_bytes);
                        assert_eq!(after.active_blocks, before.active_blocks);
                    }
                    Err(e) => panic!("seed {seed} step {step}: unexpected {e}"),
                }
            }
            5..=7 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let (p, size, byte) = live.swap_remove(i);
                assert!(check_fill(p, size.min(4096), byte), "seed {seed} step {step}: data corrupted");
                a.free(p).unwrap();
            }
            8 if !live.is_empty() => {
                let (p, _, _) = live[rng.below(live.len() as u64) as usize];
                a.record_stream(p, streams[rng.below(streams.len() as u64) as usize]).unwrap();
            }
            9 => {
                let _ = a.empty_cache();
            }
            _ => {}
        }
        a.check_invariants().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        let s = a.stats().unwrap();
        assert_eq!(s.requested_bytes, live.iter().map(|l| l.1 as u64).sum::<u64>());
    }
    for f in MODEL_FAULTS {
        fail_nth(f, 0);
    }
    for (p, size, byte) in live.drain(..) {
        assert!(check_fill(p, size.min(4096), byte));
        a.free(p).unwrap();
    }
    a.teardown().unwrap();
    for s in streams.into_iter().skip(1) {
        drop_stream(s);
    }
    assert_emulator_empty(&format!("seed {seed}"));
}
