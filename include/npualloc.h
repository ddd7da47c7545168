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
 * `npualloc_empty_cache_with` flag: the physical handles unmapped stay cached (counted in `cached_handle_bytes`
 * and `reserved_bytes`) for later growth to map again; `npualloc_empty_cache` frees them.
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
 * Version of the `npualloc_stats` layout this library fills (the field docs say which version added each field).
 */
#define NPUALLOC_STATS_VERSION 7

/**
 * Pool kind for `npualloc_get_kind_stats`: PyTorch's small pool (blocks of at most 1 MiB as rounded).
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
 * The C ABI version this header describes; it changes only when an existing signature, struct layout or status
 * number changes. The SONAME is `libnpualloc.so.<NPUALLOC_ABI_VERSION>` (build.rs and CMakeLists.txt read the
 * number from this line).
 */
#define NPUALLOC_ABI_VERSION 1

/**
 * The result of every npualloc function that can fail (32 bits; `NPUALLOC_OK` is 0). On failure
 * `npualloc_last_error()` returns a message with the details, and `npualloc_status_name()` the name of the code.
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
 * What happened to a piece of device memory (see `npualloc_set_segment_observer`): the values of the core's
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
     * Physical memory mapped at addr..addr+size: its handle, or an `aclrtMalloc` segment (fixed segments; no handle).
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
 * Opaque allocator handle: its value names a registered allocator and is not an address. npualloc never reads
 * through it and refuses NULL, any other value and a destroyed handle with NPUALLOC_ERR_INVALID_ARGUMENT.
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
 * `fn(user, device)`: run before npualloc synchronizes streams to give memory back (`npualloc_set_before_release`).
 */
typedef void (*npualloc_release_hook)(void *user, int32_t device);

/**
 * `fn(user, device, requested, report)`: a request of `requested` bytes on `device` was refused for lack of memory;
 * `report` (valid during the call) is the text the last error gets (see `npualloc_set_oom_observer`).
 */
typedef void (*npualloc_oom_hook)(void *user, int32_t device, size_t requested, const char *report);

/**
 * `fn(user, device, event, addr, size, drv_handle, pool)`: npualloc came to hold, or is about to stop holding, the
 * device memory at [addr, addr + size) of pool `pool` (0: the default pool); `drv_handle` is the physical handle
 * (`aclrtDrvMemHandle`) mapped there, NULL for a range (RESERVE, RELEASE) and for an `aclrtMalloc` segment.
 */
typedef void (*npualloc_segment_hook)(void *user,
                                      int32_t device,
                                      npualloc_segment_event event,
                                      void *addr,
                                      size_t size,
                                      void *drv_handle,
                                      uint64_t pool);

/**
 * What `npualloc_ipc_export` writes: plain bytes, to be copied by any means to another process of the host.
 */
typedef struct npualloc_ipc_handle {
    uint8_t bytes[NPUALLOC_IPC_HANDLE_SIZE];
} npualloc_ipc_handle;

/**
 * Allocator statistics in PyTorch `memory_stats()` vocabulary; the names are also the snapshot's "stats" keys. The
 * caller sets `struct_size` to `sizeof(npualloc_stats)`; fields past it are not written, so callers built against an
 * older, smaller struct keep working (fields are only ever added at the end). The cached part of the segments is
 * segment_bytes - allocated_bytes - pending_free_bytes.
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
     * The most `allocated_bytes` at once: exact while one stream allocates; with several, the highest total seen when
     * some stream reached a new high of its own (kept without a counter every stream writes; a peak that streams each
     * below their own high make together can be missed). Likewise `requested_bytes_peak`.
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
     * Bytes freed by the caller and waiting for work on other streams (record_stream) to complete.
     */
    uint64_t pending_free_bytes;
    /**
     * Device memory held by segments: whole fixed segments, and the mapped
     * pages of expandable ranges. The snapshot's segment sizes add up to it.
     */
    uint64_t segment_bytes;
    /**
     * Physical handles unmapped and kept for reuse (expandable segments); 0 with fixed segments.
     */
    uint64_t cached_handle_bytes;
    /**
     * Address space of all segments: with expandable segments their reserved virtual ranges; with fixed segments the
     * part of each that blocks tile (`segment_bytes` less any alignment slack).
     */
    uint64_t address_space_bytes;
    /**
     * The most `segments` at once. (Version 3 from here on.)
     */
    uint64_t segments_peak;
    /**
     * Segments made: fixed segments obtained with aclrtMalloc plus expandable ranges reserved.
     */
    uint64_t num_segments_created;
    /**
     * Segments given back; `num_segments_created - num_segments_released` is `segments`.
     */
    uint64_t num_segments_released;
    /**
     * Wholly free physical handles mapped a second time where an expandable range grew, in place of a fresh handle
     * (each also counts in `num_maps`; its old address is unmapped later). (Version 4 from here on.)
     */
    uint64_t num_handle_moves;
    /**
     * Bytes of the blocks handed out since the allocator was made, as rounded: `allocated_bytes_total -
     * allocated_bytes` bytes were freed. (Version 5 from here on.)
     */
    uint64_t allocated_bytes_total;
    /**
     * Device memory obtained since the allocator was made (fixed segments and physical handles):
     * `reserved_bytes_total - reserved_bytes` bytes were given back.
     */
    uint64_t reserved_bytes_total;
    /**
     * Blocks freed by the caller and waiting for work on other streams (their bytes are `pending_free_bytes`).
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
     * Blocks of at least this many bytes are never split (`max_split_size_mb`); `UINT64_MAX` when no limit is set
     * (PyTorch's -1, read as a signed number).
     */
    uint64_t max_split_size;
    /**
     * Live blocks exported to other processes (`npualloc_ipc_export`). (Version 6 from here on.)
     */
    uint64_t exported_blocks;
    /**
     * Bytes of freed blocks that other processes still hold imported: neither handed out nor given back until the last
     * of them lets go (counted in `pending_free_bytes` too).
     */
    uint64_t held_for_importers_bytes;
    /**
     * The most device memory this allocator may reserve (`per_process_memory_fraction`,
     * `npualloc_set_memory_fraction`) in bytes; `UINT64_MAX` when there is no limit. (Version 7 from here on.)
     */
    uint64_t memory_limit;
} npualloc_stats;

/**
 * A live block of a pool, as `npualloc_pool_live_blocks` reports it and `npualloc_pool_restore` takes it back.
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
 * The function table of one ABI version (see `npualloc_get_api`). Each field points to the function of the same name
 * without the `npualloc_` prefix, except two in C: `register_` is `npualloc_register` (`register` is a C keyword),
 * and `abi_version_fn` is `npualloc_abi_version` (the field `abi_version` holds the table's version).
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
 * Creates an allocator for ACL device `device`. `config` is `"key:value,key:value"` (see the README for the
 * keys); NULL reads `NPUALLOC_CONF` from the environment, else torch_npu's `PYTORCH_NPU_ALLOC_CONF` (and, once
 * `npualloc_read_pytorch_alloc_conf` turned it on, `PYTORCH_ALLOC_CONF`), else uses the defaults. The ACL
 * runtime is loaded on first use from config key `acl_library`, else `NPUALLOC_ACL_LIBRARY`, else
 * `$ASCEND_HOME_PATH/lib64/libascendcl.so`, else the loader's search.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT (negative device, or a device `aclrtSetDevice` refuses as unknown that
 * is past `aclrtGetDeviceCount`, when the runtime has that call), NPUALLOC_ERR_BAD_CONFIG (unknown key, bad
 * value, conflicting keys), NPUALLOC_ERR_UNSUPPORTED, NPUALLOC_ERR_RUNTIME (setting the device failed
 * otherwise), NPUALLOC_ERR_RUNTIME_UNAVAILABLE (libascendcl missing).
 *
 * # Safety
 * `config` is NULL or a NUL-terminated string; `out` is NULL or writable.
 */
npualloc_status npualloc_create(const char *config,
                                int32_t device,
                                struct npualloc_allocator **out);

/**
 * Whether configs read from the environment (`npualloc_create` with a NULL config, and the pluggable entry
 * points' allocators) also read `PYTORCH_ALLOC_CONF` when `NPUALLOC_CONF` and `PYTORCH_NPU_ALLOC_CONF` are
 * both unset, as torch_npu 2.12 and later do: nonzero `on` turns it on. Off by default, so a value written for
 * another device's allocator changes nothing for a host that does not read it (npualloc's torch_npu bridge
 * does). Process-wide; existing allocators keep their config. Writes the replaced setting (1 or 0) to
 * `*previous` unless NULL. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a misaligned `previous`, changing nothing.
 *
 * # Safety
 * `previous` is NULL or valid for writing one `int32_t`.
 */
npualloc_status npualloc_read_pytorch_alloc_conf(int32_t on,
                                                 int32_t *previous);

/**
 * Destroys an allocator: unregisters it from every stream it was registered on, synchronizes the streams it
 * used, and returns all device memory, live blocks included (their count and bytes, and any runtime call that
 * failed while giving memory back, are reported on stderr and in `npualloc_last_error()`; it still returns
 * NPUALLOC_OK: past unregistration, destroy always completes). If a stream cannot be unregistered, it returns
 * NPUALLOC_ERR_RUNTIME first and the allocator stays usable (that stream's runtime would otherwise call into
 * freed memory); call it again later. No other thread may use the allocator during this call; another
 * allocator of the device asking it for its free cache (`npualloc_set_before_release`) is not a use: destroy
 * waits for that ask to end. Afterwards every call given the handle, and every callback of a binding made
 * from it, refuses it with INVALID_ARGUMENT: no later allocator gets the same handle value.
 *
 * # Safety
 * `a` is NULL or a live handle, which no other thread uses during or after the call.
 */
npualloc_status npualloc_destroy(struct npualloc_allocator *a);

/**
 * Allocates `size` bytes for work on `stream` (NULL: the default stream) and writes the device address, at
 * least 512-byte aligned, to `*out_ptr`. Returns NPUALLOC_ERR_INVALID_ARGUMENT for size 0, a size of 2^60
 * bytes or more, or a stream the runtime does not know or of another device (checked when this allocator
 * first meets it; the message names the call that refused it, or both devices); NPUALLOC_ERR_OUT_OF_MEMORY
 * after every recovery step failed, the last asking the device's other allocators in this process for their
 * free cache (the message says where memory is); NPUALLOC_ERR_RUNTIME if an ACL call failed otherwise.
 *
 * # Safety
 * `a` is NULL or a live handle; `out_ptr` is NULL or writable.
 */
npualloc_status npualloc_malloc(struct npualloc_allocator *a,
                                size_t size,
                                aclrtStream stream,
                                void **out_ptr);

/**
 * Frees a block by its start address. The memory is reusable at once by later work on the block's stream; if
 * other streams used it (`npualloc_record_stream`), only after their work recorded so far completes. Returns
 * NPUALLOC_ERR_UNKNOWN_POINTER (state unchanged) for a pointer this allocator did not return, an interior
 * pointer, or a block already freed. An address is all the allocator knows a block by: once a later malloc
 * hands it out again, a stale free of it frees the new block, so a host that may free twice keeps its own
 * record (the Python package's `MemBlock` refuses a second free).
 *
 * # Safety
 * `a` is NULL or a live handle. `ptr` is never dereferenced.
 */
npualloc_status npualloc_free(struct npualloc_allocator *a,
                              void *ptr);

/**
 * Notes that work queued on `stream` uses the block at `ptr`, so freeing it waits for that work; recording the
 * block's own stream is a no-op. Returns NPUALLOC_ERR_UNKNOWN_POINTER if `ptr` is not the start of a live
 * block; NPUALLOC_ERR_INVALID_ARGUMENT for a stream of another device (checked as in npualloc_malloc).
 *
 * # Safety
 * `a` is NULL or a live handle. `ptr` is never dereferenced.
 */
npualloc_status npualloc_record_stream(struct npualloc_allocator *a,
                                       void *ptr,
                                       aclrtStream stream);

/**
 * Undoes `npualloc_record_stream(a, ptr, stream)`: the caller has ordered `stream`'s work on the block some
 * other way (torch_npu's `eraseStream`, used by its `MULTI_STREAM_MEMORY_REUSE` modes), so a later free waits
 * only for the block's other streams. A stream the block was never recorded on (its own and unknown streams
 * included) is NPUALLOC_OK and changes nothing. Returns NPUALLOC_ERR_UNKNOWN_POINTER (nothing changes) if
 * `ptr` is not the start of a live block.
 *
 * # Safety
 * `a` is NULL or a live handle. `ptr` and `stream` are only compared, never dereferenced.
 */
npualloc_status npualloc_erase_stream(struct npualloc_allocator *a,
                                      void *ptr,
                                      aclrtStream stream);

/**
 * Returns every cached, unused segment to the runtime, after synchronizing only the streams that used them.
 * Blocks in use are untouched.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_empty_cache(struct npualloc_allocator *a);

/**
 * `npualloc_empty_cache` with `flags`: 0 is `npualloc_empty_cache`; `NPUALLOC_EMPTY_KEEP_HANDLES` unmaps the
 * cached memory of expandable segments but keeps its physical handles (torch_npu's `emptyVirtAddrCache`).
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for an unknown flag bit, NPUALLOC_ERR_UNSUPPORTED for
 * `NPUALLOC_EMPTY_KEEP_HANDLES` with fixed segments (no handles to keep); nothing changes then.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_empty_cache_with(struct npualloc_allocator *a,
                                          uint32_t flags);

/**
 * Caps the device memory this allocator reserves at `fraction` of the device's total (0 lets it reserve
 * nothing more); 1 removes the cap (torch_npu's `setMemoryFraction`: the whole device is no limit, so
 * `garbage_collection_threshold` has none to act on). Memory already reserved is not released. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT for a fraction outside [0, 1] or NaN.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_set_memory_fraction(struct npualloc_allocator *a,
                                             double fraction);

/**
 * Describes the live block containing `ptr` (any address inside it). Returns NPUALLOC_ERR_UNKNOWN_POINTER if
 * no live block contains `ptr`.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` is NULL or writable. `ptr` is never dereferenced.
 */
npualloc_status npualloc_query(const struct npualloc_allocator *a,
                               const void *ptr,
                               struct npualloc_block_info *out);

/**
 * Registers the allocator on `stream` through an `aclrtAllocatorDesc` with all four callbacks set; blocks the runtime
 * allocates through it belong to `stream`. Registering a stream twice is OK. Register before the first op on the
 * stream: after an op ran with nothing registered, GE keeps its own allocator for that stream, and a later
 * registration returns NPUALLOC_OK but has no effect; when work is already queued on the stream, the call succeeds
 * and leaves a message starting with "warning:" in `npualloc_last_error()`. Returns NPUALLOC_ERR_INVALID_ARGUMENT for
 * a NULL stream (the runtime cannot apply an allocator to the default stream), a stream the runtime does not know or
 * one of another device; NPUALLOC_ERR_RUNTIME if an ACL call failed. A failed call registers and creates nothing.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_register(struct npualloc_allocator *a,
                                  aclrtStream stream);

/**
 * Unregisters the allocator from `stream` and destroys that desc; an unknown stream is OK. If the runtime refuses to
 * unregister, nothing changes: the stream keeps the allocator (and its callbacks stay valid).
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_unregister(struct npualloc_allocator *a,
                                    aclrtStream stream);

/**
 * The desc's allocation callback: allocates `size` bytes on the binding's stream and returns a block handle, or NULL
 * with the thread's last error set.
 *
 * # Safety
 * `binding` is NULL or a live binding from `npualloc_register` or `npualloc_binding_create`.
 */
void *npualloc_desc_alloc(void *binding,
                          size_t size);

/**
 * The desc's free callback: frees a block handle. A NULL block is a no-op (the binding is still checked). An unknown
 * or already freed block changes nothing; the error goes to stderr and the last error.
 *
 * # Safety
 * `binding` as for `npualloc_desc_alloc`. `block` is only looked up, never dereferenced.
 */
void npualloc_desc_free(void *binding,
                        void *block);

/**
 * The desc's advise callback: like alloc; `addr_hint` (may be NULL) is a wish for an address and is not promised.
 *
 * # Safety
 * `binding` as for `npualloc_desc_alloc`. `addr_hint` is never dereferenced.
 */
void *npualloc_desc_alloc_advise(void *binding,
                                 size_t size,
                                 void *addr_hint);

/**
 * The desc's address callback: the device address of a block handle (the handle itself). O(1).
 */
void *npualloc_desc_get_addr(void *block);

/**
 * Makes a binding (the `obj` for a host-built desc or GE's external allocator shim) whose blocks belong to `stream`
 * (NULL: default stream). Destroy it with `npualloc_binding_destroy` before destroying the allocator; the callbacks
 * refuse a binding whose allocator was destroyed (NULL, or nothing freed, and a last error saying so). Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT for a NULL `binding` or a stream the runtime does not know.
 *
 * # Safety
 * `a` is NULL or a live handle; `binding` is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_binding_create(struct npualloc_allocator *a,
                                        aclrtStream stream,
                                        void **binding);

/**
 * Destroys a binding made by `npualloc_binding_create`. NULL is a no-op.
 *
 * # Safety
 * `binding` is NULL or a live binding from `npualloc_binding_create` that no desc registered with the runtime names.
 */
npualloc_status npualloc_binding_destroy(void *binding);

/**
 * The host is about to destroy `stream`: the memory the allocator caches for it and its address ranges go back
 * to the device (after synchronizing the streams that used that memory). Its live blocks stay valid and are
 * freed as usual; a later use of the stream starts afresh. Hosts that create streams over their lifetime call
 * it before `aclrtDestroyStream`, or address space runs out after some tens of streams. Statuses: OK (nothing
 * changes for a stream the allocator never served); INVALID_ARGUMENT for a destroyed `a`; the runtime's failure
 * when memory could not be given back (what could, was).
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_forget_stream(struct npualloc_allocator *a,
                                       aclrtStream stream);

/**
 * `npualloc_forget_stream` for the pluggable entry points' process-wide allocator of `device`; a device whose
 * allocator was never created has nothing to forget (OK, nothing is created). Statuses: OK; INVALID_ARGUMENT
 * for a device outside the range `npualloc_pluggable_init` set (0..64 before it); as `npualloc_forget_stream`
 * otherwise.
 */
npualloc_status npualloc_pluggable_forget_stream(int device,
                                                 aclrtStream stream);

/**
 * Starts, resizes or stops the memory history: the allocator keeps its last `max_entries` events (alloc, free
 * requested, free completed, segment alloc/free or map/unmap, out of memory) for
 * `npualloc_snapshot_pytorch_json`. 0 turns recording off and drops the entries; a smaller bound keeps the
 * newest. Off when an allocator is created. While off, a malloc or free pays one relaxed atomic load for it;
 * while on, each event takes a lock shared by the allocator's streams, and entries take about 50 bytes each.
 * Statuses: OK; INVALID_ARGUMENT for a destroyed `a`.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_record_history(struct npualloc_allocator *a,
                                        size_t max_entries);

/**
 * Writes to `*out_json` a snapshot as JSON in the format of PyTorch's `torch.cuda.memory._snapshot()`:
 * `segments` with their `blocks`, and `device_traces`, one list per device index up to this allocator's device,
 * this device's holding the memory history, oldest first (`addr` is `device_free` for "oom"; `pool_id` is
 * `[0, pool]`, as `segment_pool_id`). Frames are always empty lists. A segment is a fixed segment or a run of
 * mapped pages of an expandable range (`is_expandable` true). Taking a snapshot adds a "snapshot" entry to the
 * history. Free the string with `npualloc_string_free`. Costs O(blocks + entries) and locks each of the
 * allocator's pools in turn. Statuses: OK; INVALID_ARGUMENT for a destroyed `a` or a NULL `out_json`.
 *
 * # Safety
 * `a` is NULL or a live handle; `out_json` is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_snapshot_pytorch_json(const struct npualloc_allocator *a,
                                               char **out_json);

/**
 * `npualloc_record_history` for the pluggable entry points' process-wide allocator of `device`, created now
 * from `NPUALLOC_CONF` if it does not exist yet, as their first allocation would. Statuses: OK;
 * INVALID_ARGUMENT for a device outside the range `npualloc_pluggable_init` set (0..64 before it); the
 * creation failure's status when the device's allocator cannot be created.
 */
npualloc_status npualloc_pluggable_record_history(int device,
                                                  size_t max_entries);

/**
 * `npualloc_snapshot_pytorch_json` for the pluggable entry points' process-wide allocator of `device` (created
 * now if it does not exist yet). Free the string with `npualloc_string_free`. Statuses: as
 * `npualloc_pluggable_record_history`; INVALID_ARGUMENT for a NULL `out_json` (nothing created).
 *
 * # Safety
 * `out_json` is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_pluggable_snapshot_pytorch_json(int device,
                                                         char **out_json);

/**
 * Installs `fn`, run with `user` and the allocator's device before every synchronization that precedes giving device
 * memory back (empty_cache, the out-of-memory ladder, the release threshold, destroy), on the thread that triggered
 * it (maybe inside `npualloc_free`) and with no npualloc lock held that another stream's malloc or free needs. It
 * also runs inside the malloc of another npualloc allocator of the same device that asks this one for its free cache
 * before refusing a request, with no lock of either held: `fn` may allocate, free, and create or destroy other
 * allocators, but not destroy this one (destroy would wait for the ask `fn` is part of) or the asking one; a request
 * `fn` makes that runs out of memory is refused without asking again. A host with its own queue of work not yet
 * handed to the runtime (torch_npu's task queue) drains it there, or returns at once on a thread where its drain
 * cannot run. NULL `fn` removes the hook. Replaces any earlier hook, returning once no other thread is inside the old
 * one (so its `user` may be freed), except when called from inside a hook call: then at once, since two hooks each
 * removing the other would wait forever. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` may be called with `user` from any thread until it is replaced or the allocator
 * destroyed.
 */
npualloc_status npualloc_set_before_release(struct npualloc_allocator *a,
                                            npualloc_release_hook fn,
                                            void *user);

/**
 * Installs `fn`, run with `user` once per request refused with NPUALLOC_ERR_OUT_OF_MEMORY, on the requesting thread,
 * after everything the request took was given back and with no npualloc lock held. NULL `fn` removes it; replacing
 * works as for `npualloc_set_before_release`. With the config key `oom_snapshot:PATH`, a PyTorch-format snapshot (a
 * pickle, with the memory history while recording) is written to PATH just before, and the report and the error's
 * message end with a sentence naming PATH, or saying why the file could not be written. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle.
 *
 * # Safety
 * As for `npualloc_set_before_release`.
 */
npualloc_status npualloc_set_oom_observer(struct npualloc_allocator *a,
                                          npualloc_oom_hook fn,
                                          void *user);

/**
 * Installs `fn`, run with `user` for every piece of device memory the allocator comes to hold or stops holding, so
 * that a communication library (HCCL) can register it: RESERVE after an expandable range is reserved, before anything
 * is mapped in it; MAP after a physical handle is mapped or an `aclrtMalloc` segment obtained, before any of it is
 * handed out; UNMAP before the call that unmaps or frees it; RELEASE after the range's last UNMAP, before it is
 * released. A runtime call that fails after its UNMAP (or RELEASE) is followed by MAP (or RESERVE) again. A handle
 * moved to a second address is a MAP at the new address and later an UNMAP of the old; sleep is UNMAP, wake MAP;
 * destroy unmaps and releases everything, with events.
 *
 * `fn` runs on the thread that caused the event: during a growth with that stream's pool locked; while memory is given
 * back (empty_cache, out-of-memory retries, the release threshold, sleep, wake, forget_stream, pool destroy, destroy)
 * with the allocator's give-back lock held too, which a malloc on another stream waits for only when it needs that
 * memory, and a free never. `fn` must not call this allocator's functions, and should return quickly. NULL `fn`
 * removes the observer; replacing works as for `npualloc_set_before_release`. What the allocator already holds is not
 * replayed: call `npualloc_for_each_segment` after setting the observer. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a
 * NULL or dead handle.
 *
 * # Safety
 * As for `npualloc_set_before_release`.
 */
npualloc_status npualloc_set_segment_observer(struct npualloc_allocator *a,
                                              npualloc_segment_hook fn,
                                              void *user);

/**
 * Calls `fn` with `user`, on the calling thread before returning, once with NPUALLOC_SEGMENT_RESERVE for every
 * expandable range the allocator holds and once with NPUALLOC_SEGMENT_MAP for every piece of memory mapped (each range
 * before the pieces in it), so that a library attaching late registers what exists. `fn` runs with no npualloc lock
 * held: memory gained or given back meanwhile may be missing, or also be told to an observer. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT for a NULL or dead handle or a NULL `fn`.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_for_each_segment(const struct npualloc_allocator *a,
                                          npualloc_segment_hook fn,
                                          void *user);

/**
 * Exports the live block that starts at `ptr` (any pool, mode or size) so that another process of the host can
 * map the same memory with `npualloc_ipc_import`; writes the handle to `out`. Exporting a block again gives the
 * same handle. While any process holds the block imported, its memory is neither handed to another request
 * nor given back, even after this process frees it (the free succeeds at once); it returns to the cache when
 * the last importer closes it or exits, as a later free, empty_cache or the out-of-memory ladder sees. A block
 * freed before any import is no longer exported. The runtime exports a physical handle once per process: with
 * expandable segments, a handle a communication library registered (and so exported) makes the export fail
 * with NPUALLOC_ERR_RUNTIME, and the message says so.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT for a destroyed handle or NULL `ptr`, NPUALLOC_ERR_UNKNOWN_POINTER
 * when `ptr` is not the start of a live block of `a`, NPUALLOC_ERR_UNSUPPORTED when the runtime lacks the
 * sharing calls, NPUALLOC_ERR_RUNTIME when it refuses. Nothing changes on an error.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` is NULL or writable.
 */
npualloc_status npualloc_ipc_export(struct npualloc_allocator *a,
                                    void *ptr,
                                    struct npualloc_ipc_handle *out);

/**
 * In a process other than the exporter's (it needs no allocator), maps the memory of the block `h` names on
 * `device` (the exporter's, or another device of the host where the runtime allows it), and writes its address
 * to `out_ptr` and its usable size (at least what was requested) to `out_size`. Each process sees the other's
 * writes. Importing one handle twice gives two imports (the same address for a fixed-segment block), each
 * ended by one `npualloc_ipc_close`. An import stays valid after the exporter exits. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT for NULL arguments, bytes that are not an export's, a handle this process
 * exported ("use the pointer itself"), a block no longer exported or an exporter that has exited;
 * NPUALLOC_ERR_RUNTIME when the runtime refuses. Nothing changes on an error.
 *
 * # Safety
 * `h` is NULL or readable; `out_ptr` and `out_size` NULL or writable.
 */
npualloc_status npualloc_ipc_import(const struct npualloc_ipc_handle *h,
                                    int32_t device,
                                    void **out_ptr,
                                    size_t *out_size);

/**
 * Ends one import of the block at `ptr` (from `npualloc_ipc_import`); the last one unmaps it, and the exporter
 * may reuse the memory once no process holds it. Work queued on the memory must be finished first. Returns
 * NPUALLOC_ERR_UNKNOWN_POINTER when `ptr` is no live import, NPUALLOC_ERR_RUNTIME when the runtime refuses
 * to unmap (the import has ended all the same).
 *
 * # Safety
 * Nothing may use the imported memory after its last close.
 */
npualloc_status npualloc_ipc_close(void *ptr);

/**
 * The message recorded by the most recent failing npualloc call on this thread, or "" when there is none. Every
 * function that returns a status clears it when it starts, so after `NPUALLOC_OK` it is "" (unless the function
 * documents a note it leaves on success, such as `npualloc_destroy` reporting live blocks). Never returns NULL. The
 * string belongs to the library: do not free it; it stays valid until the next npualloc call on this thread, so copy
 * it to keep it. Each thread has its own message; this call does not change it.
 */
const char *npualloc_last_error(void);

/**
 * Checks a 2D copy without performing it or calling the runtime, by the rules `npualloc_memcpy2d` (`is_async == 0`)
 * or `npualloc_memcpy2d_async` (`is_async != 0`) would apply: NPUALLOC_OK if the copy would be attempted (or is a
 * no-op). With `a` NULL only the runtime's documented rules are checked, in its order: width 0 or height 0 is a
 * successful no-op (checked first, so NULL pointers are then accepted); a NULL `dst` or `src`, `width > dpitch`,
 * `width > spitch`, a kind other than ACL_MEMCPY_HOST_TO_DEVICE (1), ACL_MEMCPY_DEVICE_TO_HOST (2),
 * ACL_MEMCPY_DEVICE_TO_DEVICE (3) and ACL_MEMCPY_DEFAULT (4), `height > 5242880` and `width > 5000000` are
 * NPUALLOC_ERR_INVALID_ARGUMENT with a message naming the rule; then a synchronous DEVICE_TO_DEVICE copy is
 * NPUALLOC_ERR_UNSUPPORTED (the runtime's 207000). With an allocator, each device side of the copy must also lie in
 * a live block it owns (NPUALLOC_ERR_UNKNOWN_POINTER otherwise; interior pointers are fine), and so must the last byte
 * touched, `(height-1)*pitch + width - 1` past the pointer (NPUALLOC_ERR_COPY_OUT_OF_BOUNDS otherwise). For
 * ACL_MEMCPY_DEFAULT the device sides are the ends in the allocator's blocks, and a synchronous copy with both ends in
 * them is NPUALLOC_ERR_INVALID_ARGUMENT (the runtime resolves it to device-to-device and answers 107000).
 *
 * # Safety
 * `a` is NULL or a live handle. `dst` and `src` are only compared with the allocator's blocks, never dereferenced.
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
 * Validates a 2D copy as `npualloc_check_memcpy2d(a, ..., is_async = 0)` does (with its statuses; nothing is copied
 * then), then performs it with `aclrtMemcpy2d` on the allocator's runtime or, with `a` NULL, the default ACL library
 * (`NPUALLOC_ACL_LIBRARY`, else `$ASCEND_HOME_PATH/lib64/libascendcl.so`, else the loader's search). Width 0 or
 * height 0 returns NPUALLOC_OK without calling the runtime. Also returns NPUALLOC_ERR_RUNTIME_UNAVAILABLE if `a` is
 * NULL and libascendcl cannot be loaded, NPUALLOC_ERR_RUNTIME if `aclrtMemcpy2d` fails (the message names its
 * aclError).
 *
 * # Safety
 * `a` is NULL or a live handle. Every byte the copy touches (`height` rows of `width` bytes, `dpitch` and `spitch`
 * apart) lies in memory valid for the copy's direction, as `aclrtMemcpy2d` requires; npualloc checks this only for
 * the device side of blocks it owns.
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
 * Validates a 2D copy as `npualloc_check_memcpy2d(a, ..., is_async = 1)` does (with its statuses; nothing is enqueued
 * then), then enqueues it on `stream` (NULL: the default stream) with `aclrtMemcpy2dAsync`; the copy is complete only
 * once the stream has been synchronized. A NULL `a`, a zero width or height and the runtime's failures are as for
 * `npualloc_memcpy2d`.
 *
 * # Safety
 * As for `npualloc_memcpy2d`, and both regions stay valid until the stream has run the copy.
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
 * torch_npu's allocation hook: `size` bytes on `device` for work on `stream` (NULL: the device's default stream).
 * Returns the device address, or NULL with the thread's last error set (out of memory, bad device, the device's
 * allocator could not be created). Size 0 returns NULL and is not an error.
 *
 * # Safety
 * `stream` is NULL or a stream of `device` (it is checked with the runtime).
 */
void *npualloc_pluggable_malloc(size_t size,
                                int device,
                                aclrtStream stream);

/**
 * torch_npu's free hook: frees `ptr`, returned by `npualloc_pluggable_malloc` for `device`; `size` and `stream` are
 * not needed. NULL is a no-op (the device is not checked then either). A pointer this device's allocator does not own
 * (another device's, unknown, already freed) changes nothing: the last error says why and a line goes to stderr.
 *
 * # Safety
 * `ptr` is NULL or came from `npualloc_pluggable_malloc` for `device`, and nothing but work already queued on its
 * streams uses the block after this call. `ptr` itself is only looked up, never dereferenced.
 */
void npualloc_pluggable_free(void *ptr,
                             size_t size,
                             int device,
                             aclrtStream stream);

/**
 * torch_npu's init hook: the process will use devices `0..device_count`; later calls naming another device fail.
 * Allocators are still created on a device's first use. A count outside 1..=64 is refused (last error and stderr);
 * calling it again replaces the count.
 */
void npualloc_pluggable_init(int device_count);

/**
 * torch_npu's empty-cache hook: returns every cached, unused segment of every device's allocator to the runtime.
 * The first error is recorded as the last error; with `check_error` true, errors are also printed on stderr.
 */
void npualloc_pluggable_empty_cache(bool check_error);

/**
 * torch_npu's memory-fraction hook: caps `device`'s allocator at `fraction` of the device memory (in [0, 1], as
 * torch_npu allows; 0 lets it reserve nothing more), creating the allocator if needed. A bad fraction or device
 * changes nothing: last error and stderr.
 */
void npualloc_pluggable_set_memory_fraction(double fraction,
                                            int device);

/**
 * torch_npu's base-allocation hook: for a pointer into a live block of any device's pluggable allocator, writes the
 * size of the segment holding it to `*size` and returns the segment's base address. Returns NULL (nothing written,
 * last error set) for NULL `size` or a pointer no allocator owns.
 *
 * # Safety
 * `size` is NULL or valid for writing one `size_t`. `ptr` is never dereferenced.
 */
void *npualloc_pluggable_base_alloc(void *ptr,
                                    size_t *size);

/**
 * torch_npu's reset-peak hook: resets the peak statistics of `device`'s allocator, if created. A bad device: last
 * error and stderr. torch_npu 2.13 and later call it as `void(c10::DeviceIndex)` (`int8_t`), older releases as
 * `void(int)`, so only the low byte of `device` is read, as a signed 8-bit value: a caller passing an `int8_t` may
 * leave the upper bits of the register or stack slot undefined.
 */
void npualloc_pluggable_reset_peak_stats(int device);

/**
 * The process-wide allocator the pluggable entry points use for `device` (created on first use as they do), as a
 * handle for the whole C API: statistics, record/erase stream, hooks and snapshots of the memory torch_npu allocates.
 * `npualloc_destroy` refuses it: it lives until the process exits. Returns NPUALLOC_ERR_INVALID_ARGUMENT for NULL
 * `out` or a device outside the range `npualloc_pluggable_init` set (0..64 before it); a creation failure is that of
 * `npualloc_create`, returned again by every later call for the device.
 *
 * # Safety
 * `out` is NULL or valid for writing one handle.
 */
npualloc_status npualloc_pluggable_allocator(int device,
                                             struct npualloc_allocator **out);

/**
 * The function table for C ABI version `abi_version`, or NULL (last error set) when this library does not provide
 * that version. The table is static: never free it.
 */
const struct npualloc_api *npualloc_get_api(uint32_t abi_version);

/**
 * Creates a private pool and writes its id (never 0, the default pool, and never reused) to `*out_pool`.
 * `config` is `"key:value,..."`, or NULL for the defaults:
 * - `sleep` = `keep` (default) | `offload` | `discard`: what `npualloc_sleep` does to the pool's live blocks.
 * - `use_on_oom` (default false): when a request of the default pool runs out of memory, a free block of the
 *   pool on the request's stream serves it first, with no device call, as the pool's block (torch_npu's
 *   `MemPool(use_on_oom=True)`); failing that, any request outside the pool may take the pool's cached memory.
 *   Otherwise a pool keeps its cached memory until `npualloc_pool_destroy` (`npualloc_empty_cache` leaves it).
 * - For libraries that register the pool's blocks (HCCL, ADXL): `alignment` (`2m`, `64k` or bytes, a power of
 *   two up to 2 MiB; default 512) makes every block start on that boundary and its size a multiple of it;
 *   `no_split` (default false) makes every block 2 MiB-aligned memory of its own, never cut from cached
 *   memory: with fixed segments a segment of its own or a whole cached one; in an expandable range whole
 *   physical handles no other block touches (missing pages get handles covering exactly them; freed neighbours
 *   coalesce, and a later request takes only the handles it needs). In fixed mode an aligned segment the
 *   runtime places off the boundary costs one more `aclrtMalloc`, one unit larger.
 *
 * Returns NPUALLOC_ERR_BAD_CONFIG naming the key for an unknown key or a bad value.
 *
 * # Safety
 * `a` is NULL or a live handle; `config` is NULL or a NUL-terminated string; `out_pool` is NULL or writable.
 */
npualloc_status npualloc_pool_create(struct npualloc_allocator *a,
                                     const char *config,
                                     uint64_t *out_pool);

/**
 * Until the matching `npualloc_pool_end`, every allocation on `stream` (from any thread, through every entry
 * point: direct, desc, pluggable) is served from `pool`; `stream` NULL routes instead every allocation the
 * calling thread makes, on any stream (PyTorch's `use_mem_pool`). Routes nest: the newest wins. Frees always go
 * to the block's own pool. A stream in graph capture may be routed; it is never queried or synchronized.
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a pool never created or destroyed, an unknown
 * stream, or a thread route asked for from a thread-local destructor once the thread's own state is gone (it
 * could never end).
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_begin(struct npualloc_allocator *a,
                                    uint64_t pool,
                                    aclrtStream stream);

/**
 * Ends the newest route of `stream` (NULL: of the calling thread), which must go to `pool`. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, when that route goes to another pool, there is none, or the
 * pool does not exist. For the calling thread from a thread-local destructor once the thread's own state is
 * gone, returns NPUALLOC_OK: its routes ended with that state.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_end(struct npualloc_allocator *a,
                                  uint64_t pool,
                                  aclrtStream stream);

/**
 * Destroys `pool`: it takes no more routes, its cached memory goes back to the device now (after synchronizing
 * the streams that used it), and its live blocks stay valid, their memory going back when freed. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for pool 0, a pool never created or already destroyed, or
 * a pool with an active route.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_destroy(struct npualloc_allocator *a,
                                      uint64_t pool);

/**
 * Sets `pool`'s `use_on_oom` from now on: nonzero `on` lets requests of other pools that run out of memory
 * take its cached memory, 0 stops it (torch_npu's `MemPool` sets it at any time; its destructor clears it).
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for pool 0 (the default pool's cache always serves
 * such requests) or a pool never created or destroyed.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_set_use_on_oom(struct npualloc_allocator *a,
                                             uint64_t pool,
                                             int32_t on);

/**
 * Fills `*out` as `npualloc_get_stats` does, for one pool (0: the default pool; a destroyed pool's live blocks
 * still count). Counters of device calls, retries and OOMs count those made for the pool's memory and requests
 * (sleep, wake and freeing unmapped handles cached for any pool count only in the allocator's); reserved bytes
 * are the pool's segments; the peaks are the pool's own (allocated and requested as `npualloc_get_stats` keeps
 * them, over the pool's streams; reserved the most its segments held). Returns NPUALLOC_ERR_INVALID_ARGUMENT
 * for a pool never created or a `struct_size` below the header.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` as for `npualloc_get_stats`.
 */
npualloc_status npualloc_pool_get_stats(const struct npualloc_allocator *a,
                                        uint64_t pool,
                                        struct npualloc_stats *out);

/**
 * Gives back the cached memory of `pool` (0: the default pool's; a destroyed pool's remainder too) after
 * synchronizing only the streams that used it; live blocks are untouched. A pool that served a graph capture
 * and is not destroyed keeps its memory (the graph may replay until `npualloc_pool_destroy`): NPUALLOC_OK,
 * nothing given back. The before-release hook runs first, as for `npualloc_empty_cache`. Returns
 * NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a pool never created.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_pool_empty_cache(struct npualloc_allocator *a,
                                          uint64_t pool);

/**
 * Calls `fn` with `user` for every live block of `pool` (0: the default pool), in address order: a checkpoint
 * `npualloc_pool_restore` can set the pool back to (as PyTorch's graph trees take of a graph pool after each
 * recording). `fn` runs on the calling thread after the blocks were read, with no npualloc lock held, before
 * this returns. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL `fn` or a pool never created or destroyed.
 *
 * # Safety
 * `a` is NULL or a live handle; `fn` is called with `user` only as said.
 */
npualloc_status npualloc_pool_live_blocks(const struct npualloc_allocator *a,
                                          uint64_t pool,
                                          npualloc_live_block_fn fn,
                                          void *user);

/**
 * Sets the live blocks of `pool` to exactly the `n` blocks at `blocks` (a list from
 * `npualloc_pool_live_blocks`; `n` 0 with NULL `blocks` frees them all): the pool's other live blocks are
 * freed, and each listed block not live now is allocated again at its address and size, from the pool's free
 * memory there, on its old stream's pool (`stream` must be the one reported); one live now at the same address
 * and size stays. No device call is made. What PyTorch's graph trees do with a graph pool's checkpoint before
 * recording a new branch (torch_npu's `setCheckpointPoolState`). The caller makes sure no other thread
 * allocates in or frees into the pool meanwhile.
 *
 * Returns NPUALLOC_ERR_INVALID_ARGUMENT, changing nothing, for a NULL `blocks` with `n` above 0, pool 0 (the
 * default pool's frees follow rules a restore would skip), a pool never created or destroyed, a block no
 * listing could give (a request of 0 bytes or more than its size, an address or size off the pool's alignment
 * or not whole 512-byte units, a stream other than its memory's), overlapping blocks, a block whose memory is
 * not the pool's (given back since, or another pool's), is not mapped, or will not be free once the pool's
 * other blocks are (a freed block still waiting for other streams' work), or a live block to be freed that
 * other streams used (`npualloc_record_stream`) or another process imported.
 *
 * # Safety
 * `a` is NULL or a live handle; a non-NULL `blocks` points to `n` readable blocks.
 */
npualloc_status npualloc_pool_restore(struct npualloc_allocator *a,
                                      uint64_t pool,
                                      const struct npualloc_live_block *blocks,
                                      size_t n);

/**
 * Sleeps: synchronizes every stream that used memory, gives back all cached memory, copies the live blocks of
 * `sleep=offload` pools to host memory and gives their device memory back, gives back those of `sleep=discard` pools
 * without a copy, and leaves those of `sleep=keep` pools (the default pool keeps). Virtual addresses stay reserved:
 * every pointer is valid again after `npualloc_wake`. While asleep, allocations routed to offload or discard pools are
 * INVALID_ARGUMENT; any block may be freed. Statuses: OK, also when asleep already (nothing changes); INVALID_ARGUMENT
 * after an `npualloc_wake_with` that left some pools asleep (wake the rest first); UNSUPPORTED when an offload or
 * discard pool has live blocks and the allocator uses fixed segments (`expandable_segments:false`), both changing
 * nothing; the runtime's failure otherwise (what was taken is brought back first).
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_sleep(struct npualloc_allocator *a);

/**
 * Wakes: maps device memory under every sleeping block again at the same address and restores offloaded contents
 * (discarded ones read as undefined). All or nothing: when the handles do not fit, the cached memory of the pools
 * awake is given back (as the out-of-memory ladder gives it; a graph pool keeps its own) and the wake tried again; a
 * physical allocation, map or copy refused part-way is undone whole, every block staying asleep with its host copy.
 * Statuses: OK, also when awake already; OUT_OF_MEMORY when the device cannot hold the sleeping blocks or a map is
 * refused (a later call may succeed); the runtime's failure of a copy back. A refused wake changes nothing.
 *
 * # Safety
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_wake(struct npualloc_allocator *a);

/**
 * Sleeps as `npualloc_sleep` does, with the mode of some pools chosen now: the `n_offload` pools at `offload_pools`
 * offload, the `n_discard` pools at `discard_pools` discard, and every other pool sleeps in its own `sleep` config
 * (the default pool, 0, keeps unless listed): vLLM's `sleep(offload_tags=...)` with one pool per tag. A list may be
 * NULL when its count is 0; a pool may appear twice in one list. Statuses: those of `npualloc_sleep`, and
 * INVALID_ARGUMENT, changing nothing, for a NULL list with a count above 0, a count too large for memory, a
 * misaligned list, a pool that does not exist or was destroyed, or a pool in both lists. Asleep already: OK, nothing
 * changes (the lists are still checked).
 *
 * # Safety
 * `a` is NULL or a live handle; a non-NULL list points to its count of readable `uint64_t`.
 */
npualloc_status npualloc_sleep_with(struct npualloc_allocator *a,
                                    const uint64_t *offload_pools,
                                    size_t n_offload,
                                    const uint64_t *discard_pools,
                                    size_t n_discard);

/**
 * Wakes only the sleeping blocks of the `n` pools at `pools`, by the rules of `npualloc_wake`; the others stay asleep
 * (their allocations still INVALID_ARGUMENT) and the allocator counts as asleep until every pool is awake: vLLM's
 * `wake_up(tags=[...])` with one pool per tag, e.g. the weights before the KV cache. A pool not asleep is OK and
 * changes nothing; a destroyed pool may be listed (its sleeping live blocks wake). `pools` may be NULL when `n` is 0
 * (then only an allocator with no pool left asleep becomes awake). Statuses: those of `npualloc_wake`, and
 * INVALID_ARGUMENT, changing nothing, for a NULL list with `n` above 0, a count too large for memory, a misaligned
 * list, or a pool that was never created. Awake already: OK (the list is still checked).
 *
 * # Safety
 * `a` is NULL or a live handle; a non-NULL `pools` points to `n` readable `uint64_t`.
 */
npualloc_status npualloc_wake_with(struct npualloc_allocator *a,
                                   const uint64_t *pools,
                                   size_t n);

/**
 * Fills `*out` up to `out->struct_size` bytes, whole fields only, and writes back in `struct_size` how many bytes it
 * filled. Returns NPUALLOC_ERR_INVALID_ARGUMENT for a NULL handle or `out`, or a `struct_size` smaller than the two
 * header fields.
 *
 * # Safety
 * `a` is NULL or a live handle; `out` is NULL or points to an `npualloc_stats` whose `struct_size` bytes are writable
 * (at least its two header fields).
 */
npualloc_status npualloc_get_stats(const struct npualloc_allocator *a,
                                   struct npualloc_stats *out);

/**
 * Fills `*out` as `npualloc_get_stats` does, for the blocks of one pool kind (`NPUALLOC_SMALL_BLOCKS` or
 * `NPUALLOC_LARGE_BLOCKS`) over every pool: PyTorch's "small_pool" and "large_pool" figures. Reserved bytes are the
 * kind's segments' (cached unmapped handles belong to no kind); the allocated and requested peaks are the kind's sums
 * at the moments the allocator's peaks are taken, so a high of one kind while the total stays below its peak is
 * missed; the reserved and segment peaks read as their current figures; the device call counters and
 * `reserved_bytes_total` read 0. Returns NPUALLOC_ERR_INVALID_ARGUMENT for another `kind`, or as `npualloc_get_stats`.
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
 * `a` is NULL or a live handle.
 */
npualloc_status npualloc_reset_peak_stats(struct npualloc_allocator *a);

/**
 * Writes a JSON snapshot (segments, their blocks with address, size, state — active / cached / pending-free — and
 * stream, and the stats) to `*out_json`; free it with `npualloc_string_free`. Costs O(blocks).
 *
 * # Safety
 * `a` is NULL or a live handle; `out_json` is NULL or valid for writing one pointer.
 */
npualloc_status npualloc_snapshot_json(const struct npualloc_allocator *a,
                                       char **out_json);

/**
 * Frees a string returned by npualloc. NULL is a no-op.
 *
 * # Safety
 * `s` is NULL or a string returned by npualloc and not yet freed.
 */
void npualloc_string_free(char *s);

/**
 * The name of a status code as a static string, e.g. "NPUALLOC_ERR_OUT_OF_MEMORY"; any other value gives
 * "NPUALLOC_UNKNOWN_STATUS". Never returns NULL; do not free the string. Does not change the thread's last error.
 */
const char *npualloc_status_name(npualloc_status status);

/**
 * The library version as "MAJOR.MINOR.PATCH": static, never NULL, not to be freed. Does not change the
 * thread's last error.
 */
const char *npualloc_version(void);

/**
 * The C ABI version the loaded library implements; a host compiled against this header checks
 * `npualloc_abi_version() == NPUALLOC_ABI_VERSION` after loading it. Does not change the thread's last error.
 */
uint32_t npualloc_abi_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* NPUALLOC_H */
