/*
 * npualloc_sleep / npualloc_wake at the C boundary, on the emulator:
 * - NULL handles are INVALID_ARGUMENT with a message;
 * - the default pool keeps its live blocks, so sleep gives back exactly the
 *   cached memory: the emulator then holds the pages under the live block
 *   and nothing else, and no host memory was taken;
 * - sleep while asleep and wake while awake are OK; the block's bytes are
 *   intact through it all, and requests are served while asleep;
 * - destroy leaves nothing behind.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define MIB ((size_t)1 << 20)
#define PAGE (2 * MIB)
#define CONFIG "expandable_segments:true,page_size:2m,map_ahead:false"

static aclemu_usage usage_of(void) {
    aclemu_usage u;
    memset(&u, 0xff, sizeof u);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    return u;
}

static uint64_t host_bytes(void) {
    uint64_t bytes = 1, count = 1;
    CHECK_EQ_INT(aclemu_host_usage(&bytes, &count), 0);
    return bytes;
}

static int intact(const unsigned char *p, size_t n, unsigned char byte) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != byte) return 0;
    }
    return 1;
}

int main(void) {
    CHECK_STATUS(npualloc_sleep(NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strlen(npualloc_last_error()) > 0);
    CHECK_STATUS(npualloc_wake(NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strlen(npualloc_last_error()) > 0);

    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return TEST_SUMMARY();
    unsigned char *live = NULL;
    void *spare = NULL;
    CHECK_STATUS(npualloc_malloc(a, 3 * MIB, NULL, (void **)&live), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, 20 * MIB, NULL, &spare), NPUALLOC_OK);
    if (live == NULL || spare == NULL) return TEST_SUMMARY();
    memset(live, 0x6b, 3 * MIB);
    CHECK_STATUS(npualloc_free(a, spare), NPUALLOC_OK);
    uint64_t host = host_bytes();

    CHECK_STATUS(npualloc_wake(a), NPUALLOC_OK);
    CHECK_STATUS(npualloc_sleep(a), NPUALLOC_OK);
    /* The live block's two pages (one 4 MiB handle) and nothing else. */
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(u.physical_bytes, 2 * PAGE);
    CHECK_EQ_INT(u.mapped_bytes, 2 * PAGE);
    CHECK_EQ_INT(host_bytes(), host);
    CHECK_STATUS(npualloc_sleep(a), NPUALLOC_OK);

    void *more = NULL;
    CHECK_STATUS(npualloc_malloc(a, MIB, NULL, &more), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, more), NPUALLOC_OK);
    CHECK(intact(live, 3 * MIB, 0x6b));
    CHECK_STATUS(npualloc_wake(a), NPUALLOC_OK);
    CHECK_STATUS(npualloc_wake(a), NPUALLOC_OK);
    CHECK(intact(live, 3 * MIB, 0x6b));

    CHECK_STATUS(npualloc_free(a, live), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    u = usage_of();
    CHECK_EQ_INT(u.physical_count, 0);
    CHECK_EQ_INT(u.reserved_ranges, 0);
    return TEST_SUMMARY();
}
