//! Random operation sequences checked against a model, through the emulator.
//!
//! Each seed picks a device capacity and a config, then runs random mallocs,
//! frees, record_stream calls, stream holds and releases, device-to-host
//! copies queued on held streams and empty_cache calls over three streams,
//! with or without injected runtime faults. After every step the allocator's
//! invariants hold; a block handed out overlaps neither a live block nor a
//! copy another stream still has queued; data written into a block reads back
//! until its free. Seeds are fixed, so a failure replays.
//!
//! `model_based_random_sequences` runs shorter sequences of the same calls,
//! without held streams or copies, against a plainer model; the threads'
//! tests share one allocator among threads. The tests are here, what they
//! run in the modules below.

mod model;
pub(super) mod ops;
mod seeded;
mod threads;

use super::support::{allocator, check_fill, drop_stream, emu_lock, fill, new_stream, set_capacity, usage, Rng, DEV};
use seeded::{run_seed, run_seed_as, SEEDS};
use threads::{run_threads_over_configs, EXPANDABLE_CONFIGS, FIXED_CONFIGS};

#[test]
fn random_operations_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed(seed, false);
    }
    set_capacity(1 << 30);
}

#[test]
fn random_operations_with_injected_faults_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed(seed, true);
    }
    set_capacity(1 << 30);
}

/// The seeds again where every growth may move a wholly free handle (Note
/// [moves of wholly free handles]): a roomy device and nothing mapped
/// ahead, with and without faults.
#[test]
fn random_operations_with_handle_moves_keep_the_invariants() {
    let _g = emu_lock();
    for seed in 1..=SEEDS {
        run_seed_as(seed, seed % 2 == 0, Some(("expandable_segments:true,map_ahead:false", 8 << 30)));
    }
    set_capacity(1 << 30);
}

/// Mallocs, frees, record_stream and empty_cache on up to three streams,
/// checked against a list of live blocks with their fill bytes.
#[test]
fn model_based_random_sequences() {
    let _g = emu_lock();
    for seed in 1..=36u64 {
        model::run_model_seed(seed);
    }
    set_capacity(1 << 30);
}

#[test]
fn threads_sharing_fixed_segments_keep_the_model() {
    run_threads_over_configs(&FIXED_CONFIGS);
}

#[test]
fn threads_sharing_expandable_segments_keep_the_model() {
    run_threads_over_configs(&EXPANDABLE_CONFIGS);
}

/// Two threads, each on its own stream, malloc and free small and
/// mid-size blocks and check their data.
#[test]
fn two_threads_stress() {
    let _g = emu_lock();
    set_capacity(8 << 30);
    let a = std::sync::Arc::new(allocator("expandable_segments:false"));
    let streams = [new_stream(), new_stream()];
    let ops = 50_000; // per thread: 100k operations in all
    let handles: Vec<_> = (0..2u8)
        .map(|t| {
            let a = a.clone();
            let stream = streams[t as usize];
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t as u64);
                let mut live: Vec<(usize, usize)> = Vec::new();
                for _ in 0..ops {
                    if live.len() < 64 && (live.is_empty() || rng.below(2) == 0) {
                        let limit = if rng.below(8) == 0 { 4 << 20 } else { 64 << 10 };
                        let size = 1 + rng.below(limit) as usize;
                        let p = a.malloc(size, stream).unwrap();
                        fill(p, size, 0xA0 + t);
                        live.push((p, size));
                    } else {
                        let (p, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
                        assert!(check_fill(p, size, 0xA0 + t), "thread {t}: corruption");
                        a.free(p).unwrap();
                    }
                }
                for (p, _) in live {
                    a.free(p).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = a.stats().unwrap();
    assert_eq!(s.num_allocs, s.num_frees);
    assert_eq!((s.allocated_bytes, s.active_blocks), (0, 0));
    a.check_invariants().unwrap();
    a.teardown().unwrap();
    for s in streams {
        drop_stream(s);
    }
    assert_eq!(usage(DEV).malloc_count, 0);
    set_capacity(1 << 30);
}
