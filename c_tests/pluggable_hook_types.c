/*
 * torch_npu's reset-peak hook type: torch_npu 2.13 and later call it as
 * void(c10::DeviceIndex), an int8_t
 * (docs/runtime-behaviour.md "torch_npu's pluggable hooks"). Called through a void(*)(int8_t) pointer, and through
 * a pointer that fills the whole argument register with garbage above the
 * low byte (what an int8_t caller may leave there), the hook reads the
 * device from the low byte only: a valid device is accepted (no last error),
 * an invalid one (-1 in the low byte, or 5 with 2 devices) refused.
 */
#include <stdint.h>
#include <string.h>

#include "npualloc.h"
#include "test_helper.h"

typedef void (*reset_peak_i8)(int8_t);
typedef void (*reset_peak_wide)(uint32_t);

int main(void) {
    npualloc_pluggable_init(2);
    CHECK(strcmp(npualloc_last_error(), "") == 0);
    void *p = npualloc_pluggable_malloc(4096, 1, NULL);
    CHECK(p != NULL);
    npualloc_pluggable_free(p, 4096, 1, NULL);

    reset_peak_i8 as_i8 = (reset_peak_i8)(void (*)(void))npualloc_pluggable_reset_peak_stats;
    as_i8((int8_t)1);
    CHECK(strcmp(npualloc_last_error(), "") == 0);
    as_i8((int8_t)-1);
    CHECK(strstr(npualloc_last_error(), "-1") != NULL);

    /* Garbage above the low byte: the hook must see device 1, then 0. */
    reset_peak_wide wide = (reset_peak_wide)(void (*)(void))npualloc_pluggable_reset_peak_stats;
    wide(0xA5A5A501u);
    if (strcmp(npualloc_last_error(), "") != 0)
        fprintf(stderr, "device 1 with garbage: %s\n", npualloc_last_error());
    CHECK(strcmp(npualloc_last_error(), "") == 0);
    wide(0x7FFFFF00u);
    CHECK(strcmp(npualloc_last_error(), "") == 0);
    /* -1 and 5 in the low byte stay refused, whatever is above. */
    wide(0x000100FFu);
    CHECK(strstr(npualloc_last_error(), "-1") != NULL);
    wide(0x12345605u);
    CHECK(strstr(npualloc_last_error(), "device 5") != NULL);

    /* The plugin table's entry is the same function. */
    const npualloc_api *api = npualloc_get_api(npualloc_abi_version());
    CHECK(api != NULL);
    if (api != NULL) {
        reset_peak_wide from_table = (reset_peak_wide)(void (*)(void))api->pluggable_reset_peak_stats;
        from_table(0xFFFFFF00u);
        CHECK(strcmp(npualloc_last_error(), "") == 0);
    }

    npualloc_pluggable_empty_cache(true);
    return TEST_SUMMARY();
}
