/*
 * Shutdown: a host that ends while npualloc still holds device memory must
 * not crash on its way out. Each case runs in a child process (fork) and
 * must exit normally with status 0:
 * - exit() with live allocators (fixed and expandable segments), live
 *   blocks, a registered stream and a second thread still running;
 * - return from main with the process-wide pluggable allocator holding blocks;
 * - aclFinalize first, then npualloc_destroy (which may report an ACL
 *   failure, but must return a documented status and not crash), then exit;
 * - aclFinalize, then exit with the allocator still alive.
 * Allocators live in globals, so memcheck sees them as reachable at exit.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "npualloc.h"
#include "acl_emu.h"
#include "test_helper.h"

#define DEVICE 3

static npualloc_allocator *g_fixed, *g_expandable;
static void *g_blocks[8];
static aclrtStream g_stream;
static volatile int g_thread_started;

static void nap(void) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

/* Exit codes of a child: 0 ok, 2..9 a failed step. */
static int live_allocators(void) {
    if (npualloc_create("expandable_segments:false", DEVICE, &g_fixed) != NPUALLOC_OK) return 2;
    if (npualloc_create("expandable_segments:true", DEVICE, &g_expandable) != NPUALLOC_OK) return 3;
    if (aclrtSetDevice(DEVICE) != ACL_SUCCESS || aclrtCreateStream(&g_stream) != ACL_SUCCESS) return 4;
    if (npualloc_register(g_fixed, g_stream) != NPUALLOC_OK) return 5;
    size_t sizes[4] = {1000, 4 << 20, 512, 30 << 20};
    for (int i = 0; i < 4; i++) {
        if (npualloc_malloc(g_fixed, sizes[i], g_stream, &g_blocks[i]) != NPUALLOC_OK) return 6;
        if (npualloc_malloc(g_expandable, sizes[i], NULL, &g_blocks[4 + i]) != NPUALLOC_OK) return 6;
    }
    /* A pending free: used on another stream, freed, not yet reusable. */
    if (npualloc_record_stream(g_fixed, g_blocks[0], NULL) != NPUALLOC_OK) return 7;
    if (npualloc_free(g_fixed, g_blocks[0]) != NPUALLOC_OK) return 7;
    g_blocks[0] = NULL;
    return 0;
}

static void *busy_thread(void *arg) {
    (void)arg;
    void *p = NULL;
    g_thread_started = 1;
    for (;;) {
        if (npualloc_malloc(g_expandable, 4096, NULL, &p) == NPUALLOC_OK) npualloc_free(g_expandable, p);
        nap();
    }
    return NULL;
}

static int case_exit_with_live_allocators(void) {
    int rc = live_allocators();
    if (rc) return rc;
    pthread_t t;
    if (pthread_create(&t, NULL, busy_thread, NULL) != 0) return 8;
    while (!g_thread_started) nap();
    exit(0); /* the thread is still inside npualloc calls */
}

static int case_pluggable_live_at_exit(void) {
    npualloc_pluggable_init(4);
    for (int i = 0; i < 4; i++) {
        g_blocks[i] = npualloc_pluggable_malloc((size_t)(i + 1) << 20, DEVICE, NULL);
        if (g_blocks[i] == NULL) return 2;
    }
    return 0; /* return from main: atexit handlers and TLS destructors run */
}

static int documented(npualloc_status st) {
    return st == NPUALLOC_OK || st == NPUALLOC_ERR_RUNTIME;
}

static int case_finalize_then_destroy(void) {
    aclError init = aclInit(NULL);
    if (init != ACL_SUCCESS && init != ACL_ERROR_REPEAT_INITIALIZE) return 2;
    int rc = live_allocators();
    if (rc) return rc;
    if (aclFinalize() != ACL_SUCCESS) return 8;
    npualloc_status st = npualloc_destroy(g_fixed);
    g_fixed = NULL;
    if (!documented(st)) return 9;
    st = npualloc_destroy(g_expandable);
    g_expandable = NULL;
    if (!documented(st)) return 9;
    exit(0);
}

static int case_finalize_then_exit(void) {
    aclError init = aclInit(NULL);
    if (init != ACL_SUCCESS && init != ACL_ERROR_REPEAT_INITIALIZE) return 2;
    int rc = live_allocators();
    if (rc) return rc;
    if (aclFinalize() != ACL_SUCCESS) return 8;
    return 0;
}

static void run_case(const char *name, int (*body)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        exit(body());
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: child %s %d\n", name, WIFSIGNALED(status) ? "killed by signal" : "exited with",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 0);
    printf("-- %s\n", name);
}

int main(void) {
    run_case("exit with live allocators and a busy thread", case_exit_with_live_allocators);
    run_case("return from main with pluggable allocators holding blocks", case_pluggable_live_at_exit);
    run_case("aclFinalize, then destroy", case_finalize_then_destroy);
    run_case("aclFinalize, then exit with live allocators", case_finalize_then_exit);
    return TEST_SUMMARY();
}
