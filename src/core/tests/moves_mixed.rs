//! Seeded sequences mixing handle moves with `empty_cache`, sleep and wake,
//! `forget_stream` and refused runtime calls, on a roomy and a small device:
//! after every step no block overlaps another, every live block's bytes
//! (three 4 KiB samples of each) are as written, the invariants hold and,
//! without faults, the emulator maps what the allocator says; teardown
//! leaves nothing.

use super::support::{
    allocator, check_accounting, check_fill, emu_lock, fail_nth, fill, set_capacity, teardown_clean, Baseline, Rng, MIB,
};
use crate::core::SleepMode;

/// The three 4 KiB samples of a block of `n` bytes at `p`: start, middle, end.
fn samples(p: usize, n: usize) -> [(usize, usize); 3] {
    let k = 4096.min(n);
    [(p, k), (p + n / 2 - k / 2, k), (p + n - k, k)]
}

fn write(p: usize, n: usize, t: u8) {
    for (at, k) in samples(p, n) {
        fill(at, k, t);
    }
}

fn intact(p: usize, n: usize, t: u8) -> bool {
    samples(p, n).iter().all(|&(at, k)| check_fill(at, k, t))
}

const FAULTS: [&str; 5] =
    ["aclrtUnmapMem", "aclrtMapMem", "aclrtMallocPhysical", "aclrtFreePhysical", "aclrtSynchronizeStream"];

fn disarm() {
    for f in FAULTS {
        fail_nth(f, 0);
    }
}
use crate::runtime::Stream;

struct Guard;
impl Drop for Guard {
    fn drop(&mut self) {
        disarm();
        set_capacity(1 << 30);
    }
}

/// Runs one sequence; returns the handle moves it made.
fn run(seed: u64, config: &str, cap: u64, faults: bool) -> u64 {
    let _g = emu_lock();
    let _c = Guard;
    set_capacity(cap);
    let base = Baseline::take();
    let a = allocator(config);
    let mut rng = Rng::new(seed);
    let mut live: Vec<(usize, usize, u8)> = Vec::new();
    let mut tag = 1u8;
    let sizes = [MIB, 3 * MIB, 17 * MIB, 32 * MIB, 33 * MIB, 48 * MIB, 65 * MIB, 100 * MIB, 200 * MIB];
    for step in 0..120 {
        if faults && rng.below(6) == 0 {
            fail_nth(FAULTS[rng.index(FAULTS.len())], 1 + rng.below(3) as i32);
        }
        let op = rng.below(100);
        let what;
        if op < 50 || live.is_empty() {
            let n = sizes[rng.index(sizes.len())] + rng.below(4) as usize * 4096;
            what = format!("malloc {n}");
            if let Ok(p) = a.malloc(n, Stream::DEFAULT) {
                for &(q, m, _) in &live {
                    assert!(p + n <= q || q + m <= p, "seed {seed} step {step}: {p:#x}+{n} overlaps live {q:#x}+{m}");
                }
                tag = tag.wrapping_add(1).max(1);
                write(p, n, tag);
                live.push((p, n, tag));
            }
        } else if op < 90 {
            let (p, n, t) = live.swap_remove(rng.index(live.len()));
            assert!(intact(p, n, t), "seed {seed} step {step}: block {p:#x} corrupted");
            what = format!("free {p:#x}");
            a.free(p).unwrap();
        } else if op < 95 {
            what = "empty_cache".into();
            let _ = a.empty_cache();
        } else if op < 98 {
            what = "sleep/wake".into();
            if a.sleep(SleepMode::Offload).is_ok() || a.is_asleep() {
                let _ = a.wake();
                if a.is_asleep() {
                    disarm();
                    a.wake().unwrap();
                }
            }
        } else {
            what = "forget_stream".into();
            let _ = a.forget_stream(Stream::DEFAULT);
        }
        if !a.is_asleep() {
            for &(p, n, t) in &live {
                assert!(intact(p, n, t), "seed {seed} step {step} after {what}: block {p:#x}+{n} corrupted");
            }
        }
        a.check_invariants().unwrap_or_else(|e| panic!("seed {seed} step {step} after {what}: {e}"));
        if !faults {
            check_accounting(&a, &base, None, &format!("seed {seed} step {step} after {what}"));
        }
    }
    disarm();
    for (p, _, _) in live {
        a.free(p).unwrap();
    }
    let _ = a.empty_cache();
    check_accounting(&a, &base, None, &format!("seed {seed} end"));
    let moves = a.stats().unwrap().num_handle_moves;
    teardown_clean(a, &base);
    moves
}

#[test]
fn moves_mixed_with_reclaim_sleep_and_forget_keep_every_block() {
    let mut moves = 0;
    for seed in 1..3 {
        moves += run(seed, "map_ahead:false", 8 << 30, false);
        run(seed, "", 8 << 30, false);
        run(seed, "map_ahead:false", 1 << 30, false);
    }
    assert!(moves > 0, "the sequences made no handle move: they test nothing of moves");
}

#[test]
fn moves_mixed_with_refused_calls_keep_every_block() {
    let mut moves = 0;
    for seed in 1..3 {
        moves += run(seed, "map_ahead:false", 8 << 30, true);
        run(seed, "", 1 << 30, true);
    }
    assert!(moves > 0, "the sequences made no handle move: they test nothing of moves");
}
