//! The VMM family: reserve / malloc physical / map / unmap / free / release
//! and the granularity query (docs/acl-api.md §5 "Virtual memory").

mod common;
use ascendcl::*;
use common::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};

#[test]
fn reserve_rules() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut p = null_mut();
        assert_eq!(aclrtReserveMemAddress(null_mut(), 2 * MIB, 0, null_mut(), 0), INVALID_PARAM);
        assert_eq!(aclrtReserveMemAddress(&mut p, 0, 0, null_mut(), 0), INVALID_PARAM);
        assert_eq!(aclrtReserveMemAddress(&mut p, 2 * MIB, 0, null_mut(), 2), INVALID_PARAM);
        let want = 0x1000_0000_0000usize as *mut c_void;
        assert_eq!(aclrtReserveMemAddress(&mut p, 2 * MIB, 0, want, 0), INVALID_PARAM);
        assert_eq!(dev.usage().reserved_ranges, 0);
        // The driver refuses any alignment.
        assert_eq!(aclrtReserveMemAddress(&mut p, 2 * MIB, 2 * MIB, null_mut(), 0), RT_PARAM_INVALID);
        // One reservation is at most 128 GiB (910B / 910_93).
        assert_eq!(aclrtReserveMemAddress(&mut p, 128 * GIB + 1, 0, null_mut(), 0), RT_MEMORY_ALLOCATION);
        assert_eq!(aclrtReserveMemAddress(&mut p, 200 * GIB, 0, null_mut(), 0), RT_MEMORY_ALLOCATION);
        assert_eq!(dev.usage().reserved_ranges, 0);
        assert_eq!(aclrtReserveMemAddress(&mut p, 128 * GIB, 0, null_mut(), 0), 0);
        assert_eq!(p as usize % GIB, 0);
        assert_eq!(dev.usage().reserved_ranges, 1);
        assert_eq!(aclrtReleaseMemAddress(p), 0);
        // flags 1 is kept for older callers; sizes need not be granularity
        // multiples.
        assert_eq!(aclrtReserveMemAddress(&mut p, 3 * MIB + 5, 0, null_mut(), 1), 0);
        assert_eq!(p as usize % (2 * MIB), 0);
        assert_eq!(dev.usage().reserved_ranges, 1);
        assert_eq!(aclrtReleaseMemAddress(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtReleaseMemAddress(p.cast::<u8>().add(2 * MIB).cast()), RT_PARAM_INVALID);
        assert_eq!(aclrtReleaseMemAddress(p), 0);
        assert_eq!(aclrtReleaseMemAddress(p), RT_PARAM_INVALID);
        // Above 512 MiB: from the base heap, in whole GiB at a GiB boundary.
        for size in [512 * MIB + 1, GIB + 2 * MIB, 3 * GIB] {
            assert_eq!(aclrtReserveMemAddress(&mut p, size, 0, null_mut(), 0), 0);
            assert_eq!(p as usize % GIB, 0, "{size}");
            // The whole rounded range is usable: map its last 2 MiB.
            let rounded = size.div_ceil(GIB) * GIB;
            let h = physical(&dev, 2 * MIB);
            let last = p.cast::<u8>().add(rounded - 2 * MIB).cast();
            assert_eq!(aclrtMapMem(last, 2 * MIB, 0, h, 0), 0);
            assert_eq!(aclrtUnmapMem(last), 0);
            assert_eq!(aclrtFreePhysical(h), 0);
            assert_eq!(aclrtReleaseMemAddress(p), 0);
        }
    }
    dev.assert_clean();
}

#[test]
fn malloc_physical_prop_checks() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut h = null_mut();
        let good = dev.prop(ACL_HBM_MEM_HUGE);
        assert_eq!(aclrtMallocPhysical(null_mut(), 2 * MIB, &good, 0), INVALID_PARAM);
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, null(), 0), INVALID_PARAM);
        assert_eq!(aclrtMallocPhysical(&mut h, 0, &good, 0), INVALID_PARAM);
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &good, 1), INVALID_PARAM);
        // Off the 2 MiB granularity: the kernel refuses it.
        assert_eq!(aclrtMallocPhysical(&mut h, 3 * MIB, &good, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMallocPhysical(&mut h, 4096, &good, 0), RT_DRV_INTERNAL);
        // A non-zero reserve field: the driver's property check.
        let reserved = aclrtPhysicalMemProp { reserve: 1, ..good };
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &reserved, 0), RT_PARAM_INVALID);
        let mut g = 0;
        let r = &reserved as *const _ as *mut _;
        assert_eq!(aclrtMemGetAllocationGranularity(r, 0, &mut g), RT_PARAM_INVALID);
        // The P2P HBM attrs have no handler; P2P 1 GiB pages are unsupported.
        for attr in [8, 9, 11] {
            let prop = dev.prop(attr);
            assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &prop, 0), INVALID_PARAM, "{attr}");
        }
        let p2p_1g = dev.prop(17);
        assert_eq!(aclrtMallocPhysical(&mut h, GIB, &p2p_1g, 0), RT_FEATURE_NOT_SUPPORT);
        assert_eq!(dev.usage().physical_count, 0);
        let bad: [aclrtPhysicalMemProp; 9] = [
            aclrtPhysicalMemProp { handleType: 2, ..good },
            aclrtPhysicalMemProp { allocationType: 1, ..good },
            aclrtPhysicalMemProp { location: aclrtMemLocation { id: dev.id as u32, type_: 0 }, ..good },
            aclrtPhysicalMemProp { location: aclrtMemLocation { id: dev.id as u32, type_: 2 }, ..good },
            aclrtPhysicalMemProp { location: aclrtMemLocation { id: 99, type_: 1 }, ..good },
            aclrtPhysicalMemProp { memAttr: 0, ..good },
            aclrtPhysicalMemProp { memAttr: 1, ..good },
            aclrtPhysicalMemProp { memAttr: 2, ..good },
            aclrtPhysicalMemProp { memAttr: 18, ..good },
        ];
        for (i, prop) in bad.iter().enumerate() {
            assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, prop, 0), INVALID_PARAM, "bad prop {i}");
            let mut g = 0;
            assert_eq!(aclrtMemGetAllocationGranularity(prop as *const _ as *mut _, 0, &mut g), INVALID_PARAM);
        }
        // HUGE1G sizes are rounded up to whole GiB.
        let g1 = dev.prop(ACL_HBM_MEM_HUGE1G);
        assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &g1, 0), 0);
        assert_eq!(dev.usage().physical_bytes, GIB as u64);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtMallocPhysical(&mut h, GIB, &g1, 0), 0);
        assert_eq!(dev.usage().physical_bytes, GIB as u64);
        assert_eq!(aclrtFreePhysical(h), 0);
        // Every other huge-or-normal attr works with 2 MiB.
        for attr in [4, 5, 12, 13, 15, 16] {
            let prop = dev.prop(attr);
            assert_eq!(aclrtMallocPhysical(&mut h, 2 * MIB, &prop, 0), 0, "attr {attr}");
            assert_eq!(aclrtFreePhysical(h), 0);
        }
        assert_eq!(aclrtFreePhysical(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtFreePhysical(h), RT_INVALID_HANDLE);
    }
    dev.assert_clean();
}

#[test]
fn granularity_query() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let mut g = 0usize;
        let mut huge = dev.prop(ACL_HBM_MEM_HUGE);
        let mut normal = dev.prop(ACL_HBM_MEM_NORMAL);
        let mut g1 = dev.prop(ACL_HBM_MEM_HUGE1G);
        assert_eq!(aclrtMemGetAllocationGranularity(&mut huge, 0, &mut g), 0);
        assert_eq!(g, 2 * MIB);
        assert_eq!(aclrtMemGetAllocationGranularity(&mut normal, 1, &mut g), 0);
        assert_eq!(g, 2 * MIB);
        assert_eq!(aclrtMemGetAllocationGranularity(&mut g1, 0, &mut g), 0);
        assert_eq!(g, GIB);
        assert_eq!(aclrtMemGetAllocationGranularity(null_mut(), 0, &mut g), INVALID_PARAM);
        assert_eq!(aclrtMemGetAllocationGranularity(&mut huge, 0, null_mut()), INVALID_PARAM);
        assert_eq!(aclrtMemGetAllocationGranularity(&mut huge, 0xFFFF, &mut g), INVALID_PARAM);
    }
    dev.assert_clean();
}

#[test]
fn map_rules() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let base = reserve(8 * MIB);
        let b = base.cast::<u8>();
        let h = physical(&dev, 2 * MIB);
        let h4 = physical(&dev, 4 * MIB);
        assert_eq!(aclrtMapMem(null_mut(), 2 * MIB, 0, h, 0), INVALID_PARAM);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, null_mut(), 0), INVALID_PARAM);
        assert_eq!(aclrtMapMem(base, 0, 0, h, 0), INVALID_PARAM);
        // Flags and offset: the driver library's check.
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 1), RT_PARAM_INVALID);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 2 * MIB, h, 0), RT_PARAM_INVALID);
        // Everything else is the kernel's: size other than the handle's...
        assert_eq!(aclrtMapMem(base, 4 * MIB, 0, h, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h4, 0), RT_DRV_INTERNAL);
        // ...outside the reservation, straddling its end, misaligned.
        let mut local = [0u8; 64];
        assert_eq!(aclrtMapMem(local.as_mut_ptr().cast(), 2 * MIB, 0, h, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(b.add(8 * MIB).cast(), 2 * MIB, 0, h, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(b.add(6 * MIB).cast(), 4 * MIB, 0, h4, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(b.add(4096).cast(), 2 * MIB, 0, h, 0), RT_DRV_INTERNAL);
        // Unknown handles.
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, 0x1234usize as *mut c_void, 0), RT_INVALID_HANDLE);
        assert_eq!(dev.usage().mapped_bytes, 0);
        // Any granule-aligned offset inside works; overlaps do not.
        assert_eq!(aclrtMapMem(b.add(2 * MIB).cast(), 4 * MIB, 0, h4, 0), 0);
        assert_eq!(aclrtMapMem(b.add(4 * MIB).cast(), 2 * MIB, 0, h, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(base, 4 * MIB, 0, h4, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 0), 0);
        assert_eq!(dev.usage().mapped_bytes, (6 * MIB) as u64);
        *b = 1;
        *b.add(6 * MIB - 1) = 2;
        // Unmap takes a mapping's start address.
        assert_eq!(aclrtUnmapMem(null_mut()), INVALID_PARAM);
        assert_eq!(aclrtUnmapMem(b.add(4 * MIB).cast()), RT_DRV_INTERNAL);
        assert_eq!(aclrtUnmapMem(b.add(6 * MIB).cast()), RT_DRV_INTERNAL);
        assert_eq!(aclrtUnmapMem(local.as_mut_ptr().cast()), RT_DRV_INTERNAL);
        // Release is refused while anything is mapped.
        assert_eq!(aclrtReleaseMemAddress(base), RT_PARAM_INVALID);
        assert_eq!(aclrtUnmapMem(base), 0);
        assert_eq!(aclrtUnmapMem(base), RT_DRV_INTERNAL);
        assert_eq!(aclrtReleaseMemAddress(base), RT_PARAM_INVALID);
        assert_eq!(aclrtUnmapMem(b.add(2 * MIB).cast()), 0);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtFreePhysical(h4), 0);
    }
    dev.assert_clean();
}

/// A 1 GiB-page handle maps only at a 1 GiB boundary of a reservation (RB
/// VMM: `devmm_mem_map_info_check`), a 2 MiB-page one at any 2 MiB one.
#[test]
fn a_gib_page_handle_maps_only_at_a_gib_boundary() {
    let dev = Dev::take();
    // SAFETY: pointers are live locals or emulator handles.
    unsafe {
        let base = reserve(3 * GIB);
        assert_eq!(base as usize % GIB, 0);
        let b = base.cast::<u8>();
        let mut g = null_mut();
        let prop = dev.prop(ACL_HBM_MEM_HUGE1G);
        assert_eq!(aclrtMallocPhysical(&mut g, GIB, &prop, 0), 0);
        for off in [2 * MIB, 512 * MIB, GIB + 2 * MIB] {
            assert_eq!(aclrtMapMem(b.add(off).cast(), GIB, 0, g, 0), RT_DRV_INTERNAL, "at {off:#x}");
        }
        assert_eq!(dev.usage().mapped_bytes, 0);
        assert_eq!(aclrtMapMem(b.add(GIB).cast(), GIB, 0, g, 0), 0);
        // A 2 MiB-page handle goes 2 MiB past the boundary the other took.
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(b.add(2 * GIB + 2 * MIB).cast(), 2 * MIB, 0, h, 0), 0);
        assert_eq!(aclrtUnmapMem(b.add(2 * GIB + 2 * MIB).cast()), 0);
        assert_eq!(aclrtUnmapMem(b.add(GIB).cast()), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtFreePhysical(g), 0);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
    }
    dev.assert_clean();
}

#[test]
fn two_mappings_of_one_handle_share_bytes() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let base = reserve(4 * MIB).cast::<u8>();
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(base.cast(), 2 * MIB, 0, h, 0), 0);
        assert_eq!(aclrtMapMem(base.add(2 * MIB).cast(), 2 * MIB, 0, h, 0), 0);
        *base.add(12345) = 0x77;
        assert_eq!(*base.add(2 * MIB + 12345), 0x77);
        assert_eq!(aclrtUnmapMem(base.cast()), 0);
        assert_eq!(*base.add(2 * MIB + 12345), 0x77);
        assert_eq!(aclrtUnmapMem(base.add(2 * MIB).cast()), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtReleaseMemAddress(base.cast()), 0);
    }
    dev.assert_clean();
}

#[test]
fn freeing_a_mapped_handle_waits_for_the_unmap() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let base = reserve(4 * MIB);
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 0), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        // Still live (and still charged) until unmapped; but gone for users.
        assert_eq!(dev.usage().physical_count, 1);
        *base.cast::<u8>() = 5;
        // Freeing again while mapped: "too many times".
        assert_eq!(aclrtFreePhysical(h), RT_PARAM_INVALID);
        // Mapping it again is allowed (reference counted).
        let b = base.cast::<u8>().add(2 * MIB).cast();
        assert_eq!(aclrtMapMem(b, 2 * MIB, 0, h, 0), 0);
        assert_eq!(*b.cast::<u8>(), 5);
        assert_eq!(aclrtUnmapMem(base), 0);
        assert_eq!(dev.usage().physical_count, 1);
        assert_eq!(aclrtUnmapMem(b), 0);
        assert_eq!(dev.usage().physical_count, 0);
        // Released for good: the handle is unknown now.
        assert_eq!(aclrtFreePhysical(h), RT_INVALID_HANDLE);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
    }
    dev.assert_clean();
}

#[test]
fn physical_capacity_exhaustion_and_recovery() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclemu_set_device_memory(dev.id, (4 * MIB) as u64), 0);
        let a = physical(&dev, 2 * MIB);
        let b = physical(&dev, 2 * MIB);
        let mut c = null_mut();
        let prop = dev.prop(ACL_HBM_MEM_HUGE);
        assert_eq!(aclrtMallocPhysical(&mut c, 2 * MIB, &prop, 0), RT_MEMORY_ALLOCATION);
        // aclrtMalloc shares the same budget.
        assert_eq!(aclrtMalloc(&mut c, 64, 0), RT_MEMORY_ALLOCATION);
        assert_eq!(aclrtFreePhysical(a), 0);
        assert_eq!(aclrtMallocPhysical(&mut c, 2 * MIB, &prop, 0), 0);
        assert_eq!(aclrtFreePhysical(b), 0);
        assert_eq!(aclrtFreePhysical(c), 0);
    }
    dev.assert_clean();
}

#[test]
fn sync_copy_between_mapped_ranges_is_d2d() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let base = reserve(2 * MIB);
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 0), 0);
        let d = malloc(64);
        // DEFAULT between device buffers: refused by the sync call.
        assert_eq!(aclrtMemcpy2d(base, 64, d, 64, 64, 1, 4), RT_PARAM_INVALID);
        let src = [9u8; 64];
        assert_eq!(aclrtMemcpy2d(base, 64, src.as_ptr().cast(), 64, 64, 1, 4), 0);
        assert_eq!(*base.cast::<u8>().add(63), 9);
        assert_eq!(aclrtFree(d), 0);
        assert_eq!(aclrtUnmapMem(base), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
    }
    dev.assert_clean();
}

/// RB VMM "what reserving and releasing need": neither call needs a current
/// context (the runtime passes both straight on to the driver, which
/// reserves from the process's SVM range), as when torch_npu probes with
/// 512 bytes before it sets a device (`NPUAllocatorConfig::parseArgs`).
/// Such a range counts in no device's usage; its first map decides its
/// device, as for any reservation.
#[test]
fn reserve_and_release_need_no_context() {
    let dev = Dev::take();
    let other = Dev::take_besides(&dev);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtSetDevice(dev.id), 0);
        // torch_npu's probe: 512 bytes, flags 1, then released at once.
        let probe = on_fresh_thread(|| {
            let mut id = -1;
            assert_eq!(aclrtGetDevice(&mut id), RT_CONTEXT_NULL);
            let mut p = null_mut();
            assert_eq!(aclrtReserveMemAddress(&mut p, 512, 0, null_mut(), 1), 0);
            assert!(!p.is_null());
            assert_eq!(p as usize % (2 * MIB), 0, "small reservations are 2 MiB-aligned");
            assert_eq!(aclrtReleaseMemAddress(p), 0);
            assert_eq!(aclrtReleaseMemAddress(p), RT_PARAM_INVALID);
            // The parameter checks stay as they are.
            assert_eq!(aclrtReserveMemAddress(&mut p, 2 * MIB, 2 * MIB, null_mut(), 0), RT_PARAM_INVALID);
            assert_eq!(aclrtReserveMemAddress(&mut p, 0, 0, null_mut(), 0), INVALID_PARAM);
            p as usize
        });
        assert_ne!(probe, 0);
        // Reserved with no context: no device counts it; mapped from a
        // thread with a device, it takes that device's memory.
        let base = on_fresh_thread(|| reserve(4 * MIB) as usize) as *mut c_void;
        assert_eq!(dev.usage().reserved_ranges, 0);
        assert_eq!(other.usage().reserved_ranges, 0);
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, h, 0), 0);
        assert_eq!(dev.usage().mapped_bytes, (2 * MIB) as u64);
        base.cast::<u8>().write(7);
        assert_eq!(base.cast::<u8>().read(), 7);
        // The first map fixed its device.
        let theirs = physical(&other, 2 * MIB);
        let b = base.cast::<u8>().add(2 * MIB).cast();
        assert_eq!(aclrtMapMem(b, 2 * MIB, 0, theirs, 0), RT_DRV_INTERNAL);
        // Still mapped: refused on any thread.
        let based = base as usize;
        assert_eq!(on_fresh_thread(|| aclrtReleaseMemAddress(based as *mut c_void)), RT_PARAM_INVALID);
        assert_eq!(aclrtUnmapMem(base), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtFreePhysical(theirs), 0);
        assert_eq!(on_fresh_thread(|| aclrtReleaseMemAddress(based as *mut c_void)), 0);
        // Reserved with a device current, released with none: the device's
        // count drops.
        let owned = reserve(2 * MIB) as usize;
        assert_eq!(dev.usage().reserved_ranges, 1);
        assert_eq!(on_fresh_thread(|| aclrtReleaseMemAddress(owned as *mut c_void)), 0);
        assert_eq!(dev.usage().reserved_ranges, 0);
    }
    dev.assert_clean();
    other.assert_clean();
}

#[test]
fn one_reservation_holds_one_device() {
    let dev = Dev::take();
    let other = Dev::take_besides(&dev);
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        assert_eq!(aclrtSetDevice(dev.id), 0);
        let base = reserve(4 * MIB);
        let mine = physical(&dev, 2 * MIB);
        let theirs = physical(&other, 2 * MIB);
        assert_eq!(aclrtMapMem(base, 2 * MIB, 0, mine, 0), 0);
        let b = base.cast::<u8>().add(2 * MIB).cast();
        assert_eq!(aclrtMapMem(b, 2 * MIB, 0, theirs, 0), RT_DRV_INTERNAL);
        // The first map fixed the reservation's device: unmapping does not
        // clear it.
        assert_eq!(aclrtUnmapMem(base), 0);
        assert_eq!(aclrtMapMem(b, 2 * MIB, 0, theirs, 0), RT_DRV_INTERNAL);
        assert_eq!(aclrtMapMem(b, 2 * MIB, 0, mine, 0), 0);
        assert_eq!(aclrtUnmapMem(b), 0);
        // A fresh reservation takes the other device's memory.
        let fresh = reserve(2 * MIB);
        assert_eq!(aclrtMapMem(fresh, 2 * MIB, 0, theirs, 0), 0);
        assert_eq!(other.usage().mapped_bytes, (2 * MIB) as u64);
        assert_eq!(aclrtUnmapMem(fresh), 0);
        assert_eq!(aclrtReleaseMemAddress(fresh), 0);
        assert_eq!(aclrtFreePhysical(mine), 0);
        assert_eq!(aclrtFreePhysical(theirs), 0);
        assert_eq!(aclrtReleaseMemAddress(base), 0);
    }
    dev.assert_clean();
    other.assert_clean();
}

/// RB "one handle mapped at two addresses at once": the driver counts a
/// handle's mappings and checks only addresses, so a handle mapped in one
/// reservation may be mapped in another at the same time (what GE's page
/// allocator does with free handles), freed meanwhile, and unmapped at its
/// old address while the new one stays in use.
#[test]
fn a_handle_mapped_in_two_reservations_moves_between_them() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let old = reserve(2 * MIB).cast::<u8>();
        let new = reserve(2 * MIB).cast::<u8>();
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(old.cast(), 2 * MIB, 0, h, 0), 0);
        *old.add(777) = 0x3c;
        assert_eq!(aclrtMapMem(new.cast(), 2 * MIB, 0, h, 0), 0);
        assert_eq!(*new.add(777), 0x3c);
        assert_eq!(dev.usage().mapped_bytes, (4 * MIB) as u64);
        // One handle, counted once however often it is mapped.
        assert_eq!(dev.usage().physical_count, 1);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtUnmapMem(old.cast()), 0);
        // The new address still holds the handle's bytes and takes writes.
        assert_eq!(dev.usage().physical_count, 1);
        *new.add(778) = 0x3d;
        assert_eq!(*new.add(777), 0x3c);
        assert_eq!(*new.add(778), 0x3d);
        assert_eq!(aclrtUnmapMem(new.cast()), 0);
        assert_eq!(dev.usage().physical_count, 0);
        assert_eq!(aclrtReleaseMemAddress(old.cast()), 0);
        assert_eq!(aclrtReleaseMemAddress(new.cast()), 0);
    }
    dev.assert_clean();
}

/// RB "one handle mapped at two addresses at once", inside one reservation
/// (what npualloc's handle moves do: a free handle's pages stay mapped
/// until a synchronization while the handle backs other pages of the same
/// range): both addresses show the same bytes, and unmapping the old one
/// leaves the new one as it was.
#[test]
fn a_handle_mapped_twice_in_one_reservation() {
    let dev = Dev::take();
    // SAFETY: pointers are NULL, live locals, buffers sized for the call or emulator handles.
    unsafe {
        let base = reserve(8 * MIB).cast::<u8>();
        let (old, new) = (base, base.add(4 * MIB));
        let h = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(old.cast(), 2 * MIB, 0, h, 0), 0);
        *old.add(4242) = 0x5a;
        assert_eq!(aclrtMapMem(new.cast(), 2 * MIB, 0, h, 0), 0);
        assert_eq!(*new.add(4242), 0x5a);
        *new.add(4243) = 0xa5;
        assert_eq!(*old.add(4243), 0xa5);
        assert_eq!(dev.usage().physical_count, 1);
        assert_eq!(aclrtUnmapMem(old.cast()), 0);
        assert_eq!(*new.add(4242), 0x5a);
        assert_eq!(*new.add(4243), 0xa5);
        // The old address takes another mapping again.
        let other = physical(&dev, 2 * MIB);
        assert_eq!(aclrtMapMem(old.cast(), 2 * MIB, 0, other, 0), 0);
        assert_eq!(aclrtUnmapMem(old.cast()), 0);
        assert_eq!(aclrtUnmapMem(new.cast()), 0);
        assert_eq!(aclrtFreePhysical(h), 0);
        assert_eq!(aclrtFreePhysical(other), 0);
        assert_eq!(aclrtReleaseMemAddress(base.cast()), 0);
    }
    dev.assert_clean();
}
