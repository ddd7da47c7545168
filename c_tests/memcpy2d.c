/*
 * Validated 2D copies (docs/runtime-behaviour.md "2D copies"):
 * - a table-driven matrix through npualloc_check_memcpy2d, without an
 *   allocator (the runtime's documented rules) and with one (plus the
 *   owning block's bounds): pitches, the height and width limits, every
 *   kind for sync and async, NULL pointers with and without a zero width,
 *   the last valid byte of a block and one past it, interior pointers, a
 *   foreign device pointer, sizes near SIZE_MAX;
 * - end to end through the emulator: host -> device -> host round trip of a
 *   matrix whose destination padding columns must survive; an async copy on
 *   a held stream lands only after the stream is released;
 * - no device memory, stream or desc left behind.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define H2D 1
#define D2H 2
#define D2D 3
#define DEF 4 /* ACL_MEMCPY_DEFAULT */
#define MAX_H ((size_t)5242880)
#define MAX_W ((size_t)5000000)

#define ROWS 16
#define PITCH 4096
#define BLOCK_BYTES ((size_t)ROWS * PITCH)

typedef struct row {
    const char *name;
    uintptr_t dst;
    size_t dpitch;
    uintptr_t src;
    size_t spitch;
    size_t width;
    size_t height;
    int32_t kind;
    int32_t is_async;
    npualloc_status want_null; /* without an allocator */
    npualloc_status want_alloc; /* with the allocator */
} row;

static void run_rows(const npualloc_allocator *a, const row *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        npualloc_status got = npualloc_check_memcpy2d(NULL, (const void *)r->dst, r->dpitch,
                                                      (const void *)r->src, r->spitch, r->width,
                                                      r->height, r->kind, r->is_async);
        if (got != r->want_null) {
            fprintf(stderr, "row \"%s\" (a = NULL): got %s, expected %s: %s\n", r->name,
                    npualloc_status_name(got), npualloc_status_name(r->want_null), npualloc_last_error());
        }
        CHECK(got == r->want_null);
        got = npualloc_check_memcpy2d(a, (const void *)r->dst, r->dpitch, (const void *)r->src, r->spitch,
                                      r->width, r->height, r->kind, r->is_async);
        if (got != r->want_alloc) {
            fprintf(stderr, "row \"%s\" (allocator): got %s, expected %s: %s\n", r->name,
                    npualloc_status_name(got), npualloc_status_name(r->want_alloc), npualloc_last_error());
        }
        CHECK(got == r->want_alloc);
        if (got != NPUALLOC_OK) {
            CHECK(npualloc_last_error()[0] != '\0');
        }
    }
}

static void check_device_empty(void) {
    aclemu_usage u;
    memset(&u, 0xff, sizeof u);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK_EQ_INT(u.malloc_bytes, 0);
    CHECK_EQ_INT(u.malloc_count, 0);
    CHECK_EQ_INT(u.physical_bytes, 0);
    CHECK_EQ_INT(u.physical_count, 0);
    CHECK_EQ_INT(u.mapped_bytes, 0);
    CHECK_EQ_INT(u.reserved_ranges, 0);
    CHECK_EQ_INT(u.streams, 0);
    CHECK_EQ_INT(u.descs, 0);
}

static void validation_matrix(npualloc_allocator *a, aclrtStream s) {
    void *blk = NULL;
    CHECK_STATUS(npualloc_malloc(a, BLOCK_BYTES, NULL, &blk), NPUALLOC_OK);
    npualloc_block_info info;
    memset(&info, 0, sizeof info);
    CHECK_STATUS(npualloc_query(a, blk, &info), NPUALLOC_OK);
    CHECK(info.addr == (uint64_t)(uintptr_t)blk);
    CHECK(info.size >= BLOCK_BYTES);
    /* The bounds rule is against the block as the allocator rounded it. */
    const size_t size = (size_t)info.size;
    const uintptr_t d = (uintptr_t)blk;
    const uintptr_t end = d + size; /* one past the last byte */

    void *blk2 = NULL;
    CHECK_STATUS(npualloc_malloc(a, BLOCK_BYTES, NULL, &blk2), NPUALLOC_OK);
    const uintptr_t d2 = (uintptr_t)blk2;

    /* A device pointer from the runtime, not from this allocator. */
    void *foreign = NULL;
    CHECK_EQ_INT(aclrtMalloc(&foreign, 1 << 20, ACL_MEM_MALLOC_HUGE_FIRST), 0);
    const uintptr_t f = (uintptr_t)foreign;

    static unsigned char host_buf[64];
    const uintptr_t h = (uintptr_t)host_buf;

    const npualloc_status OK = NPUALLOC_OK, INV = NPUALLOC_ERR_INVALID_ARGUMENT,
                          OOB = NPUALLOC_ERR_COPY_OUT_OF_BOUNDS, UNK = NPUALLOC_ERR_UNKNOWN_POINTER,
                          UNS = NPUALLOC_ERR_UNSUPPORTED;
    const size_t rows_fit = size / PITCH; /* full-pitch rows that fit */

    const row rows[] = {
        /* name, dst, dpitch, src, spitch, width, height, kind, async, a=NULL, allocator */
        {"basic H2D", d, PITCH, h, PITCH, PITCH, ROWS, H2D, 0, OK, OK},
        {"width == dpitch == spitch", d, 64, h, 64, 64, 4, H2D, 0, OK, OK},
        {"width == dpitch + 1", d, 64, h, 65, 65, 4, H2D, 0, INV, INV},
        {"width == spitch + 1", d, 65, h, 64, 65, 4, H2D, 0, INV, INV},
        {"dpitch 0", d, 0, h, 64, 1, 1, H2D, 0, INV, INV},
        /* Height limit: rules pass, then the block is far too small. */
        {"height 5242880", d, 1, h, 1, 1, MAX_H, H2D, 0, OK, MAX_H <= size ? OK : OOB},
        {"height 5242881", d, 1, h, 1, 1, MAX_H + 1, H2D, 0, INV, INV},
        {"height 5242881 async", d, 1, h, 1, 1, MAX_H + 1, H2D, 1, INV, INV},
        {"width 5000000", d, MAX_W, h, MAX_W, MAX_W, 1, H2D, 0, OK, MAX_W <= size ? OK : OOB},
        {"width 5000001", d, MAX_W + 1, h, MAX_W + 1, MAX_W + 1, 1, H2D, 0, INV, INV},
        {"width 5000001 async", d, MAX_W + 1, h, MAX_W + 1, MAX_W + 1, 1, H2D, 1, INV, INV},
        /* NULL pointers: refused, unless nothing is copied. */
        {"NULL dst", 0, 64, h, 64, 64, 1, H2D, 0, INV, INV},
        {"NULL src", d, 64, 0, 64, 64, 1, H2D, 0, INV, INV},
        {"NULL dst, width 0", 0, 64, h, 64, 0, 1, H2D, 0, OK, OK},
        {"NULL src, height 0", d, 64, 0, 64, 64, 0, H2D, 0, OK, OK},
        {"NULL both, width 0, bad kind", 0, 0, 0, 0, 0, 5, 99, 0, OK, OK},
        /* Bounds: the last byte touched is exactly the block's last byte. */
        {"last valid byte, full rows", d, PITCH, h, PITCH, PITCH, rows_fit, H2D, 0, OK, OK},
        {"one row too many", d, PITCH, h, PITCH, PITCH, rows_fit + 1, H2D, 0, OK, OOB},
        {"last row ends at the last byte", end - (rows_fit - 1) * PITCH - 10, PITCH, h, PITCH, 10, rows_fit, H2D, 0, OK, OK},
        {"last row one byte past", end - (rows_fit - 1) * PITCH - 10, PITCH, h, PITCH, 11, rows_fit, H2D, 0, OK, OOB},
        {"single last byte", end - 1, 1, h, 1, 1, 1, H2D, 0, OK, OK},
        {"one past the end", end, 1, h, 1, 1, 1, H2D, 0, OK, end == d2 ? OK : UNK},
        {"last byte, D2H", h, 1, end - 1, 1, 1, 1, D2H, 0, OK, OK},
        {"2 bytes from the last, D2H", h, 2, end - 1, 2, 2, 1, D2H, 0, OK, OOB},
        /* Interior pointers: room for exactly the rest of the block. */
        {"interior, fits", d + 100, size - 100, h, size - 100, size - 100, 1, H2D, 0, OK, OK},
        {"interior, one byte over", d + 100, size - 99, h, size - 99, size - 99, 1, H2D, 0, OK, OOB},
        {"interior rows", d + 100, PITCH, h, PITCH, PITCH - 100, rows_fit, H2D, 0, OK, OK},
        {"interior rows, one over", d + 100, PITCH, h, PITCH, PITCH - 99, rows_fit, H2D, 0, OK, OOB},
        /* D2D (async only) checks both sides. */
        {"D2D async, two blocks", d2, PITCH, d, PITCH, PITCH, ROWS, D2D, 1, OK, OK},
        {"D2D async, src foreign", d2, PITCH, f, PITCH, PITCH, ROWS, D2D, 1, OK, UNK},
        {"D2D async, dst foreign", f, PITCH, d, PITCH, PITCH, ROWS, D2D, 1, OK, UNK},
        /* The sync call refuses D2D as "not supported" (the runtime's 207000),
         * after the height and width limits. */
        {"D2D sync", d2, PITCH, d, PITCH, PITCH, ROWS, D2D, 0, UNS, UNS},
        {"D2D sync, height 5242881", d2, 1, d, 1, 1, MAX_H + 1, D2D, 0, INV, INV},
        /* DEFAULT: the ends in the allocator's blocks are bounds-checked. */
        {"DEFAULT H2D", d, PITCH, h, PITCH, PITCH, ROWS, DEF, 0, OK, OK},
        {"DEFAULT H2D, one row too many", d, PITCH, h, PITCH, PITCH, rows_fit + 1, DEF, 0, OK, OOB},
        {"DEFAULT foreign to host", h, 64, f, 64, 64, 1, DEF, 0, OK, OK},
        {"DEFAULT D2D async", d2, PITCH, d, PITCH, PITCH, ROWS, DEF, 1, OK, OK},
        {"DEFAULT D2D sync", d2, PITCH, d, PITCH, PITCH, ROWS, DEF, 0, OK, INV},
        /* Foreign device pointers and host pointers on the device side. */
        {"foreign dst", f, PITCH, h, PITCH, PITCH, 1, H2D, 0, OK, UNK},
        {"foreign src", h, PITCH, f, PITCH, PITCH, 1, D2H, 0, OK, UNK},
        {"host pointer as device dst", h, 64, h, 64, 64, 1, H2D, 0, OK, UNK},
        /* The host side is not looked up. */
        {"host side not looked up", f, 64, d, 64, 64, 1, D2H, 0, OK, OK},
        /* Near SIZE_MAX: no crash, refused. */
        {"SIZE_MAX pitch and height", d, SIZE_MAX, h, SIZE_MAX, 1, SIZE_MAX, H2D, 0, INV, INV},
        {"SIZE_MAX width", d, SIZE_MAX, h, SIZE_MAX, SIZE_MAX, 1, H2D, 0, INV, INV},
        {"SIZE_MAX pitch, 2 rows", d, SIZE_MAX, h, SIZE_MAX, 1, 2, H2D, 0, OK, OOB},
        {"SIZE_MAX pitch, 3 rows (wraps)", d, SIZE_MAX, h, SIZE_MAX, 2, 3, H2D, 0, OK, OOB},
        {"SIZE_MAX/2 pitch, max height", d, SIZE_MAX / 2, h, SIZE_MAX / 2, MAX_W, MAX_H, H2D, 1, OK, OOB},
        {"dst near SIZE_MAX", SIZE_MAX - 1, 1, h, 1, 1, 1, H2D, 0, OK, UNK},
    };
    run_rows(a, rows, sizeof rows / sizeof rows[0]);

    /* Every kind, sync and async. */
    for (int32_t is_async = 0; is_async <= 1; is_async++) {
        for (int32_t kind = -1; kind <= 8; kind++) {
            uintptr_t dst = kind == D2H ? h : d2, src = kind == H2D ? h : d;
            int ok = kind == H2D || kind == D2H || kind == DEF || (kind == D2D && is_async);
            npualloc_status want = ok ? NPUALLOC_OK : NPUALLOC_ERR_INVALID_ARGUMENT;
            if (kind == D2D && !is_async)
                want = NPUALLOC_ERR_UNSUPPORTED;
            /* DEFAULT between two of the allocator's blocks resolves to D2D,
             * which the sync call refuses as an invalid value. */
            npualloc_status want_a = kind == DEF && !is_async ? NPUALLOC_ERR_INVALID_ARGUMENT : want;
            npualloc_status got_null = npualloc_check_memcpy2d(NULL, (void *)dst, 64, (void *)src, 64, 64, 4, kind, is_async);
            npualloc_status got_a = npualloc_check_memcpy2d(a, (void *)dst, 64, (void *)src, 64, 64, 4, kind, is_async);
            if (got_null != want || got_a != want_a) {
                fprintf(stderr, "kind %d async %d: got %s / %s, expected %s / %s: %s\n", kind, is_async,
                        npualloc_status_name(got_null), npualloc_status_name(got_a), npualloc_status_name(want),
                        npualloc_status_name(want_a), npualloc_last_error());
            }
            CHECK(got_null == want);
            CHECK(got_a == want_a);
        }
    }
    /* A rule failure names the rule. */
    CHECK_STATUS(npualloc_check_memcpy2d(NULL, blk, 64, host_buf, 64, 64, MAX_H + 1, H2D, 0),
                 NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(npualloc_last_error(), "height") != NULL);
    CHECK_STATUS(npualloc_check_memcpy2d(a, blk, PITCH, host_buf, PITCH, PITCH, rows_fit + 1, H2D, 0), OOB);
    CHECK(strstr(npualloc_last_error(), "out of bounds") != NULL);
    /* A handle that is not an allocator. */
    CHECK_STATUS(npualloc_check_memcpy2d((const npualloc_allocator *)host_buf, blk, 64, host_buf, 64, 64, 1, H2D, 0),
                 NPUALLOC_ERR_INVALID_ARGUMENT);

    /* The copy functions refuse the same way and touch nothing. */
    CHECK_STATUS(npualloc_memcpy2d(a, foreign, 64, host_buf, 64, 64, 1, H2D), NPUALLOC_ERR_UNKNOWN_POINTER);
    CHECK_STATUS(npualloc_memcpy2d(a, blk, PITCH, host_buf, PITCH, PITCH, rows_fit + 1, H2D), OOB);
    CHECK_STATUS(npualloc_memcpy2d_async(a, blk, PITCH, host_buf, PITCH, PITCH, rows_fit + 1, H2D, s), OOB);
    CHECK_STATUS(npualloc_memcpy2d(NULL, blk, 64, host_buf, 64, 64, 1, D2D), NPUALLOC_ERR_UNSUPPORTED);
    /* Zero-size copies succeed without the runtime, NULL pointers and all. */
    CHECK_STATUS(npualloc_memcpy2d(a, NULL, 0, NULL, 0, 0, 7, 42), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d(NULL, NULL, 0, NULL, 0, 7, 0, 42), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d_async(a, NULL, 0, NULL, 0, 0, 7, 42, s), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d_async(NULL, NULL, 0, NULL, 0, 7, 0, 42, NULL), NPUALLOC_OK);

    CHECK_EQ_INT(aclrtFree(foreign), 0);
    CHECK_STATUS(npualloc_free(a, blk2), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, blk), NPUALLOC_OK);
}

#define M_ROWS 8
#define M_COLS 24    /* bytes copied per row */
#define H_PITCH 32   /* host pitch */
#define D_PITCH 64   /* device pitch */
#define OUT_PITCH 40 /* host destination pitch: 16 padding bytes per row */
#define SENTINEL 0xA5

static void round_trip(const npualloc_allocator *a) {
    unsigned char src[M_ROWS * H_PITCH], out[M_ROWS * OUT_PITCH];
    for (size_t i = 0; i < sizeof src; i++) {
        src[i] = (unsigned char)(i * 7 + 1);
    }
    memset(out, SENTINEL, sizeof out);
    void *dev = NULL;
    CHECK_STATUS(npualloc_malloc((npualloc_allocator *)a, M_ROWS * D_PITCH, NULL, &dev), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d(a, dev, D_PITCH, src, H_PITCH, M_COLS, M_ROWS, H2D), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d(a, out, OUT_PITCH, dev, D_PITCH, M_COLS, M_ROWS, D2H), NPUALLOC_OK);
    int data_ok = 1, padding_ok = 1;
    for (size_t r = 0; r < M_ROWS; r++) {
        for (size_t c = 0; c < OUT_PITCH; c++) {
            unsigned char got = out[r * OUT_PITCH + c];
            if (c < M_COLS) {
                data_ok &= got == src[r * H_PITCH + c];
            } else {
                padding_ok &= got == SENTINEL;
            }
        }
    }
    CHECK(data_ok);
    CHECK(padding_ok);
    /* The same through the default runtime (a == NULL). */
    memset(out, SENTINEL, sizeof out);
    CHECK_STATUS(npualloc_memcpy2d(NULL, out, OUT_PITCH, dev, D_PITCH, M_COLS, M_ROWS, D2H), NPUALLOC_OK);
    CHECK(memcmp(out, src, M_COLS) == 0);
    CHECK(out[M_COLS] == SENTINEL && out[OUT_PITCH - 1] == SENTINEL);
    CHECK(memcmp(out + (M_ROWS - 1) * OUT_PITCH, src + (M_ROWS - 1) * H_PITCH, M_COLS) == 0);
    CHECK_STATUS(npualloc_free((npualloc_allocator *)a, dev), NPUALLOC_OK);
}

static void async_on_held_stream(npualloc_allocator *a, aclrtStream s) {
    unsigned char src[M_ROWS * H_PITCH], out[M_ROWS * OUT_PITCH];
    for (size_t i = 0; i < sizeof src; i++) {
        src[i] = (unsigned char)(255 - i);
    }
    void *dev = NULL;
    CHECK_STATUS(npualloc_malloc(a, M_ROWS * D_PITCH, s, &dev), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d(a, dev, D_PITCH, src, H_PITCH, M_COLS, M_ROWS, H2D), NPUALLOC_OK);

    memset(out, SENTINEL, sizeof out);
    CHECK_EQ_INT(aclemu_stream_hold(s), 0);
    CHECK_STATUS(npualloc_memcpy2d_async(a, out, OUT_PITCH, dev, D_PITCH, M_COLS, M_ROWS, D2H, s), NPUALLOC_OK);
    int untouched = 1;
    for (size_t i = 0; i < sizeof out; i++) {
        untouched &= out[i] == SENTINEL;
    }
    CHECK(untouched); /* still queued */
    CHECK_EQ_INT(aclemu_stream_release(s), 0);
    CHECK_EQ_INT(aclrtSynchronizeStream(s), 0);
    int data_ok = 1, padding_ok = 1;
    for (size_t r = 0; r < M_ROWS; r++) {
        for (size_t c = 0; c < OUT_PITCH; c++) {
            unsigned char got = out[r * OUT_PITCH + c];
            if (c < M_COLS) {
                data_ok &= got == src[r * H_PITCH + c];
            } else {
                padding_ok &= got == SENTINEL;
            }
        }
    }
    CHECK(data_ok);
    CHECK(padding_ok);

    /* D2D async on the same stream, within blocks. */
    void *dev2 = NULL;
    CHECK_STATUS(npualloc_malloc(a, M_ROWS * D_PITCH, s, &dev2), NPUALLOC_OK);
    CHECK_STATUS(npualloc_memcpy2d_async(a, dev2, D_PITCH, dev, D_PITCH, M_COLS, M_ROWS, D2D, s), NPUALLOC_OK);
    memset(out, SENTINEL, sizeof out);
    CHECK_STATUS(npualloc_memcpy2d_async(a, out, OUT_PITCH, dev2, D_PITCH, M_COLS, M_ROWS, D2H, s), NPUALLOC_OK);
    CHECK_EQ_INT(aclrtSynchronizeStream(s), 0);
    CHECK(memcmp(out + 3 * OUT_PITCH, src + 3 * H_PITCH, M_COLS) == 0);
    CHECK(out[3 * OUT_PITCH + M_COLS] == SENTINEL);

    CHECK_STATUS(npualloc_free(a, dev2), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, dev), NPUALLOC_OK);
}

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    aclrtStream s = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s), 0);
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(NULL, 0, &a), NPUALLOC_OK);
    if (a == NULL) {
        return TEST_SUMMARY();
    }
    validation_matrix(a, s);
    round_trip(a);
    async_on_held_stream(a, s);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    CHECK_EQ_INT(aclrtSynchronizeStream(s), 0);
    CHECK_EQ_INT(aclrtDestroyStream(s), 0);
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    check_device_empty();
    return TEST_SUMMARY();
}
