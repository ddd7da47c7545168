/*
 * Out of memory and teardown, with fixed and with expandable segments:
 * - on a 64 MiB device, allocating past the capacity returns
 *   NPUALLOC_ERR_OUT_OF_MEMORY after the recovery ladder, changes nothing
 *   live, and the allocator keeps working (cached memory is reused and, when
 *   a request needs it, returned to the device and remapped);
 * - destroy with live blocks returns OK, reports the live blocks in the last
 *   error, and leaves no device memory, physical handle, mapping or reserved
 *   range behind.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define MIB ((size_t)1 << 20)
#define DEVICE_BYTES (64 * MIB)

static npualloc_stats stats_of(const npualloc_allocator *a) {
    npualloc_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_STATUS(npualloc_get_stats(a, &s), NPUALLOC_OK);
    return s;
}

static void check_device_empty(const char *when) {
    aclemu_usage u;
    memset(&u, 0xff, sizeof u);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    if (u.malloc_bytes || u.malloc_count || u.physical_bytes || u.physical_count || u.mapped_bytes ||
        u.reserved_ranges || u.descs) {
        fprintf(stderr, "%s: device not empty\n", when);
    }
    CHECK_EQ_INT(u.malloc_bytes, 0);
    CHECK_EQ_INT(u.malloc_count, 0);
    CHECK_EQ_INT(u.physical_bytes, 0);
    CHECK_EQ_INT(u.physical_count, 0);
    CHECK_EQ_INT(u.mapped_bytes, 0);
    CHECK_EQ_INT(u.reserved_ranges, 0);
    CHECK_EQ_INT(u.descs, 0);
}

static void out_of_memory(const char *config) {
    fprintf(stderr, "-- out_of_memory(\"%s\")\n", config);
    CHECK_EQ_INT(aclemu_set_device_memory(0, DEVICE_BYTES), 0);
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(config, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;

    /* Fill the device with 8 MiB blocks until it refuses. */
    void *blocks[64];
    size_t n = 0;
    npualloc_status st = NPUALLOC_OK;
    while (n < 64) {
        void *p = NULL;
        st = npualloc_malloc(a, 8 * MIB, NULL, &p);
        if (st != NPUALLOC_OK) break;
        blocks[n++] = p;
    }
    CHECK_EQ_INT(st, NPUALLOC_ERR_OUT_OF_MEMORY);
    CHECK(strlen(npualloc_last_error()) > 0);
    CHECK(n >= 4 && n <= 8);

    /* A refused request changes nothing live. */
    npualloc_stats before = stats_of(a);
    void *big = NULL;
    CHECK_STATUS(npualloc_malloc(a, 32 * MIB, NULL, &big), NPUALLOC_ERR_OUT_OF_MEMORY);
    CHECK(big == NULL);
    npualloc_stats after = stats_of(a);
    CHECK_EQ_INT(after.allocated_bytes, before.allocated_bytes);
    CHECK_EQ_INT(after.active_blocks, before.active_blocks);
    CHECK_EQ_INT(after.num_allocs, before.num_allocs);
    CHECK(after.num_ooms > before.num_ooms);

    /* Still working: freed memory is reused... */
    CHECK_STATUS(npualloc_free(a, blocks[--n]), NPUALLOC_OK);
    void *p = NULL;
    CHECK_STATUS(npualloc_malloc(a, 8 * MIB, NULL, &p), NPUALLOC_OK);
    blocks[n++] = p;

    /* ...and after freeing everything, one request larger than any cached
     * block succeeds (the ladder returns the cache to the device if needed). */
    while (n > 0) CHECK_STATUS(npualloc_free(a, blocks[--n]), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, 40 * MIB, NULL, &big), NPUALLOC_OK);
    CHECK(big != NULL);
    CHECK_STATUS(npualloc_free(a, big), NPUALLOC_OK);

    CHECK_STATUS(npualloc_malloc(a, 4096, NULL, &p), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, p), NPUALLOC_OK);
    npualloc_stats end = stats_of(a);
    CHECK_EQ_INT(end.allocated_bytes, 0);
    CHECK_EQ_INT(end.num_allocs, end.num_frees);

    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    check_device_empty("after out_of_memory");
    CHECK_EQ_INT(aclemu_set_device_memory(0, (uint64_t)8 << 30), 0);
}

static void destroy_with_live_blocks(const char *config) {
    fprintf(stderr, "-- destroy_with_live_blocks(\"%s\")\n", config);
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(config, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    aclrtStream s = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s), 0);
    CHECK_STATUS(npualloc_register(a, s), NPUALLOC_OK);

    void *p = NULL;
    size_t sizes[] = {512, 4096, 3 * MIB, 20 * MIB + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CHECK_STATUS(npualloc_malloc(a, sizes[i], i % 2 ? s : NULL, &p), NPUALLOC_OK);
    }
    /* Cached memory too: one block freed. */
    CHECK_STATUS(npualloc_malloc(a, 6 * MIB, NULL, &p), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, p), NPUALLOC_OK);
    void *block = npualloc_desc_alloc(NULL, 1);
    CHECK(block == NULL);
    size_t op[] = {1 * MIB, 2 * MIB};
    CHECK_EQ_INT(aclemu_run_op(s, op, 2), 0);

    aclemu_usage u;
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK(u.malloc_bytes + u.mapped_bytes > 0);
    CHECK_EQ_INT(u.descs, 1);

    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    const char *msg = npualloc_last_error();
    CHECK(strstr(msg, "4 live block") != NULL);
    CHECK(strstr(msg, "bytes") != NULL);
    check_device_empty("after destroy with live blocks");
    CHECK_EQ_INT(aclrtDestroyStream(s), 0);
}

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    out_of_memory("expandable_segments:false");
    out_of_memory("expandable_segments:true");
    out_of_memory("");
    destroy_with_live_blocks("expandable_segments:false");
    destroy_with_live_blocks("expandable_segments:true");
    destroy_with_live_blocks("");
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    return TEST_SUMMARY();
}
