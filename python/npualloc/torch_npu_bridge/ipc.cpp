// Sharing blocks with other processes: torch_npu's shareIpcHandle and getIpcDevPtr, which its
// storage sharing calls (StorageSharing.cpp: _share_npu_ in the sender, _new_shared_npu in the
// receiver, for torch.multiprocessing and reduce_tensor). The handle string travels untouched;
// with the bridge in both processes it is npualloc_ipc_export's 128 bytes, which start with
// "NPUALLOC" (torch_npu's own allocator refuses them as a handle of a future version). A handle
// of torch_npu's own format goes to torch_npu's own allocator.

#include "bridge.h"

namespace npualloc_bridge {

namespace {
constexpr char kMagic[] = "NPUALLOC";
constexpr size_t kMagicLen = sizeof kMagic - 1;

// torch_npu's own allocator's import, where the release has one (a template, so that a release
// without getIpcDevPtr never compiles the call).
template <class A>
std::shared_ptr<void> own_import(A* own, int device_count, const std::string& handle) {
  if constexpr (requires { own->getIpcDevPtr(handle); }) {
    TORCH_CHECK(own != nullptr, "npualloc: getIpcDevPtr: the handle is not npualloc's, and torch_npu's own "
                                "allocator, which would import it, is not there");
    if (!own->initialized()) own->init(device_count);
    return own->getIpcDevPtr(handle);
  } else {
    TORCH_CHECK(false, "npualloc: getIpcDevPtr: the handle is not npualloc's");
  }
}
}  // namespace

bool Bridge::has_ipc() const {
  return api->struct_size >= offsetof(npualloc_api, ipc_close) + sizeof(void*);
}

std::pair<ptrdiff_t, std::string> Bridge::share_ipc(void* ptr) {
  TORCH_CHECK(ptr != nullptr, "npualloc: shareIpcHandle of a NULL pointer (an empty storage?)");
  TORCH_CHECK(has_ipc(), "npualloc: this npualloc library (", api->struct_size,
              "-byte function table) cannot share memory between processes; install npualloc 0.4 or later");
  int device = device_of(ptr);
  npualloc_allocator* a = handle(device);
  // The block that holds `ptr`: a storage's data is its block's start, or inside it
  // (allocate_with_aligned).
  npualloc_block_info info{};
  check(api->query(a, ptr, &info), "shareIpcHandle (query)");
  npualloc_ipc_handle h{};
  check(api->ipc_export(a, reinterpret_cast<void*>(info.addr), &h), "shareIpcHandle (ipc_export)");
  std::string bytes(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes);
  return {static_cast<ptrdiff_t>(reinterpret_cast<uintptr_t>(ptr) - info.addr), std::move(bytes)};
}

std::shared_ptr<void> Bridge::ipc_dev_ptr(const std::string& handle) {
  if (handle.size() != NPUALLOC_IPC_HANDLE_SIZE || handle.compare(0, kMagicLen, kMagic) != 0) {
    // Another process's torch_npu allocator made it: torch_npu's own allocator imports it.
    return own_import(own_, device_count_, handle);
  }
  TORCH_CHECK(has_ipc(), "npualloc: this npualloc library cannot import memory of another process; install "
                         "npualloc 0.4 or later");
  std::lock_guard<std::mutex> g(ipc_mu_);
  if (auto it = ipc_imports_.find(handle); it != ipc_imports_.end()) {
    if (auto alive = it->second.lock()) return alive;
  }
  int device = current_device();
  npualloc_ipc_handle h{};
  std::memcpy(h.bytes, handle.data(), sizeof h.bytes);
  void* p = nullptr;
  size_t size = 0;
  check(api->ipc_import(&h, device, &p, &size), "getIpcDevPtr (ipc_import)");
  // Dropped when the last storage using it dies: queued work on it is waited for first (as
  // torch_npu's own does), then the import ends. A deleter never throws.
  std::shared_ptr<void> mapped(p, [device](void* q) {
    try {
      c10_npu::NPUGuard guard(device);
      aclrtSynchronizeDevice();
    } catch (...) {
    }
    if (api->ipc_close(q) != NPUALLOC_OK) {
      std::fprintf(stderr, "npualloc: closing an import of another process's memory failed: %s\n",
                   last_error().c_str());
    }
  });
  ipc_imports_[handle] = mapped;
  return mapped;
}

}  // namespace npualloc_bridge
