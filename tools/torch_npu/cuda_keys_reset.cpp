// Loaded after `import torch` (the CUDA build) and before `import torch_npu`:
// removes the allocator-config keys libc10_cuda.so registered when it was
// loaded (c10/cuda/CUDAAllocatorConfig.h, getKeys()), which torch_npu
// registers again for the NPU; without this torch_npu aborts with
// "Duplicated key ... found in device-specific configuration parser hook
// registration". Returns how many keys it removed. Compiled against the
// installed torch's header: up to torch 2.12 getMutableKeys is inline there,
// its set a unique symbol libc10.so exports; from 2.13 libc10.so defines it.
// Torch before 2.9 has no such registry (no c10/core/AllocatorConfig.h):
// nothing to remove.
#if __has_include(<c10/core/AllocatorConfig.h>)
#include <exception>
#include <string>
#include <unordered_set>

#include <c10/core/AllocatorConfig.h>

extern "C" int npu_emu_reset_cuda_allocator_keys() {
  static const char* const cuda_keys[] = {
      "backend", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
      "release_lock_on_hipmalloc", "pinned_use_hip_host_register",
      "graph_capture_record_stream_reuse", "pinned_reserve_segment_size_mb",
      "pinned_num_register_threads", "per_process_memory_fraction",
      "pinned_free_catch_all", "throw_on_cudamalloc_oom"};
  try {
    auto& keys = c10::CachingAllocator::AcceleratorAllocatorConfig::getMutableKeys();
    int removed = 0;
    for (const char* key : cuda_keys) removed += static_cast<int>(keys.erase(key));
    return removed;
  } catch (const std::exception&) {
    return -1;
  } catch (...) {
    return -1;
  }
}
#else
extern "C" int npu_emu_reset_cuda_allocator_keys() {
  return 0;
}
#endif
