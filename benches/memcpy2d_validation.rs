//! Cost of validating one 2D copy: the documented rules plus the bounds check
//! against the owning block, first with a one-block stand-in lookup, then with
//! a real `DeviceAllocator`'s `block_range` (what `npualloc_check_memcpy2d`
//! does), and an emulated 2D copy against one flat copy of the same bytes.
//!
//! Needs the emulator: `cargo build --workspace --release` first.

use std::hint::black_box;

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use npualloc::config::Config;
use npualloc::core::DeviceAllocator;
use npualloc::memcpy2d::{check_copy, check_rules, check_within_block, Checked, Copy2d, ACL_MEMCPY_HOST_TO_DEVICE};
use npualloc::runtime::Stream;

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
        Ok(Checked::Copy { .. }) => {
            c.device_regions().all(|r| check_within_block(&r, c.width, c.height, BLOCK.0, BLOCK.1).is_ok())
        }
        Ok(Checked::NoOp) => true,
        Err(_) => false,
    }
}

fn bench(c: &mut Criterion) {
    let copy = typical();
    assert!(rules_and_bounds(&copy));
    c.bench_function("check_rules", |b| b.iter(|| check_rules(black_box(&copy)).is_ok()));
    c.bench_function("check_rules+check_within_block", |b| b.iter(|| rules_and_bounds(black_box(&copy))));
    c.bench_function("check_copy (one-block lookup)", |b| {
        b.iter(|| {
            check_copy(black_box(&copy), |addr| {
                let (start, size) = black_box(BLOCK);
                (addr >= start && addr - start < size).then_some((start, size))
            })
            .is_ok()
        })
    });
    let bad = Copy2d { height: 4096, ..typical() };
    c.bench_function("check_within_block (error path)", |b| b.iter(|| rules_and_bounds(black_box(&bad))));
}

/// A `DeviceAllocator` over the emulator next to the bench executable.
fn emulated_allocator() -> DeviceAllocator {
    // Benches run from target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    let lib: PathBuf = exe.parent().and_then(|d| d.parent()).expect("target dir").join("libascendcl.so");
    assert!(lib.is_file(), "{} is missing; run `cargo build --workspace --release` first", lib.display());
    // Set before any other thread exists (criterion runs benches on this one).
    std::env::set_var("NPUALLOC_ACL_LIBRARY", &lib);
    DeviceAllocator::new(Config::default(), 0).expect("allocator over the emulator")
}

fn with_allocator(c: &mut Criterion) {
    let a = emulated_allocator();
    // Some other live blocks, so the lookup is not trivially the only entry.
    let others: Vec<usize> = (0..64).map(|i| a.malloc((i + 1) * 4096, Stream::DEFAULT).unwrap()).collect();
    let rows = 1080;
    let (dpitch, width) = (8192, 7680);
    let block = a.malloc(rows * dpitch + 4096, Stream::DEFAULT).unwrap();
    let host = vec![0x5au8; rows * width];
    let copy = Copy2d {
        dst: block + 4096,
        dpitch,
        src: host.as_ptr() as usize,
        spitch: width,
        width,
        height: rows,
        kind: ACL_MEMCPY_HOST_TO_DEVICE,
        is_async: false,
    };
    let lookup = |addr| a.block_range(addr).ok().flatten();
    assert!(check_copy(&copy, lookup).is_ok());
    c.bench_function("check_copy (DeviceAllocator::block_range)", |b| {
        b.iter(|| check_copy(black_box(&copy), |addr| a.block_range(addr).ok().flatten()).is_ok())
    });

    // The copy itself through the emulator, against one flat copy of the
    // same bytes (the emulator's device memory is host memory).
    let rt = a.runtime().clone();
    let mut g = c.benchmark_group("copy_1080x7680");
    g.bench_function("aclrtMemcpy2d (emulated, validated)", |b| {
        b.iter(|| {
            check_copy(black_box(&copy), |addr| a.block_range(addr).ok().flatten()).unwrap();
            // SAFETY: the block holds rows * dpitch + 4096 bytes and host holds
            // rows * width; validated above.
            unsafe {
                rt.memcpy2d(
                    copy.dst as *mut _,
                    copy.dpitch,
                    copy.src as *const _,
                    copy.spitch,
                    copy.width,
                    copy.height,
                    copy.kind as u32,
                    None,
                )
            }
            .unwrap()
        })
    });
    g.bench_function("flat copy of the same bytes", |b| {
        b.iter(|| {
            // SAFETY: block is rows * dpitch + 4096 >= rows * width bytes of
            // (emulated, host-backed) device memory.
            unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), black_box(block) as *mut u8, rows * width) }
        })
    });
    g.finish();

    a.free(block).unwrap();
    for p in others {
        a.free(p).unwrap();
    }
}

criterion_group!(benches, bench, with_allocator);
criterion_main!(benches);
