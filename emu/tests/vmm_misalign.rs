//! `aclemu_misalign_reservations`: reservations above 512 MiB placed 2 MiB
//! past a 1 GiB boundary, for tests of a caller's fallback. The control is
//! process-wide, so this binary holds this one test.

mod common;
use ascendcl::*;
use common::*;

#[test]
fn misaligned_reservations_start_one_granule_past_a_gib_boundary() {
    let dev = Dev::take();
    // SAFETY: pointers are live locals or emulator handles.
    unsafe {
        assert_eq!(aclemu_misalign_reservations(2), 0);
        // A small reservation is 2 MiB-aligned as always and uses no count.
        let small = reserve(8 * MIB);
        assert_eq!(small as usize % (2 * MIB), 0);
        let (a, b, c) = (reserve(2 * GIB), reserve(GIB + 1), reserve(2 * GIB));
        assert_eq!(a as usize % GIB, 2 * MIB, "the first large reservation is off its boundary");
        assert_eq!(b as usize % GIB, 2 * MIB, "the second too");
        assert_eq!(c as usize % GIB, 0, "the count is spent: back at a boundary");
        // The whole rounded size is still usable: its last 2 MiB maps.
        let h = physical(&dev, 2 * MIB);
        let last = a.cast::<u8>().add(2 * GIB - 2 * MIB).cast();
        assert_eq!(aclrtMapMem(last, 2 * MIB, 0, h, 0), 0);
        assert_eq!(aclrtUnmapMem(last), 0);
        // A 1 GiB-page handle does not map at its start, only at the next GiB.
        let mut g = std::ptr::null_mut();
        let prop = dev.prop(ACL_HBM_MEM_HUGE1G);
        assert_eq!(aclrtMallocPhysical(&mut g, GIB, &prop, 0), 0);
        assert_eq!(aclrtMapMem(a, GIB, 0, g, 0), RT_DRV_INTERNAL);
        let next = a.cast::<u8>().add(GIB - 2 * MIB).cast();
        assert_eq!(aclrtMapMem(next, GIB, 0, g, 0), 0);
        assert_eq!(aclrtUnmapMem(next), 0);
        assert_eq!(aclrtFreePhysical(g), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        // Turned off: later ones are aligned again.
        assert_eq!(aclemu_misalign_reservations(5), 0);
        assert_eq!(aclemu_misalign_reservations(0), 0);
        let d = reserve(2 * GIB);
        assert_eq!(d as usize % GIB, 0);
        for p in [small, a, b, c, d] {
            assert_eq!(aclrtReleaseMemAddress(p), 0);
        }
    }
    dev.assert_clean();
}
