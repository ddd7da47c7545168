/*
 * Expandable segments through the C API (config
 * "expandable_segments:true,page_size:2m,map_ahead:false": 2 MiB pages, each
 * physical handle covering one or more of them), checked against the
 * emulator's own counters:
 * - growth: each allocation maps only the pages it lacks, with one handle
 *   while the device has room and handles of 4 MiB on a nearly full one; one
 *   reserved range per (stream, pool kind);
 * - hole filling: a request that fits a freed block in the middle lands there
 *   and maps nothing;
 * - recycling: on a full device, pages freed on one stream back a request on
 *   another, so the allocator maps more often than the runtime allocated
 *   physical memory, and reserved memory does not grow;
 * - empty_cache returns every page no live block uses;
 * - destroy leaves no physical handle, mapping or reserved range.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define MIB ((size_t)1 << 20)
#define PAGE (2 * MIB)
/* Mapping ahead off: these tests follow each page; the Rust tests cover
 * handles mapped ahead of demand. */
#define CONFIG "expandable_segments:true,page_size:2m,map_ahead:false"

static npualloc_stats stats_of(const npualloc_allocator *a) {
    npualloc_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_STATUS(npualloc_get_stats(a, &s), NPUALLOC_OK);
    return s;
}

static aclemu_usage usage_of(void) {
    aclemu_usage u;
    memset(&u, 0xff, sizeof u);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    return u;
}

/* Gives the device `bytes` of room on top of what it already holds. */
static void budget(size_t bytes) {
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(aclemu_set_device_memory(0, u.malloc_bytes + u.physical_bytes + bytes), 0);
}

static void check_device_empty(const char *when) {
    aclemu_usage u = usage_of();
    if (u.malloc_count || u.physical_count || u.mapped_bytes || u.reserved_ranges || u.events) {
        fprintf(stderr, "%s: device not empty\n", when);
    }
    CHECK_EQ_INT(u.malloc_count, 0);
    CHECK_EQ_INT(u.physical_bytes, 0);
    CHECK_EQ_INT(u.physical_count, 0);
    CHECK_EQ_INT(u.mapped_bytes, 0);
    CHECK_EQ_INT(u.reserved_ranges, 0);
    CHECK_EQ_INT(u.events, 0);
}

/* The emulator holds exactly what the allocator counts as reserved, maps
 * no more than that, and maps whole pages. */
static void check_agrees(const npualloc_allocator *a) {
    npualloc_stats s = stats_of(a);
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(u.physical_bytes, s.reserved_bytes);
    CHECK(u.mapped_bytes <= u.physical_bytes);
    CHECK_EQ_INT(u.mapped_bytes % PAGE, 0);
}

static void *alloc(npualloc_allocator *a, size_t size, aclrtStream stream) {
    void *p = NULL;
    CHECK_STATUS(npualloc_malloc(a, size, stream, &p), NPUALLOC_OK);
    CHECK(p != NULL);
    return p;
}

static void growth(aclrtStream s1) {
    fprintf(stderr, "-- growth\n");
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;

    char *p1 = alloc(a, 4096, NULL);
    npualloc_stats s = stats_of(a);
    CHECK_EQ_INT(s.num_maps, 1);
    CHECK_EQ_INT(s.reserved_bytes, PAGE);
    CHECK_EQ_INT(s.segments, 1);
    CHECK_EQ_INT(s.num_device_mallocs, 0);
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(u.physical_count, 1);
    CHECK_EQ_INT(u.mapped_bytes, PAGE);
    CHECK_EQ_INT(u.reserved_ranges, 1);

    /* Large pool, own range: [0, 3) MiB maps pages 0 and 1 with one 4 MiB
     * handle. */
    char *p2 = alloc(a, 3 * MIB, NULL);
    s = stats_of(a);
    CHECK_EQ_INT(s.num_maps, 2);
    CHECK_EQ_INT(s.segments, 2);
    CHECK_EQ_INT(s.reserved_bytes, 3 * PAGE);

    /* [3, 6) MiB follows directly and maps only page 2. */
    char *p3 = alloc(a, 3 * MIB, NULL);
    CHECK(p3 == p2 + 3 * MIB);
    s = stats_of(a);
    CHECK_EQ_INT(s.num_maps, 3);
    CHECK_EQ_INT(s.reserved_bytes, 4 * PAGE);

    /* Another stream: its own small range. */
    char *q = alloc(a, 4096, s1);
    s = stats_of(a);
    CHECK_EQ_INT(s.num_maps, 4);
    CHECK_EQ_INT(s.segments, 3);
    u = usage_of();
    CHECK_EQ_INT(u.reserved_ranges, 3);
    CHECK_EQ_INT(u.physical_count, 4);
    CHECK_EQ_INT(u.mapped_bytes, s.reserved_bytes);
    check_agrees(a);

    void *all[] = {p1, p2, p3, q};
    for (size_t i = 0; i < 4; i++) CHECK_STATUS(npualloc_free(a, all[i]), NPUALLOC_OK);
    CHECK_EQ_INT(stats_of(a).num_unmaps, 0);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    check_device_empty("after growth");
}

static void hole_filling(void) {
    fprintf(stderr, "-- hole_filling\n");
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    char *x = alloc(a, 4 * MIB, NULL);
    char *y = alloc(a, 4 * MIB, NULL);
    char *z = alloc(a, 4 * MIB, NULL);
    CHECK(y == x + 4 * MIB && z == x + 8 * MIB);
    CHECK_STATUS(npualloc_free(a, y), NPUALLOC_OK);
    npualloc_stats before = stats_of(a);
    uint64_t mapped = usage_of().mapped_bytes;
    CHECK_EQ_INT(before.num_maps, 3); /* one 4 MiB handle each */

    char *h = alloc(a, 3 * MIB, NULL);
    CHECK(h >= y && h + 3 * MIB <= z);
    npualloc_stats after = stats_of(a);
    CHECK_EQ_INT(after.num_maps, before.num_maps);
    CHECK_EQ_INT(after.reserved_bytes, before.reserved_bytes);
    CHECK_EQ_INT(usage_of().mapped_bytes, mapped);
    check_agrees(a);

    void *all[] = {x, z, h};
    for (size_t i = 0; i < 3; i++) CHECK_STATUS(npualloc_free(a, all[i]), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    check_device_empty("after hole_filling");
}

static void recycling(aclrtStream s1) {
    fprintf(stderr, "-- recycling\n");
    budget(24 * MIB); /* room for exactly 12 pages, six 4 MiB handles */
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    char *x = alloc(a, 16 * MIB, NULL);
    char *y = alloc(a, 8 * MIB, NULL);
    memset(y, 0x3c, 8 * MIB);
    CHECK_EQ_INT(usage_of().physical_count, 6);
    CHECK_STATUS(npualloc_free(a, x), NPUALLOC_OK);

    /* The device is full: s1's 8 pages must be x's four handles. */
    char *z = alloc(a, 16 * MIB, s1);
    npualloc_stats s = stats_of(a);
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(s.num_maps, 6 + 4);
    CHECK_EQ_INT(s.num_unmaps, 4);
    CHECK_EQ_INT(u.physical_count, 6);
    CHECK(u.physical_count < s.num_maps);
    CHECK_EQ_INT(s.reserved_bytes, 24 * MIB);
    CHECK_EQ_INT(u.physical_bytes, 24 * MIB);
    CHECK_EQ_INT(u.mapped_bytes, 24 * MIB);
    CHECK_EQ_INT(s.num_ooms, 0);
    check_agrees(a);
    int intact = 1;
    for (size_t i = 0; i < 8 * MIB; i++) intact &= y[i] == 0x3c;
    CHECK(intact);

    CHECK_STATUS(npualloc_free(a, y), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, z), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    check_device_empty("after recycling");
    CHECK_EQ_INT(aclemu_set_device_memory(0, (uint64_t)8 << 30), 0);
}

static void empty_cache_returns_every_page(void) {
    fprintf(stderr, "-- empty_cache_returns_every_page\n");
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    /* Large: x [0, 3), y [3, 5.5), z [5.5, 13.5) MiB = pages 0..6, as
     * handles {0, 1} (x), {2} (y's new page) and {3..6} (z's). */
    char *x = alloc(a, 3 * MIB, NULL);
    char *y = alloc(a, 5 * MIB / 2, NULL);
    char *z = alloc(a, 8 * MIB, NULL);
    CHECK(y == x + 3 * MIB && z == y + 5 * MIB / 2);
    char *s1 = alloc(a, 4096, NULL);
    char *s2 = alloc(a, 4096, NULL);
    CHECK_EQ_INT(stats_of(a).num_maps, 4);
    CHECK_STATUS(npualloc_free(a, x), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, z), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, s2), NPUALLOC_OK);

    /* Live: y on pages 1 and 2, s1 on the small page. Page 0 is free but
     * shares its handle with page 1, so it stays: handles {0, 1}, {2} and
     * the small page remain; {3..6} goes. */
    CHECK_STATUS(npualloc_empty_cache(a), NPUALLOC_OK);
    npualloc_stats s = stats_of(a);
    aclemu_usage u = usage_of();
    CHECK_EQ_INT(s.reserved_bytes, 4 * PAGE);
    CHECK_EQ_INT(u.physical_count, 3);
    CHECK_EQ_INT(u.mapped_bytes, 4 * PAGE);
    check_agrees(a);

    CHECK_STATUS(npualloc_free(a, y), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, s1), NPUALLOC_OK);
    CHECK_STATUS(npualloc_empty_cache(a), NPUALLOC_OK);
    s = stats_of(a);
    u = usage_of();
    CHECK_EQ_INT(s.reserved_bytes, 0);
    CHECK_EQ_INT(u.physical_count, 0);
    CHECK_EQ_INT(u.physical_bytes, 0);
    CHECK_EQ_INT(u.mapped_bytes, 0);
    CHECK_EQ_INT(u.reserved_ranges, 0); /* ranges that hold nothing go back too */
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    check_device_empty("after empty_cache_returns_every_page");
}

static void destroy_leaks_nothing(aclrtStream s1, aclrtStream s2) {
    fprintf(stderr, "-- destroy_leaks_nothing\n");
    budget(24 * MIB);
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(CONFIG, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    /* Live blocks in four ranges, a freed block's pages (moved by the out-of
     * memory ladder), and a free waiting for a held stream. */
    void *x = alloc(a, 16 * MIB, NULL);
    alloc(a, 4 * MIB, NULL);
    alloc(a, 512, NULL);
    CHECK_STATUS(npualloc_free(a, x), NPUALLOC_OK);
    alloc(a, 6 * MIB, s1);
    alloc(a, 1000, s1);
    void *w = alloc(a, 2 * MIB, NULL);
    CHECK_STATUS(npualloc_record_stream(a, w, s2), NPUALLOC_OK);
    CHECK_EQ_INT(aclemu_stream_hold(s2), 0);
    CHECK_STATUS(npualloc_free(a, w), NPUALLOC_OK);
    check_agrees(a);
    aclemu_usage u = usage_of();
    CHECK(u.mapped_bytes > 0);
    CHECK_EQ_INT(u.reserved_ranges, 4);

    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    CHECK(strstr(npualloc_last_error(), "4 live block") != NULL);
    check_device_empty("after destroy_leaks_nothing");
    CHECK_EQ_INT(aclemu_stream_release(s2), 0);
    CHECK_EQ_INT(aclemu_set_device_memory(0, (uint64_t)8 << 30), 0);
}

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    aclrtStream s1 = NULL, s2 = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s1), 0);
    CHECK_EQ_INT(aclrtCreateStream(&s2), 0);
    check_device_empty("at start");
    growth(s1);
    hole_filling();
    recycling(s1);
    empty_cache_returns_every_page();
    destroy_leaks_nothing(s1, s2);
    CHECK_EQ_INT(aclrtDestroyStream(s1), 0);
    CHECK_EQ_INT(aclrtDestroyStream(s2), 0);
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    return TEST_SUMMARY();
}
