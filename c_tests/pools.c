/*
 * Private pools at the C boundary: npualloc_pool_create / begin / end /
 * destroy / get_stats / empty_cache refuse NULL handles, NULL out-pointers, unknown and
 * destroyed pools, pool 0's destruction, a pool_end naming the wrong route
 * and bad pool configs, each with its documented status, an explanation in
 * npualloc_last_error() and no change to the allocator's statistics; a
 * routed allocation comes from the pool, whose statistics count it (and
 * the device call that made its memory); npualloc_pool_live_blocks lists
 * the pool's live block and npualloc_pool_restore sets it live again after
 * its free (refusing a NULL list and overlapping blocks);
 * npualloc_pool_empty_cache gives the pool's cache back.
 */
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

static npualloc_stats stats_of(const npualloc_allocator *a, int pool) {
    npualloc_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    npualloc_status st = pool < 0 ? npualloc_get_stats(a, &s) : npualloc_pool_get_stats(a, (uint64_t)pool, &s);
    if (st != NPUALLOC_OK) fprintf(stderr, "stats failed: %s\n", npualloc_last_error());
    return s;
}

/* npualloc_pool_live_blocks' function: keeps up to 4 blocks. */
struct listed {
    npualloc_live_block b[4];
    int n;
};
static void keep_block(void *user, const npualloc_live_block *block) {
    struct listed *list = user;
    if (list->n < 4) list->b[list->n] = *block;
    list->n++;
}

static npualloc_allocator *A;
static npualloc_stats before;

static int refused_cleanly(void) {
    int explained = npualloc_last_error()[0] != '\0';
    npualloc_stats now = stats_of(A, -1);
    if (!explained) fprintf(stderr, "  no last error\n");
    return explained && memcmp(&now, &before, sizeof now) == 0;
}

#define REFUSED(expr, status)           \
    do {                                \
        before = stats_of(A, -1);       \
        CHECK_STATUS((expr), (status)); \
        CHECK(refused_cleanly());       \
    } while (0)

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    CHECK_STATUS(npualloc_create("", 0, &A), NPUALLOC_OK);
    if (A == NULL) return TEST_SUMMARY();
    aclrtStream s = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s), 0);

    uint64_t pool = 12345;
    REFUSED(npualloc_pool_create(NULL, NULL, &pool), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_create(A, NULL, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_create(A, "sleep:nap", &pool), NPUALLOC_ERR_BAD_CONFIG);
    CHECK_STATUS(npualloc_pool_create(A, "sleep:nap", &pool), NPUALLOC_ERR_BAD_CONFIG);
    CHECK(strstr(npualloc_last_error(), "sleep") != NULL); /* the message names the key */
    REFUSED(npualloc_pool_create(A, "color:red", &pool), NPUALLOC_ERR_BAD_CONFIG);
    CHECK_EQ_INT(pool, 12345); /* nothing written on failure */
    CHECK_STATUS(npualloc_pool_create(A, "sleep:discard,use_on_oom:false", &pool), NPUALLOC_OK);
    CHECK(pool != 0);

    REFUSED(npualloc_pool_begin(NULL, pool, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_begin(A, pool + 100, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_end(A, pool, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_end(NULL, pool, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_destroy(A, 0), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_destroy(NULL, pool), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_get_stats(A, pool, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_get_stats(NULL, pool, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_empty_cache(NULL, pool), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_empty_cache(A, pool + 100), NPUALLOC_ERR_INVALID_ARGUMENT);

    /* A route; the wrong end and a destroy while routed change nothing. */
    CHECK_STATUS(npualloc_pool_begin(A, pool, s), NPUALLOC_OK);
    REFUSED(npualloc_pool_end(A, pool, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_destroy(A, pool), NPUALLOC_ERR_INVALID_ARGUMENT);
    void *p = NULL;
    CHECK_STATUS(npualloc_malloc(A, 4096, s, &p), NPUALLOC_OK);
    CHECK_STATUS(npualloc_pool_end(A, pool, s), NPUALLOC_OK);
    CHECK_EQ_INT(stats_of(A, (int)pool).active_blocks, 1);
    CHECK_EQ_INT(stats_of(A, 0).active_blocks, 0);
    CHECK_EQ_INT(stats_of(A, -1).active_blocks, 1);
    CHECK(stats_of(A, (int)pool).num_device_mallocs + stats_of(A, (int)pool).num_maps >= 1);
    CHECK_EQ_INT(stats_of(A, 0).num_device_mallocs + stats_of(A, 0).num_maps, 0);
    /* A checkpoint of the pool's live blocks, set back after the block was freed. */
    struct listed list = {0};
    REFUSED(npualloc_pool_live_blocks(A, pool, NULL, &list), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_live_blocks(NULL, pool, keep_block, &list), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_live_blocks(A, pool + 100, keep_block, &list), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(npualloc_pool_live_blocks(A, pool, keep_block, &list), NPUALLOC_OK);
    CHECK_EQ_INT(list.n, 1);
    CHECK(list.b[0].ptr == p && list.b[0].requested == 4096 && list.b[0].size >= 4096 && list.b[0].stream == s);
    REFUSED(npualloc_pool_restore(A, pool, NULL, 1), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_restore(NULL, pool, list.b, 1), NPUALLOC_ERR_INVALID_ARGUMENT);
    npualloc_live_block twice[2] = {list.b[0], list.b[0]};
    REFUSED(npualloc_pool_restore(A, pool, twice, 2), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(npualloc_free(A, p), NPUALLOC_OK);
    CHECK_EQ_INT(stats_of(A, (int)pool).active_blocks, 0);
    CHECK_STATUS(npualloc_pool_restore(A, pool, list.b, 1), NPUALLOC_OK);
    CHECK_EQ_INT(stats_of(A, (int)pool).active_blocks, 1);
    CHECK_STATUS(npualloc_pool_restore(A, pool, NULL, 0), NPUALLOC_OK); /* frees it again */
    CHECK_EQ_INT(stats_of(A, (int)pool).active_blocks, 0);
    /* empty_cache leaves the pool's cache; pool_empty_cache gives it back. */
    CHECK_STATUS(npualloc_empty_cache(A), NPUALLOC_OK);
    CHECK(stats_of(A, (int)pool).reserved_bytes > 0);
    CHECK_STATUS(npualloc_pool_empty_cache(A, pool), NPUALLOC_OK);
    CHECK_EQ_INT(stats_of(A, (int)pool).reserved_bytes, 0);

    CHECK_STATUS(npualloc_pool_destroy(A, pool), NPUALLOC_OK);
    REFUSED(npualloc_pool_destroy(A, pool), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pool_begin(A, pool, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(stats_of(A, (int)pool).reserved_bytes, 0);
    uint64_t next = 0;
    CHECK_STATUS(npualloc_pool_create(A, NULL, &next), NPUALLOC_OK);
    CHECK(next > pool); /* ids are never reused */

    CHECK_STATUS(npualloc_destroy(A), NPUALLOC_OK);
    CHECK_EQ_INT(aclrtDestroyStream(s), 0);
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    return TEST_SUMMARY();
}
