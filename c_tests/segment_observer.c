/*
 * The segment observer at the C boundary, used as a communication library
 * would: it keeps a table of registered memory, registering at RESERVE and
 * MAP and deregistering at UNMAP and RELEASE; every block malloc hands out
 * lies in registered memory while it is live; after empty_cache and after
 * destroy the table matches what the allocator holds (nothing at the end).
 * A library attaching late learns what exists from npualloc_for_each_segment.
 * Bad arguments are refused with a message and change nothing.
 */
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define MAX 4096

typedef struct {
    uintptr_t addr;
    size_t size;
    void *handle;
    int used;
} entry;

typedef struct {
    entry ranges[MAX];
    entry mapped[MAX];
    int errors;
    int events;
} library;

static int find(entry *t, uintptr_t addr, size_t size) {
    for (int i = 0; i < MAX; i++)
        if (t[i].used && t[i].addr == addr && t[i].size == size) return i;
    return -1;
}

static int add(entry *t, uintptr_t addr, size_t size, void *handle) {
    for (int i = 0; i < MAX; i++)
        if (!t[i].used) {
            t[i] = (entry){addr, size, handle, 1};
            return 1;
        }
    return 0;
}

static int count(const entry *t) {
    int n = 0;
    for (int i = 0; i < MAX; i++) n += t[i].used;
    return n;
}

static void observe(void *user, int32_t device, npualloc_segment_event event, void *addr, size_t size,
                    void *drv_handle, uint64_t pool) {
    library *lib = (library *)user;
    uintptr_t a = (uintptr_t)addr;
    int i;
    (void)pool;
    lib->events++;
    if (device != 0) lib->errors++;
    switch (event) {
    case NPUALLOC_SEGMENT_RESERVE:
        if (drv_handle != NULL || find(lib->ranges, a, size) >= 0 || !add(lib->ranges, a, size, NULL)) lib->errors++;
        break;
    case NPUALLOC_SEGMENT_RELEASE:
        i = find(lib->ranges, a, size);
        if (i < 0) lib->errors++; else lib->ranges[i].used = 0;
        break;
    case NPUALLOC_SEGMENT_MAP:
        if (find(lib->mapped, a, size) >= 0 || !add(lib->mapped, a, size, drv_handle)) lib->errors++;
        break;
    case NPUALLOC_SEGMENT_UNMAP:
        i = find(lib->mapped, a, size);
        if (i < 0 || lib->mapped[i].handle != drv_handle) lib->errors++; else lib->mapped[i].used = 0;
        break;
    default:
        lib->errors++;
    }
}

/* Whether [p, p + n) lies in memory the library registered. */
static int registered(const library *lib, uintptr_t p, size_t n) {
    uintptr_t end = p + n;
    while (p < end) {
        int hit = 0;
        for (int i = 0; i < MAX; i++) {
            const entry *e = &lib->mapped[i];
            if (e->used && e->addr <= p && p < e->addr + e->size) {
                p = e->addr + e->size;
                hit = 1;
                break;
            }
        }
        if (!hit) return 0;
    }
    return 1;
}

/* Whether two tables list the same entries. */
static int same(const entry *x, const entry *y) {
    if (count(x) != count(y)) return 0;
    for (int i = 0; i < MAX; i++)
        if (x[i].used && find((entry *)y, x[i].addr, x[i].size) < 0) return 0;
    return 1;
}

static library live, late;

static void run(const char *config) {
    npualloc_allocator *a = NULL;
    memset(&live, 0, sizeof live);
    CHECK_STATUS(npualloc_create(config, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    CHECK_STATUS(npualloc_set_segment_observer(a, observe, &live), NPUALLOC_OK);
    void *p[64] = {0};
    size_t sizes[64];
    for (int i = 0; i < 64; i++) {
        sizes[i] = (size_t)(i % 3 == 0 ? 48u << 20 : (i % 3 == 1 ? 3u << 20 : 4096u + (size_t)i * 1000));
        CHECK_STATUS(npualloc_malloc(a, sizes[i], NULL, &p[i]), NPUALLOC_OK);
        CHECK(registered(&live, (uintptr_t)p[i], sizes[i]));
    }
    for (int i = 0; i < 64; i += 2) CHECK_STATUS(npualloc_free(a, p[i]), NPUALLOC_OK);
    CHECK_STATUS(npualloc_empty_cache(a), NPUALLOC_OK);
    for (int i = 1; i < 64; i += 2) CHECK(registered(&live, (uintptr_t)p[i], sizes[i]));

    /* A library attaching now learns exactly what the first one holds. */
    memset(&late, 0, sizeof late);
    CHECK_STATUS(npualloc_for_each_segment(a, observe, &late), NPUALLOC_OK);
    CHECK(same(late.mapped, live.mapped));
    CHECK(same(late.ranges, live.ranges));
    CHECK(count(live.mapped) > 0);
    CHECK_EQ_INT(late.errors, 0);

    /* Bad arguments: refused with a message, nothing called. */
    int before = late.events;
    CHECK_STATUS(npualloc_for_each_segment(a, NULL, &late), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("fn is NULL"));
    CHECK_STATUS(npualloc_for_each_segment(NULL, observe, &late), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(npualloc_set_segment_observer(NULL, observe, &late), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(late.events, before);

    for (int i = 1; i < 64; i += 2) CHECK_STATUS(npualloc_free(a, p[i]), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    /* Destroy deregistered everything it had registered. */
    CHECK_EQ_INT(count(live.mapped), 0);
    CHECK_EQ_INT(count(live.ranges), 0);
    CHECK_EQ_INT(live.errors, 0);
    CHECK(live.events > 0);
}

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    run("");
    run("expandable_segments:false");
    return TEST_SUMMARY();
}
