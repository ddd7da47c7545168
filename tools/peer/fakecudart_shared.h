/* fakecudart_shared.h -- one fake device shared by several processes.

   With FAKECUDA_SHARED=<name> set, the fake runtime maps the POSIX
   shared-memory segment /<name> (created on first use, zero-filled) and
   charges every cudaMalloc and cuMemCreate of every process that names it
   against one capacity: a call fails when the processes together would pass
   it, and cudaMemGetInfo reports what all of them leave free. Each process's
   own bookkeeping (fakecuda_get_stats: used_bytes, peak_used_bytes) stays its
   own; shared_used_bytes / shared_peak_bytes are the device's.

   The first process stores its FAKECUDA_MEM_BYTES / FAKECUDA_MEM_GIB capacity
   in the segment; a process that names the segment with a different capacity
   sees no device (cudaGetDeviceCount: cudaErrorNoDevice) and a message on
   stderr. The segment outlives the processes, as a device does: remove it
   with `rm /dev/shm/<name>` (or shm_unlink) before reusing the name.

   The turn fields are for harnesses that run several replays in lockstep
   (replay_torch --tenant, tenants.h); the fake runtime only maps them.

   This header is read by C (the fake runtime) and C++ (replay_torch). */
#pragma once
#include <stdint.h>

#ifdef __cplusplus
#include <atomic>
#define FAKECUDA_ATOMIC(T) std::atomic<T>
#else
#include <stdatomic.h>
#define FAKECUDA_ATOMIC(T) _Atomic T
#endif

#define FAKECUDA_MAX_TENANTS 8

struct fakecuda_shared {
  FAKECUDA_ATOMIC(uint64_t) capacity; /* device bytes; 0 until the first process sets it */
  FAKECUDA_ATOMIC(uint64_t) used;     /* bytes charged by all processes now */
  FAKECUDA_ATOMIC(uint64_t) peak;     /* the most `used` has been */
  FAKECUDA_ATOMIC(uint32_t) attached; /* processes that mapped the segment */
  /* lockstep (harnesses only) */
  FAKECUDA_ATOMIC(uint32_t) arrived;  /* tenants ready to start */
  FAKECUDA_ATOMIC(uint32_t) turn;     /* futex word: whose part runs now */
  FAKECUDA_ATOMIC(int32_t) pids[FAKECUDA_MAX_TENANTS]; /* a tenant's pid once it has joined */
  FAKECUDA_ATOMIC(uint32_t) failed;   /* bit K: tenant K stopped on an error */
};

/* fakecuda_shared_device(): the mapped segment, or NULL when FAKECUDA_SHARED
   is unset (look up with dlsym(RTLD_DEFAULT, "fakecuda_shared_device")). */
typedef struct fakecuda_shared* (*fakecuda_shared_device_fn)(void);
