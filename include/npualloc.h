/*
 * npualloc: a caching device-memory allocator for Huawei Ascend NPUs.
 *
 * API conventions (the README's "API conventions" section has the details):
 * - Every function that can fail returns npualloc_status; NPUALLOC_OK is 0.
 *   On failure nothing changes and npualloc_last_error() describes why
 *   (thread-local; never NULL; valid until the next npualloc call on that thread).
 * - Outputs are trailing out-parameters, written only on success.
 * - NULL where a value is required is NPUALLOC_ERR_INVALID_ARGUMENT; destructors accept NULL.
 * - Freeing NULL is a successful no-op at every free (npualloc_free,
 *   npualloc_desc_free, npualloc_pluggable_free), as with C's free; the
 *   allocator handle or binding must still be valid.
 * - A stream must be one the runtime knows (checked with aclrtStreamQuery the
 *   first time a call meets it; a stream in graph capture is accepted without
 *   it); an unknown one is NPUALLOC_ERR_INVALID_ARGUMENT.
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
 * `npualloc_empty_cache_with` flag: the physical handles unmapped stay cached
 * (counted in `cached_handle_bytes` and `reserved_bytes`) for later growth,
 * which then maps them again instead of allocating; `npualloc_empty_cache`
 * frees them.
 */
#define NPUALLOC_EMPTY_KEEP_HANDLES 1

/**
 * Bytes of an `npualloc_ipc_handle`.
 */
#define NPUALLOC_IPC_HANDLE_SIZE 128

/**
 * How many devices the pluggable entry points can serve (ids 0 to this - 1).
 */
#define NPUALLOC_PLUGGABLE_MAX_DEVICES 64

/**
 * Version of the `npualloc_stats` layout this library fills: 2 added the
 * fields from `num_physical_mallocs` on, 3 those from `segments_peak` on,
 * 4 `num_handle_moves`, 5 those from `allocated_bytes_total` on, 6
 * those from `exported_blocks` on, 7 `memory_limit`.
 */
#define NPUALLOC_STATS_VERSION 7

/**
 * The pool kind `npualloc_get_kind_stats` reports on: PyTorch's small pool
 * (blocks of at most 1 MiB as rounded).
 */
#define NPUALLOC_SMALL_BLOCKS 0

/**
 * The large pool (blocks over 1 MiB).
 */
#define NPUALLOC_LARGE_BLOCKS 1

/**
 * Major version of the library (semantic versioning).
 */
#define NPUALLOC_VERSION_MAJOR 0

/**
 * Minor version of the library.
 */
#define NPUALLOC_VERSION_MINOR 4

/**
 * Patch version of the library.
 */
#define NPUALLOC_VERSION_PATCH 0

/**
 * The C ABI version this header describes. It changes only when an existing
 * signature, struct layout or status number changes; `npualloc_abi_version()`
 * returns the library's. The shared library's SONAME is
 * `libnpualloc.so.<NPUALLOC_ABI_VERSION>` (build.rs and CMakeLists.txt read
 * the number from this line).
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

/**
 * What happened to a piece of device memory (see
 * `npualloc_set_segment_observer`): the values of the core's
 * `SegmentEvent` (a test checks they agree).
 */
enum npualloc_segment_event
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : int32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
    /**
     * A virtual range reserved (expandable segments): addr, size; no handle.
     */
    NPUALLOC_SEGMENT_RESERVE = 1,
    /**
     * That range is about to be released.
     */
    NPUALLOC_SEGMENT_RELEASE = 2,
    /**
     * Physical memory mapped at addr..addr+size: its handle (expandable
     * segments), or an `aclrtMalloc` segment (fixed segments; no handle).
     */
    NPUALLOC_SEGMENT_MAP = 3,
    /**
     * That memory is about to be unmapped, or freed: deregister it here.
     */
    NPUALLOC_SEGMENT_UNMAP = 4,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum npualloc_segment_event npualloc_segment_event;
#else
typedef int32_t npualloc_segment_event;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Opaque allocator handle. C holds a pointer to it whose value names a
 * registered allocator and is not an address: npualloc never reads through
 * it, and checks it on every call, refusing NULL, any other value and a
 * destroyed handle with NPUALLOC_ERR_INVALID_ARGUMENT.
 */
typedef struct npualloc_allocator npualloc_allocator;

/**
 * What `npualloc_query` reports about a live block.
 */
typedef struct npualloc_block_info {
    /**
     * Start address of the block.
     */
    uint64_t addr;
    /**
     * Size of the block as rounded by the allocator.
     */
    uint64_t size;
    /**
     * Bytes the caller asked for.
     */
    uint64_t requested;
    /**
     * Stream the block belongs to (NULL: the default stream).
     */
    aclrtStream stream;
} npualloc_block_info;

/**
 * `fn(user, device)`: run before npualloc synchronizes streams to give
 * device memory back (see `npualloc_set_before_release`).
 */
typedef void (*npualloc_release_hook)(void *user, int32_t device);

/**
 * `fn(user, device, requested, report)`: a request of `requested` bytes on
 * `device` was refused for lack of memory; `report` (valid during the call)
 * is the text the last error gets (see `npualloc_set_oom_observer`).
 */
typedef void (*npualloc_oom_hook)(void *user, int32_t device, size_t requested, const char *report);

/**
 * `fn(user, device, event, addr, size, drv_handle, pool)`: npualloc came to
 * hold, or is about to stop holding, the device memory at
 * [addr, addr + size) of pool `pool` (0: the default pool); `drv_handle` is
 * the physical handle (`aclrtDrvMemHandle`) mapped there, NULL for a range
 * (RESERVE, RELEASE) and for an `aclrtMalloc` segment (fixed segments). See
 * `npualloc_set_segment_observer`.
 */
typedef void (*npualloc_segment_hook)(void *user,
                                      int32_t device,
                                      npualloc_segment_event event,
                                      void *addr,
                                      size_t size,
                                      void *drv_handle,
                                      uint64_t pool);

/**
 * What `npualloc_ipc_export` writes: plain bytes, to be copied through a
 * pipe, socket, file or shared memory to another process of the host.
 */
typedef struct npualloc_ipc_handle {
    uint8_t bytes[NPUALLOC_IPC_HANDLE_SIZE];
} npualloc_ipc_handle;

/**
 * Allocator statistics (PyTorch `memory_stats()` vocabulary, plus where the
 * reserved memory is). The caller sets `struct_size` to
 * `sizeof(npualloc_stats)`; fields past it are not written, so callers built
 * against an older, smaller struct keep working. Fields are only ever added
 * at the end. The same names are the keys of the snapshot's "stats" object.
 *
 * reserved_bytes = segment_bytes + cached_handle_bytes; the cached part of
 * the segments is segment_bytes - allocated_bytes - pending_free_bytes.
 */
typedef struct npualloc_stats {
    uint32_t struct_size;
    /**
     * Filled by the library: NPUALLOC_STATS_VERSION.
     */
    uint32_t version;
    /**
     * Bytes of live blocks, as rounded.
     */
    uint64_t allocated_bytes;
    /**
     * The most `allocated_bytes` at once: exact while one stream allocates;
     * with several, the highest total seen when some stream reached a new
     * high of its own (kept without a counter every stream writes; a peak
     * that streams each below their own high make together can be missed).
     * Likewise `requested_bytes_peak`.
     */
    uint64_t allocated_bytes_peak;
    /**
     * Bytes of live blocks, as asked.
     */
    uint64_t requested_bytes;
    /**
     * The most `requested_bytes` at once.
     */
    uint64_t requested_bytes_peak;
    /**
     * Device memory held: `segment_bytes` plus `cached_handle_bytes`.
     */
    uint64_t reserved_bytes;
    /**
     * The most `reserved_bytes` at once.
     */
    uint64_t reserved_bytes_peak;
    /**
     * Live blocks.
     */
    uint64_t active_blocks;
    /**
     * Fixed segments plus expandable ranges.
     */
    uint64_t segments;
    /**
     * Allocations served.
     */
    uint64_t num_allocs;
    /**
     * Frees (pending ones included).
     */
    uint64_t num_frees;
    /**
     * aclrtMalloc calls that succeeded.
     */
    uint64_t num_device_mallocs;
    /**
     * aclrtFree calls that succeeded.
     */
    uint64_t num_device_frees;
    /**
     * aclrtMapMem calls that succeeded.
     */
    uint64_t num_maps;
    /**
     * aclrtUnmapMem calls that succeeded.
     */
    uint64_t num_unmaps;
    /**
     * Requests that went through the out-of-memory ladder.
     */
    uint64_t num_alloc_retries;
    /**
     * Requests refused for lack of memory.
     */
    uint64_t num_ooms;
    /**
     * Stream synchronizations made to give memory back.
     */
    uint64_t num_syncs;
    /**
     * Largest block a request could get without a device call.
     */
    uint64_t largest_free_block;
    /**
     * aclrtMallocPhysical calls that succeeded. (Version 2 from here on.)
     */
    uint64_t num_physical_mallocs;
    /**
     * aclrtFreePhysical calls that succeeded.
     */
    uint64_t num_physical_frees;
    /**
     * Bytes freed by the caller and waiting for work on other streams
     * (record_stream) to complete.
     */
    uint64_t pending_free_bytes;
    /**
     * Device memory held by segments: whole fixed segments, and the mapped
     * pages of expandable ranges. The snapshot's segment sizes add up to it.
     */
    uint64_t segment_bytes;
    /**
     * Physical handles unmapped and kept for reuse (expandable segments);
     * 0 with fixed segments.
     */
    uint64_t cached_handle_bytes;
    /**
     * Address space of all segments: with expandable segments their
     * reserved virtual ranges; with fixed segments the part of each that
     * blocks tile (`segment_bytes` less any alignment slack).
     */
    uint64_t address_space_bytes;
    /**
     * The most `segments` at once. (Version 3 from here on.)
     */
    uint64_t segments_peak;
    /**
     * Segments made: fixed segments obtained with aclrtMalloc plus
     * expandable ranges reserved.
     */
    uint64_t num_segments_created;
    /**
     * Segments given back; `num_segments_created - num_segments_released`
     * is `segments`.
     */
    uint64_t num_segments_released;
    /**
     * Wholly free physical handles mapped a second time where an
     * expandable range grew, in place of a fresh handle (each also counts
     * in `num_maps`; its old address is unmapped later). (Version 4 from
     * here on.)
     */
    uint64_t num_handle_moves;
    /**
     * Bytes of the blocks handed out since the allocator was made, as
     * rounded: `allocated_bytes_total - allocated_bytes` bytes were freed.
     * (Version 5 from here on.)
     */
    uint64_t allocated_bytes_total;
    /**
     * Device memory obtained since the allocator was made (fixed segments
     * and physical handles): `reserved_bytes_total - reserved_bytes` bytes
     * were given back.
     */
    uint64_t reserved_bytes_total;
    /**
     * Blocks freed by the caller and waiting for work on other streams
     * (their bytes are `pending_free_bytes`).
     */
    uint64_t pending_free_blocks;
    /**
     * Free blocks of fixed segments that hold other blocks too: cached
     * pieces of a split segment (none with expandable segments).
     */
    uint64_t inactive_split_blocks;
    /**
     * Bytes of those blocks.
     */
    uint64_t inactive_split_bytes;
    /**
     * Blocks of at least this many bytes are never split
     * (`max_split_size_mb`); `UINT64_MAX` when no limit is set (PyTorch's
     * -1, read as a signed number).
     */
    uint64_t max_split_size;
    /**
     * Live blocks exported to other processes (`npualloc_ipc_export`).
     * (Version 6 from here on.)
     */
    uint64_t exported_blocks;
    /**
     * Bytes of freed blocks that other processes still hold imported:
     * neither handed out nor given back until the last of them lets go
     * (counted in `pending_free_bytes` too).
     */
    uint64_t held_for_importers_bytes;
    /**
     * The most device memory this allocator may reserve
     * (`per_process_memory_fraction`, `npualloc_set_memory_fraction`) in
     * bytes; `UINT64_MAX` when there is no limit. (Version 7 from here on.)
     */
    uint64_t memory_limit;
} npualloc_stats;

/**
 * A live block of a pool, as `npualloc_pool_live_blocks` reports it and
 * `npualloc_pool_restore` takes it back.
 */
typedef struct npualloc_live_block {
    /**
     * The block's address (what `npualloc_malloc` returned).
     */
    void *ptr;
    /**
     * Its bytes: the request rounded as the pool rounds it.
     */
    size_t size;
    /**
     * The bytes its caller asked for.
     */
    size_t requested;
    /**
     * The stream it was allocated on.
     */
    aclrtStream stream;
} npualloc_live_block;

/**
 * Called by `npualloc_pool_live_blocks` with its `user` and one block.
 */
typedef void (*npualloc_live_block_fn)(void *user, const struct npualloc_live_block *block);

/**
 * The function table of one ABI version (see `npualloc_get_api`). Each field
 * points to the function of the same name without the `npualloc_` prefix,
 * except two in C: `register_` is `npualloc_register` (`register` is a C keyword)
 * and `abi_version_fn` is `npualloc_abi_version` (the field `abi_version`
 * holds the table's version).
 */
typedef struct npualloc_api {
    /**
     * `sizeof(npualloc_api)` in the library that made the table.
     */
    uint32_t struct_size;
    /**
     * The ABI version the table follows.
     */
    uint32_t abi_version;
    const char *(*status_name)(npualloc_status);
    const char *(*last_error)(void);
    npualloc_status (*create)(const char*, int32_t, struct npualloc_allocator**);
    npualloc_status (*destroy)(struct npualloc_allocator*);
    npualloc_status (*register_)(struct npualloc_allocator*, aclrtStream);
    npualloc_status (*unregister)(struct npualloc_allocator*, aclrtStream);
    void *(*desc_alloc)(void*, size_t);
    void (*desc_free)(void*, void*);
    void *(*desc_alloc_advise)(void*, size_t, void*);
    void *(*desc_get_addr)(void*);
    npualloc_status (*binding_create)(struct npualloc_allocator*, aclrtStream, void**);
    npualloc_status (*binding_destroy)(void*);
    npualloc_status (*malloc)(struct npualloc_allocator*, size_t, aclrtStream, void**);
    npualloc_status (*free)(struct npualloc_allocator*, void*);
    npualloc_status (*record_stream)(struct npualloc_allocator*, void*, aclrtStream);
    npualloc_status (*empty_cache)(struct npualloc_allocator*);
    npualloc_status (*set_memory_fraction)(struct npualloc_allocator*, double);
    npualloc_status (*query)(const struct npualloc_allocator*,
                             const void*,
                             struct npualloc_block_info*);
    npualloc_status (*get_stats)(const struct npualloc_allocator*, struct npualloc_stats*);
    npualloc_status (*reset_peak_stats)(struct npualloc_allocator*);
    npualloc_status (*snapshot_json)(const struct npualloc_allocator*, char**);
    void (*string_free)(char*);
    npualloc_status (*check_memcpy2d)(const struct npualloc_allocator*,
                                      const void*,
                                      size_t,
                                      const void*,
                                      size_t,
                                      size_t,
                                      size_t,
                                      int32_t,
                                      int32_t);
    npualloc_status (*memcpy2d)(const struct npualloc_allocator*,
                                void*,
                                size_t,
                                const void*,
                                size_t,
                                size_t,
                                size_t,
                                int32_t);
    npualloc_status (*memcpy2d_async)(const struct npualloc_allocator*,
                                      void*,
                                      size_t,
                                      const void*,
                                      size_t,
                                      size_t,
                                      size_t,
                                      int32_t,
                                      aclrtStream);
    void *(*pluggable_malloc)(size_t, int, aclrtStream);
    void (*pluggable_free)(void*, size_t, int, aclrtStream);
    void (*pluggable_init)(int);
    void (*pluggable_empty_cache)(bool);
    void (*pluggable_set_memory_fraction)(double, int);
    void *(*pluggable_base_alloc)(void*, size_t*);
    void (*pluggable_reset_peak_stats)(int);
    uint32_t (*abi_version_fn)(void);
    const char *(*version)(void);
    npualloc_status (*record_history)(struct npualloc_allocator*, size_t);
    npualloc_status (*snapshot_pytorch_json)(const struct npualloc_allocator*, char**);
    npualloc_status (*pluggable_record_history)(int, size_t);
    npualloc_status (*pluggable_snapshot_pytorch_json)(int, char**);
    npualloc_status (*forget_stream)(struct npualloc_allocator*, aclrtStream);
    npualloc_status (*pluggable_forget_stream)(int, aclrtStream);
    npualloc_status (*erase_stream)(struct npualloc_allocator*, void*, aclrtStream);
    npualloc_status (*pluggable_allocator)(int, struct npualloc_allocator**);
    npualloc_status (*set_before_release)(struct npualloc_allocator*, npualloc_release_hook, void*);
    npualloc_status (*set_oom_observer)(struct npualloc_allocator*, npualloc_oom_hook, void*);
    npualloc_status (*pool_create)(struct npualloc_allocator*, const char*, uint64_t*);
    npualloc_status (*pool_begin)(struct npualloc_allocator*, uint64_t, aclrtStream);
    npualloc_status (*pool_end)(struct npualloc_allocator*, uint64_t, aclrtStream);
    npualloc_status (*pool_destroy)(struct npualloc_allocator*, uint64_t);
    npualloc_status (*pool_get_stats)(const struct npualloc_allocator*,
                                      uint64_t,
                                      struct npualloc_stats*);
    npualloc_status (*sleep)(struct npualloc_allocator*);
    npualloc_status (*wake)(struct npualloc_allocator*);
    npualloc_status (*sleep_with)(struct npualloc_allocator*,
                                  const uint64_t*,
                                  size_t,
                                  const uint64_t*,
                                  size_t);
    npualloc_status (*wake_with)(struct npualloc_allocator*, const uint64_t*, size_t);
    npualloc_status (*pool_empty_cache)(struct npualloc_allocator*, uint64_t);
    npualloc_status (*get_kind_stats)(const struct npualloc_allocator*,
                                      int32_t,
                                      struct npualloc_stats*);
    npualloc_status (*pool_set_use_on_oom)(struct npualloc_allocator*, uint64_t, int32_t);
    npualloc_status (*empty_cache_with)(struct npualloc_allocator*, uint32_t);
    npualloc_status (*set_segment_observer)(struct npualloc_allocator*, npualloc_segment_hook, void*);
    npualloc_status (*for_each_segment)(const struct npualloc_allocator*,
                                        npualloc_segment_hook,
                                        void*);
    npualloc_status (*ipc_export)(struct npualloc_allocator*, void*, struct npualloc_ipc_handle*);
    npualloc_status (*ipc_import)(const struct npualloc_ipc_handle*, int32_t, void**, size_t*);
    npualloc_status (*ipc_close)(void*);
    npualloc_status (*pool_live_blocks)(const struct npualloc_allocator*,
                                        uint64_t,
                                        npualloc_live_block_fn,
                                        void*);
    npualloc_status (*pool_restore)(struct npualloc_allocator*,
                                    uint64_t,
                                    const struct npualloc_live_block*,
                                    size_t);
    npualloc_status (*read_pytorch_alloc_conf)(int32_t, int32_t*);
} npualloc_api;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Creates an allocator for ACL device `device`.
 *
 * `config` is `"key:value,key:value"` (see the README for the keys); NULL
 * reads `NPUALLOC_CONF` from the environment, else torch_npu's
 * `PYTORCH_NPU_ALLOC_CONF` (and, once turned on, `PYTORCH_ALLOC_CONF`:
 * `npualloc_read_pytorch_alloc_conf`), else uses the defaults. The
 * ACL runtime is loaded on first use (config key `acl_library`, else
 * `NPUALLOC_ACL_LIBRARY`, else `$ASCEND_HOME_PATH/lib64/libascendcl.so`,
 * else the loader's search).
 *
 * Returns NPUALLOC_OK and writes `*out`; NPUALLOC_ERR_INVALID_ARGUMENT (NULL
 * `out`, negative device, a device id `aclrtSetDevice` refuses as unknown
 * that is past the runtime's `aclrtGetDeviceCount`, when the runtime has
 * that call), NPUALLOC_ERR_BAD_CONFIG (unknown key, bad value,
 * conflicting keys), NPUALLOC_ERR_UNSUPPORTED, NPUALLOC_ERR_RUNTIME (setting
 * the device failed otherwise), NPUALLOC_ERR_RUNTIME_UNAVAILABLE
 * (libascendcl missing).
 * Thread-safe.
 *
 * # Safety
 * `config` is NULL or a NUL-terminated string; `out` is NULL or valid for
 * writing one handle.
 */
npualloc_status npualloc_create(const char *config,
                                int32_t device,
                                struct npualloc_allocator **out);

/**
 * Whether a config read from the environment (`npualloc_create` with a NULL
 * config, and the pluggable entry points' allocators) also reads
 * `PYTORCH_ALLOC_CONF` when `NPUALLOC_CONF` and `PYTORCH_NPU_ALLOC_CONF` are
 * both unset, as torch_npu 2.12 and later read it: `on` nonzero turns it
 * on, zero off. Off by default, so that a value written for another
 * device's allocator changes nothing for a host that does not read it; a
 * host whose torch_npu reads the variable turns it on (npualloc's torch_npu
 * bridge does). Process-wide, as the environment is; allocators already
 * created keep their config.
 *
 * Writes the setting it replaces (1 or 0) to `*previous` when `previous` is
 * not NULL. Returns NPUALLOC_OK, or NPUALLOC_ERR_INVALID_ARGUMENT for a
 * misaligned `previous`, changing nothing. Thread-safe.
 *
 * # Safety
 * `previous` is NULL or valid for writing one `int32_t`.
 */
npualloc_status npualloc_read_pytorch_alloc_conf(int32_t on, int32_t *previous);

/**
 * Destroys an allocator: unregisters it from every stream it was registered
 * on, synchronizes the streams it used, and returns all device memory. Live
 * blocks are released too; their count and bytes are reported on stderr and
 * in `npualloc_last_error()` (the call still returns NPUALLOC_OK), as is any
 * runtime call that failed while giving memory back: past unregistration,
 * destroy always completes and the handle is gone.
 * If a stream cannot be unregistered, destroy returns NPUALLOC_ERR_RUNTIME
 * before anything else and the allocator stays usable (still registered on
 * that stream, whose runtime would otherwise call into freed memory); call
 * it again later.
 * `npualloc_destroy(NULL)` is a no-op returning NPUALLOC_OK. No other thread
 * may use the allocator during this call. Another allocator of the device
 * asking this one for its free cache before refusing a request (see
 * `npualloc_set_before_release`) is not a use: destroy waits for that ask
 * to end first. Afterwards every call given the
 * handle (a second destroy included), and every callback of a binding made
 * from it, refuses it with INVALID_ARGUMENT, however many allocators are
 * created since: a later allocator never gets the same handle value, and
 * nothing of the destroyed one is kept.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed, which no
 * other thread uses during or after the call.
 */
npualloc_status npualloc_destroy(struct npualloc_allocator *a);

/**
 * Allocates `size` bytes for work on `stream` (NULL: the default stream)
 * and writes the device address to `*out_ptr`. Addresses are at least
 * 512-byte aligned.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle or `out_ptr`, size 0,
 * a size of 2^60 bytes or more (a smaller one the device cannot hold is
 * NPUALLOC_ERR_OUT_OF_MEMORY), a stream the runtime does not know, or a
 * stream of another device (each stream is checked the first time this
 * allocator meets it, with aclmdlRICaptureGetInfo, aclrtStreamQuery and
 * aclrtGetStreamOverflowSwitch when the runtime has them; an unknown stream's
 * message names the call that refused it, another device's names both devices; a stream in
 * graph capture is accepted without aclrtStreamQuery); NPUALLOC_ERR_OUT_OF_MEMORY after every
 * recovery step failed, the last one asking the device's other npualloc allocators in this
 * process to give back their free cache (the message says where memory is);
 * NPUALLOC_ERR_RUNTIME if an ACL call failed otherwise. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed; `out_ptr`
 * is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_malloc(struct npualloc_allocator *a,
                                size_t size,
                                aclrtStream stream,
                                void **out_ptr);

/**
 * Frees a block by its start address. The memory is reusable at once by
 * later work on the block's stream; if other streams used it
 * (`npualloc_record_stream`), only after their work recorded so far completes.
 *
 * Freeing NULL is a no-op returning NPUALLOC_OK, as with C's `free` and
 * `cudaFree`; the same rule holds for `npualloc_desc_free` and
 * `npualloc_pluggable_free`. The handle must still be valid.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle;
 * NPUALLOC_ERR_UNKNOWN_POINTER (state unchanged) for a pointer this
 * allocator did not return, an interior pointer, or a block already freed
 * (unless its address was handed out again, below).
 *
 * An address is all the allocator knows a block by: once a later malloc
 * hands the same address out again, a stale free of it cannot be told from
 * a free of the new block, and frees that block. A host that may free
 * twice keeps its own record of what it freed (the Python package's
 * `MemBlock` refuses a second free).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed. `ptr` is
 * only compared with the allocator's blocks, never dereferenced.
 */
npualloc_status npualloc_free(struct npualloc_allocator *a, void *ptr);

/**
 * Notes that work queued on `stream` uses the block at `ptr`, so freeing it
 * waits for that work. Recording the block's own stream is a no-op.
 *
 * Returns NPUALLOC_ERR_UNKNOWN_POINTER if `ptr` is not the start of a live block;
 * NPUALLOC_ERR_INVALID_ARGUMENT for a stream the runtime does not know or a
 * stream of another device (checked as in npualloc_malloc).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed. `ptr` is
 * never dereferenced; `stream` is checked with the runtime.
 */
npualloc_status npualloc_record_stream(struct npualloc_allocator *a, void *ptr, aclrtStream stream);

/**
 * Undoes `npualloc_record_stream(a, ptr, stream)`: the caller has ordered
 * `stream`'s work on the block some other way (torch_npu's `eraseStream`,
 * used by its `MULTI_STREAM_MEMORY_REUSE` modes), so a later free waits
 * only for the block's other streams. A stream the block was never
 * recorded on (its own stream included, and streams the runtime does not
 * know) is NPUALLOC_OK and changes nothing.
 *
 * Returns NPUALLOC_ERR_UNKNOWN_POINTER (nothing changes) if `ptr` is not the
 * start of a live block; NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead
 * handle. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle. `ptr` and `stream` are only compared, never
 * dereferenced.
 */
npualloc_status npualloc_erase_stream(struct npualloc_allocator *a, void *ptr, aclrtStream stream);

/**
 * Returns every cached, unused segment to the runtime, after synchronizing
 * only the streams that used them. Blocks in use are untouched.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_empty_cache(struct npualloc_allocator *a);

/**
 * `npualloc_empty_cache` with `flags`: 0 is `npualloc_empty_cache`;
 * `NPUALLOC_EMPTY_KEEP_HANDLES` unmaps the cached memory of expandable
 * segments but keeps its physical handles (torch_npu's
 * `emptyVirtAddrCache`).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for an unknown flag bit, and
 * NPUALLOC_ERR_UNSUPPORTED for `NPUALLOC_EMPTY_KEEP_HANDLES` when the
 * allocator uses fixed segments (no handles to keep); nothing changes
 * then.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_empty_cache_with(struct npualloc_allocator *a, uint32_t flags);

/**
 * Caps the device memory this allocator reserves at `fraction` (in [0, 1],
 * as torch_npu allows; 0 lets it reserve nothing more) of the device's
 * total; 1 removes the cap (torch_npu's `setMemoryFraction`: the whole
 * device is no limit, so `garbage_collection_threshold` has none to act
 * on). Memory already reserved is not released by this call.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a fraction outside [0, 1] or NaN.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_set_memory_fraction(struct npualloc_allocator *a, double fraction);

/**
 * Describes the live block containing `ptr` (any address inside it).
 *
 * Returns NPUALLOC_ERR_UNKNOWN_POINTER if no live block contains `ptr`.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed; `out` is
 * NULL or valid for writing one `npualloc_block_info`. `ptr` is never
 * dereferenced.
 */
npualloc_status npualloc_query(const struct npualloc_allocator *a,
                               const void *ptr,
                               struct npualloc_block_info *out);

/**
 * Registers the allocator on `stream` through an `aclrtAllocatorDesc` with
 * all four callbacks set; blocks the runtime allocates through it belong to
 * `stream`. Registering a stream twice is OK (no duplicate).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle, a NULL stream (the
 * runtime cannot apply an allocator to the default stream), a stream the
 * runtime does not know or a stream of another device (checked as in
 * npualloc_malloc, on the allocator's device);
 * NPUALLOC_ERR_RUNTIME if an ACL call failed. Nothing is registered or
 * created when the call fails.
 *
 * Register before the first op on the stream. GE picks a stream's allocator
 * when the first op runs on it: after an op ran with nothing registered, GE
 * keeps its own allocator for that stream, and a later registration returns
 * NPUALLOC_OK but has no effect. npualloc cannot ask GE; when work is still
 * queued on the stream (`aclrtStreamQuery` says not ready), the call
 * succeeds and leaves a warning starting with "warning:" in
 * `npualloc_last_error()`.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed. `stream`
 * is checked with the runtime.
 */
npualloc_status npualloc_register(struct npualloc_allocator *a, aclrtStream stream);

/**
 * Unregisters the allocator from `stream` and destroys that desc. An
 * unknown stream is OK. If the runtime refuses to unregister, nothing
 * changes: the stream keeps the allocator (and its callbacks stay valid).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_unregister(struct npualloc_allocator *a, aclrtStream stream);

/**
 * The desc's allocation callback: allocates `size` bytes on the binding's
 * stream and returns a block handle, or NULL with the thread's last error set.
 *
 * # Safety
 * `binding` is NULL or a binding from `npualloc_register` or
 * `npualloc_binding_create` not yet destroyed (the runtime passes back the
 * `obj` it was given).
 */
void *npualloc_desc_alloc(void *binding, size_t size);

/**
 * The desc's free callback: frees a block handle. A NULL block is a no-op
 * (the rule of every npualloc free; the binding is still checked). An
 * unknown or already freed block changes nothing; the error goes to stderr
 * and the last error.
 *
 * # Safety
 * `binding` as for `npualloc_desc_alloc`. `block` is only looked up, never
 * dereferenced.
 */
void npualloc_desc_free(void *binding, void *block);

/**
 * The desc's advise callback: like alloc; `addr_hint` (may be NULL) is a
 * wish for an address and is not promised.
 *
 * # Safety
 * `binding` as for `npualloc_desc_alloc`. `addr_hint` is never dereferenced.
 */
void *npualloc_desc_alloc_advise(void *binding, size_t size, void *addr_hint);

/**
 * The desc's address callback: the device address of a block handle (the
 * handle itself). O(1).
 */
void *npualloc_desc_get_addr(void *block);

/**
 * Makes a binding (the `obj` for a host-built desc or GE's external
 * allocator shim) whose blocks belong to `stream` (NULL: default stream).
 * Destroy it with `npualloc_binding_destroy` before destroying the
 * allocator; the callbacks refuse a binding whose allocator was destroyed
 * (NULL, or nothing freed, and a last error saying so).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle or `binding`, or a
 * stream the runtime does not know (checked as in npualloc_register).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed; `binding`
 * is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_binding_create(struct npualloc_allocator *a,
                                        aclrtStream stream,
                                        void **binding);

/**
 * Destroys a binding made by `npualloc_binding_create`. NULL is a no-op.
 *
 * # Safety
 * `binding` is NULL or a binding from `npualloc_binding_create` not yet
 * destroyed, which no desc registered with the runtime still names.
 */
npualloc_status npualloc_binding_destroy(void *binding);

/**
 * The host is done with `stream` (it is about to destroy it): the memory
 * the allocator caches for it and its address ranges go back to the device
 * (after synchronizing the streams that used that memory). Its live blocks
 * stay valid and are freed as usual; a later use of the stream starts
 * afresh. A stream the allocator never served: OK, nothing changes.
 * Hosts that create streams over their lifetime call it before
 * `aclrtDestroyStream`, or address space runs out after some tens of
 * streams.
 *
 * Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`; the runtime's
 * failure when memory could not be given back (what could, was).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_forget_stream(struct npualloc_allocator *a, aclrtStream stream);

/**
 * `npualloc_forget_stream` for the process-wide allocator of `device` that
 * the torch_npu pluggable entry points use. A device whose allocator was
 * never created has nothing to forget: OK, nothing is created.
 *
 * Statuses: OK; INVALID_ARGUMENT for a device outside the range
 * `npualloc_pluggable_init` set (0..64 before it); as
 * `npualloc_forget_stream` otherwise. Thread-safe.
 */
npualloc_status npualloc_pluggable_forget_stream(int device, aclrtStream stream);

/**
 * Starts, resizes or stops the memory history: the allocator keeps its last
 * `max_entries` events (alloc, free requested, free completed, segment
 * alloc/free or map/unmap, out of memory) for
 * `npualloc_snapshot_pytorch_json`. 0 turns recording off and drops the
 * entries kept; a smaller bound than before keeps the newest. Off when an
 * allocator is created.
 *
 * While off, a malloc or free pays one relaxed atomic load for it; while
 * on, each event takes a lock shared by the allocator's streams. Memory for
 * entries grows as they arrive (about 50 bytes each), up to the bound.
 *
 * Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`.
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_record_history(struct npualloc_allocator *a, size_t max_entries);

/**
 * Writes a snapshot in the format of PyTorch's
 * `torch.cuda.memory._snapshot()`, as JSON, to `*out_json`: an object with
 * `segments` (each with `device`, `address`, `total_size`,
 * `allocated_size`, `active_size`, `requested_size`, `stream`,
 * `segment_type`, `segment_pool_id`, `is_expandable`, `frames` and
 * `blocks`, each block with `address`, `size`, `requested_size`, `state`
 * — active_allocated / active_pending_free / inactive — and `frames`) and
 * `device_traces` (one list per device index up to this allocator's
 * device; this device's holds the memory history, oldest first, each
 * entry with `action`, `addr` (`device_free` for "oom"), `size`,
 * `stream`, `pool_id` (`[0, pool]`, as `segment_pool_id`), `time_us`,
 * `frames`). Frames are always empty lists.
 *
 * A segment is device-backed memory: a fixed segment, or each run of
 * mapped pages of an expandable range (`is_expandable` true). The history
 * is empty unless `npualloc_record_history` turned it on; taking a
 * snapshot adds a "snapshot" entry to it. Free the string with
 * `npualloc_string_free`. Costs O(blocks + entries) and locks each of the
 * allocator's pools in turn.
 *
 * Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a` or a NULL
 * `out_json` (nothing written).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed;
 * `out_json` is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_snapshot_pytorch_json(const struct npualloc_allocator *a, char **out_json);

/**
 * `npualloc_record_history` for the process-wide allocator of `device`
 * that the torch_npu pluggable entry points use (created now from
 * `NPUALLOC_CONF` if it does not exist yet, as their first allocation
 * would).
 *
 * Statuses: OK; INVALID_ARGUMENT for a device outside the range
 * `npualloc_pluggable_init` set (0..64 before it); the status of the
 * creation failure when the device's allocator cannot be created.
 * Thread-safe.
 */
npualloc_status npualloc_pluggable_record_history(int device, size_t max_entries);

/**
 * `npualloc_snapshot_pytorch_json` for the process-wide allocator of
 * `device` that the torch_npu pluggable entry points use (created now from
 * `NPUALLOC_CONF` if it does not exist yet). Free the string with
 * `npualloc_string_free`.
 *
 * Statuses: as `npualloc_pluggable_record_history`, and INVALID_ARGUMENT
 * for a NULL `out_json` (nothing written, nothing created).
 *
 * # Safety
 * `out_json` is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_pluggable_snapshot_pytorch_json(int device, char **out_json);

/**
 * Installs `fn`, run with `user` and the allocator's device before every
 * synchronization that precedes giving device memory back: empty_cache,
 * the out-of-memory ladder (with its garbage collection and headroom
 * moves), the release threshold, and destroy. It runs with no npualloc
 * lock held that a malloc or free on another stream needs, on the thread
 * that triggered the release, which may be inside `npualloc_free` (the
 * last block of a destroyed pool, the release threshold). It also runs
 * when another npualloc allocator of the same device in the process is
 * about to refuse a request and asks this one for its free cache: then on
 * that allocator's thread, inside its malloc, with no lock of either
 * allocator held; `fn` may allocate and free there, and create and
 * destroy other allocators, but not destroy this one (destroy would wait
 * for the ask `fn` is part of) or the one asking (inside its malloc); a
 * request `fn` makes that runs out of memory is refused without asking
 * the other allocators again. A host with its
 * own queue of work not yet handed to the runtime (torch_npu's task queue)
 * drains it there; a host whose drain cannot run on some thread of its own
 * (its queue's own threads) must return at once there. NULL `fn` removes
 * the hook. Replaces any earlier hook; returns only once no other thread
 * is inside the old one, so its `user` may be freed then. Called from
 * inside a hook call (this hook replacing itself, or the out-of-memory
 * observer), it returns at once without waiting: the old hook may then
 * still run on other threads (two hooks each removing the other would
 * otherwise wait for each other forever).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` may be called with `user` from any
 * thread until it is replaced or the allocator destroyed.
 */
npualloc_status npualloc_set_before_release(struct npualloc_allocator *a,
                                            npualloc_release_hook fn,
                                            void *user);

/**
 * Installs `fn`, run with `user` once per request refused with
 * NPUALLOC_ERR_OUT_OF_MEMORY, after everything the request took was given
 * back and with no npualloc lock held, on the thread that made the
 * request, with the same report text the last error gets. NULL `fn`
 * removes it; replaces any earlier observer, returning once no other
 * thread is inside the old one. Called from inside a hook call (this
 * observer replacing itself, or the before-release hook), it returns at
 * once without waiting: the old observer may then still run on other
 * threads. With the config key
 * `oom_snapshot:PATH`, a PyTorch-format snapshot (a pickle, the memory
 * history included while recording) is written to PATH just before, and
 * the report (the error's message as well) ends with a sentence naming
 * PATH, or saying why the file could not be written.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` may be called with `user` from any
 * thread until it is replaced or the allocator destroyed.
 */
npualloc_status npualloc_set_oom_observer(struct npualloc_allocator *a,
                                          npualloc_oom_hook fn,
                                          void *user);

/**
 * Installs `fn`, run with `user` for every piece of device memory the
 * allocator comes to hold or stops holding, so that a communication
 * library (HCCL) can register it: NPUALLOC_SEGMENT_RESERVE after an
 * expandable range is reserved and before anything is mapped in it;
 * NPUALLOC_SEGMENT_MAP after a physical handle is mapped (with the handle)
 * or an `aclrtMalloc` segment is obtained (fixed segments, no handle), and
 * before any of it is handed out; NPUALLOC_SEGMENT_UNMAP before the call
 * that unmaps or frees it, so the library can deregister first;
 * NPUALLOC_SEGMENT_RELEASE after the range's last UNMAP, before it is
 * released. A runtime call that fails after its UNMAP (or RELEASE) is
 * followed by MAP (or RESERVE) again: the memory is still held. A physical
 * handle moved to a second address (`handle_moves`) is a MAP at the new
 * address and, later, an UNMAP of the old one; sleep is UNMAP, wake MAP;
 * destroy unmaps and releases everything, with events.
 *
 * `fn` runs on the thread that caused the event. On a growth (a malloc
 * that maps or obtains memory) that stream's pool is locked: its other
 * requests and frees wait, another stream's do not. When memory is given
 * back (empty_cache, the out-of-memory retries, the release threshold,
 * sleep, wake, forget_stream, pool destroy, destroy) the allocator's
 * give-back lock is held as well. A malloc on another stream waits for it
 * only when it runs out of memory, its growth passes
 * `garbage_collection_threshold`, or `reserved_headroom` asks other
 * streams for pages: it needs the memory being given back. A free never
 * waits for it: memory a free would give back over the release threshold
 * while another give-back runs goes back with that one, or with the next
 * free that gives memory back. A free that gives memory back calls `fn`
 * itself. `fn` must not call this allocator's functions, and should
 * return quickly. NULL `fn` removes the observer. One observer per
 * allocator: setting one replaces the last, returning once no other thread
 * is inside the old one (at once when called from inside a hook call).
 * What the allocator already holds is not replayed: call
 * `npualloc_for_each_segment` after setting the observer.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` may be called with `user` from any
 * thread until it is replaced or the allocator destroyed.
 */
npualloc_status npualloc_set_segment_observer(struct npualloc_allocator *a,
                                              npualloc_segment_hook fn,
                                              void *user);

/**
 * Calls `fn` with `user` once with NPUALLOC_SEGMENT_RESERVE for every
 * expandable range the allocator holds now and once with
 * NPUALLOC_SEGMENT_MAP for every piece of memory mapped now (each physical
 * handle where it is mapped; each fixed segment), each range before the
 * pieces in it, so that a library attaching late registers what exists.
 * Each pool of each stream is read under its lock and `fn` is called after
 * the reading, with no npualloc lock held. Memory gained or given back by
 * another thread while it runs may be missing, or be told to an observer
 * set before as well.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle or a NULL
 * `fn`. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` is called with `user` on the calling
 * thread only, before this returns.
 */
npualloc_status npualloc_for_each_segment(const struct npualloc_allocator *a,
                                          npualloc_segment_hook fn,
                                          void *user);

/**
 * Exports the live block that starts at `ptr` (of allocator `a`, any pool,
 * either mode, any size) so that another process of the host can map the
 * same memory with `npualloc_ipc_import`; writes the handle to `out`.
 * Exporting a block again gives the same handle.
 *
 * While any process holds the block imported, its memory is neither
 * handed to another request nor given back, even after this process frees
 * it: the free succeeds at once, and the memory returns to the cache when
 * the last importer closes it or exits (seen by a later free, empty_cache
 * or the out-of-memory ladder). A block freed before any process imported
 * it is no longer exported. The runtime exports a physical handle once
 * per process: with expandable segments, a handle a communication library
 * registered (and so exported itself) makes the export fail with
 * NPUALLOC_ERR_RUNTIME, and the message says so.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle or NULL
 * `ptr` or `out`, NPUALLOC_ERR_UNKNOWN_POINTER when `ptr` is not the start
 * of a live block of `a`, NPUALLOC_ERR_UNSUPPORTED when the runtime lacks
 * the sharing calls, NPUALLOC_ERR_RUNTIME when it refuses. Nothing changes
 * on an error. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` is NULL or writable.
 */
npualloc_status npualloc_ipc_export(struct npualloc_allocator *a,
                                    void *ptr,
                                    struct npualloc_ipc_handle *out);

/**
 * In another process than the exporter's (it needs no allocator of its
 * own), maps the memory of the block `h` names on `device` (the
 * exporter's device, or another device of the host where the runtime
 * allows it) and writes the address of its first byte to `out_ptr` and
 * its usable size (at least what was requested) to `out_size`. The
 * importer sees the exporter's bytes and the exporter the importer's
 * writes. Importing one handle twice gives two imports (the same address
 * for a fixed-segment block), each ended by one `npualloc_ipc_close`. An
 * import stays valid after the exporter exits.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for NULL arguments, bytes that are
 * not an export's, a handle this process exported ("use the pointer
 * itself"), a block no longer exported or an exporter that has exited;
 * NPUALLOC_ERR_RUNTIME when the runtime refuses. Nothing changes on an
 * error. Thread-safe.
 *
 * # Safety
 * `h` is NULL or readable; `out_ptr` and `out_size` NULL or writable.
 */
npualloc_status npualloc_ipc_import(const struct npualloc_ipc_handle *h,
                                    int32_t device,
                                    void **out_ptr,
                                    size_t *out_size);

/**
 * Ends one import of the block at `ptr`, a pointer `npualloc_ipc_import`
 * returned; the last unmaps it, and the exporter may reuse the memory once
 * no process holds it. Work queued on the memory must be finished first.
 *
 * Returns NPUALLOC_ERR_UNKNOWN_POINTER when `ptr` is no live import,
 * NPUALLOC_ERR_RUNTIME when the runtime refuses to unmap (the import has
 * ended all the same). Thread-safe.
 *
 * # Safety
 * Nothing may use the imported memory after its last close.
 */
npualloc_status npualloc_ipc_close(void *ptr);

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
 * Checks a 2D copy without performing it: the rules `npualloc_memcpy2d`
 * (`is_async == 0`) or `npualloc_memcpy2d_async` (`is_async != 0`) would
 * apply.
 *
 * `a` may be NULL: then only the runtime's documented rules are checked.
 * Those are, in the runtime's order: width 0 or height 0 is a successful
 * no-op (checked first, so NULL pointers are then accepted); a NULL `dst`
 * or `src`, `width > dpitch`, `width > spitch`, a kind other than
 * ACL_MEMCPY_HOST_TO_DEVICE (1), ACL_MEMCPY_DEVICE_TO_HOST (2),
 * ACL_MEMCPY_DEVICE_TO_DEVICE (3) and ACL_MEMCPY_DEFAULT (4),
 * `height > 5242880` and `width > 5000000` are
 * NPUALLOC_ERR_INVALID_ARGUMENT with a message naming the rule; then a
 * synchronous DEVICE_TO_DEVICE copy is NPUALLOC_ERR_UNSUPPORTED (the
 * runtime's 207000). With an allocator, each device side of the copy must
 * also lie in a live block it owns (NPUALLOC_ERR_UNKNOWN_POINTER otherwise;
 * interior pointers are fine) and the last byte touched,
 * `(height-1)*pitch + width - 1` past the pointer, computed without
 * overflow, must lie inside that same block
 * (NPUALLOC_ERR_COPY_OUT_OF_BOUNDS otherwise). For ACL_MEMCPY_DEFAULT the
 * device sides are the ends that lie in the allocator's blocks (the others
 * are left to the runtime), and a synchronous copy with both ends in them
 * is NPUALLOC_ERR_INVALID_ARGUMENT (the runtime resolves it to
 * device-to-device and answers 107000). A non-NULL `a` that is not a live
 * allocator is NPUALLOC_ERR_INVALID_ARGUMENT.
 *
 * Returns NPUALLOC_OK if the copy would be attempted (or is a no-op).
 * Never calls the runtime. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed. `dst` and
 * `src` are only compared with the allocator's blocks, never dereferenced.
 */
npualloc_status npualloc_check_memcpy2d(const struct npualloc_allocator *a,
                                        const void *dst,
                                        size_t dpitch,
                                        const void *src,
                                        size_t spitch,
                                        size_t width,
                                        size_t height,
                                        int32_t kind,
                                        int32_t is_async);

/**
 * Validates a 2D copy as `npualloc_check_memcpy2d(a, ..., is_async = 0)`
 * does, then performs it with `aclrtMemcpy2d` (synchronous).
 *
 * `a` may be NULL (only the documented rules are checked, and the copy uses
 * the default ACL library: `NPUALLOC_ACL_LIBRARY`, else
 * `$ASCEND_HOME_PATH/lib64/libascendcl.so`, else the loader's search);
 * with an allocator the copy uses the allocator's runtime. Width 0 or
 * height 0 returns NPUALLOC_OK without calling the runtime.
 *
 * Returns NPUALLOC_OK; NPUALLOC_ERR_INVALID_ARGUMENT,
 * NPUALLOC_ERR_UNSUPPORTED, NPUALLOC_ERR_UNKNOWN_POINTER or
 * NPUALLOC_ERR_COPY_OUT_OF_BOUNDS from validation (nothing is copied); NPUALLOC_ERR_RUNTIME_UNAVAILABLE if `a`
 * is NULL and libascendcl cannot be loaded; NPUALLOC_ERR_RUNTIME if
 * `aclrtMemcpy2d` fails (the message names it and its aclError).
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed. Every byte
 * the copy touches (`height` rows of `width` bytes, `dpitch` and `spitch`
 * apart) lies in memory valid for the copy's direction, as `aclrtMemcpy2d`
 * requires; npualloc checks this only for the device side of blocks it owns.
 */
npualloc_status npualloc_memcpy2d(const struct npualloc_allocator *a,
                                  void *dst,
                                  size_t dpitch,
                                  const void *src,
                                  size_t spitch,
                                  size_t width,
                                  size_t height,
                                  int32_t kind);

/**
 * Validates a 2D copy as `npualloc_check_memcpy2d(a, ..., is_async = 1)`
 * does, then enqueues it on `stream` (NULL: the default stream) with
 * `aclrtMemcpy2dAsync`. The copy is complete only once the stream has been
 * synchronized; both regions must stay valid until then.
 *
 * `a` may be NULL, with the same meaning as for `npualloc_memcpy2d`. Width 0
 * or height 0 returns NPUALLOC_OK without calling the runtime.
 *
 * Returns NPUALLOC_OK; NPUALLOC_ERR_INVALID_ARGUMENT,
 * NPUALLOC_ERR_UNKNOWN_POINTER or NPUALLOC_ERR_COPY_OUT_OF_BOUNDS from
 * validation (nothing is enqueued); NPUALLOC_ERR_RUNTIME_UNAVAILABLE if `a`
 * is NULL and libascendcl cannot be loaded; NPUALLOC_ERR_RUNTIME if
 * `aclrtMemcpy2dAsync` fails (the message names it and its aclError).
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed. As for
 * `npualloc_memcpy2d`, and both regions stay valid until the stream has run
 * the copy.
 */
npualloc_status npualloc_memcpy2d_async(const struct npualloc_allocator *a,
                                        void *dst,
                                        size_t dpitch,
                                        const void *src,
                                        size_t spitch,
                                        size_t width,
                                        size_t height,
                                        int32_t kind,
                                        aclrtStream stream);

/**
 * torch_npu's allocation hook: `size` bytes on `device` for work on `stream`
 * (NULL: the device's default stream). Returns the device address, or NULL
 * with the thread's last error set (out of memory, bad device, the device's
 * allocator could not be created). Size 0 returns NULL and is not an error.
 * Thread-safe.
 *
 * # Safety
 * `stream` is NULL or a stream of `device` (it is checked with the runtime).
 */
void *npualloc_pluggable_malloc(size_t size, int device, aclrtStream stream);

/**
 * torch_npu's free hook: frees `ptr`, returned by `npualloc_pluggable_malloc`
 * for `device`. `size` and `stream` are the values torch passes back (the
 * block's own stream is known; they are not needed). NULL is a no-op, as
 * for every npualloc free (the device is not checked then either). A
 * pointer this device's allocator does not own (another device's, unknown,
 * already freed) changes nothing: the last error says why and a line goes
 * to stderr. Thread-safe.
 *
 * # Safety
 * `ptr` is NULL or came from `npualloc_pluggable_malloc` for `device`, and
 * nothing but work already queued on its streams uses the block after this
 * call. `ptr` itself is only looked up, never dereferenced.
 */
void npualloc_pluggable_free(void *ptr, size_t size, int device, aclrtStream stream);

/**
 * torch_npu's init hook: the process will use devices `0..device_count`.
 * Later calls naming a device outside that range fail. Allocators are still
 * created lazily, on a device's first use. A count outside 1..=64 is refused
 * (last error and stderr); calling it again replaces the count.
 */
void npualloc_pluggable_init(int device_count);

/**
 * torch_npu's empty-cache hook: returns every cached, unused segment of
 * every device's allocator to the runtime. Errors are recorded as the last
 * error (the first one) and, when `check_error` is true, printed on stderr.
 */
void npualloc_pluggable_empty_cache(bool check_error);

/**
 * torch_npu's memory-fraction hook: caps `device`'s allocator at `fraction`
 * (in [0, 1], as torch_npu allows; 0 lets the allocator reserve nothing
 * more) of the device memory, creating the allocator if needed. A bad
 * fraction or device changes nothing: last error and stderr.
 */
void npualloc_pluggable_set_memory_fraction(double fraction, int device);

/**
 * torch_npu's base-allocation hook: for a pointer into a live block of any
 * device's pluggable allocator, writes the size of the segment holding it
 * to `*size` and returns the segment's base address. Returns NULL (nothing
 * written, last error set) for NULL `size` or a pointer no allocator owns.
 *
 * # Safety
 * `size` is NULL or valid for writing one `size_t`. `ptr` is never
 * dereferenced.
 */
void *npualloc_pluggable_base_alloc(void *ptr, size_t *size);

/**
 * torch_npu's reset-peak hook: resets the peak statistics of `device`'s
 * allocator (nothing to do when it has not been created). A bad device:
 * last error and stderr.
 *
 * torch_npu calls the hook as `void(c10::DeviceIndex)`, an `int8_t`
 * (torch_npu 2.13 and later); older releases as `void(int)`. Only the low
 * byte of `device` is read, as a signed 8-bit value, so the call is right
 * either way on every ABI: a caller passing an `int8_t` may leave the upper
 * bits of the register or stack slot undefined.
 */
void npualloc_pluggable_reset_peak_stats(int device);

/**
 * The process-wide allocator the pluggable entry points use for `device`,
 * created from `NPUALLOC_CONF` on first use as they do, as a handle for the
 * whole C API (a host such as a torch_npu bridge uses it for statistics,
 * record/erase stream, hooks and snapshots of the memory torch_npu
 * allocates). `npualloc_destroy` refuses it: it lives until the process
 * exits. The same handle is written for every call with the same device.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for NULL `out` or a device outside
 * the range `npualloc_pluggable_init` set (0..64 before it); a creation
 * failure is that of `npualloc_create` and is returned again by every
 * later call for the device. Thread-safe.
 *
 * # Safety
 * `out` is NULL or valid for writing one handle.
 */
npualloc_status npualloc_pluggable_allocator(int device, struct npualloc_allocator **out);

/**
 * The function table for C ABI version `abi_version`, or NULL (last error
 * set) when this library does not provide that version. The table is
 * static: never free it. Thread-safe.
 */
const struct npualloc_api *npualloc_get_api(uint32_t abi_version);

/**
 * Creates a private pool and writes its id to `*out_pool`. Ids are never
 * 0 (the default pool) and never reused. `config` is `"key:value,..."` or
 * NULL for the defaults: `sleep` = `keep` (default) | `offload` |
 * `discard`, what `npualloc_sleep` does to the pool's live blocks;
 * `use_on_oom` (default false): when a request of the default pool runs
 * out of memory, a free block of the pool on the request's stream serves
 * it first, with no device call, as the pool's block (torch_npu's
 * `MemPool(use_on_oom=True)`); failing that, for any request outside the
 * pool, the pool's cached memory may be given back for it. Otherwise a
 * pool's cached memory stays with it until `npualloc_pool_destroy`
 * (`npualloc_empty_cache` leaves it). What the pool's blocks look like, for
 * a library that registers them (HCCL, ADXL): `alignment` (`2m`, `64k` or
 * bytes, a power of two up to 2 MiB; default 512) makes every block start
 * on that boundary and its size a multiple of it; `no_split` (default
 * false) makes every block 2 MiB-aligned memory of its own, never cut from
 * a cached piece of memory: with fixed segments each block is a segment of
 * its own, or a whole cached one; in an expandable range each block is
 * whole physical handles that no other block touches (the pages it lacks
 * get handles covering exactly them, and a request on cached pages takes
 * each handle it touches whole; freed neighbours coalesce, and a later
 * request takes only the handles it needs of them). In fixed mode an aligned segment
 * the runtime places off the boundary costs one more `aclrtMalloc`, one
 * unit larger.
 *
 * Returns NPUALLOC_ERR_BAD_CONFIG naming the key for an unknown key or a
 * bad value; NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle or a
 * NULL `out_pool`. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `config` is NULL or a NUL-terminated
 * string; `out_pool` is NULL or writable.
 */
npualloc_status npualloc_pool_create(struct npualloc_allocator *a,
                                     const char *config,
                                     uint64_t *out_pool);

/**
 * From now until the matching `npualloc_pool_end`, every allocation on
 * `stream` (from any thread, through every entry point: direct, desc,
 * pluggable) is served from `pool`. `stream` NULL routes instead every
 * allocation the calling thread makes, on any stream (PyTorch's
 * `use_mem_pool`). Routes nest: the innermost (newest) wins. Frees always
 * go to the block's own pool. A stream in graph capture may be routed; it
 * is never queried or synchronized.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a NULL or
 * dead handle, a pool never created or destroyed, a stream the runtime
 * does not know, or a thread route (NULL `stream`) asked for from a
 * thread-local destructor once the thread's own state is gone (it could
 * never end). Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_begin(struct npualloc_allocator *a,
                                    uint64_t pool,
                                    aclrtStream stream);

/**
 * Ends the innermost route of `stream` (NULL: of the calling thread),
 * which must go to `pool`.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, when that
 * route goes to another pool, there is none, the pool does not exist, or
 * the handle is NULL or dead. Thread-safe. Called for the calling thread
 * from a thread-local destructor once the thread's own state is gone,
 * returns NPUALLOC_OK: its routes ended with that state.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_end(struct npualloc_allocator *a, uint64_t pool, aclrtStream stream);

/**
 * Destroys `pool`: it takes no more routes, its cached memory goes back
 * to the device now (after synchronizing the streams that used it), and
 * its live blocks stay valid, their memory going back when they are
 * freed. Pool 0 cannot be destroyed.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for pool 0, a
 * pool never created or already destroyed, a pool with an active route,
 * or a NULL or dead handle. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_destroy(struct npualloc_allocator *a, uint64_t pool);

/**
 * Sets pool `pool`'s `use_on_oom` (its config key) from now on: nonzero
 * `on` lets requests of other pools that run out of memory take its cached
 * memory, 0 stops it. torch_npu's `MemPool` sets it at any time (its
 * destructor clears it).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for pool 0 (the
 * default pool's cache always serves such requests), a pool never created
 * or destroyed, or a NULL or dead handle. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_set_use_on_oom(struct npualloc_allocator *a,
                                             uint64_t pool,
                                             int32_t on);

/**
 * Fills `*out` as `npualloc_get_stats` does, for one pool's blocks and
 * memory (0: the default pool; a destroyed pool's live blocks still
 * count). Counters of device calls (device mallocs and frees, maps,
 * physical mallocs and frees, syncs, retries, OOMs) count the calls made
 * for the pool's memory and its requests (sleep and wake, and the freeing
 * of unmapped handles cached for any pool, count only in the allocator's);
 * reserved bytes are the pool's segments; the peaks are the pool's own
 * (allocated and requested as `npualloc_get_stats` keeps them, over the
 * pool's streams; reserved the most its segments held).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle, a pool
 * never created, a NULL `out` or a `struct_size` below the header.
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` as for `npualloc_get_stats`.
 */
npualloc_status npualloc_pool_get_stats(const struct npualloc_allocator *a,
                                        uint64_t pool,
                                        struct npualloc_stats *out);

/**
 * Gives back the cached memory of `pool` (0: the default pool's) after
 * synchronizing only the streams that used it; its live blocks are
 * untouched and the pool keeps working. A destroyed pool's remaining
 * cached memory goes back too. A pool that served a graph capture and is
 * not destroyed keeps its memory (the graph may replay until
 * `npualloc_pool_destroy`): NPUALLOC_OK, nothing given back. The
 * before-release hook runs first, as for `npualloc_empty_cache`.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a pool
 * never created or a NULL or dead handle. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_empty_cache(struct npualloc_allocator *a, uint64_t pool);

/**
 * Calls `fn` with `user` for every live block of `pool` (0: the default
 * pool), in address order: what `npualloc_pool_restore` can set the pool
 * back to later (a checkpoint, as PyTorch's graph trees take of a graph
 * pool after each recording). The pool's streams are read under their
 * locks; `fn` runs after the reading with no npualloc lock held, on the
 * calling thread, before this returns.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle, a NULL
 * `fn`, or a pool never created or destroyed. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` is called with `user` only as said.
 */
npualloc_status npualloc_pool_live_blocks(const struct npualloc_allocator *a,
                                          uint64_t pool,
                                          npualloc_live_block_fn fn,
                                          void *user);

/**
 * Sets the live blocks of `pool` to exactly the `n` blocks at `blocks`
 * (a list `npualloc_pool_live_blocks` gave earlier; `n` 0 with NULL
 * `blocks` frees them all): every other live block of the pool is freed,
 * and each listed block not live now is allocated again at its address
 * and size, from the pool's free memory there, on its old stream's pool
 * (`stream` must be the one reported). A listed block live now at the
 * same address and size stays as it is. Nothing else of the pool changes:
 * no device call is made. What PyTorch's graph trees do with a graph
 * pool's checkpoint before recording a new branch (torch_npu's
 * `setCheckpointPoolState`).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a NULL or
 * dead handle, a NULL `blocks` with `n` above 0, pool 0 (the default
 * pool's frees follow rules a restore would skip), a pool never created
 * or destroyed, a block no listing could give (a request of 0 bytes or
 * more than its size, an address or size off the pool's alignment or not
 * whole 512-byte units, a stream other than its memory's), two listed
 * blocks that overlap, a block whose memory is not the pool's (given back
 * since, or another pool's), is not mapped, or will not be free once the
 * pool's other blocks are (a freed block still waiting for other streams'
 * work), or a live block that would be freed and that other streams used
 * (`npualloc_record_stream`) or another process imported. The caller makes
 * sure no other thread allocates in or frees into the pool meanwhile.
 * Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; a non-NULL `blocks` points to `n`
 * readable blocks.
 */
npualloc_status npualloc_pool_restore(struct npualloc_allocator *a,
                                      uint64_t pool,
                                      const struct npualloc_live_block *blocks,
                                      size_t n);

/**
 * Sleeps: synchronizes every stream that used memory, gives back all cached
 * memory of every pool, copies the live blocks of `sleep=offload` pools to
 * host memory and gives their device memory back, gives back those of
 * `sleep=discard` pools without a copy, and leaves `sleep=keep` pools' live
 * blocks (the default pool keeps). Virtual addresses stay reserved: every
 * pointer is valid again after `npualloc_wake`. While asleep, allocations
 * routed to offload or discard pools are INVALID_ARGUMENT; freeing any
 * block is allowed. Asleep already: OK, nothing changes; but after an
 * `npualloc_wake_with` that woke some pools and left others asleep:
 * INVALID_ARGUMENT, nothing changed (wake the rest first).
 *
 * Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`, or after a
 * partial wake (above); UNSUPPORTED
 * (nothing changed) when an offload or discard pool has live blocks and
 * the allocator uses fixed segments (`expandable_segments:false`); the
 * runtime's failure otherwise (what was taken is brought back first).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_sleep(struct npualloc_allocator *a);

/**
 * Wakes: maps device memory under every sleeping block again at the same
 * address and restores offloaded contents (discarded ones read as
 * undefined). All or nothing: when the handles do not fit, the cached
 * memory of the pools awake is given back first (as the out-of-memory
 * ladder gives it; a graph pool keeps its own) and the wake tried again; a
 * physical allocation, map or copy refused part-way is undone whole, every
 * block staying asleep with its host copy. Awake already: OK.
 *
 * Statuses: OK; INVALID_ARGUMENT for a NULL or destroyed `a`;
 * OUT_OF_MEMORY when the device cannot hold the sleeping blocks or a map
 * is refused: nothing changed, the allocator is still asleep, and a later
 * call may succeed; the runtime's failure of a copy back, also changing
 * nothing.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_wake(struct npualloc_allocator *a);

/**
 * Sleeps as `npualloc_sleep` does, with the sleep mode of some pools
 * chosen now instead of at `npualloc_pool_create`: the `n_offload` pools
 * at `offload_pools` offload (their live blocks are copied to host memory
 * and restored by `npualloc_wake`), the `n_discard` pools at
 * `discard_pools` discard (they read as undefined after wake), and every
 * other pool sleeps in its own `sleep` config (the default pool, 0,
 * keeps unless listed). This is vLLM's `sleep(offload_tags=...)` with one
 * pool per tag. A list may be NULL when its count is 0; a pool may appear
 * twice in one list. Wake with `npualloc_wake`.
 *
 * Statuses: those of `npualloc_sleep`, and INVALID_ARGUMENT, changing
 * nothing, for a NULL or destroyed `a`, a NULL list with a count above 0,
 * a count too large for memory, a misaligned list, a pool that does not
 * exist or was destroyed, or a pool in both lists. Asleep already: OK,
 * nothing changes (the lists are still checked); after a partial wake,
 * INVALID_ARGUMENT as for `npualloc_sleep`.
 *
 * # Safety
 * `a` is NULL or a live handle; a non-NULL list points to its count of
 * readable `uint64_t`.
 */
npualloc_status npualloc_sleep_with(struct npualloc_allocator *a,
                                    const uint64_t *offload_pools,
                                    size_t n_offload,
                                    const uint64_t *discard_pools,
                                    size_t n_discard);

/**
 * Wakes only the sleeping blocks of the `n` pools at `pools`, by the rules
 * of `npualloc_wake`: all or nothing (OUT_OF_MEMORY changes nothing, the
 * pools stay asleep), and the awake pools' cached memory is given back
 * before giving up. The other pools stay asleep (their allocations still
 * INVALID_ARGUMENT), and the allocator counts as asleep until every pool is
 * awake. This is vLLM's `wake_up(tags=[...])` with one pool per tag, e.g.
 * the weights before the KV cache. A pool not asleep (a `keep` pool, or
 * one woken already) is OK and changes nothing; a destroyed pool may be
 * listed (its sleeping live blocks wake); `npualloc_wake` wakes every pool.
 * `pools` may be NULL when `n` is 0 (then only an allocator with no pool
 * left asleep becomes awake).
 *
 * Statuses: those of `npualloc_wake`, and INVALID_ARGUMENT, changing
 * nothing, for a NULL or destroyed `a`, a NULL list with `n` above 0, a
 * count too large for memory, a misaligned list, or a pool that was never
 * created. Awake already: OK (the list is still checked).
 *
 * # Safety
 * `a` is NULL or a live handle; a non-NULL `pools` points to `n` readable
 * `uint64_t`.
 */
npualloc_status npualloc_wake_with(struct npualloc_allocator *a, const uint64_t *pools, size_t n);

/**
 * Fills `*out` up to `out->struct_size` bytes, whole fields only, and
 * writes back in `struct_size` how many bytes it filled.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle or `out`, or a
 * `struct_size` smaller than the two header fields.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed; `out` is
 * NULL or points to an `npualloc_stats` whose `struct_size` bytes are writable
 * (at least its two header fields).
 */
npualloc_status npualloc_get_stats(const struct npualloc_allocator *a, struct npualloc_stats *out);

/**
 * Fills `*out` as `npualloc_get_stats` does, for the blocks of one pool
 * kind (`NPUALLOC_SMALL_BLOCKS` or `NPUALLOC_LARGE_BLOCKS`) over every
 * pool: PyTorch's "small_pool" and "large_pool" figures. Blocks, cumulative
 * block figures, pending frees, inactive split blocks, segments and their
 * bytes are the kind's own; reserved bytes are its segments' (unmapped
 * handles cached for reuse belong to no kind); the peaks of allocated and
 * requested bytes are the kind's sums at the moments `npualloc_get_stats`'s
 * peaks are taken, so a high of one kind while the allocator's total stays
 * below its peak is missed; the reserved and segment peaks read as their
 * current figures, and the counters of device calls and
 * `reserved_bytes_total` read 0 (kept for the whole allocator only).
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for another `kind`, a NULL or dead
 * handle, a NULL `out` or a `struct_size` below the header. Thread-safe.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` as for `npualloc_get_stats`.
 */
npualloc_status npualloc_get_kind_stats(const struct npualloc_allocator *a,
                                        int32_t kind,
                                        struct npualloc_stats *out);

/**
 * Resets the peak counters to the current values.
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed.
 */
npualloc_status npualloc_reset_peak_stats(struct npualloc_allocator *a);

/**
 * Writes a JSON snapshot (segments, their blocks with address, size, state
 * — active / cached / pending-free — and stream, and the stats) to
 * `*out_json`. Free it with `npualloc_string_free`. Costs O(blocks).
 *
 * # Safety
 * `a` is NULL or a handle from `npualloc_create` not yet destroyed; `out_json`
 * is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_snapshot_json(const struct npualloc_allocator *a, char **out_json);

/**
 * Frees a string returned by npualloc. NULL is a no-op.
 *
 * # Safety
 * `s` is NULL or a string returned by npualloc and not yet freed.
 */
void npualloc_string_free(char *s);

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
