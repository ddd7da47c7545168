/*
 * inference_demo: npualloc serving a model-like workload on the ACL emulator.
 *
 * One allocator is registered on two streams, the way a framework hands it to
 * the runtime. Ops then run on both streams through the runtime's path
 * (aclemu_run_op allocates each op's workspaces through the registered
 * allocator, checks them and frees them), while the "framework" allocates
 * activations directly with npualloc_malloc / npualloc_free in a
 * forward/backward order (last allocated, first freed). At the end the demo
 * prints how many allocations npualloc served, how much memory it held, and
 * how many device calls it made compared with calling aclrtMalloc for every
 * request; after teardown it checks with the emulator that nothing leaked.
 *
 * Run it through scripts/demo.sh, or by hand with NPUALLOC_ACL_LIBRARY set to
 * the emulator's libascendcl.so. NPUALLOC_CONF, when set, configures the
 * allocator (e.g. NPUALLOC_CONF=expandable_segments:false).
 *
 * Exit status: 0 on success, 1 if any call failed or something leaked.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"

#define DEVICE 0
#define STEPS 10           /* forward + backward passes */
#define LAYERS 12          /* activations per forward pass */
#define MAX_WORKSPACES 4   /* workspaces per op */

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* ---- error handling: every call is checked, the first failure ends the demo ---- */

static void fail_npualloc(const char *what, npualloc_status st) {
    fprintf(stderr, "inference_demo: %s failed: %s: %s\n", what, npualloc_status_name(st),
            npualloc_last_error());
    exit(1);
}

#define NPU_CHECK(call)                          \
    do {                                         \
        npualloc_status st_ = (call);            \
        if (st_ != NPUALLOC_OK) {                \
            fail_npualloc(#call, st_);           \
        }                                        \
    } while (0)

#define ACL_CHECK(call)                                                                      \
    do {                                                                                     \
        long long rc_ = (long long)(call);                                                   \
        if (rc_ != 0) {                                                                      \
            fprintf(stderr, "inference_demo: %s failed: error %lld\n", #call, rc_);          \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* ---- a small deterministic size generator (xorshift64*) ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t rng_between(size_t lo, size_t hi) { /* in [lo, hi] */
    return lo + (size_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* An op workspace: mostly small, sometimes a few MiB, rarely tens of MiB. */
static size_t workspace_size(void) {
    unsigned pick = (unsigned)(rng_next() % 100);
    if (pick < 50) return rng_between(1 * KIB, 64 * KIB);
    if (pick < 80) return rng_between(64 * KIB, 2 * MIB);
    if (pick < 95) return rng_between(2 * MIB, 16 * MIB);
    return rng_between(16 * MIB, 48 * MIB);
}

/* ---- the workload ---- */

typedef struct demo {
    npualloc_allocator *alloc;
    aclrtStream streams[2];
    uint64_t ops;          /* ops run through aclemu_run_op */
    uint64_t workspaces;   /* workspace blocks those ops allocated */
    uint64_t direct;       /* npualloc_malloc calls */
} demo;

/* One op on `stream` with 1..MAX_WORKSPACES workspaces, served by the
 * allocator registered on that stream. */
static void run_op(demo *d, aclrtStream stream) {
    size_t sizes[MAX_WORKSPACES];
    size_t n = 1 + (size_t)(rng_next() % MAX_WORKSPACES);
    for (size_t i = 0; i < n; i++) sizes[i] = workspace_size();
    aclError rc = aclemu_run_op(stream, sizes, n);
    if (rc != 0) {
        fprintf(stderr, "inference_demo: aclemu_run_op failed: error %d (%s)\n", (int)rc,
                npualloc_last_error());
        exit(1);
    }
    d->ops++;
    d->workspaces += n;
}

/* Activation size of a layer: a fixed shape per layer times the step's batch
 * (8..32 rows of 32), so shapes repeat across steps but not exactly. */
static size_t activation_size(int layer, unsigned batch) {
    size_t per_row = (size_t)(1 + layer % 4) * 48 * KIB + (size_t)layer * 4 * KIB;
    return per_row * batch;
}

/* One forward + backward pass on the compute stream (streams[0]), with the
 * side stream (streams[1], e.g. communication) running its own ops alongside. */
static void train_like_step(demo *d) {
    aclrtStream main_stream = d->streams[0];
    aclrtStream side_stream = d->streams[1];
    unsigned batch = 8 + 8 * (unsigned)(rng_next() % 4); /* 8, 16, 24 or 32 */
    void *act[LAYERS];

    for (int l = 0; l < LAYERS; l++) { /* forward: activations pile up */
        NPU_CHECK(npualloc_malloc(d->alloc, activation_size(l, batch), main_stream, &act[l]));
        d->direct++;
        run_op(d, main_stream);
        run_op(d, side_stream);
    }
    for (int l = LAYERS - 1; l >= 0; l--) { /* backward: last in, first out */
        void *grad = NULL;
        NPU_CHECK(npualloc_malloc(d->alloc, activation_size(l, batch), main_stream, &grad));
        d->direct++;
        run_op(d, main_stream);
        run_op(d, side_stream);
        NPU_CHECK(npualloc_free(d->alloc, grad));
        NPU_CHECK(npualloc_free(d->alloc, act[l]));
    }
}

/* ---- reporting ---- */

static double mib(uint64_t bytes) { return (double)bytes / (double)MIB; }

int main(void) {
    demo d;
    memset(&d, 0, sizeof d);

    ACL_CHECK(aclInit(NULL));
    ACL_CHECK(aclrtSetDevice(DEVICE));

    const char *conf = getenv("NPUALLOC_CONF");
    NPU_CHECK(npualloc_create(NULL, DEVICE, &d.alloc));
    ACL_CHECK(aclrtCreateStream(&d.streams[0]));
    ACL_CHECK(aclrtCreateStream(&d.streams[1]));
    NPU_CHECK(npualloc_register(d.alloc, d.streams[0]));
    NPU_CHECK(npualloc_register(d.alloc, d.streams[1]));

    for (int step = 0; step < STEPS; step++) train_like_step(&d);
    ACL_CHECK(aclrtSynchronizeStream(d.streams[0]));
    ACL_CHECK(aclrtSynchronizeStream(d.streams[1]));

    npualloc_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    NPU_CHECK(npualloc_get_stats(d.alloc, &st));

    uint64_t served = st.num_allocs;
    if (served != d.workspaces + d.direct || st.num_frees != served || st.allocated_bytes != 0) {
        fprintf(stderr,
                "inference_demo: counters disagree: %" PRIu64 " allocs, %" PRIu64
                " frees, %" PRIu64 " bytes still allocated; expected %" PRIu64 " allocs\n",
                st.num_allocs, st.num_frees, st.allocated_bytes, d.workspaces + d.direct);
        return 1;
    }
    /* Every call that got device memory or mapped it counts against npualloc. */
    uint64_t device_calls = st.num_device_mallocs + st.num_maps + st.num_physical_mallocs;

    printf("npualloc %s inference demo on the ACL emulator (device %d, config: %s)\n\n",
           npualloc_version(), DEVICE, conf != NULL && conf[0] != '\0' ? conf : "defaults");
    printf("workload\n");
    printf("  ops run on 2 registered streams      %8" PRIu64 "  (%" PRIu64
           " workspaces, 1 KiB..48 MiB)\n", d.ops, d.workspaces);
    printf("  activations malloc'ed/freed (LIFO)   %8" PRIu64 "  (%d forward/backward passes x %d layers x 2)\n",
           d.direct, STEPS, LAYERS);
    printf("  allocations served                   %8" PRIu64 "\n\n", served);
    printf("memory\n");
    printf("  allocated peak                       %8.1f MiB\n", mib(st.allocated_bytes_peak));
    printf("  reserved peak                        %8.1f MiB  (allocated peak / reserved peak = %.0f%%)\n",
           mib(st.reserved_bytes_peak),
           st.reserved_bytes_peak ? 100.0 * (double)st.allocated_bytes_peak / (double)st.reserved_bytes_peak : 0.0);
    printf("  reserved now / segments              %8.1f MiB  / %" PRIu64 " segments\n",
           mib(st.reserved_bytes), st.segments);
    printf("    in segments / unmapped handles     %8.1f MiB  / %.1f MiB\n\n", mib(st.segment_bytes),
           mib(st.cached_handle_bytes));
    printf("device calls\n");
    printf("  aclrtMalloc                          %8" PRIu64 "\n", st.num_device_mallocs);
    printf("  aclrtMallocPhysical                  %8" PRIu64 "\n", st.num_physical_mallocs);
    printf("  aclrtMapMem                          %8" PRIu64 "\n", st.num_maps);
    printf("  stream syncs                         %8" PRIu64 "\n", st.num_syncs);
    if (device_calls > 0 && device_calls <= served) {
        printf("  saved vs aclrtMalloc per request     %8" PRIu64 "  (%" PRIu64 " requests, %" PRIu64
               " device calls: %.1fx fewer)\n",
               served - device_calls, served, device_calls, (double)served / (double)device_calls);
    } else {
        printf("  saved vs aclrtMalloc per request     %8d  (%" PRIu64 " requests, %" PRIu64 " device calls)\n",
               0, served, device_calls);
    }

    NPU_CHECK(npualloc_unregister(d.alloc, d.streams[0]));
    NPU_CHECK(npualloc_unregister(d.alloc, d.streams[1]));
    NPU_CHECK(npualloc_destroy(d.alloc));
    if (npualloc_last_error()[0] != '\0') { /* destroy's note about live blocks */
        fprintf(stderr, "inference_demo: npualloc_destroy: %s\n", npualloc_last_error());
        return 1;
    }
    ACL_CHECK(aclrtDestroyStream(d.streams[0]));
    ACL_CHECK(aclrtDestroyStream(d.streams[1]));
    ACL_CHECK(aclrtResetDevice(DEVICE));
    ACL_CHECK(aclFinalize());

    aclemu_usage u;
    ACL_CHECK(aclemu_get_usage(DEVICE, &u));
    int leaked = u.malloc_count || u.malloc_bytes || u.physical_count || u.physical_bytes ||
                 u.mapped_bytes || u.reserved_ranges || u.streams || u.events || u.descs;
    printf("\nafter teardown the emulator holds: %" PRIu64 " mallocs (%" PRIu64 " B), %" PRIu64
           " physical handles, %" PRIu64 " B mapped, %" PRIu64 " reserved ranges, %" PRIu64
           " streams, %" PRIu64 " events, %" PRIu64 " allocator descs\n",
           u.malloc_count, u.malloc_bytes, u.physical_count, u.mapped_bytes, u.reserved_ranges,
           u.streams, u.events, u.descs);
    if (leaked) {
        printf("LEAK: device resources outlived the allocator\n");
        return 1;
    }
    printf("no leaks\n");
    return 0;
}
