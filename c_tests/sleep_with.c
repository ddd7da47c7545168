/*
 * npualloc_sleep_with at the C boundary, on the emulator:
 * - a pool made with the default sleep=keep offloads because the call
 *   lists it: the device then holds nothing of it, its bytes go to host
 *   memory, and wake brings them back at the same address;
 * - bad lists (NULL with a count, an unknown pool, a pool in both lists)
 *   and a NULL handle are INVALID_ARGUMENT with a message and change
 *   nothing: the allocator stays awake and the pool serves;
 * - npualloc_wake_with wakes one pool at a time, as vllm-ascend wakes its
 *   weights before its KV cache: the weights read back and serve, the KV
 *   cache pool still refuses allocations, and the allocator is awake only
 *   once both are; bad lists are INVALID_ARGUMENT and wake nothing;
 * - destroy leaves nothing behind.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define MIB ((size_t)1 << 20)
#define CONFIG "expandable_segments:true,page_size:2m,map_ahead:false"

static aclemu_usage usage_of(void) {
    aclemu_usage u;
    memset(&u, 0xff, sizeof u);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    return u;
}

static int intact(const unsigned char *p, size_t n, unsigned char byte) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != byte) return 0;
    }
    return 1;
}

int main(void) {
    CHECK_STATUS(npualloc_sleep_with(NULL, NULL, 0, NULL, 0), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strlen(npualloc_last_error()) > 0);

    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return TEST_SUMMARY();
    uint64_t weights = 0;
    CHECK_STATUS(npualloc_pool_create(a, NULL, &weights), NPUALLOC_OK);
    unsigned char *w = NULL;
    CHECK_STATUS(npualloc_pool_begin(a, weights, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, 3 * MIB, NULL, (void **)&w), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_end(a, weights, NULL), NPUALLOC_OK);
    if (w == NULL) return TEST_SUMMARY();
    memset(w, 0x3c, 3 * MIB);
    aclemu_usage awake = usage_of();

    uint64_t unknown[] = {weights, 12345};
    uint64_t both[] = {weights};
    CHECK_STATUS(npualloc_sleep_with(a, NULL, 1, NULL, 0), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "offload_pools") != NULL);
    CHECK_STATUS(npualloc_sleep_with(a, unknown, 2, NULL, 0), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "12345") != NULL);
    CHECK_STATUS(npualloc_sleep_with(a, both, 1, both, 1), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "both") != NULL);
    CHECK_EQ_INT(usage_of().physical_bytes, awake.physical_bytes);
    void *more = NULL;
    CHECK_STATUS(npualloc_pool_begin(a, weights, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, MIB, NULL, &more), NPUALLOC_OK); /* still awake */
    CHECK_STATUS(npualloc_pool_end(a, weights, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, more), NPUALLOC_OK);

    const uint64_t offload[] = {weights};
    CHECK_STATUS(npualloc_sleep_with(a, offload, 1, NULL, 0), NPUALLOC_OK);
    CHECK_EQ_INT(usage_of().physical_bytes, 0);
    CHECK_STATUS(npualloc_wake(a), NPUALLOC_OK);
    CHECK(intact(w, 3 * MIB, 0x3c));

    /* Partial wake: the weights first, then the KV cache. */
    uint64_t kv = 0;
    CHECK_STATUS(npualloc_pool_create(a, NULL, &kv), NPUALLOC_OK);
    void *k = NULL;
    CHECK_STATUS(npualloc_pool_begin(a, kv, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, 4 * MIB, NULL, &k), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_end(a, kv, NULL), NPUALLOC_OK);
    const uint64_t discard[] = {kv};
    CHECK_STATUS(npualloc_sleep_with(a, offload, 1, discard, 1), NPUALLOC_OK);
    CHECK_EQ_INT(usage_of().physical_bytes, 0);
    CHECK_STATUS(npualloc_wake_with(NULL, offload, 1), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(npualloc_wake_with(a, NULL, 1), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "pools") != NULL);
    CHECK_STATUS(npualloc_wake_with(a, unknown, 2), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "12345") != NULL);
    CHECK_EQ_INT(usage_of().physical_bytes, 0); /* nothing woken */
    CHECK_STATUS(npualloc_wake_with(a, offload, 1), NPUALLOC_OK);
    CHECK(intact(w, 3 * MIB, 0x3c));
    CHECK_EQ_INT(usage_of().physical_bytes, 4 * MIB); /* the weights' two pages only */
    void *refused = NULL;
    CHECK_STATUS(npualloc_pool_begin(a, kv, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, MIB, NULL, &refused), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "asleep") != NULL);
    CHECK_STATUS(npualloc_pool_end(a, kv, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_begin(a, weights, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, MIB, NULL, &more), NPUALLOC_OK); /* the weights pool serves */
    CHECK_STATUS(npualloc_pool_end(a, weights, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, more), NPUALLOC_OK);
    CHECK_STATUS(npualloc_wake_with(a, discard, 1), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_begin(a, kv, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, MIB, NULL, &more), NPUALLOC_OK); /* awake */
    CHECK_STATUS(npualloc_pool_end(a, kv, NULL), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, more), NPUALLOC_OK);
    CHECK_STATUS(npualloc_wake_with(a, NULL, 0), NPUALLOC_OK);
    memset(k, 0x7e, 4 * MIB);
    CHECK(intact(k, 4 * MIB, 0x7e) && intact(w, 3 * MIB, 0x3c));

    CHECK_STATUS(npualloc_free(a, k), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_destroy(a, kv), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, w), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_destroy(a, weights), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(u.physical_count, 0);
    CHECK_EQ_INT(u.reserved_ranges, 0);
    return TEST_SUMMARY();
}
