// torch_npu's NPU sanitizer sees npualloc's blocks as it sees its own allocator's: with the
// sanitizer on in stream mode, torch_npu's allocator reports each allocation, each free (before
// it), each record_stream and each erase that ends a stream use to the Python callback
// registries of torch_npu.utils._npu_trace (NPUCachingAllocator.cpp: traceNpuMemoryAllocation,
// traceNpuMemoryDeallocation, traceNpuRecordStream, traceNpuEraseStream; PyCallbackTrigger.h,
// CONCRETE_TRACE_NPU). The trace state (NPUTrace) is not exported by libtorch_npu.so, so
// npualloc.torch_npu tells the bridge when the sanitizer is on (npualloc_torch_npu_bridge_trace).

#include <pybind11/pybind11.h>

#include "bridge.h"

namespace npualloc_bridge {

template <typename... Args>
void Bridge::fire(const char* registry, Args... args) {
  if (!tracing_.load(std::memory_order_relaxed) || !Py_IsInitialized()) return;
  // Called with no bridge lock held: the GIL comes first, as in torch_npu.
  try {
    pybind11::gil_scoped_acquire gil;
    pybind11::module_ mod = pybind11::module_::import("torch_npu.utils._npu_trace");
    // Releases before 2.9 trace no record_stream or erase (no such registry): neither does this.
    if (!pybind11::hasattr(mod, registry)) return;
    mod.attr(registry).attr("fire_callbacks")(args...);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npualloc: the NPU trace hook %s failed: %s\n", registry, e.what());
  }
}

void Bridge::trace_alloc(void* p) {
  fire("NPUMemoryAllocationCallbacks", reinterpret_cast<uintptr_t>(p));
}

void Bridge::trace_free(void* p) {
  fire("NPUMemoryDeallocationCallbacks", reinterpret_cast<uintptr_t>(p));
}

void Bridge::trace_stream(const char* registry, void* p, aclrtStream stream) {
  fire(registry, reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(stream));
}

}  // namespace npualloc_bridge

// Whether torch_npu's sanitizer traces in stream mode (npualloc.torch_npu calls it when it
// enables the bridge and whenever torch_npu activates the trace). Never throws.
extern "C" __attribute__((visibility("default"))) void npualloc_torch_npu_bridge_trace(int on) {
  if (npualloc_bridge::bridge != nullptr) npualloc_bridge::bridge->set_tracing(on != 0);
}
