/*
 * Status names, the last-error string and the version functions, through the
 * shared library and the generated header.
 */
#include <stdio.h>
#include <string.h>

#include "npualloc.h"
#include "test_helper.h"

static void check_status_names(void) {
    static const struct {
        npualloc_status status;
        int number;
        const char *name;
    } cases[] = {
        {NPUALLOC_OK, 0, "NPUALLOC_OK"},
        {NPUALLOC_ERR_INVALID_ARGUMENT, 1, "NPUALLOC_ERR_INVALID_ARGUMENT"},
        {NPUALLOC_ERR_BAD_CONFIG, 2, "NPUALLOC_ERR_BAD_CONFIG"},
        {NPUALLOC_ERR_UNKNOWN_POINTER, 3, "NPUALLOC_ERR_UNKNOWN_POINTER"},
        {NPUALLOC_ERR_COPY_OUT_OF_BOUNDS, 4, "NPUALLOC_ERR_COPY_OUT_OF_BOUNDS"},
        {NPUALLOC_ERR_UNSUPPORTED, 5, "NPUALLOC_ERR_UNSUPPORTED"},
        {NPUALLOC_ERR_OUT_OF_MEMORY, 100, "NPUALLOC_ERR_OUT_OF_MEMORY"},
        {NPUALLOC_ERR_RUNTIME, 200, "NPUALLOC_ERR_RUNTIME"},
        {NPUALLOC_ERR_RUNTIME_UNAVAILABLE, 201, "NPUALLOC_ERR_RUNTIME_UNAVAILABLE"},
        {NPUALLOC_ERR_INTERNAL, 900, "NPUALLOC_ERR_INTERNAL"},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *name = npualloc_status_name(cases[i].status);
        CHECK_EQ_INT(cases[i].status, cases[i].number);
        CHECK(name != NULL);
        if (name != NULL && strcmp(name, cases[i].name) != 0) {
            fprintf(stderr, "status %d is named %s, expected %s\n", cases[i].number, name, cases[i].name);
            CHECK(!"status name");
        }
        /* The names are static: the same pointer every time. */
        CHECK(npualloc_status_name(cases[i].status) == name);
    }

    /* Any other value is unknown (C may pass any int). */
    {
        const int unknown[] = {-1, 6, 99, 101, 202, 899, 901, 0x7fffffff};
        for (i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
            const char *name = npualloc_status_name((npualloc_status)unknown[i]);
            CHECK(name != NULL && strcmp(name, "NPUALLOC_UNKNOWN_STATUS") == 0);
        }
    }
    CHECK_EQ_INT(sizeof(npualloc_status), 4);
}

static void check_last_error(void) {
    const char *msg = npualloc_last_error();
    CHECK(msg != NULL);
    /* Nothing has failed on this thread yet. */
    CHECK(msg != NULL && msg[0] == '\0');
    /* Reading it does not change it; neither do the infallible getters. */
    (void)npualloc_status_name(NPUALLOC_ERR_INTERNAL);
    (void)npualloc_version();
    CHECK(npualloc_last_error() != NULL && npualloc_last_error()[0] == '\0');
}

static void check_versions(void) {
    char expected[64];
    const char *version = npualloc_version();
    snprintf(expected, sizeof expected, "%d.%d.%d", NPUALLOC_VERSION_MAJOR, NPUALLOC_VERSION_MINOR,
             NPUALLOC_VERSION_PATCH);
    CHECK(version != NULL);
    if (version != NULL && strcmp(version, expected) != 0) {
        fprintf(stderr, "npualloc_version() is %s, the header says %s\n", version, expected);
        CHECK(!"version matches header");
    }
    CHECK(npualloc_version() == version);
    CHECK_EQ_INT(npualloc_abi_version(), NPUALLOC_ABI_VERSION);
    CHECK_EQ_INT(NPUALLOC_ABI_VERSION, 1);
}

int main(void) {
    check_last_error();
    check_status_names();
    check_versions();
    return TEST_SUMMARY();
}
