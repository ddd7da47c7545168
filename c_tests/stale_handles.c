/*
 * Handles used after they were destroyed: a second destroy, a free through a
 * destroyed allocator handle, and a host binding that outlived its
 * allocator. Each is refused with INVALID_ARGUMENT (or NULL from a desc
 * callback) and a message naming the destroyed handle, also after another
 * allocator was created (which may take the destroyed one's registry slot,
 * never its handle value, so the stale handle can never reach the new
 * allocator). The memcheck run of the C tests sees any read of freed memory
 * here.
 */
#include "npualloc.h"
#include "test_helper.h"
#include <string.h>

int main(void) {
    npualloc_allocator *a = NULL, *b = NULL;
    void *binding = NULL, *p = NULL, *q = NULL;

    CHECK_STATUS(npualloc_create(NULL, 0, &a), NPUALLOC_OK);
    CHECK_STATUS(npualloc_binding_create(a, NULL, &binding), NPUALLOC_OK);
    CHECK_STATUS(npualloc_malloc(a, 4096, NULL, &p), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, p), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_OK);

    /* Straight after destroy. */
    CHECK_STATUS(npualloc_destroy(a), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("destroyed"));
    CHECK_STATUS(npualloc_free(a, p), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("destroyed"));
    CHECK(npualloc_desc_alloc(binding, 4096) == NULL);
    CHECK(last_error_has("the binding's allocator") && last_error_has("was destroyed"));

    /* Another allocator created since, with a live block. */
    CHECK_STATUS(npualloc_create(NULL, 0, &b), NPUALLOC_OK);
    CHECK((void *)b != (void *)a);
    CHECK_STATUS(npualloc_malloc(b, 4096, NULL, &q), NPUALLOC_OK);
    CHECK_STATUS(npualloc_free(a, q), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(npualloc_desc_alloc(binding, 4096) == NULL);
    CHECK(npualloc_desc_alloc_advise(binding, 4096, NULL) == NULL);
    npualloc_desc_free(binding, q);
    CHECK(last_error_has("was destroyed"));
    CHECK_EQ_INT(active_blocks(b), 1); /* b's block untouched, nothing served to the stale binding */
    npualloc_block_info info;
    CHECK_STATUS(npualloc_query(b, q, &info), NPUALLOC_OK);

    /* The binding itself is still the host's to destroy, once. */
    CHECK_STATUS(npualloc_binding_destroy(binding), NPUALLOC_OK);
    CHECK_STATUS(npualloc_binding_destroy(binding), NPUALLOC_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("destroyed"));

    CHECK_STATUS(npualloc_free(b, q), NPUALLOC_OK);
    CHECK_STATUS(npualloc_destroy(b), NPUALLOC_OK);
    return TEST_SUMMARY();
}
