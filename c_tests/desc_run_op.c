/*
 * The drop-in desc path: the allocator registered on two streams serves the
 * ops the runtime runs there (aclemu_run_op allocates, checks and frees each
 * op's workspaces through the registered callbacks), and the register /
 * unregister rules: NULL stream refused, double register and unknown
 * unregister OK, destroy unregisters every stream and destroys its descs.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define OPS_PER_STREAM 300

static npualloc_stats get_stats(const npualloc_allocator *a) {
    npualloc_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_STATUS(npualloc_get_stats(a, &s), NPUALLOC_OK);
    return s;
}

/* Workspace sizes from small to a few MiB, varied per op. */
static size_t op_sizes(unsigned op, size_t sizes[4]) {
    static const size_t base[] = {1, 512, 4096, 100000, 1 << 20, (3 << 20) + 17, 257, 65536};
    size_t n = 1 + op % 4;
    for (size_t i = 0; i < n; i++) {
        sizes[i] = base[(op * 7 + i * 3) % 8] + (op % 13) * 32;
    }
    return n;
}

static void run_ops_on_two_streams(const char *config) {
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create(config, 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    aclrtStream s1 = NULL, s2 = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s1), 0);
    CHECK_EQ_INT(aclrtCreateStream(&s2), 0);
    CHECK_STATUS(npualloc_register(a, s1), NPUALLOC_OK);
    CHECK_STATUS(npualloc_register(a, s2), NPUALLOC_OK);

    int failures = 0;
    for (unsigned op = 0; op < OPS_PER_STREAM; op++) {
        size_t sizes[4];
        size_t n = op_sizes(op, sizes);
        if (aclemu_run_op(s1, sizes, n) != 0) failures++;
        n = op_sizes(op + 5, sizes);
        if (aclemu_run_op(s2, sizes, n) != 0) failures++;
    }
    CHECK_EQ_INT(failures, 0);
    CHECK_EQ_INT(aclrtSynchronizeStream(s1), 0);
    CHECK_EQ_INT(aclrtSynchronizeStream(s2), 0);

    npualloc_stats st = get_stats(a);
    CHECK(st.num_allocs >= 2 * OPS_PER_STREAM);
    CHECK_EQ_INT(st.num_allocs, st.num_frees);
    CHECK_EQ_INT(st.allocated_bytes, 0);
    CHECK_EQ_INT(st.active_blocks, 0);
    CHECK(st.reserved_bytes > 0);

    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    CHECK_EQ_INT(aclrtDestroyStream(s1), 0);
    CHECK_EQ_INT(aclrtDestroyStream(s2), 0);
}

static void registration_rules(void) {
    npualloc_allocator *a = NULL;
    CHECK_STATUS(npualloc_create("", 0, &a), NPUALLOC_OK);
    if (a == NULL) return;
    aclrtStream s1 = NULL, s2 = NULL, never = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s1), 0);
    CHECK_EQ_INT(aclrtCreateStream(&s2), 0);
    CHECK_EQ_INT(aclrtCreateStream(&never), 0);

    aclemu_usage u0, u;
    CHECK_EQ_INT(aclemu_get_usage(0, &u0), 0);

    /* The default stream cannot carry an allocator. */
    CHECK_STATUS(npualloc_register(a, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(strlen(npualloc_last_error()) > 0);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK_EQ_INT(u.descs, u0.descs);

    /* Twice is fine and makes one desc. */
    CHECK_STATUS(npualloc_register(a, s1), NPUALLOC_OK);
    CHECK_STATUS(npualloc_register(a, s1), NPUALLOC_OK);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK_EQ_INT(u.descs, u0.descs + 1);
    CHECK_STATUS(npualloc_register(a, s2), NPUALLOC_OK);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK_EQ_INT(u.descs, u0.descs + 2);

    aclrtAllocatorDesc desc = NULL;
    CHECK_EQ_INT(aclrtAllocatorGetByStream(s1, &desc, NULL, NULL, NULL, NULL, NULL), 0);
    CHECK(desc != NULL);

    /* Unregistering a stream that was never registered is OK. */
    CHECK_STATUS(npualloc_unregister(a, never), NPUALLOC_OK);
    CHECK_STATUS(npualloc_unregister(a, NULL), NPUALLOC_OK);

    /* Unregister then register again works. */
    CHECK_STATUS(npualloc_unregister(a, s2), NPUALLOC_OK);
    CHECK(aclrtAllocatorGetByStream(s2, &desc, NULL, NULL, NULL, NULL, NULL) != 0);
    CHECK_STATUS(npualloc_unregister(a, s2), NPUALLOC_OK);
    CHECK_STATUS(npualloc_register(a, s2), NPUALLOC_OK);

    size_t sizes[2] = {4096, 1 << 20};
    CHECK_EQ_INT(aclemu_run_op(s1, sizes, 2), 0);
    CHECK_EQ_INT(aclemu_run_op(s2, sizes, 2), 0);

    /* Destroy unregisters both streams and destroys their descs. */
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    desc = NULL;
    CHECK(aclrtAllocatorGetByStream(s1, &desc, NULL, NULL, NULL, NULL, NULL) != 0);
    CHECK(aclrtAllocatorGetByStream(s2, &desc, NULL, NULL, NULL, NULL, NULL) != 0);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK_EQ_INT(u.descs, 0);
    CHECK_EQ_INT(u.malloc_bytes, 0);
    /* With nothing registered, the graph engine runs the op with its own
     * allocator: npualloc's destroyed callbacks are not called, and the
     * device memory stays untouched. */
    CHECK_EQ_INT(aclemu_run_op(s1, sizes, 2), 0);
    CHECK_EQ_INT(aclemu_get_usage(0, &u), 0);
    CHECK_EQ_INT(u.malloc_bytes, 0);

    CHECK_EQ_INT(aclrtDestroyStream(s1), 0);
    CHECK_EQ_INT(aclrtDestroyStream(s2), 0);
    CHECK_EQ_INT(aclrtDestroyStream(never), 0);
}

int main(void) {
    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    run_ops_on_two_streams(NULL);
    run_ops_on_two_streams("");
    run_ops_on_two_streams("expandable_segments:false");
    registration_rules();
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    return TEST_SUMMARY();
}
