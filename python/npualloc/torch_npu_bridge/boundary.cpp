// What C and Rust call into the bridge, each catching every exception: npualloc's release hook
// (the task-queue drain), npualloc_torch_npu_bridge_install / _active, and the torch_npu helpers
// the base class's inline defaults need.

#include <sys/prctl.h>

#include <cstring>

#include "release.h"

namespace npualloc_bridge {

const npualloc_api* api = nullptr;
Bridge* bridge = nullptr;

namespace {

// True on torch_npu's own task-queue threads: the consumer that hands queued work to the runtime
// (NPUQueue.cpp, StartConsume: SetThreadType(ACL_THREAD)) and the thread that frees the queued
// work's parameters (StartRelease: RELEASE_THREAD); SetThreadType names them with prctl
// (NPUAffinityController.cpp, kThreadTypeToNameMap). Emptying the queue from either would wait
// for the queue that thread itself works on (Repository::MakeSureQueueEmpty waits until it is
// empty), and npualloc may run the hook inside a free (the last block of a destroyed pool, the
// release threshold): should one of those threads free a block (the release thread destroys
// queued tasks' parameters), the drain would never return. There the stream synchronization
// npualloc makes next covers the work handed to the runtime; work still queued behind the
// calling thread's own is not waited for.
bool on_task_queue_thread() {
  char name[17] = {0};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) return false;
  return std::strcmp(name, "acl_thread") == 0 || std::strcmp(name, "release_thread") == 0;
}

}  // namespace

void drain_task_queue(void* /*user*/, int32_t device) {
  // Called by npualloc (Rust) before it synchronizes to give memory back: nothing may escape.
  // npuSynchronizeDevice empties every stream's task queue (when TASK_QUEUE_ENABLE is on) and
  // synchronizes the device, as torch_npu's own allocator does before releasing cached blocks
  // (NPUCachingAllocator.cpp: "Make sure taskqueue is empty, then execute release_cached_blocks").
  if (on_task_queue_thread()) return;
  try {
    // npuSynchronizeDevice acts on the current device: make it the allocator's (the caller's
    // current device may be another one), and put the caller's back afterwards.
    c10_npu::NPUGuard guard(static_cast<c10::DeviceIndex>(device));
    c10_npu::npuSynchronizeDevice(false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npualloc: emptying torch_npu's task queue for device %d failed: %s\n", device, e.what());
  } catch (...) {
    std::fprintf(stderr, "npualloc: emptying torch_npu's task queue for device %d failed\n", device);
  }
}

}  // namespace npualloc_bridge

// NPUAllocator's inline defaults (getMemoryInfo, recordStream(c10::Stream), the pool methods,
// isHistoryEnabled) use torch_npu's error macros, whose helpers below libtorch_npu.so does not
// export; the compiler still emits those defaults (the base class's vtable is built during
// construction), so the library would not load without definitions. Bridge overrides every one
// of those defaults, so these are never reached; they are local to this library (hidden) and
// only report that something unexpected happened.
#define NPUALLOC_LOCAL __attribute__((visibility("hidden")))
NPUALLOC_LOCAL std::string formatErrorCode(SubModule, ErrCode) {
  return " [npualloc bridge]";
}
namespace c10_npu {
NPUALLOC_LOCAL std::string getDeviceErrorMessage(int) {
  return "";
}
NPUALLOC_LOCAL bool isCannOOM(const std::string&) {
  return false;
}
namespace acl {
NPUALLOC_LOCAL aclError AclrtPeekAtLastError(aclrtLastErrLevel) {
  return ACL_SUCCESS;
}
}  // namespace acl
namespace option {
NPUALLOC_LOCAL void oom_observer(int64_t, int64_t, int64_t, int64_t) {}
NPUALLOC_LOCAL bool OptionsManager::IsOomSnapshotEnable() {
  return false;
}
NPUALLOC_LOCAL bool OptionsManager::IsCompactErrorOutput() {
  return false;
}
}  // namespace option
}  // namespace c10_npu

namespace {
void write_error(char* err, size_t len, const std::string& msg) {
  if (err != nullptr && len > 0) {
    std::snprintf(err, len, "%s", msg.c_str());
  }
}
}  // namespace

// Installs npualloc (the library at `library`) as torch_npu's allocator, adding `tail` bytes to
// every request as torch_npu's own allocator does on this SoC/CANN. Returns 0, or 1 with a message
// in `err`; nothing is changed on failure. Calling it again after success returns 0.
extern "C" __attribute__((visibility("default"))) int npualloc_torch_npu_bridge_install(const char* library, size_t tail,
                                                                                         char* err, size_t err_len) {
  using namespace npualloc_bridge;
  try {
    if (bridge != nullptr) {
      return 0;
    }
    if (library == nullptr) {
      write_error(err, err_len, "library path is NULL");
      return 1;
    }
    void* h = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      write_error(err, err_len, std::string("cannot load ") + library + ": " + dlerror());
      return 1;
    }
    using GetApi = const npualloc_api* (*)(uint32_t);
    auto get_api = reinterpret_cast<GetApi>(dlsym(h, "npualloc_get_api"));
    const npualloc_api* table = get_api ? get_api(1) : nullptr;
    if (table == nullptr || table->struct_size < offsetof(npualloc_api, set_before_release) + sizeof(void*)) {
      write_error(err, err_len, std::string(library) + " is an npualloc without erase_stream, pluggable_allocator "
                                                           "and set_before_release (ABI 1, API 0.3 or newer needed)");
      dlclose(h);  // nothing changed: the library loaded here goes again
      return 1;
    }
    NCA::NPUAllocator* current = NCA::allocator.load();
    if (current != nullptr && current->initialized()) {
      write_error(err, err_len, "torch_npu has already initialized its allocator (" + current->name() +
                                    "); it can be replaced only before the first NPU use");
      dlclose(h);
      return 1;
    }
    api = table;
    // Never destroyed: torch_npu's allocators live until the process exits, and tensors freed at
    // exit still call the deleter.
    bridge = new ReleaseBridge(tail, current);
    NCA::allocator.store(bridge);
    c10::SetAllocator(c10::DeviceType::PrivateUse1, bridge, /*priority=*/1);
    return 0;
  } catch (const std::exception& e) {
    write_error(err, err_len, e.what());
  } catch (...) {
    write_error(err, err_len, "unknown exception");
  }
  return 1;
}

// Whether the bridge is torch_npu's allocator now.
extern "C" __attribute__((visibility("default"))) int npualloc_torch_npu_bridge_active(void) {
  try {
    return npualloc_bridge::bridge != nullptr &&
           c10_npu::NPUCachingAllocator::allocator.load() == npualloc_bridge::bridge;
  } catch (...) {
    return 0;
  }
}