// npualloc's memory registered with HCCL for zero-copy collectives: torch_npu's
// buildServerMemMapForHccl.
//
// What torch_npu does (PT torch_npu/csrc/distributed/ProcessGroupHCCL.cpp, the ProcessGroupHCCL
// constructor; torch_npu/csrc/core/npu/NPUCachingAllocator.cpp, ExpandableSegment::setHcclComm
// and DeviceCachingAllocator::buildServerMemMapForHccl): with TORCH_HCCL_ZERO_COPY=1, expandable
// segments, and LOCAL_RANK, RANK, GROUP_RANK and LOCAL_WORLD_SIZE set, the world process group
// makes a communicator of the host's ranks and hands it to the allocator once per process. The
// allocator then sets every reserved address range on it (HcclCommSetMemoryRange, alignment 0,
// flags 1) and activates every physical handle mapped there (HcclCommActivateCommMemory, offset 0,
// flags 0), and keeps doing so as memory is mapped, unmapped (HcclCommDeactivateCommMemory) and
// ranges released (HcclCommUnsetMemoryRange). HCCL's activated memory is process-wide: a
// collective on any communicator whose buffers lie in it may skip HCCL's own staging buffer.
//
// npualloc tells the bridge of every range and handle as it comes and goes (its segment observer,
// Bridge::on_segment) and lists what exists (npualloc_for_each_segment), so the bridge does the
// same for npualloc's memory. What it registered is kept per device, so a piece is never set or
// activated twice. Events that come while the listing runs wait in a queue and apply after it, in
// order: the listing is a view taken before them, so applying them last ends in what npualloc
// holds. Fixed-mode segments
// (aclrtMalloc, no physical handle) cannot be activated: HCCL's zero copy needs expandable
// segments, as torch_npu's does, and the bridge says so once.
//
// The four HCCL functions are looked up in the libhccl.so torch_npu has loaded (torch_npu's own
// wrappers, at_npu::hccl::*Face, are not exported).

#include <map>

#include "bridge.h"
#include "torch_npu/csrc/distributed/HCCLUtils.hpp"

namespace npualloc_bridge {

namespace {

using SetRange = HcclResult (*)(HcclComm, void*, size_t, size_t, uint64_t);
using UnsetRange = HcclResult (*)(HcclComm, void*);
using Activate = HcclResult (*)(HcclComm, void*, size_t, size_t, void*, uint64_t);
using Deactivate = HcclResult (*)(HcclComm, void*);

struct HcclFunctions {
  SetRange set_range = nullptr;
  UnsetRange unset_range = nullptr;
  Activate activate = nullptr;
  Deactivate deactivate = nullptr;
};

const HcclFunctions& hccl_functions() {
  static const HcclFunctions f = [] {
    HcclFunctions out;
    // As torch_npu finds them (FunctionLoader::Get): the process's symbols first (a preloaded
    // HCCL), then the libhccl.so it opened.
    void* lib = RTLD_DEFAULT;
    if (dlsym(lib, "HcclCommActivateCommMemory") == nullptr) {
      lib = dlopen("libhccl.so", RTLD_LAZY | RTLD_NOLOAD);
      if (lib == nullptr) lib = dlopen("libhccl.so", RTLD_LAZY);
      TORCH_CHECK(lib != nullptr, "npualloc: HCCL zero copy needs libhccl.so: ", dlerror());
    }
    out.set_range = reinterpret_cast<SetRange>(dlsym(lib, "HcclCommSetMemoryRange"));
    out.unset_range = reinterpret_cast<UnsetRange>(dlsym(lib, "HcclCommUnsetMemoryRange"));
    out.activate = reinterpret_cast<Activate>(dlsym(lib, "HcclCommActivateCommMemory"));
    out.deactivate = reinterpret_cast<Deactivate>(dlsym(lib, "HcclCommDeactivateCommMemory"));
    TORCH_CHECK(out.set_range && out.unset_range && out.activate && out.deactivate,
                "npualloc: this libhccl.so lacks HcclCommSetMemoryRange, HcclCommUnsetMemoryRange, "
                "HcclCommActivateCommMemory or HcclCommDeactivateCommMemory, which HCCL zero copy needs");
    return out;
  }();
  return f;
}

std::string hccl_failure(const char* what, void* addr, size_t size, HcclResult code) {
  char text[200];
  std::snprintf(text, sizeof text, "%s at %p (%zu bytes) failed with HCCL error %d", what, addr, size,
                static_cast<int>(code));
  return text;
}

}  // namespace

// One device's registration: the communicator and what is set and activated on it.
struct Bridge::HcclBinding {
  std::mutex mu;
  std::shared_ptr<c10d_npu::HCCLComm> comm;
  std::map<uintptr_t, size_t> ranges;  // set with HcclCommSetMemoryRange
  std::map<uintptr_t, std::pair<size_t, void*>> active;  // activated: size and handle
  bool warned_fixed = false;
  // While the listing runs: the events that came meanwhile, applied after it.
  struct Event {
    npualloc_segment_event event;
    void* addr;
    size_t size;
    void* handle;
  };
  bool listing = true;
  std::vector<Event> queued;

  // The raw communicator, or NULL once torch_npu destroyed it (at exit): then nothing is called.
  HcclComm raw() const {
    return comm ? comm->getHcclComm() : nullptr;
  }

  // Applies one event; an HCCL failure is returned as a message (empty: done or nothing to do).
  std::string apply(npualloc_segment_event event, void* addr, size_t size, void* handle) {
    HcclComm c = raw();
    if (c == nullptr) return {};
    const HcclFunctions& f = hccl_functions();
    auto key = reinterpret_cast<uintptr_t>(addr);
    switch (event) {
      case NPUALLOC_SEGMENT_RESERVE: {
        if (ranges.count(key) != 0) return {};
        HcclResult r = f.set_range(c, addr, size, 0, 1);
        if (r != HCCL_SUCCESS) return hccl_failure("HcclCommSetMemoryRange", addr, size, r);
        ranges[key] = size;
        return {};
      }
      case NPUALLOC_SEGMENT_MAP: {
        if (handle == nullptr) {
          if (!warned_fixed) {
            warned_fixed = true;
            TORCH_WARN("npualloc: HCCL zero copy activates physical handles of expandable segments; npualloc runs "
                       "with expandable_segments:false here, so its memory is not activated and collectives "
                       "take HCCL's staged path");
          }
          return {};
        }
        auto it = active.find(key);
        if (it != active.end()) {
          // Listed and reported by a queued event too: the same piece.
          if (it->second == std::make_pair(size, handle)) return {};
          f.deactivate(c, addr);
          active.erase(it);
        }
        HcclResult r = f.activate(c, addr, size, 0, handle, 0);
        if (r != HCCL_SUCCESS) return hccl_failure("HcclCommActivateCommMemory", addr, size, r);
        active[key] = {size, handle};
        return {};
      }
      case NPUALLOC_SEGMENT_UNMAP: {
        auto it = active.find(key);
        if (it == active.end()) return {};
        active.erase(it);
        HcclResult r = f.deactivate(c, addr);
        if (r != HCCL_SUCCESS) return hccl_failure("HcclCommDeactivateCommMemory", addr, size, r);
        return {};
      }
      case NPUALLOC_SEGMENT_RELEASE: {
        auto it = ranges.find(key);
        if (it == ranges.end()) return {};
        ranges.erase(it);
        HcclResult r = f.unset_range(c, addr);
        if (r != HCCL_SUCCESS) return hccl_failure("HcclCommUnsetMemoryRange", addr, size, r);
        return {};
      }
    }
    return {};
  }
};

namespace {

// npualloc_for_each_segment's callback during buildServerMemMapForHccl: the first failure is kept.
struct HcclListing {
  Bridge::HcclBinding* binding;
  std::string error;
};

void list_for_hccl(void* user, int32_t, npualloc_segment_event event, void* addr, size_t size, void* handle,
                   uint64_t) noexcept {
  auto* l = static_cast<HcclListing*>(user);
  try {
    if (!l->error.empty()) return;
    std::lock_guard<std::mutex> g(l->binding->mu);
    l->error = l->binding->apply(event, addr, size, handle);
  } catch (...) {
    l->error = "an HCCL registration call threw";
  }
}

}  // namespace

void Bridge::buildServerMemMapForHccl(int device, std::shared_ptr<c10d_npu::HCCLComm> comm) {
  check_device(device);
  TORCH_CHECK(comm != nullptr && comm->getHcclComm() != nullptr,
              "npualloc: buildServerMemMapForHccl needs a live HCCL communicator");
  TORCH_CHECK(observes_segments(), "npualloc: HCCL zero copy needs a libnpualloc with npualloc_for_each_segment; "
                                   "this one is older than the bridge");
  hccl_functions();  // fails here, not in an event, if HCCL lacks the calls
  npualloc_allocator* a = handle(device);
  // Kept for the process's life, as torch_npu keeps its communicator in its allocator.
  auto* b = new HcclBinding;
  b->comm = std::move(comm);
  HcclBinding* none = nullptr;
  if (!hccl_[device].compare_exchange_strong(none, b, std::memory_order_acq_rel)) {
    delete b;
    TORCH_CHECK(false, "npualloc: device ", device,
                " already has its memory registered with an HCCL communicator (buildServerMemMapForHccl "
                "is called once per process, by the world process group)");
  }
  // From here events are queued; the listing (which reads npualloc's pools under their locks, so
  // no lock of the bridge is held across it) registers what existed, then the queue applies.
  HcclListing listing{b, {}};
  npualloc_status st = api->for_each_segment(a, &list_for_hccl, &listing);
  if (st != NPUALLOC_OK && listing.error.empty()) listing.error = "listing it: " + last_error();
  {
    std::lock_guard<std::mutex> g(b->mu);
    for (const auto& e : b->queued) {
      if (!listing.error.empty()) break;
      listing.error = b->apply(e.event, e.addr, e.size, e.handle);
    }
    b->queued.clear();
    b->listing = false;
    if (!listing.error.empty()) {
      // Unbound: later events call nothing, and the process group's failure leaves no registration.
      b->comm.reset();
    }
  }
  if (!listing.error.empty()) {
    hccl_[device].store(nullptr, std::memory_order_release);
    TORCH_CHECK(false, "npualloc: registering device ", device, "'s memory with HCCL: ", listing.error);
  }
}

void Bridge::hccl_event(int32_t device, npualloc_segment_event event, void* addr, size_t size, void* handle) noexcept {
  if (device < 0 || device >= kMaxDevices) return;
  HcclBinding* bound = hccl_[device].load(std::memory_order_acquire);
  if (bound == nullptr) return;
  HcclBinding& b = *bound;
  // Called from npualloc's Rust code: reported, never thrown.
  try {
    std::string error;
    {
      std::lock_guard<std::mutex> g(b.mu);
      if (b.listing) {
        b.queued.push_back({event, addr, size, handle});
        return;
      }
      error = b.apply(event, addr, size, handle);
    }
    if (!error.empty()) {
      std::fprintf(stderr, "npualloc: %s; collectives on that memory take HCCL's staged path\n", error.c_str());
    }
  } catch (...) {
    std::fprintf(stderr, "npualloc: an HCCL registration call threw; the event was dropped\n");
  }
}

}  // namespace npualloc_bridge
