/*
 * A tiny check helper for the C tests (no framework to download).
 *
 *   CHECK(cond)                 counts a pass, or prints file:line and the expression
 *   CHECK_EQ_INT(a, b)          compares two integers and prints both on mismatch
 *   CHECK_STATUS(expr, status)  compares an npualloc_status and prints the names and
 *                               npualloc_last_error() on mismatch (needs npualloc.h first)
 *   return TEST_SUMMARY();      prints "N passed, M failed"; 0 when nothing failed
 *   last_error_has(text)        whether npualloc_last_error() says `text` (needs npualloc.h first)
 *   active_blocks(allocator)    the allocator's active_blocks statistic (needs npualloc.h first)
 */
#ifndef NPUALLOC_TEST_HELPER_H
#define NPUALLOC_TEST_HELPER_H

#include <stdio.h>
#include <string.h>

static int test_passed_ = 0;
static int test_failed_ = 0;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) {                                                                   \
            test_passed_++;                                                           \
        } else {                                                                      \
            test_failed_++;                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                    \
    do {                                                                                      \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                       \
        if (check_a_ == check_b_) {                                                           \
            test_passed_++;                                                                   \
        } else {                                                                              \
            test_failed_++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s == %s (%lld vs %lld)\n", __FILE__, \
                    __LINE__, #a, #b, check_a_, check_b_);                                    \
        }                                                                                     \
    } while (0)

#ifdef NPUALLOC_H
#define CHECK_STATUS(expr, expected)                                                          \
    do {                                                                                      \
        npualloc_status check_got_ = (expr), check_want_ = (expected);                        \
        if (check_got_ == check_want_) {                                                      \
            test_passed_++;                                                                   \
        } else {                                                                              \
            test_failed_++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK_STATUS failed: %s\n  got %s, expected %s\n  last error: %s\n", \
                    __FILE__, __LINE__, #expr, npualloc_status_name(check_got_),              \
                    npualloc_status_name(check_want_), npualloc_last_error());                \
        }                                                                                     \
    } while (0)

static inline int last_error_has(const char *needle) {
    const char *msg = npualloc_last_error();
    return msg != NULL && strstr(msg, needle) != NULL;
}

static inline unsigned long long active_blocks(npualloc_allocator *a) {
    npualloc_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_STATUS(npualloc_get_stats(a, &s), NPUALLOC_OK);
    return s.active_blocks;
}
#endif

#define TEST_SUMMARY() \
    (printf("%d passed, %d failed\n", test_passed_, test_failed_), test_failed_ == 0 ? 0 : 1)

#endif /* NPUALLOC_TEST_HELPER_H */
