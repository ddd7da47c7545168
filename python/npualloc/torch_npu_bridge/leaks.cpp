// msleaks (CANN's memory-leak checker) sees npualloc's blocks as it sees torch_npu's own
// allocator's. msleaks runs the program with its hook library preloaded, and torch_npu's
// allocator then describes each block through the mstx memory calls of libms_tools_ext.so
// (NPUCachingAllocator.cpp, DeviceCachingAllocator::malloc and free; mstx_mgr.cpp): in domain
// "ptaCaching", at each allocation a heap at the block's address of the allocator's reserved bytes
// and a region of the block's size; at each free the same heap with the reserved bytes then, and
// the block's region unregistered by its address. The bridge makes the same calls with npualloc's
// figures.
//
// When torch_npu makes them (MstxMgr::isMsleaksEnable, IsSupportMstxFunc): LD_PRELOAD names a file
// whose real path ends in libascend_kernel_hook.so, and $ASCEND_HOME_PATH/lib64/libms_tools_ext.so
// exists. The functions: with LD_PRELOAD set, the process's own definitions first (the preloaded
// hook's), then libms_tools_ext.so's (FunctionLoader::Get). The layouts: torch_npu's
// third_party/mstx/ms_tools_ext.h.

#include <limits.h>
#include <stdlib.h>

#include <sstream>

#include "bridge.h"

namespace npualloc_bridge {

namespace {

struct RangeDesc {  // mstxMemVirtualRangeDesc_t
  uint32_t device_id;
  const void* ptr;
  uint64_t size;
};
struct HeapDesc {  // mstxMemHeapDesc_t: a sub-allocator's virtual-address heap
  int32_t usage;
  int32_t type;
  const void* type_specific_desc;
};
struct RegionsRegisterBatch {  // mstxMemRegionsRegisterBatch_t
  void* heap;
  int32_t region_type;
  size_t region_count;
  const void* region_desc_array;
  void** region_handle_array_out;
};
struct RegionRef {  // mstxMemRegionRef_t, by pointer
  int32_t ref_type;
  const void* pointer;
};
struct RegionsUnregisterBatch {  // mstxMemRegionsUnregisterBatch_t
  size_t ref_count;
  const RegionRef* ref_array;
};

struct Mstx {
  void* (*domain_create)(const char*) = nullptr;
  void* (*heap_register)(void*, const HeapDesc*) = nullptr;
  void (*regions_register)(void*, const RegionsRegisterBatch*) = nullptr;
  void (*regions_unregister)(void*, const RegionsUnregisterBatch*) = nullptr;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string real_path(const std::string& path) {
  char out[PATH_MAX];
  return realpath(path.c_str(), out) != nullptr ? std::string(out) : std::string();
}

bool msleaks_preloaded(const char* preload) {
  std::stringstream entries(preload);
  std::string entry;
  while (std::getline(entries, entry, ':')) {
    if (ends_with(real_path(entry), "libascend_kernel_hook.so")) return true;
  }
  return false;
}

// The functions when msleaks is on, else null; decided once, as torch_npu does.
const Mstx* mstx() {
  static const Mstx* loaded = []() -> const Mstx* {
    const char* preload = std::getenv("LD_PRELOAD");
    const char* home = std::getenv("ASCEND_HOME_PATH");
    if (preload == nullptr || home == nullptr || !msleaks_preloaded(preload) ||
        real_path(std::string(home) + "/lib64/libms_tools_ext.so").empty()) {
      return nullptr;
    }
    void* library = nullptr;
    auto find = [&](const char* name) -> void* {
      if (void* f = dlsym(RTLD_DEFAULT, name)) return f;
      if (library == nullptr) library = dlopen("libms_tools_ext.so", RTLD_LAZY);
      return library != nullptr ? dlsym(library, name) : nullptr;
    };
    auto* m = new Mstx;
    m->domain_create = reinterpret_cast<decltype(m->domain_create)>(find("mstxDomainCreateA"));
    m->heap_register = reinterpret_cast<decltype(m->heap_register)>(find("mstxMemHeapRegister"));
    m->regions_register = reinterpret_cast<decltype(m->regions_register)>(find("mstxMemRegionsRegister"));
    m->regions_unregister = reinterpret_cast<decltype(m->regions_unregister)>(find("mstxMemRegionsUnregister"));
    if (m->domain_create == nullptr) {
      std::fprintf(stderr, "npualloc: msleaks is preloaded, but mstxDomainCreateA was not found: no leak reports\n");
      delete m;
      return nullptr;
    }
    return m;
  }();
  return loaded;
}

// The domain and the heap of an event (torch_npu creates the domain at every event too).
void* heap_event(const Mstx& m, int device, void* p, uint64_t reserved) {
  void* domain = m.domain_create("ptaCaching");
  if (m.heap_register != nullptr) {
    RangeDesc heap{static_cast<uint32_t>(device), p, reserved};
    HeapDesc desc{0, 0, &heap};
    m.heap_register(domain, &desc);
  }
  return domain;
}

}  // namespace

void Bridge::leaks_alloc(int device, void* p) {
  const Mstx* m = mstx();
  if (m == nullptr) return;
  npualloc_allocator* a = handle(device);
  npualloc_block_info info{};
  if (api->query(a, p, &info) != NPUALLOC_OK) return;
  void* domain = heap_event(*m, device, p, stats_of(device).reserved_bytes);
  if (m->regions_register != nullptr) {
    RangeDesc region{static_cast<uint32_t>(device), p, info.size};
    RegionsRegisterBatch batch{nullptr, 0, 1, &region, nullptr};
    m->regions_register(domain, &batch);
  }
}

void Bridge::leaks_free(int device, void* p) {
  const Mstx* m = mstx();
  if (m == nullptr) return;
  void* domain = heap_event(*m, device, p, stats_of(device).reserved_bytes);
  if (m->regions_unregister != nullptr) {
    RegionRef ref{0, p};
    RegionsUnregisterBatch batch{1, &ref};
    m->regions_unregister(domain, &batch);
  }
}

}  // namespace npualloc_bridge
