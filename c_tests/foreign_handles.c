/*
 * Values that are not handles, passed as an allocator handle or a binding:
 * the address of a stack variable, of a heap buffer, of a page nobody may
 * read (PROT_NONE), the same page once unmapped, a small integer, and a
 * live handle of the other kind. npualloc never reads through a handle, so
 * none of these crashes (a read of the PROT_NONE or unmapped page would),
 * none is changed, and each call returns INVALID_ARGUMENT (NULL or nothing
 * from a desc callback) with a message saying the value is not an npualloc
 * handle. A live allocator's blocks are left alone throughout.
 */
#define _DEFAULT_SOURCE

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "npualloc.h"
#include "test_helper.h"

/* `v` is refused by every call that takes an allocator handle here, and by
 * every desc callback and the binding destructor. `live_block` is a block of
 * another allocator, which must stay live. */
static void refused_everywhere(void *v, void *live_block) {
    npualloc_allocator *as_allocator = (npualloc_allocator *)v;
    void *sentinel = (void *)(uintptr_t)0x5a5a;
    void *out = sentinel;

    CHECK_STATUS(npualloc_malloc(as_allocator, 4096, NULL, &out), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc allocator handle"));
    CHECK(out == sentinel);
    CHECK_STATUS(npualloc_free(as_allocator, live_block), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc allocator handle"));
    CHECK_STATUS(npualloc_free(as_allocator, NULL), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc allocator handle"));
    CHECK_STATUS(npualloc_destroy(as_allocator), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc allocator handle"));

    CHECK(npualloc_desc_alloc(v, 4096) == NULL);
    CHECK(last_error_has("is not an npualloc binding"));
    CHECK(npualloc_desc_alloc_advise(v, 4096, NULL) == NULL);
    CHECK(last_error_has("is not an npualloc binding"));
    npualloc_desc_free(v, live_block);
    CHECK(last_error_has("is not an npualloc binding"));
    CHECK_STATUS(npualloc_binding_destroy(v), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc binding"));
}

int main(void) {
    npualloc_allocator *a = NULL;
    void *binding = NULL, *block = NULL;
    CHECK_STATUS(npualloc_create(NULL, 0, &a), NPUALLOC_OK);
    CHECK_STATUS(npualloc_binding_create(a, NULL, &binding), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, 4096, NULL, &block), NPUALLOC_OK);

    /* A stack variable and a heap buffer, checked unchanged afterwards. */
    uint64_t on_stack[8];
    memset(on_stack, 0xa5, sizeof on_stack);
    refused_everywhere(on_stack, block);
    static unsigned char heap_copy[4096];
    unsigned char *heap = malloc(sizeof heap_copy);
    CHECK(heap != NULL);
    memset(heap, 0x5a, sizeof heap_copy);
    memcpy(heap_copy, heap, sizeof heap_copy);
    refused_everywhere(heap, block);
    CHECK(memcmp(heap, heap_copy, sizeof heap_copy) == 0);
    for (size_t i = 0; i < sizeof on_stack / sizeof on_stack[0]; i++) {
        CHECK(on_stack[i] == 0xa5a5a5a5a5a5a5a5ULL);
    }
    free(heap);

    /* A page nobody may read, then the same address unmapped. */
    void *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(page != MAP_FAILED);
    if (page != MAP_FAILED) {
        refused_everywhere(page, block);
        CHECK(munmap(page, 4096) == 0);
        refused_everywhere(page, block);
    }

    /* A small integer, and NULL (its own message). */
    refused_everywhere((void *)(uintptr_t)0x1000, block);
    CHECK_STATUS(npualloc_malloc(NULL, 4096, NULL, &block), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("must not be NULL"));

    /* Each kind's live handle as the other kind. */
    CHECK_STATUS(npualloc_free((npualloc_allocator *)binding, block), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc allocator handle"));
    CHECK_STATUS(npualloc_destroy((npualloc_allocator *)binding), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc allocator handle"));
    CHECK(npualloc_desc_alloc((void *)a, 4096) == NULL);
    CHECK(last_error_has("is not an npualloc binding"));
    CHECK_STATUS(npualloc_binding_destroy((void *)a), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("is not an npualloc binding"));

    /* Nothing above touched the live allocator, its block or its binding. */
    CHECK_EQ_INT(active_blocks(a), 1);
    void *through_binding = npualloc_desc_alloc(binding, 4096);
    CHECK(through_binding != NULL);
    npualloc_desc_free(binding, through_binding);
    CHECK_STATUS(npualloc_free(a, block), NPUALLOC_OK);
    CHECK_EQ_INT(active_blocks(a), 0);
    CHECK_STATUS(npualloc_binding_destroy(binding), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);
    return TEST_SUMMARY();
}
