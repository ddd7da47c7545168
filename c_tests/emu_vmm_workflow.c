/*
 * The documented 7-step VMM workflow, end to end, against the emulator
 * loaded with dlopen as a host would load CANN's libascendcl.so:
 * reserve, malloc physical, map, write, unmap, map the same handle at
 * another offset and read the data back, then unmap, free and release, and
 * check that no physical handle, mapping or reservation is left.
 *
 * ACL_EMU_LIBRARY_PATH names the library to load (a string literal).
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "acl_emu.h"

#ifndef ACL_EMU_LIBRARY_PATH
#define ACL_EMU_LIBRARY_PATH "libascendcl.so"
#endif

#define MIB ((size_t)1 << 20)
#define DEVICE 0

typedef aclError (*set_device_fn)(int32_t);
typedef aclError (*reset_device_fn)(int32_t);
typedef aclError (*reserve_fn)(void **, size_t, size_t, void *, uint64_t);
typedef aclError (*release_fn)(void *);
typedef aclError (*malloc_physical_fn)(aclrtDrvMemHandle *, size_t, const aclrtPhysicalMemProp *, uint64_t);
typedef aclError (*free_physical_fn)(aclrtDrvMemHandle);
typedef aclError (*map_fn)(void *, size_t, size_t, aclrtDrvMemHandle, uint64_t);
typedef aclError (*unmap_fn)(void *);
typedef aclError (*granularity_fn)(aclrtPhysicalMemProp *, aclrtMemGranularityOptions, size_t *);
typedef int32_t (*get_usage_fn)(int32_t, aclemu_usage *);

static int failures;

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                 \
            failures++;                                                     \
        }                                                                   \
    } while (0)

/* Resolves a symbol into a function pointer (the POSIX-blessed way). */
#define RESOLVE(lib, var, name)                                             \
    do {                                                                    \
        *(void **)(&(var)) = dlsym((lib), (name));                          \
        if ((var) == NULL) {                                                \
            fprintf(stderr, "missing symbol %s: %s\n", (name), dlerror());   \
            return 1;                                                       \
        }                                                                   \
    } while (0)

int main(void) {
    void *lib = dlopen(ACL_EMU_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(%s) failed: %s\n", ACL_EMU_LIBRARY_PATH, dlerror());
        return 1;
    }
    set_device_fn set_device;
    reset_device_fn reset_device;
    reserve_fn reserve;
    release_fn release;
    malloc_physical_fn malloc_physical;
    free_physical_fn free_physical;
    map_fn map;
    unmap_fn unmap;
    granularity_fn granularity;
    get_usage_fn get_usage;
    RESOLVE(lib, set_device, "aclrtSetDevice");
    RESOLVE(lib, reset_device, "aclrtResetDevice");
    RESOLVE(lib, reserve, "aclrtReserveMemAddress");
    RESOLVE(lib, release, "aclrtReleaseMemAddress");
    RESOLVE(lib, malloc_physical, "aclrtMallocPhysical");
    RESOLVE(lib, free_physical, "aclrtFreePhysical");
    RESOLVE(lib, map, "aclrtMapMem");
    RESOLVE(lib, unmap, "aclrtUnmapMem");
    RESOLVE(lib, granularity, "aclrtMemGetAllocationGranularity");
    RESOLVE(lib, get_usage, "aclemu_get_usage");

    EXPECT(set_device(DEVICE) == ACL_SUCCESS);

    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.id = DEVICE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    size_t gran = 0;
    EXPECT(granularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &gran) == ACL_SUCCESS);
    EXPECT(gran == 2 * MIB);

    /* 1. Reserve 8 MiB of address space. */
    void *base = NULL;
    EXPECT(reserve(&base, 8 * MIB, 0, NULL, 0) == ACL_SUCCESS);
    EXPECT(base != NULL);

    /* 2. One 2 MiB physical handle. */
    aclrtDrvMemHandle handle = NULL;
    EXPECT(malloc_physical(&handle, 2 * MIB, &prop, 0) == ACL_SUCCESS);
    EXPECT(handle != NULL);
    if (base == NULL || handle == NULL) {
        return 1;
    }

    /* 3-4. Map it at the start and write through the mapping. */
    unsigned char *first = (unsigned char *)base;
    EXPECT(map(first, 2 * MIB, 0, handle, 0) == ACL_SUCCESS);
    for (size_t i = 0; i < 2 * MIB; i += 4093) {
        first[i] = (unsigned char)(i * 7 + 1);
    }
    first[2 * MIB - 1] = 0x5a;

    /* 5. Unmap; then map the same handle 4 MiB further and read back. */
    EXPECT(unmap(first) == ACL_SUCCESS);
    unsigned char *second = first + 4 * MIB;
    EXPECT(map(second, 2 * MIB, 0, handle, 0) == ACL_SUCCESS);
    int mismatches = 0;
    for (size_t i = 0; i < 2 * MIB; i += 4093) {
        if (second[i] != (unsigned char)(i * 7 + 1)) {
            mismatches++;
        }
    }
    EXPECT(mismatches == 0);
    EXPECT(second[2 * MIB - 1] == 0x5a);

    /* Release is refused while a mapping is live. */
    EXPECT(release(base) != ACL_SUCCESS);

    /* 5-7. Unmap, free the handle, release the range. */
    EXPECT(unmap(second) == ACL_SUCCESS);
    EXPECT(free_physical(handle) == ACL_SUCCESS);
    EXPECT(release(base) == ACL_SUCCESS);

    aclemu_usage usage;
    memset(&usage, 0xff, sizeof usage);
    EXPECT(get_usage(DEVICE, &usage) == 0);
    EXPECT(usage.physical_count == 0);
    EXPECT(usage.physical_bytes == 0);
    EXPECT(usage.mapped_bytes == 0);
    EXPECT(usage.reserved_ranges == 0);

    EXPECT(reset_device(DEVICE) == ACL_SUCCESS);
    dlclose(lib);
    if (failures != 0) {
        fprintf(stderr, "emu_vmm_workflow: %d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
