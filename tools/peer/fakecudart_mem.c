/* fakecudart_mem.c -- the fake CUDA runtime's memory: cudaMalloc/cudaFree (host
   mappings charged against the capacity), host memory, copies, pointer
   attributes, IPC and memory pools (fakecudart.c describes the library). */
#include "fakecudart_internal.h"

/* ------------------------------------------------------------------------ */
/* pointer -> size table for cudaMalloc'd blocks                              */
/* ------------------------------------------------------------------------ */

struct alloc_rec {
  uintptr_t ptr;
  size_t size;   /* requested size */
  size_t mapped; /* mmap length */
  struct alloc_rec* next;
};
#define NBUCKET 65536
static struct alloc_rec* g_tab[NBUCKET];
static pthread_mutex_t g_tab_mu = PTHREAD_MUTEX_INITIALIZER;
static inline size_t hptr(uintptr_t p) {
  return (size_t)((p >> 12) * 0x9E3779B97F4A7C15ull >> 48) & (NBUCKET - 1);
}
void tab_insert(uintptr_t p, size_t size, size_t mapped) {
  struct alloc_rec* r = (struct alloc_rec*)malloc(sizeof *r);
  r->ptr = p;
  r->size = size;
  r->mapped = mapped;
  pthread_mutex_lock(&g_tab_mu);
  size_t h = hptr(p);
  r->next = g_tab[h];
  g_tab[h] = r;
  pthread_mutex_unlock(&g_tab_mu);
}
int tab_remove(uintptr_t p, size_t* size, size_t* mapped) {
  pthread_mutex_lock(&g_tab_mu);
  struct alloc_rec** pp = &g_tab[hptr(p)];
  for (; *pp; pp = &(*pp)->next) {
    if ((*pp)->ptr == p) {
      struct alloc_rec* r = *pp;
      *pp = r->next;
      pthread_mutex_unlock(&g_tab_mu);
      *size = r->size;
      *mapped = r->mapped;
      free(r);
      return 1;
    }
  }
  pthread_mutex_unlock(&g_tab_mu);
  return 0;
}
/* range lookup: which cudaMalloc block contains p (linear; rarely used) */
int tab_find_range(uintptr_t p, uintptr_t* base, size_t* size) {
  int found = 0;
  pthread_mutex_lock(&g_tab_mu);
  for (size_t i = 0; i < NBUCKET && !found; i++)
    for (struct alloc_rec* r = g_tab[i]; r; r = r->next)
      if (p >= r->ptr && p < r->ptr + r->size) {
        *base = r->ptr;
        *size = r->size;
        found = 1;
        break;
      }
  pthread_mutex_unlock(&g_tab_mu);
  return found;
}

void* host_map(size_t len) {
  void* p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* ------------------------------------------------------------------------ */
/* memory                                                                     */
/* ------------------------------------------------------------------------ */

/* Physical memory a real cudaMalloc consumes: the driver backs allocations of
   1 MiB and more with whole 2 MiB pages (and returns 2 MiB-aligned
   addresses); smaller ones are sub-allocated (512 B granularity here). */
static size_t charged_size(size_t size) {
  if (size >= ((size_t)1 << 20))
    return (size + FAKE_GRANULARITY - 1) & ~(FAKE_GRANULARITY - 1);
  return (size + 511) & ~(size_t)511;
}

/* anonymous RW mapping of len bytes whose start is aligned to `align` */
static void* host_map_aligned(size_t len, size_t align) {
  if (align <= 4096) return host_map(len);
  char* p = (char*)host_map(len + align);
  if (!p) return NULL;
  uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
  if (a > (uintptr_t)p) munmap(p, a - (uintptr_t)p);
  size_t tail = (uintptr_t)p + len + align - (a + len);
  if (tail) munmap((char*)(a + len), tail);
  return (void*)a;
}

EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  INIT();
  if (!devPtr) return set_err(cudaErrorInvalidValue);
  *devPtr = NULL;
  if (size == 0) return cudaSuccess;
  simulated_latency();
  size_t charged = charged_size(size);
  size_t mapped = (size + 4095) & ~(size_t)4095;
  if (!charge(charged)) {
    atomic_fetch_add(&g_malloc_failed, 1);
    if (g_verbose)
      fprintf(stderr, "[fakecudart] cudaMalloc(%zu) -> OOM (used %llu)\n",
              size, (unsigned long long)atomic_load(&g_used));
    return set_err(cudaErrorMemoryAllocation);
  }
  void* p = host_map_aligned(
      mapped, size >= FAKE_GRANULARITY ? FAKE_GRANULARITY : 4096);
  if (!p) {
    uncharge(charged);
    atomic_fetch_add(&g_malloc_failed, 1);
    return set_err(cudaErrorMemoryAllocation);
  }
  tab_insert((uintptr_t)p, size, mapped);
  atomic_fetch_add(&g_malloc_calls, 1);
  atomic_fetch_add(&g_malloc_bytes_total, size);
  if (g_verbose)
    fprintf(stderr, "[fakecudart] cudaMalloc(%zu) -> %p\n", size, p);
  *devPtr = p;
  return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void* devPtr) {
  INIT();
  if (!devPtr) return cudaSuccess; /* cudaFree(0): context init idiom */
  simulated_latency();
  size_t size, mapped;
  if (!tab_remove((uintptr_t)devPtr, &size, &mapped))
    return set_err(cudaErrorInvalidDevicePointer);
  munmap(devPtr, mapped);
  uncharge(charged_size(size));
  atomic_fetch_add(&g_free_calls, 1);
  if (g_verbose)
    fprintf(stderr, "[fakecudart] cudaFree(%p) size %zu\n", devPtr, size);
  return cudaSuccess;
}

EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size,
                                   cudaStream_t s) {
  (void)s;
  return cudaMalloc(devPtr, size);
}
EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t s) {
  (void)s;
  return cudaFree(devPtr);
}
EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size,
                                     unsigned int flags) {
  (void)flags;
  return cudaMalloc(devPtr, size);
}

EXPORT cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
  INIT();
  /* a shared device: what every process that shares it leaves free */
  struct fakecuda_shared* dev = shared_device();
  uint64_t used = dev ? atomic_load(&dev->used) : atomic_load(&g_used);
  if (free_b) *free_b = used > g_capacity ? 0 : g_capacity - used;
  if (total) *total = g_capacity;
  return cudaSuccess;
}

/* pinned host memory: plain host memory */
EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return set_err(cudaErrorInvalidValue);
  if (posix_memalign(ptr, 4096, size ? size : 1))
    return set_err(cudaErrorMemoryAllocation);
  return cudaSuccess;
}
EXPORT cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  (void)flags;
  return cudaMallocHost(ptr, size);
}
EXPORT cudaError_t cudaFreeHost(void* ptr) {
  free(ptr);
  return cudaSuccess;
}
EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size,
                                    unsigned int flags) {
  (void)ptr;
  (void)size;
  (void)flags;
  return cudaSuccess;
}
EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  (void)ptr;
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t n,
                              enum cudaMemcpyKind kind) {
  (void)kind;
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n,
                                   enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)s;
  return cudaMemcpy(dst, src, n, kind);
}
EXPORT cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice,
                                       const void* src, int srcDevice,
                                       size_t n, cudaStream_t s) {
  (void)dstDevice;
  (void)srcDevice;
  (void)s;
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (n) memset(p, v, n);
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  (void)s;
  return cudaMemset(p, v, n);
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a,
                                            const void* ptr) {
  if (!a) return set_err(cudaErrorInvalidValue);
  memset(a, 0, sizeof *a);
  uintptr_t base;
  size_t sz;
  if (ptr && tab_find_range((uintptr_t)ptr, &base, &sz)) {
    a->type = cudaMemoryTypeDevice;
    a->device = 0;
    a->devicePointer = (void*)ptr;
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    a->hostPointer = (void*)ptr;
  }
  return cudaSuccess;
}

/* IPC is not supported */
EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void* p) {
  (void)h;
  (void)p;
  return set_err(cudaErrorNotSupported);
}
EXPORT cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t h,
                                        unsigned int flags) {
  (void)p;
  (void)h;
  (void)flags;
  return set_err(cudaErrorNotSupported);
}
EXPORT cudaError_t cudaIpcCloseMemHandle(void* p) {
  (void)p;
  return set_err(cudaErrorNotSupported);
}

/* stream-ordered memory pools: a single dummy pool */
static int g_dummy_pool;
EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool,
                                               int device) {
  (void)device;
  if (!pool) return set_err(cudaErrorInvalidValue);
  *pool = (cudaMemPool_t)&g_dummy_pool;
  return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return cudaDeviceGetDefaultMemPool(pool, device);
}
EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool,
                                           enum cudaMemPoolAttr attr,
                                           void* value) {
  (void)pool;
  if (!value) return set_err(cudaErrorInvalidValue);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
      *(int*)value = 1;
      break;
    default:
      *(uint64_t*)value = 0;
      break;
  }
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool,
                                           enum cudaMemPoolAttr attr,
                                           void* value) {
  (void)pool;
  (void)attr;
  (void)value;
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool,
                                        const struct cudaMemAccessDesc* d,
                                        size_t n) {
  (void)pool;
  (void)d;
  (void)n;
  return cudaSuccess;
}
EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  (void)pool;
  (void)keep;
  return cudaSuccess;
}

/* CUDA graph memory attributes: nothing is ever captured */
EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(
    int device, enum cudaGraphMemAttributeType attr, void* value) {
  (void)device;
  (void)attr;
  if (value) *(uint64_t*)value = 0;
  return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(
    int device, enum cudaGraphMemAttributeType attr, void* value) {
  (void)device;
  (void)attr;
  (void)value;
  return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) {
  (void)device;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node,
                                                cudaGraphNode_t* deps,
                                                cudaGraphEdgeData* edges,
                                                size_t* n) {
  (void)node;
  (void)deps;
  (void)edges;
  if (n) *n = 0;
  return set_err(cudaErrorNotSupported);
}
