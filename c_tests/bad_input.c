/*
 * The bad-input matrix: every export given a NULL handle, a NULL out-pointer,
 * size 0, a size near SIZE_MAX, a foreign pointer, a double free, or a
 * pointer of another allocator returns its documented status, leaves the
 * allocator's state as it was (statistics compared before and after) and
 * leaves a non-empty npualloc_last_error().
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

static npualloc_allocator *A; /* the allocator whose state must not change */
static npualloc_stats before;

static npualloc_stats stats_of(const npualloc_allocator *a) {
    npualloc_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (npualloc_get_stats(a, &s) != NPUALLOC_OK) {
        fprintf(stderr, "get_stats failed: %s\n", npualloc_last_error());
    }
    return s;
}

static void snap(void) { before = stats_of(A); }

static int unchanged(void) {
    npualloc_stats now = stats_of(A);
    int same = memcmp(&now, &before, sizeof now) == 0;
    if (!same) fprintf(stderr, "  statistics changed\n");
    return same;
}

/* The last error of the latest refused call (checking the statistics
 * afterwards clears the thread's message). */
static char last[1024];

static int has_error(void) {
    snprintf(last, sizeof last, "%s", npualloc_last_error());
    return last[0] != '\0';
}

/* A status call that must fail with `status`, change nothing and explain why. */
#define REFUSED(expr, status)           \
    do {                                \
        snap();                         \
        CHECK_STATUS((expr), (status)); \
        CHECK(has_error());             \
        CHECK(unchanged());             \
    } while (0)

/* A pointer-returning call that must return NULL, change nothing and explain. */
#define REFUSED_NULL(expr)     \
    do {                       \
        snap();                \
        CHECK((expr) == NULL); \
        CHECK(has_error());    \
        CHECK(unchanged());    \
    } while (0)

/* A void call that must change nothing and explain. */
#define REFUSED_VOID(expr)  \
    do {                    \
        snap();             \
        expr;               \
        CHECK(has_error()); \
        CHECK(unchanged()); \
    } while (0)

/* A call that must succeed without doing anything: OK (for status calls),
 * no message, statistics unchanged. Freeing NULL is such a call at every
 * entry point, as with C's free. */
#define NO_OP(expr)              \
    do {                         \
        snap();                  \
        expr;                    \
        CHECK(!has_error());     \
        CHECK(unchanged());      \
    } while (0)

/* Aligned zeroed memory that is not an allocator, a binding or a block. */
static uint64_t not_a_handle[512];

static void lifecycle(void) {
    npualloc_allocator *out = (npualloc_allocator *)not_a_handle;
    REFUSED(npualloc_create(NULL, 0, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_create("", -1, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(out == (npualloc_allocator *)not_a_handle);
    REFUSED(npualloc_create("no_such_key:1", 0, &out), NPUALLOC_ERR_BAD_CONFIG);
    CHECK(strstr(last, "no_such_key") != NULL);
    REFUSED(npualloc_create("garbage_collection_threshold:2", 0, &out), NPUALLOC_ERR_BAD_CONFIG);
    CHECK(out == (npualloc_allocator *)not_a_handle);
    /* A device id the runtime does not have is a bad argument naming its ids. */
    REFUSED(npualloc_create("", 4096, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(last, "device 4096 is not a device of this runtime") != NULL);
    CHECK(out == (npualloc_allocator *)not_a_handle);

    CHECK_STATUS(npualloc_destroy(NULL), NPUALLOC_OK);
    REFUSED(npualloc_destroy((npualloc_allocator *)not_a_handle), NPUALLOC_ERR_INVALID_ARGUMENT);
}

static void direct_use(npualloc_allocator *other) {
    void *p = NULL, *q = NULL, *theirs = NULL;
    CHECK_STATUS(npualloc_malloc(A, 4096, NULL, &p), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(A, 1 << 20, NULL, &q), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(other, 8192, NULL, &theirs), NPUALLOC_OK);
    void *out = not_a_handle;
    int on_stack = 0;

    /* malloc */
    REFUSED(npualloc_malloc(NULL, 64, NULL, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_malloc((npualloc_allocator *)not_a_handle, 64, NULL, &out),
            NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_malloc(A, 64, NULL, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_malloc(A, 0, NULL, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_malloc(A, SIZE_MAX, NULL, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_malloc(A, SIZE_MAX - 511, NULL, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_malloc(A, SIZE_MAX / 2 + 1, NULL, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    /* A stream handle the runtime does not know, and a destroyed stream. */
    REFUSED(npualloc_malloc(A, 64, (aclrtStream)not_a_handle, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(last, "not a live stream") != NULL);
    aclrtStream gone = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&gone), 0);
    CHECK_EQ_INT(aclrtDestroyStream(gone), 0);
    REFUSED(npualloc_malloc(A, 64, gone, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(out == not_a_handle);

    /* free */
    REFUSED(npualloc_free(NULL, p), NPUALLOC_ERR_INVALID_ARGUMENT);
    NO_OP(CHECK_STATUS(npualloc_free(A, NULL), NPUALLOC_OK));
    REFUSED(npualloc_free(A, &on_stack), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_free(A, (char *)p + 512), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_free(A, theirs), NPUALLOC_ERR_UNKNOWN_POINTER);
    CHECK_STATUS(npualloc_free(A, p), NPUALLOC_OK);
    REFUSED(npualloc_free(A, p), NPUALLOC_ERR_UNKNOWN_POINTER);
    /* A stale address (freed, then handed out again by a later malloc of its
     * size) cannot be told from its new block: freeing it again frees that
     * block, as npualloc_free documents; the block is then gone. */
    void *tenant = NULL;
    CHECK_STATUS(npualloc_malloc(A, 4096, NULL, &tenant), NPUALLOC_OK);
    CHECK(tenant == p);
    CHECK_STATUS(npualloc_free(A, p), NPUALLOC_OK);
    REFUSED(npualloc_free(A, tenant), NPUALLOC_ERR_UNKNOWN_POINTER);

    /* record_stream */
    aclrtStream s = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s), 0);
    REFUSED(npualloc_record_stream(NULL, q, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_record_stream(A, NULL, s), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_record_stream(A, p, s), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_record_stream(A, &on_stack, s), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_record_stream(A, theirs, s), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_record_stream(A, q, (aclrtStream)not_a_handle), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(last, "not a live stream") != NULL);

    /* empty_cache, set_memory_fraction */
    REFUSED(npualloc_empty_cache(NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_set_memory_fraction(NULL, 0.5), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_set_memory_fraction(A, -1e-300), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_set_memory_fraction(A, -0.5), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_set_memory_fraction(A, 1.5), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_set_memory_fraction(A, NAN), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_set_memory_fraction(A, INFINITY), NPUALLOC_ERR_INVALID_ARGUMENT);

    /* query */
    npualloc_block_info info;
    memset(&info, 0xab, sizeof info);
    REFUSED(npualloc_query(NULL, q, &info), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_query(A, q, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_query(A, NULL, &info), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_query(A, p, &info), NPUALLOC_ERR_UNKNOWN_POINTER);
    REFUSED(npualloc_query(A, theirs, &info), NPUALLOC_ERR_UNKNOWN_POINTER);
    CHECK(info.addr == 0xababababababababULL);

    /* statistics */
    npualloc_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    REFUSED(npualloc_get_stats(NULL, &st), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_get_stats(A, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    st.struct_size = 4;
    REFUSED(npualloc_get_stats(A, &st), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(st.version, 0);
    REFUSED(npualloc_reset_peak_stats(NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    char *json = (char *)not_a_handle;
    REFUSED(npualloc_snapshot_json(NULL, &json), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_snapshot_json(A, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(json == (char *)not_a_handle);
    npualloc_string_free(NULL);

    /* memory history and the PyTorch-format snapshot */
    REFUSED(npualloc_record_history(NULL, 10), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_record_history((npualloc_allocator *)not_a_handle, 10), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_snapshot_pytorch_json(NULL, &json), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_snapshot_pytorch_json(A, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(json == (char *)not_a_handle);
    REFUSED(npualloc_pluggable_record_history(-1, 10), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pluggable_record_history(1 << 20, 10), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pluggable_snapshot_pytorch_json(0, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_pluggable_snapshot_pytorch_json(-1, &json), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(json == (char *)not_a_handle);
    CHECK_STATUS(npualloc_record_history(A, 4), NPUALLOC_OK);
    CHECK_STATUS(npualloc_snapshot_pytorch_json(A, &json), NPUALLOC_OK);
    CHECK(strncmp(json, "{\"segments\":[", 13) == 0);
    CHECK(strstr(json, "\"device_traces\":[") != NULL);
    npualloc_string_free(json);
    json = (char *)not_a_handle;
    CHECK_STATUS(npualloc_record_history(A, 0), NPUALLOC_OK);

    /* names */
    CHECK(npualloc_status_name((npualloc_status)12345) != NULL);
    CHECK(strlen(npualloc_status_name((npualloc_status)12345)) > 0);
    REFUSED_NULL(npualloc_get_api(0));
    REFUSED_NULL(npualloc_get_api(2));

    CHECK_STATUS(npualloc_free(A, q), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(other, theirs), NPUALLOC_OK);
    CHECK_EQ_INT(aclrtDestroyStream(s), 0);
}

static aclrtStream used_stream;

static void desc_path(npualloc_allocator *other) {
    aclrtStream s = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s), 0);
    REFUSED(npualloc_register(NULL, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_register(A, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_unregister(NULL, s), NPUALLOC_ERR_INVALID_ARGUMENT);
    /* A stream the runtime does not know, and a destroyed one: refused as
     * npualloc_malloc refuses them, and no desc is created. */
    aclemu_usage u0, u1;
    CHECK_EQ_INT(aclemu_get_usage(0, &u0), 0);
    REFUSED(npualloc_register(A, (aclrtStream)not_a_handle), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(last, "not a live stream") != NULL);
    aclrtStream gone = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&gone), 0);
    CHECK_EQ_INT(aclrtDestroyStream(gone), 0);
    REFUSED(npualloc_register(A, gone), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(aclemu_get_usage(0, &u1), 0);
    CHECK_EQ_INT(u1.descs, u0.descs);
    /* Unregistering a stream that was never registered is OK. */
    CHECK_STATUS(npualloc_unregister(A, (aclrtStream)not_a_handle), NPUALLOC_OK);

    void *binding = not_a_handle;
    REFUSED(npualloc_binding_create(NULL, s, &binding), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_binding_create(A, s, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_binding_create(A, (aclrtStream)not_a_handle, &binding), NPUALLOC_ERR_INVALID_ARGUMENT);
    REFUSED(npualloc_binding_create(A, gone, &binding), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(binding == not_a_handle);
    CHECK_STATUS(npualloc_binding_destroy(NULL), NPUALLOC_OK);
    REFUSED(npualloc_binding_destroy(not_a_handle), NPUALLOC_ERR_INVALID_ARGUMENT);

    CHECK_STATUS(npualloc_binding_create(A, s, &binding), NPUALLOC_OK);
    void *theirs_binding = NULL;
    CHECK_STATUS(npualloc_binding_create(other, s, &theirs_binding), NPUALLOC_OK);
    void *block = npualloc_desc_alloc(binding, 4096);
    CHECK(block != NULL);
    void *theirs = npualloc_desc_alloc(theirs_binding, 4096);
    CHECK(theirs != NULL);
    CHECK(npualloc_desc_get_addr(block) == block);
    int on_stack = 0;

    /* A live handle of the other, smaller kind is refused without reading
     * past its end (valgrind's memcheck run sees any such read). */
    {
        void *out = NULL;
        REFUSED(npualloc_malloc((npualloc_allocator *)binding, 64, NULL, &out),
                NPUALLOC_ERR_INVALID_ARGUMENT);
        CHECK(out == NULL);
        REFUSED(npualloc_free((npualloc_allocator *)binding, block), NPUALLOC_ERR_INVALID_ARGUMENT);
    }

    REFUSED_NULL(npualloc_desc_alloc(NULL, 64));
    REFUSED_NULL(npualloc_desc_alloc(not_a_handle, 64));
    REFUSED_NULL(npualloc_desc_alloc(binding, 0));
    REFUSED_NULL(npualloc_desc_alloc(binding, SIZE_MAX));
    REFUSED_NULL(npualloc_desc_alloc_advise(NULL, 64, NULL));
    REFUSED_NULL(npualloc_desc_alloc_advise(binding, 0, NULL));
    REFUSED_NULL(npualloc_desc_alloc_advise(binding, SIZE_MAX - 511, block));

    REFUSED_VOID(npualloc_desc_free(NULL, block));
    NO_OP(npualloc_desc_free(binding, NULL));
    /* The binding is still checked when the block is NULL. */
    REFUSED_VOID(npualloc_desc_free(NULL, NULL));
    REFUSED_VOID(npualloc_desc_free(not_a_handle, NULL));
    REFUSED_VOID(npualloc_desc_free(binding, &on_stack));
    REFUSED_VOID(npualloc_desc_free(binding, theirs));
    REFUSED_VOID(npualloc_desc_free(binding, (char *)block + 512));
    npualloc_desc_free(binding, block);
    CHECK(!has_error());
    REFUSED_VOID(npualloc_desc_free(binding, block));

    npualloc_desc_free(theirs_binding, theirs);
    CHECK_STATUS(npualloc_binding_destroy(binding), NPUALLOC_OK);
    CHECK_STATUS(npualloc_binding_destroy(theirs_binding), NPUALLOC_OK);
    /* The stream stays alive until the allocators that used it are destroyed. */
    used_stream = s;
}

static void pluggable(void) {
    /* The pluggable allocator of device 0 is separate from A, so A's
     * statistics must not move; its own refusals must still explain. */
    void *p = npualloc_pluggable_malloc(4096, 0, NULL);
    CHECK(p != NULL);
    int on_stack = 0;
    size_t size = 12345;

    snap();
    CHECK(npualloc_pluggable_malloc(0, 0, NULL) == NULL);
    CHECK(unchanged());
    REFUSED_NULL(npualloc_pluggable_malloc(SIZE_MAX, 0, NULL));
    REFUSED_NULL(npualloc_pluggable_malloc(64, -1, NULL));
    REFUSED_NULL(npualloc_pluggable_malloc(64, 1000, NULL));
    REFUSED_VOID(npualloc_pluggable_free(&on_stack, 4, 0, NULL));
    REFUSED_VOID(npualloc_pluggable_free(p, 4096, 1, NULL));
    REFUSED_VOID(npualloc_pluggable_free(p, 4096, -1, NULL));
    REFUSED_NULL(npualloc_pluggable_base_alloc(&on_stack, &size));
    REFUSED_NULL(npualloc_pluggable_base_alloc(p, NULL));
    CHECK_EQ_INT(size, 12345);
    REFUSED_VOID(npualloc_pluggable_set_memory_fraction(1.5, 0));
    REFUSED_VOID(npualloc_pluggable_set_memory_fraction(0.5, -3));
    REFUSED_VOID(npualloc_pluggable_reset_peak_stats(-1));
    REFUSED_VOID(npualloc_pluggable_init(0));
    REFUSED_VOID(npualloc_pluggable_init(-2));

    CHECK(npualloc_pluggable_base_alloc(p, &size) != NULL);
    npualloc_pluggable_free(p, 4096, 0, NULL);
    CHECK(!has_error());
    REFUSED_VOID(npualloc_pluggable_free(p, 4096, 0, NULL));
    NO_OP(npualloc_pluggable_free(NULL, 0, 0, NULL));
    NO_OP(npualloc_pluggable_free(NULL, 4096, 0, NULL));
}

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    npualloc_allocator *other = NULL;
    CHECK_STATUS(npualloc_create("", 0, &A), NPUALLOC_OK);
    CHECK_STATUS(npualloc_create("", 0, &other), NPUALLOC_OK);
    if (A == NULL || other == NULL) return TEST_SUMMARY();

    lifecycle();
    direct_use(other);
    desc_path(other);
    pluggable();

    npualloc_stats end = stats_of(A);
    CHECK_EQ_INT(end.allocated_bytes, 0);
    CHECK_EQ_INT(end.num_ooms, 0);
    CHECK_STATUS(npualloc_destroy(A), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(other), NPUALLOC_OK);
    CHECK_EQ_INT(aclrtDestroyStream(used_stream), 0);
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    return TEST_SUMMARY();
}
