//! Peaks of allocated and requested bytes on one stream: exact, whatever
//! mix of pools, reuse-list hits, index hits and growth made them, and
//! whichever call (malloc or free) came last (Note [peaks without a shared
//! counter]: only a malloc compares a stream's totals with its mark).

use super::support::{allocator, emu_lock, finish, set_capacity, Rng};
use crate::core::*;

#[test]
fn one_streams_peaks_are_exact_through_mallocs_frees_and_resets() {
    let _g = emu_lock();
    set_capacity(1 << 32);
    for config in ["expandable_segments:false", "expandable_segments:true"] {
        let a = allocator(config);
        let mut rng = Rng::new(25);
        // Live blocks: (address, rounded size, requested size).
        let mut live: Vec<(usize, u64, u64)> = Vec::new();
        let (mut allocated, mut requested) = (0u64, 0u64);
        let (mut peak_a, mut peak_r) = (0u64, 0u64);
        for step in 0..3000 {
            if step == 1500 {
                a.reset_peak_stats().unwrap();
                (peak_a, peak_r) = (allocated, requested);
            }
            if live.len() < 40 && (live.is_empty() || rng.below(2) == 0) {
                // Small and large pools, sizes that repeat (reuse hits) and
                // sizes that do not.
                let size = match rng.below(4) {
                    0 => 512 * (1 + rng.below(8) as usize),
                    1 => 1 + rng.below(1 << 20) as usize,
                    2 => (1 << 20) + rng.below(12 << 20) as usize,
                    _ => 4096,
                };
                let addr = a.malloc(size, Stream::DEFAULT).unwrap();
                let rounded = a.query(addr).unwrap().size as u64;
                live.push((addr, rounded, size as u64));
                allocated += rounded;
                requested += size as u64;
            } else {
                let (addr, rounded, size) = live.swap_remove(rng.index(live.len()));
                a.free(addr).unwrap();
                allocated -= rounded;
                requested -= size;
            }
            peak_a = peak_a.max(allocated);
            peak_r = peak_r.max(requested);
            let s = a.stats().unwrap();
            assert_eq!(
                (s.allocated_bytes, s.requested_bytes, s.active_blocks),
                (allocated, requested, live.len() as u64),
                "{config}, step {step}: current totals"
            );
            assert_eq!(
                (s.allocated_bytes_peak, s.requested_bytes_peak),
                (peak_a, peak_r),
                "{config}, step {step}: peaks"
            );
        }
        for (addr, _, _) in live {
            a.free(addr).unwrap();
        }
        a.check_invariants().unwrap();
        finish(a);
    }
}
