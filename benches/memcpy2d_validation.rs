//! Cost of validating one 2D copy: the documented rules plus the bounds check
//! against the owning block. (The allocator's pointer lookup is measured
//! separately; `check_copy` here uses a one-block stand-in.)

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use npualloc::memcpy2d::{
    check_copy, check_rules, check_within_block, Checked, Copy2d, ACL_MEMCPY_HOST_TO_DEVICE,
};

/// A typical upload: 1080 rows of 1920 * 4 bytes into a pitched device buffer.
fn typical() -> Copy2d {
    Copy2d {
        dst: 0x1_0000_0000 + 4096,
        dpitch: 8192,
        src: 0x7f00_0000_0000,
        spitch: 7680,
        width: 7680,
        height: 1080,
        kind: ACL_MEMCPY_HOST_TO_DEVICE,
        is_async: true,
    }
}

const BLOCK: (usize, usize) = (0x1_0000_0000, 16 << 20);

fn rules_and_bounds(c: &Copy2d) -> bool {
    match check_rules(c) {
        Ok(Checked::Copy { .. }) => c
            .device_regions()
            .all(|r| check_within_block(&r, c.width, c.height, BLOCK.0, BLOCK.1).is_ok()),
        Ok(Checked::NoOp) => true,
        Err(_) => false,
    }
}

fn bench(c: &mut Criterion) {
    let copy = typical();
    assert!(rules_and_bounds(&copy));
    c.bench_function("check_rules", |b| {
        b.iter(|| check_rules(black_box(&copy)).is_ok())
    });
    c.bench_function("check_rules+check_within_block", |b| {
        b.iter(|| rules_and_bounds(black_box(&copy)))
    });
    c.bench_function("check_copy (one-block lookup)", |b| {
        b.iter(|| {
            check_copy(black_box(&copy), |addr| {
                let (start, size) = black_box(BLOCK);
                (addr >= start && addr - start < size).then_some((start, size))
            })
            .is_ok()
        })
    });
    let bad = Copy2d {
        height: 4096,
        ..typical()
    };
    c.bench_function("check_within_block (error path)", |b| {
        b.iter(|| rules_and_bounds(black_box(&bad)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
