/*
 * npualloc: a caching device-memory allocator for Huawei Ascend NPUs.
 *
 * API conventions (the README's "API conventions" section has the details):
 * - Every function that can fail returns npualloc_status; NPUALLOC_OK is 0.
 *   On failure nothing changes and npualloc_last_error() describes why
 *   (thread-local; never NULL; valid until the next npualloc call on that thread).
 * - Outputs are trailing out-parameters, written only on success.
 * - NULL where a value is required is NPUALLOC_ERR_INVALID_ARGUMENT; destructors accept NULL.
 * - No panic or exception crosses this API; a caught bug is NPUALLOC_ERR_INTERNAL.
 * - All functions are thread-safe unless their comment says otherwise.
 */

#ifndef NPUALLOC_H
#define NPUALLOC_H

/*
 * This file is generated from the Rust sources by cbindgen (see cbindgen.toml).
 * Do not edit it by hand: run scripts/update-header.sh instead.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
typedef void *aclrtStream;

/**
 * Major version of the library (semantic versioning).
 */
#define NPUALLOC_VERSION_MAJOR 0

/**
 * Minor version of the library.
 */
#define NPUALLOC_VERSION_MINOR 1

/**
 * Patch version of the library.
 */
#define NPUALLOC_VERSION_PATCH 0

/**
 * The C ABI version this header describes. It changes only when an existing
 * signature, struct layout or status number changes; `npualloc_abi_version()`
 * returns the library's.
 */
#define NPUALLOC_ABI_VERSION 1

/**
 * The result of every npualloc function that can fail. `NPUALLOC_OK` is 0.
 *
 * A 32-bit value. On failure `npualloc_last_error()` returns a message with
 * the details, and `npualloc_status_name()` the name of the code.
 */
enum npualloc_status
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : int32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * Success.
     */
    NPUALLOC_OK = 0,
    /**
     * NULL where a value is required, a zero or overflowing size, a bad enum value or a bad stream.
     */
    NPUALLOC_ERR_INVALID_ARGUMENT = 1,
    /**
     * An unknown key, a bad value or conflicting keys in a config string.
     */
    NPUALLOC_ERR_BAD_CONFIG = 2,
    /**
     * A pointer or block this allocator does not own, or one already freed.
     */
    NPUALLOC_ERR_UNKNOWN_POINTER = 3,
    /**
     * A 2D copy would touch bytes outside the allocation that owns its first byte.
     */
    NPUALLOC_ERR_COPY_OUT_OF_BOUNDS = 4,
    /**
     * A valid request this runtime or backend cannot do.
     */
    NPUALLOC_ERR_UNSUPPORTED = 5,
    /**
     * The device could not satisfy the request after every recovery step.
     */
    NPUALLOC_ERR_OUT_OF_MEMORY = 100,
    /**
     * An ACL call failed; the last error names the function and its aclError number.
     */
    NPUALLOC_ERR_RUNTIME = 200,
    /**
     * libascendcl could not be loaded or lacks a required symbol.
     */
    NPUALLOC_ERR_RUNTIME_UNAVAILABLE = 201,
    /**
     * A bug: a caught panic or a broken invariant.
     */
    NPUALLOC_ERR_INTERNAL = 900,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum npualloc_status npualloc_status;
#else
typedef int32_t npualloc_status;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * The message recorded by the most recent failing npualloc call on this
 * thread, or "" when there is none.
 *
 * Every function that returns a status clears the message when it starts,
 * so after `NPUALLOC_OK` it is "" (unless the function documents a note it
 * leaves on success, such as `npualloc_destroy` reporting live blocks). Never
 * returns NULL. The string belongs to the library: do not free it; it stays
 * valid until the next npualloc call on this thread, so copy it to keep it.
 * Thread-safe: each thread has its own message. Does not change the message.
 */
const char *npualloc_last_error(void);

/**
 * The name of a status code as a static string, e.g. "NPUALLOC_ERR_OUT_OF_MEMORY".
 *
 * Any value may be passed: one that is not a status code gives
 * "NPUALLOC_UNKNOWN_STATUS". Never returns NULL; the string is static and must
 * not be freed. Thread-safe; does not change the thread's last error.
 */
const char *npualloc_status_name(npualloc_status status);

/**
 * The library version as "MAJOR.MINOR.PATCH", e.g. "0.1.0".
 *
 * Never returns NULL; the string is static and must not be freed.
 * Thread-safe; does not change the thread's last error.
 */
const char *npualloc_version(void);

/**
 * The C ABI version the loaded library implements (`NPUALLOC_ABI_VERSION` of
 * the header it was built with).
 *
 * A host that compiled against this header should check
 * `npualloc_abi_version() == NPUALLOC_ABI_VERSION` after loading the library.
 * Thread-safe; does not change the thread's last error.
 */
uint32_t npualloc_abi_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* NPUALLOC_H */
