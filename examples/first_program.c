/*
 * first_program: the smallest complete use of npualloc (README, "A first C
 * program"). Allocates device memory for a stream, frees it into the cache,
 * allocates again from the cache, prints the statistics and cleans up.
 * Exit status 0 on success, 1 on the first failed call.
 */
#include <stdio.h>

#ifdef NPUALLOC_USE_CANN_HEADERS
#include <acl/acl.h>    /* a CANN install: -I$ASCEND_HOME_PATH/include */
#else
#include "acl_decls.h"  /* the project's own ACL declarations (src/sys/) */
#endif
#include "npualloc.h"

#define ACL_OK(call) do { if ((call) != 0) { fprintf(stderr, "%s failed\n", #call); return 1; } } while (0)
#define NPU_OK(call) do { if ((st = (call)) != NPUALLOC_OK) { fprintf(stderr, "%s: %s: %s\n", \
    #call, npualloc_status_name(st), npualloc_last_error()); return 1; } } while (0)

int main(void) {
    npualloc_status st;
    npualloc_allocator *a = NULL;
    aclrtStream stream = NULL;
    void *p = NULL, *q = NULL;

    ACL_OK(aclInit(NULL));              /* once per process, before any other ACL call */
    ACL_OK(aclrtSetDevice(0));          /* the device this thread's streams belong to */
    ACL_OK(aclrtCreateStream(&stream));
    NPU_OK(npualloc_create(NULL, 0, &a));                 /* config from NPUALLOC_CONF */

    NPU_OK(npualloc_malloc(a, 64 << 20, stream, &p));     /* 64 MiB for work on `stream` */
    /* ... queue kernels or copies that use p on `stream` ... */
    NPU_OK(npualloc_free(a, p));                          /* back to the cache, not to ACL */
    NPU_OK(npualloc_malloc(a, 64 << 20, stream, &q));     /* served from the cache */

    npualloc_stats s = { .struct_size = sizeof s };
    NPU_OK(npualloc_get_stats(a, &s));
    printf("allocated %llu MiB, reserved %llu MiB, device mallocs+maps %llu, reused: %s\n",
           (unsigned long long)(s.allocated_bytes >> 20), (unsigned long long)(s.reserved_bytes >> 20),
           (unsigned long long)(s.num_device_mallocs + s.num_maps), p == q ? "yes" : "no");

    NPU_OK(npualloc_free(a, q));
    NPU_OK(npualloc_destroy(a));        /* syncs its streams, returns all device memory */
    ACL_OK(aclrtDestroyStream(stream));
    ACL_OK(aclrtResetDevice(0));
    ACL_OK(aclFinalize());
    return 0;
}
