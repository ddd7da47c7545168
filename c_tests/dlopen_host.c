/*
 * A dlopen host: loads libnpualloc.so by path, resolves only
 * npualloc_get_api, and drives the allocator through the table: create,
 * allocate, register on a stream, run an op through the registered desc,
 * query, free, statistics, snapshot, destroy. ABI versions other than 1 give
 * NULL.
 *
 * NPUALLOC_LIBRARY_PATH names the library to load (a string literal).
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#ifndef NPUALLOC_LIBRARY_PATH
#define NPUALLOC_LIBRARY_PATH "libnpualloc.so"
#endif

typedef const npualloc_api *(*get_api_fn)(uint32_t);

#define CHECK_API(expr, want) CHECK_EQ_INT((expr), (want))

int main(void) {
    void *lib = dlopen(NPUALLOC_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(%s) failed: %s\n", NPUALLOC_LIBRARY_PATH, dlerror());
        return 1;
    }
    get_api_fn get_api;
    *(void **)(&get_api) = dlsym(lib, "npualloc_get_api");
    if (get_api == NULL) {
        fprintf(stderr, "missing npualloc_get_api: %s\n", dlerror());
        return 1;
    }

    const npualloc_api *api = get_api(1);
    CHECK(api != NULL);
    if (api == NULL) return TEST_SUMMARY();
    CHECK_EQ_INT(api->struct_size, sizeof(npualloc_api));
    CHECK_EQ_INT(api->abi_version, 1);
    CHECK_EQ_INT(api->abi_version_fn(), NPUALLOC_ABI_VERSION);
    CHECK(strcmp(api->version(), "") != 0);
    CHECK(get_api(2) == NULL);
    CHECK(strlen(api->last_error()) > 0);
    CHECK(get_api(0) == NULL);
    CHECK(get_api(1) == api);
    CHECK(strcmp(api->status_name(NPUALLOC_ERR_OUT_OF_MEMORY), "NPUALLOC_ERR_OUT_OF_MEMORY") == 0);

    CHECK_EQ_INT(aclrtSetDevice(0), 0);
    aclrtStream s = NULL;
    CHECK_EQ_INT(aclrtCreateStream(&s), 0);

    npualloc_allocator *a = NULL;
    CHECK_API(api->create(NULL, 0, &a), NPUALLOC_OK);
    if (a == NULL) return TEST_SUMMARY();

    void *p = NULL;
    CHECK_API(api->malloc(a, 1000, s, &p), NPUALLOC_OK);
    CHECK(p != NULL && (uintptr_t)p % 512 == 0);
    npualloc_block_info info;
    CHECK_API(api->query(a, (char *)p + 999, &info), NPUALLOC_OK);
    CHECK_EQ_INT(info.addr, (uintptr_t)p);
    CHECK_EQ_INT(info.requested, 1000);
    CHECK(info.stream == s);

    CHECK_API(api->register_(a, s), NPUALLOC_OK);
    size_t sizes[3] = {256, 70000, 2u << 20};
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(aclemu_run_op(s, sizes, 3), 0);

    /* A host-built binding through the exported callbacks. */
    void *binding = NULL;
    CHECK_API(api->binding_create(a, s, &binding), NPUALLOC_OK);
    void *block = api->desc_alloc(binding, 4096);
    CHECK(block != NULL);
    CHECK(api->desc_get_addr(block) != NULL);
    void *advised = api->desc_alloc_advise(binding, 8192, NULL);
    CHECK(advised != NULL);
    api->desc_free(binding, block);
    api->desc_free(binding, advised);
    CHECK_API(api->binding_destroy(binding), NPUALLOC_OK);

    /* 2D copies through the table: a host-to-device copy into the live block,
     * one past its end, and the rules alone (no allocator). */
    {
        char host[4 * 256];
        memset(host, 7, sizeof host);
        CHECK_API(api->check_memcpy2d(a, p, 256, host, 256, 256, 4, 1, 0), NPUALLOC_OK);
        CHECK_API(api->memcpy2d(a, p, 256, host, 256, 256, 3, 1), NPUALLOC_OK);
        CHECK_API(api->check_memcpy2d(a, p, 256, host, 256, 256, 5, 1, 0), NPUALLOC_ERR_COPY_OUT_OF_BOUNDS);
        CHECK_API(api->check_memcpy2d(NULL, p, 256, host, 256, 257, 1, 1, 0), NPUALLOC_ERR_INVALID_ARGUMENT);
        CHECK_API(api->memcpy2d_async(a, host, 256, p, 256, 256, 3, 2, s), NPUALLOC_OK);
    }
    CHECK_API(api->record_stream(a, p, s), NPUALLOC_OK);
    CHECK_API(api->free(a, p), NPUALLOC_OK);
    CHECK_API(api->free(a, p), NPUALLOC_ERR_UNKNOWN_POINTER);
    CHECK(strlen(api->last_error()) > 0);

    npualloc_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_API(api->get_stats(a, &st), NPUALLOC_OK);
    CHECK_EQ_INT(st.allocated_bytes, 0);
    CHECK_EQ_INT(st.num_allocs, st.num_frees);
    CHECK(st.num_allocs >= 63);
    CHECK_API(api->reset_peak_stats(a), NPUALLOC_OK);
    char *json = NULL;
    CHECK_API(api->snapshot_json(a, &json), NPUALLOC_OK);
    CHECK(json != NULL && json[0] == '{');
    api->string_free(json);
    CHECK_API(api->set_memory_fraction(a, 0.5), NPUALLOC_OK);
    /* Sleep, then a partial wake and a full one, through the table. */
    uint64_t none[1] = {0};
    CHECK_API(api->sleep_with(a, NULL, 0, NULL, 0), NPUALLOC_OK);
    CHECK_API(api->wake_with(a, NULL, 1), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK_API(api->wake_with(a, none, 1), NPUALLOC_OK);
    CHECK_API(api->wake(a), NPUALLOC_OK);
    CHECK_API(api->empty_cache(a), NPUALLOC_OK);
    CHECK_API(api->unregister(a, s), NPUALLOC_OK);
    CHECK_API(api->register_(a, s), NPUALLOC_OK);
    CHECK_API(api->destroy(a), NPUALLOC_OK);

    /* The pluggable hooks through the table. */
    api->pluggable_init(1);
    void *q = api->pluggable_malloc(4096, 0, s);
    CHECK(q != NULL);
    size_t seg = 0;
    CHECK(api->pluggable_base_alloc(q, &seg) != NULL);
    CHECK(seg >= 4096);
    api->pluggable_free(q, 4096, 0, s);
    api->pluggable_reset_peak_stats(0);
    api->pluggable_set_memory_fraction(0.9, 0);
    api->pluggable_empty_cache(true);
    CHECK(api->pluggable_base_alloc(q, &seg) == NULL);

    CHECK_EQ_INT(aclrtSynchronizeStream(s), 0);
    CHECK_EQ_INT(aclrtDestroyStream(s), 0);
    CHECK_EQ_INT(aclrtResetDevice(0), 0);
    /* The library stays loaded: its thread-local destructors may still run. */
    return TEST_SUMMARY();
}
