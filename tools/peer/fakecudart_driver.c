/* fakecudart_driver.c -- the fake CUDA driver API (virtual memory management
   for expandable segments, contexts, errors) and the runtime's entry-point
   lookup that hands it out (fakecudart.c describes the library). */
#include "fakecudart_internal.h"

/* ------------------------------------------------------------------------ */
/* fake CUDA driver API (virtual memory management), served through           */
/* cudaGetDriverEntryPointByVersion                                           */
/* ------------------------------------------------------------------------ */

struct fake_mem_handle {
  unsigned magic;
  size_t size;
  CUmemAllocationProp prop;
};
#define HANDLE_MAGIC 0x4A4D00u

static CUresult fk_cuDeviceGet(CUdevice* d, int ordinal) {
  INIT();
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= g_device_count)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
static CUresult fk_cuDeviceGetAttribute(int* pi, CUdevice_attribute a,
                                        CUdevice dev) {
  (void)dev;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *pi = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    default: *pi = 0; break; /* fabric handles, multicast, RDMA, ...: no */
  }
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemGetAddressRange(CUdeviceptr* base, size_t* size,
                                        CUdeviceptr p) {
  uintptr_t b;
  size_t s;
  if (!tab_find_range((uintptr_t)p, &b, &s)) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = (CUdeviceptr)b;
  if (size) *size = s;
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemAddressReserve(CUdeviceptr* ptr, size_t size,
                                       size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
  (void)addr;
  (void)flags;
  if (!ptr || size == 0 || size % FAKE_GRANULARITY)
    return CUDA_ERROR_INVALID_VALUE;
  if (alignment < FAKE_GRANULARITY) alignment = FAKE_GRANULARITY;
  size_t len = size + alignment;
  char* p = (char*)mmap(NULL, len, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t a = ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1);
  if (a > (uintptr_t)p) munmap(p, a - (uintptr_t)p);
  size_t tail = (uintptr_t)p + len - (a + size);
  if (tail) munmap((char*)(a + size), tail);
  *ptr = (CUdeviceptr)a;
  atomic_fetch_add(&g_reserve_calls, 1);
  if (g_verbose)
    fprintf(stderr, "[fakecudart] cuMemAddressReserve(%zu) -> %p\n", size,
            (void*)a);
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (munmap((void*)ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&g_vafree_calls, 1);
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemCreate(CUmemGenericAllocationHandle* h, size_t size,
                               const CUmemAllocationProp* prop,
                               unsigned long long flags) {
  INIT();
  (void)flags;
  if (!h || !prop || size == 0 || size % FAKE_GRANULARITY)
    return CUDA_ERROR_INVALID_VALUE;
  simulated_latency();
  if (!charge(size)) {
    atomic_fetch_add(&g_create_failed, 1);
    if (g_verbose)
      fprintf(stderr, "[fakecudart] cuMemCreate(%zu) -> OOM\n", size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fake_mem_handle* m =
      (struct fake_mem_handle*)calloc(1, sizeof *m);
  m->magic = HANDLE_MAGIC;
  m->size = size;
  m->prop = *prop;
  *h = (CUmemGenericAllocationHandle)(uintptr_t)m;
  atomic_fetch_add(&g_create_calls, 1);
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemRelease(CUmemGenericAllocationHandle h) {
  struct fake_mem_handle* m = (struct fake_mem_handle*)(uintptr_t)h;
  if (!m || m->magic != HANDLE_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  simulated_latency();
  uncharge(m->size);
  m->magic = 0;
  free(m);
  atomic_fetch_add(&g_release_calls, 1);
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle h,
                            unsigned long long flags) {
  (void)flags;
  struct fake_mem_handle* m = (struct fake_mem_handle*)(uintptr_t)h;
  if (!m || m->magic != HANDLE_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (offset + size > m->size || size % FAKE_GRANULARITY)
    return CUDA_ERROR_INVALID_VALUE;
  simulated_latency();
  /* physical pages are anonymous host pages, created lazily on first touch.
     (A handle mapped twice would not alias -- nothing here needs that.) */
  void* p = mmap((void*)ptr, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                 0);
  if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&g_map_calls, 1);
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  simulated_latency();
  void* p = mmap((void*)ptr, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                 0);
  if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&g_unmap_calls, 1);
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                  const CUmemAccessDesc* desc, size_t count) {
  (void)ptr;
  (void)size;
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemGetAllocationGranularity(
    size_t* g, const CUmemAllocationProp* prop,
    CUmemAllocationGranularity_flags option) {
  (void)prop;
  (void)option;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  *g = FAKE_GRANULARITY;
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemExportToShareableHandle(
    void* sh, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,
    unsigned long long flags) {
  (void)sh;
  (void)h;
  (void)t;
  (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}
static CUresult fk_cuMemImportFromShareableHandle(
    CUmemGenericAllocationHandle* h, void* osh, CUmemAllocationHandleType t) {
  (void)h;
  (void)osh;
  (void)t;
  return CUDA_ERROR_NOT_SUPPORTED;
}
static CUresult fk_cuMemRetainAllocationHandle(
    CUmemGenericAllocationHandle* h, void* addr) {
  (void)h;
  (void)addr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
static CUresult fk_cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle h) {
  struct fake_mem_handle* m = (struct fake_mem_handle*)(uintptr_t)h;
  if (!prop || !m || m->magic != HANDLE_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  *prop = m->prop;
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n,
                                    CUstream s) {
  (void)s;
  unsigned int* q = (unsigned int*)p;
  for (size_t i = 0; i < n; i++) q[i] = v;
  return CUDA_SUCCESS;
}
static CUresult fk_cuStreamWriteValue32(CUstream s, CUdeviceptr addr,
                                        cuuint32_t v, unsigned int flags) {
  (void)s;
  (void)flags;
  *(volatile cuuint32_t*)addr = v;
  return CUDA_SUCCESS;
}
static CUresult fk_cuGetErrorString(CUresult e, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  switch (e) {
    case CUDA_SUCCESS: *s = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
    case CUDA_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_HANDLE: *s = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "operation not supported (fakecudart)"; break;
    default: *s = "unknown error (fakecudart)"; break;
  }
  return CUDA_SUCCESS;
}
static CUresult fk_cuGetErrorName(CUresult e, const char** s) {
  (void)e;
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = "CUDA_ERROR (fakecudart)";
  return CUDA_SUCCESS;
}
static int g_dummy_ctx;
static CUresult fk_cuCtxGetCurrent(CUcontext* c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = (CUcontext)&g_dummy_ctx;
  return CUDA_SUCCESS;
}
static CUresult fk_cuCtxSetCurrent(CUcontext c) {
  (void)c;
  return CUDA_SUCCESS;
}
static CUresult fk_cuCtxPushCurrent(CUcontext c) {
  (void)c;
  return CUDA_SUCCESS;
}
static CUresult fk_cuCtxPopCurrent(CUcontext* c) {
  if (c) *c = (CUcontext)&g_dummy_ctx;
  return CUDA_SUCCESS;
}
static CUresult fk_not_supported(void) { return CUDA_ERROR_NOT_SUPPORTED; }
static CUresult fk_cuLogsRegisterCallback(void* cb, void* data, void** out) {
  (void)cb;
  (void)data;
  if (out) *out = (void*)&g_dummy_ctx;
  return CUDA_SUCCESS;
}
static CUresult fk_cuLogsUnregisterCallback(void* h) {
  (void)h;
  return CUDA_SUCCESS;
}
static CUresult fk_cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = FAKE_DRIVER_VERSION;
  return CUDA_SUCCESS;
}
static CUresult fk_cuInit(unsigned int flags) {
  (void)flags;
  INIT();
  return CUDA_SUCCESS;
}
static CUresult fk_cuDeviceGetCount(int* n) {
  INIT();
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = g_device_count;
  return CUDA_SUCCESS;
}
static CUresult fk_cuDeviceTotalMem(size_t* b, CUdevice d) {
  (void)d;
  INIT();
  if (!b) return CUDA_ERROR_INVALID_VALUE;
  *b = g_capacity;
  return CUDA_SUCCESS;
}
static CUresult fk_cuMemGetInfo(size_t* f, size_t* t) {
  return cudaMemGetInfo(f, t) == cudaSuccess ? CUDA_SUCCESS
                                             : CUDA_ERROR_INVALID_VALUE;
}

struct drv_entry {
  const char* name;
  void* fn;
};
static const struct drv_entry g_drv[] = {
    {"cuInit", (void*)fk_cuInit},
    {"cuDriverGetVersion", (void*)fk_cuDriverGetVersion},
    {"cuDeviceGet", (void*)fk_cuDeviceGet},
    {"cuDeviceGetCount", (void*)fk_cuDeviceGetCount},
    {"cuDeviceTotalMem", (void*)fk_cuDeviceTotalMem},
    {"cuDeviceGetAttribute", (void*)fk_cuDeviceGetAttribute},
    {"cuMemGetInfo", (void*)fk_cuMemGetInfo},
    {"cuMemGetAddressRange", (void*)fk_cuMemGetAddressRange},
    {"cuMemAddressReserve", (void*)fk_cuMemAddressReserve},
    {"cuMemAddressFree", (void*)fk_cuMemAddressFree},
    {"cuMemCreate", (void*)fk_cuMemCreate},
    {"cuMemRelease", (void*)fk_cuMemRelease},
    {"cuMemMap", (void*)fk_cuMemMap},
    {"cuMemUnmap", (void*)fk_cuMemUnmap},
    {"cuMemSetAccess", (void*)fk_cuMemSetAccess},
    {"cuMemGetAllocationGranularity", (void*)fk_cuMemGetAllocationGranularity},
    {"cuMemExportToShareableHandle", (void*)fk_cuMemExportToShareableHandle},
    {"cuMemImportFromShareableHandle",
     (void*)fk_cuMemImportFromShareableHandle},
    {"cuMemRetainAllocationHandle", (void*)fk_cuMemRetainAllocationHandle},
    {"cuMemGetAllocationPropertiesFromHandle",
     (void*)fk_cuMemGetAllocationPropertiesFromHandle},
    {"cuMemsetD32Async", (void*)fk_cuMemsetD32Async},
    {"cuStreamWriteValue32", (void*)fk_cuStreamWriteValue32},
    {"cuGetErrorString", (void*)fk_cuGetErrorString},
    {"cuGetErrorName", (void*)fk_cuGetErrorName},
    {"cuCtxGetCurrent", (void*)fk_cuCtxGetCurrent},
    {"cuCtxSetCurrent", (void*)fk_cuCtxSetCurrent},
    {"cuCtxPushCurrent", (void*)fk_cuCtxPushCurrent},
    {"cuCtxPopCurrent", (void*)fk_cuCtxPopCurrent},
    {"cuLogsRegisterCallback", (void*)fk_cuLogsRegisterCallback},
    {"cuLogsUnregisterCallback", (void*)fk_cuLogsUnregisterCallback},
    /* present but unsupported: multicast and green contexts */
    {"cuMulticastAddDevice", (void*)fk_not_supported},
    {"cuMulticastBindMem", (void*)fk_not_supported},
    {"cuMulticastCreate", (void*)fk_not_supported},
    {"cuMulticastUnbind", (void*)fk_not_supported},
    {"cuCtxFromGreenCtx", (void*)fk_not_supported},
    {"cuGreenCtxCreate", (void*)fk_not_supported},
    {"cuGreenCtxDestroy", (void*)fk_not_supported},
    {"cuGreenCtxStreamCreate", (void*)fk_not_supported},
    {"cuDevSmResourceSplitByCount", (void*)fk_not_supported},
    {"cuDeviceGetDevResource", (void*)fk_not_supported},
    {"cuDevResourceGenerateDesc", (void*)fk_not_supported},
};

static void* drv_lookup(const char* name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof g_drv / sizeof g_drv[0]; i++)
    if (!strcmp(g_drv[i].name, name)) return g_drv[i].fn;
  if (g_verbose)
    fprintf(stderr, "[fakecudart] driver entry point %s: not faked\n", name);
  return NULL;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int cudaVersion,
    unsigned long long flags, enum cudaDriverEntryPointQueryResult* status) {
  INIT();
  (void)cudaVersion;
  (void)flags;
  if (!symbol || !funcPtr) return set_err(cudaErrorInvalidValue);
  void* f = drv_lookup(symbol);
  *funcPtr = f;
  if (status)
    *status = f ? cudaDriverEntryPointSuccess
                : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGetDriverEntryPoint(
    const char* symbol, void** funcPtr, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, 12000, flags,
                                          status);
}
