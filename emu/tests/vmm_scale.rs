//! 100k physical handles alive at once on one device (one memfd for all of
//! them, so no file-descriptor exhaustion), and a few thousand mappings.

mod common;
use ascendcl::*;
use common::*;
use std::ptr::null_mut;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

#[test]
fn hundred_thousand_handles_and_thousands_of_mappings() {
    const HANDLES: usize = 100_000;
    const MAPPED: usize = 4_000;
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_set_device_memory(dev.id, (HANDLES * 2 * MIB) as u64), 0);
        let fds_before = open_fds();
        let prop = dev.prop(ACL_HBM_MEM_HUGE);
        let mut handles = Vec::with_capacity(HANDLES);
        for _ in 0..HANDLES {
            let mut h = null_mut();
            assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &prop, 0), 0);
            handles.push(h);
        }
        let u = dev.usage();
        assert_eq!(u.physical_count, HANDLES as u64);
        assert_eq!(u.physical_bytes, (HANDLES * 2 * MIB) as u64);
        // The budget is exactly used up.
        let mut h = null_mut();
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &prop, 0), RT_MEMORY_ALLOCATION);
        assert!(open_fds() <= fds_before + 1, "one memfd per device, not per handle");

        let base = reserve(MAPPED * 2 * MIB).cast::<u8>();
        for (i, &h) in handles[..MAPPED].iter().enumerate() {
            let at = base.add(i * 2 * MIB);
            assert_eq!(aclrtMapMem(at.cast(), 2 * MIB, 0, h, 0), 0);
            *at.add(i % (2 * MIB)) = (i % 251) as u8 + 1;
        }
        assert_eq!(dev.usage().mapped_bytes, (MAPPED * 2 * MIB) as u64);
        for i in 0..MAPPED {
            let at = base.add(i * 2 * MIB);
            assert_eq!(*at.add(i % (2 * MIB)), (i % 251) as u8 + 1);
            assert_eq!(aclrtUnmapMem(at.cast()), 0);
        }
        assert_eq!(aclrtReleaseMemAddress(base.cast()), 0);

        // Free in an interleaved order to exercise coalescing.
        for parity in [1, 0] {
            for (i, &h) in handles.iter().enumerate() {
                if i % 2 == parity {
                    assert_eq!(aclrtFreePhysical(h), 0);
                }
            }
        }
        // Freed pages were returned: a fresh handle reads zeros.
        let h = physical(&dev, 2 * MIB);
        let base = reserve(2 * MIB).cast::<u8>();
        assert_eq!(aclrtMapMem(base.cast(), 2 * MIB, 0, h, 0), 0);
        assert_eq!(*base, 0);
        assert_eq!(aclrtUnmapMem(base.cast()), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtReleaseMemAddress(base.cast()), 0);
    }
    dev.assert_clean();
}
