/* fakecudart_internal.h -- what the sources of the fake CUDA runtime share
   (fakecudart.c describes the library). Nothing here is exported: the
   library is built with -fvisibility=hidden and fakecudart.map. */
#pragma once
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* configuration / global state                                               */
/* ------------------------------------------------------------------------ */

#define FAKE_GRANULARITY ((size_t)2 << 20) /* 2 MiB, like a real GPU */
#define FAKE_DRIVER_VERSION 13020          /* 13.2 */
#define FAKE_RUNTIME_VERSION 13020

#include "fakecudart_shared.h"
#include "fakecudart_stats.h"

#define INTERNAL __attribute__((visibility("hidden")))

/* state and configuration (fakecudart.c) */
extern INTERNAL pthread_once_t g_once;
extern INTERNAL size_t g_capacity;
extern INTERNAL int g_device_count;
extern INTERNAL long g_latency_ns, g_sync_ns, g_event_ns;
extern INTERNAL int g_verbose;

extern INTERNAL _Atomic uint64_t g_used, g_peak;
extern INTERNAL _Atomic uint64_t g_malloc_calls, g_malloc_failed, g_free_calls,
    g_malloc_bytes_total, g_create_calls, g_create_failed, g_release_calls,
    g_map_calls, g_unmap_calls, g_reserve_calls, g_vafree_calls, g_sync_calls,
    g_event_create_calls, g_event_record_calls, g_event_query_calls;

extern INTERNAL __thread int t_device;
extern INTERNAL __thread cudaError_t t_last_error;

INTERNAL void fake_init(void);
#define INIT() pthread_once(&g_once, fake_init)

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline void spin_ns(long ns) {
  if (ns <= 0) return;
  uint64_t end = now_ns() + (uint64_t)ns;
  while (now_ns() < end) {
  }
}
static inline void simulated_latency(void) { spin_ns(g_latency_ns); }

static inline cudaError_t set_err(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

/* a device shared with other processes (fakecudart_shared.c): NULL unless
   FAKECUDA_SHARED names one, and again NULL once this process has left it at
   exit. Read it once per use (shared_device()): the exit destructor may
   clear it between two reads. */
extern INTERNAL _Atomic(struct fakecuda_shared*) g_shared;
static inline struct fakecuda_shared* shared_device(void) {
  return atomic_load_explicit(&g_shared, memory_order_acquire);
}
INTERNAL int shared_attach(const char* name);
INTERNAL int shared_charge(struct fakecuda_shared* s, size_t bytes);
INTERNAL void shared_uncharge(struct fakecuda_shared* s, size_t bytes);
INTERNAL void shared_detach(void);

/* Takes up to `bytes` from *counter, never below zero; returns what it took. */
static inline uint64_t take_bytes(_Atomic uint64_t* counter, uint64_t bytes) {
  uint64_t cur = atomic_load(counter), take;
  do {
    take = cur < bytes ? cur : bytes;
  } while (take && !atomic_compare_exchange_weak(counter, &cur, cur - take));
  return take;
}

/* reserve capacity (the shared device's first, when there is one); returns 1
   on success */
static inline int charge(size_t bytes) {
  struct fakecuda_shared* s = shared_device();
  if (s && !shared_charge(s, bytes)) return 0;
  uint64_t cur = atomic_load(&g_used);
  do {
    if (cur + bytes > g_capacity || cur + bytes < cur) {
      if (s) shared_uncharge(s, bytes);
      return 0;
    }
  } while (!atomic_compare_exchange_weak(&g_used, &cur, cur + bytes));
  uint64_t now = cur + bytes, pk = atomic_load(&g_peak);
  while (now > pk && !atomic_compare_exchange_weak(&g_peak, &pk, now)) {
  }
  return 1;
}
/* Gives back what a block took. The shared device gets back only what this
   process's count still held: once the exit destructor has handed the
   process's remaining bytes back (and zeroed the count), a late free takes
   nothing from either count, so neither wraps below zero nor is returned
   twice. */
static inline void uncharge(size_t bytes) {
  struct fakecuda_shared* s = shared_device();
  uint64_t took = take_bytes(&g_used, bytes);
  if (s && took) shared_uncharge(s, took);
}

/* pointer -> size table of cudaMalloc'd blocks, host mappings (fakecudart_mem.c) */
INTERNAL void tab_insert(uintptr_t p, size_t size, size_t mapped);
INTERNAL int tab_remove(uintptr_t p, size_t* size, size_t* mapped);
INTERNAL int tab_find_range(uintptr_t p, uintptr_t* base, size_t* size);
INTERNAL void* host_map(size_t len);
