// npualloc as torch_npu's NPU allocator: allocation, free, record_stream bookkeeping and cache
// release (the class and why it is a full allocator: bridge.h).

#include "bridge.h"

namespace npualloc_bridge {

npualloc_allocator* Bridge::handle(int device) {
  check_device(device);
  npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  if (a != nullptr) {
    return a;
  }
  // Made once, under the limits' lock: the memory limit read from it is the config's, before any
  // rule of the bridge's lowers it (limit.cpp).
  std::lock_guard<std::mutex> g(limit_mu_);
  a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  if (a != nullptr) {
    return a;
  }
  check(api->pluggable_allocator(device, &a), "creating the device's allocator");
  adopt_limit(device, a);
  // torch_npu's task queue is emptied before npualloc synchronizes to give memory back.
  check(api->set_before_release(a, &drain_task_queue, nullptr), "set_before_release");
  // Segment events feed the trace trackers (history.cpp); without a tracker each costs one load.
  if (observes_segments()) {
    check(api->set_segment_observer(a, &on_segment, this), "set_segment_observer");
  }
  __atomic_store_n(&handles_[device], a, __ATOMIC_RELEASE);
  if (size_t entries = history_entries_.load(); entries > 0) {
    check(api->record_history(a, entries), "record_history");
  }
  return a;
}

void* Bridge::malloc_on(int device, size_t size, aclrtStream stream) {
  if (size == 0) {
    return nullptr;
  }
  // torch_npu's own allocator refuses 1 EB (2^60 bytes) and more as out of memory, before anything
  // else (NPUCachingAllocator.cpp, NpuCachingAllocator::allocate); npualloc's largest request is
  // below 2^60 bytes too (README, "API conventions"), pad included.
  constexpr size_t kOneExabyte = size_t{1} << 60;
  TORCH_CHECK_WITH(OutOfMemoryError, size < kOneExabyte - tail_,
                   "NPU out of memory (npualloc). Tried to allocate more than 1EB memory.");
  std::shared_ptr<c10::GatheredContext> context;
  NCA::CreateContextFn recorder;
  NCA::RecordContext when;
  {
    std::lock_guard<std::mutex> g(mu_);
    recorder = recorder_;
    when = when_;
  }
  // Gathered with no lock held: it may take the GIL.
  if (recorder != nullptr && when != NCA::RecordContext::NEVER) {
    context = recorder();
  }
  npualloc_allocator* a = handle(device);
  void* p = nullptr;
  npualloc_status st;
  std::string error;
  // A private pool's route (pools.h): only while torch_npu has one active.
  uint64_t pool = pools_.any() ? pools_.route(device, stream) : 0;
  auto attempt = [&] {
    if (pool != 0) {
      check(api->pool_begin(a, pool, nullptr), "pool_begin");
      st = api->malloc(a, size + tail_, stream, &p);
      if (st != NPUALLOC_OK) error = last_error();
      check(api->pool_end(a, pool, nullptr), "pool_end");
    } else {
      st = api->malloc(a, size + tail_, stream, &p);
      if (st != NPUALLOC_OK) error = last_error();
    }
  };
  attempt();
  if (st == NPUALLOC_ERR_OUT_OF_MEMORY && rejects(device, size + tail_)) {
    // As torch_npu's own (NPUCachingAllocator.cpp, NpuCachingAllocator::malloc): no retry, no OOM
    // observer, not counted in num_ooms; its message, then npualloc's.
    TORCH_CHECK_WITH(OutOfMemoryError, false,
                     "NPU out of memory (npualloc). Allocation was preemptively rejected because it would exceed "
                     "per_process_memory_fraction limit (throw_on_npumalloc_oom). Requested size: ",
                     size + tail_, " bytes. ", error);
  }
  if (st == NPUALLOC_ERR_OUT_OF_MEMORY && own_ != nullptr && own_->initialized() &&
      !captures_underway(device)) {
    // npualloc's own ladder gave back what it could; as torch_npu's retry does
    // (NPUCachingAllocator.cpp, DeviceCachingAllocator::malloc), the op workspaces and
    // MallocBlock's cache go back too. When that freed device memory the request is tried once
    // more (npualloc has counted the first refusal as an out-of-memory by then). Not while a
    // capture is underway: it synchronizes the device, which a capture forbids (torch_npu skips
    // its retry then too).
    auto free_now = [device] {
      size_t free_bytes = 0, total_bytes = 0;
      return device_memory(device, free_bytes, total_bytes) == ACL_SUCCESS ? free_bytes : 0;
    };
    size_t before = free_now();
    empty_own(false);
    if (free_now() > before) attempt();
  }
  if (st == NPUALLOC_ERR_OUT_OF_MEMORY) {
    std::string report = error;
    std::vector<NCA::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> g(mu_);
      observers = oom_observers_;
    }
    if (!observers.empty()) {
      // As torch_npu calls them (NPUCachingAllocator.cpp, DeviceCachingAllocator::malloc): the
      // refused request, the memory the process may use (the fraction's share when one is set,
      // else the device's total), the device's free memory.
      size_t free_bytes = 0, total_bytes = 0;
      if (device_memory(device, free_bytes, total_bytes) != ACL_SUCCESS) free_bytes = total_bytes = 0;
      double fraction = fractions_[device].load();
      size_t allowed = fraction < 1.0 ? static_cast<size_t>(fraction * static_cast<double>(total_bytes)) : total_bytes;
      for (auto& o : observers) {
        o(device, static_cast<int64_t>(size + tail_), static_cast<int64_t>(allowed), static_cast<int64_t>(free_bytes));
      }
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory (npualloc). ", report);
  }
  TORCH_CHECK(st == NPUALLOC_OK, "npualloc: malloc failed (", api->status_name(st), "): ", error);
  {
    std::lock_guard<std::mutex> g(mu_);
    Live& live = live_[p];
    live = Live{device, size + tail_, context, {}, stream, nullptr};
    counts_[device].change(size + tail_, size, +1);
    if (context && (when == NCA::RecordContext::ALLOC || when == NCA::RecordContext::ALL)) {
      keep_context(trace_contexts_, p, context);
    }
  }
  trace_alloc(p);
  leaks_alloc(device, p);
  return p;
}

void Bridge::free_block(void* ptr, bool throw_errors) {
  if (ptr == nullptr) {
    return;
  }
  trace_free(ptr);
  Live live;
  NCA::CreateContextFn recorder;
  {
    std::lock_guard<std::mutex> g(mu_);
    // context="all": the free's stack frames too (torch_npu records them on free_requested).
    recorder = when_ == NCA::RecordContext::ALL ? recorder_ : nullptr;
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      if (throw_errors) {
        TORCH_CHECK(false, "npualloc: free of ", ptr, ", which npualloc did not allocate for torch_npu");
      }
      std::fprintf(stderr, "npualloc: free of %p, which npualloc did not allocate for torch_npu\n", ptr);
      return;
    }
    live = std::move(it->second);
    live_.erase(it);
    counts_[live.device].change(live.size, live.size - tail_, -1);
  }
  if (recorder != nullptr) {
    // Gathered with no lock held: it may take the GIL.
    std::shared_ptr<c10::GatheredContext> context = recorder();
    std::lock_guard<std::mutex> g(mu_);
    if (context && when_ == NCA::RecordContext::ALL) keep_context(free_contexts_, ptr, std::move(context));
  }
  // With torch_npu's task queue, work on the streams record_stream named may still sit in the
  // queue; the event npualloc records at free must come after it, so those queues go first.
  for (const auto& s : live.streams) {
    s.stream();
  }
  // Before the free: once npualloc has the block back, another thread may get its address.
  leaks_free(live.device, ptr);
  npualloc_status st = api->free(handle(live.device), ptr);
  if (st != NPUALLOC_OK) {
    std::string msg = last_error();
    if (throw_errors) {
      TORCH_CHECK(false, "npualloc: free failed: ", msg);
    }
    std::fprintf(stderr, "npualloc: free of %p failed: %s\n", ptr, msg.c_str());
  }
}

void Bridge::deleter(void* ptr) {
  // Called from DataPtr destructors: nothing may escape.
  try {
    bridge->free_block(ptr, false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npualloc: free of %p failed: %s\n", ptr, e.what());
  } catch (...) {
    std::fprintf(stderr, "npualloc: free of %p failed (unknown exception)\n", ptr);
  }
}

// torch_npu's guard (NPUCachingAllocator.cpp, eraseStream and eraseStreamWithBlockPtr): HCCL's
// WorkHCCL::synchronize made the current stream wait for the collective, so a stream use ends only
// when that stream is the block's own, where the block's next tenant will be ordered after the
// wait; on any other stream a new tensor could take the block before the collective ends. With a
// work (MULTI_STREAM_MEMORY_REUSE=3), only the work last recorded on this block may end it: an
// erase for a block's previous tenant at the same address changes nothing. A block no longer live
// keeps its use: torch_npu's allocator ends the wait of a freed block here (its HCCL-mode erase
// comes once the tensor is gone), npualloc's freed block waits for the event recorded at its free,
// which completes with the collective. mu_ is held to the end, so a free and a new tenant at the
// same address cannot come between the check and the erase. Returns whether the use ended.
bool Bridge::erase(void* p, c10_npu::NPUStream stream, const void* work) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(p);
  if (it == live_.end() || (work != nullptr && it->second.hccl_work != work)) {
    return false;
  }
  int device = it->second.device;
  if (it->second.stream != c10_npu::getCurrentNPUStream(device).stream(false)) {
    return false;
  }
  check(api->erase_stream(handle(device), p, stream.stream(false)), "erase_stream");
  auto& v = it->second.streams;
  v.erase(std::remove(v.begin(), v.end(), stream), v.end());
  return true;
}

namespace {

// aclrtMemUceInfo (acl_rt.h): a failed range, and reserved words the runtime zeroes.
struct UceRange {
  void* addr;
  size_t len;
  size_t reserved[14];
};
constexpr size_t kMaxUceRanges = 128;  // MAX_MEM_UCE_INFO_ARRAY_SIZE, what torch_npu asks for

bool overlaps(uintptr_t a, size_t a_len, uintptr_t b, size_t b_len) {
  return a_len != 0 && b_len != 0 && a < b + b_len && b < a + a_len;
}

// npualloc_for_each_segment's callback for the UCE check: the mapped pieces (MAP events).
void list_mapped(void* user, int32_t, npualloc_segment_event event, void* addr, size_t size, void*, uint64_t) noexcept {
  if (event != NPUALLOC_SEGMENT_MAP) return;
  try {
    static_cast<std::vector<std::pair<uintptr_t, size_t>>*>(user)->emplace_back(reinterpret_cast<uintptr_t>(addr), size);
  } catch (...) {
    // Out of host memory: the piece goes unlisted, and only a live block in it is still found.
  }
}

}  // namespace

// As torch_npu's own (NPUCachingAllocator.cpp, checkUceInMemPool): a failed range in memory the
// allocator holds, cached or live, is found, and a live block it touches becomes unsafe.
// check_uce_in_memory (Module.cpp) asks once, empties the cache, and asks again: found again
// means a live tensor's data was hit (3: load a checkpoint), else cached memory only (2: run the
// step again). npualloc's handles (and fixed segments) can outlast an empty_cache around a live
// block with no tensor in the failed part, so the second ask of a framed check finds live blocks
// only; torch_npu's own allocator finds any block of a segment it keeps, and answers 3 there.
// The ranges are torch_npu's copy, read when the error came (NPUException.cpp,
// checkUceErrAndRepair). torch_npu's own allocator also narrows that copy to the ranges it found
// (restart_device then repairs only those); its setter is not exported, so npualloc cannot.
bool Bridge::checkUceInMemPool(int device) {
  check_device(device);
  npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  std::vector<std::pair<uintptr_t, size_t>> ranges;
  int ask = 1;
  bool framed = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    UceCheck& check = uce_[device];
    framed = check.framed;
    if (framed) {
      ranges = check.ranges;
      ask = ++check.asks;
    }
  }
  if (!framed) ranges = runtime_uce_ranges(device);
  if (ranges.empty() || a == nullptr) return false;
  // Cached memory: what is mapped now (with fixed segments, each aclrtMalloc segment).
  std::vector<std::pair<uintptr_t, size_t>> mapped;
  if (observes_segments()) {
    check(api->for_each_segment(a, &list_mapped, &mapped), "check_uce_in_memory (listing segments)");
  }
  bool live_hit = false, cached_hit = false;
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [at, len] : ranges) {
    for (auto& [p, live] : live_) {
      if (live.device == device && overlaps(at, len, reinterpret_cast<uintptr_t>(p), live.size)) {
        live.unsafe = true;
        live_hit = true;
      }
    }
    for (const auto& [base, size] : mapped) {
      cached_hit = cached_hit || overlaps(at, len, base, size);
    }
  }
  bool found = live_hit || (cached_hit && ask == 1);
  if (found && framed) uce_[device].found = true;
  return found;
}

// The runtime's list of failed ranges (aclrtGetMemUceInfo), for an ask outside a framed check.
std::vector<std::pair<uintptr_t, size_t>> Bridge::runtime_uce_ranges(int device) {
  using GetUceInfo = aclError (*)(int32_t, UceRange*, size_t, size_t*);
  static const auto get_info = reinterpret_cast<GetUceInfo>(dlsym(RTLD_DEFAULT, "aclrtGetMemUceInfo"));
  TORCH_CHECK(get_info != nullptr, "npualloc: check_uce_in_memory: the runtime has no aclrtGetMemUceInfo");
  std::vector<UceRange> got(kMaxUceRanges);
  size_t count = 0;
  aclError rc = get_info(device, got.data(), got.size(), &count);
  TORCH_CHECK(rc == ACL_SUCCESS, "npualloc: check_uce_in_memory: aclrtGetMemUceInfo failed with ", rc);
  std::vector<std::pair<uintptr_t, size_t>> ranges;
  for (size_t i = 0; i < std::min(count, got.size()); ++i) {
    ranges.emplace_back(reinterpret_cast<uintptr_t>(got[i].addr), got[i].len);
  }
  return ranges;
}

void Bridge::begin_uce_check(int device, std::vector<std::pair<uintptr_t, size_t>> ranges) {
  check_device(device);
  std::lock_guard<std::mutex> g(mu_);
  uce_[device] = UceCheck{true, std::move(ranges), 0, false};
}

bool Bridge::end_uce_check(int device) {
  check_device(device);
  std::lock_guard<std::mutex> g(mu_);
  bool found = uce_[device].found;
  uce_[device] = UceCheck{};
  return found;
}

bool Bridge::stream_capturing(aclrtStream stream) {
  // Looked up, not linked: a runtime without graph capture has no capture underway.
  using CaptureGetInfo = aclError (*)(aclrtStream, int*, void**);
  static const auto get_info = reinterpret_cast<CaptureGetInfo>(dlsym(RTLD_DEFAULT, "aclmdlRICaptureGetInfo"));
  if (get_info == nullptr) return false;
  int status = 0;  // aclmdlRICaptureStatus: 0 is ACL_MODEL_RI_CAPTURE_STATUS_NONE (acl_rt.h)
  void* model = nullptr;
  return get_info(stream, &status, &model) == ACL_SUCCESS && status != 0;
}

void Bridge::empty_own(bool check_error) {
  if (own_ == nullptr || !own_->initialized()) return;
  try {
    own_->emptyCache(check_error);
  } catch (const std::exception& e) {
    if (check_error) throw;
    std::fprintf(stderr, "npualloc: torch_npu's own allocator's empty_cache: %s\n", e.what());
  }
}

void Bridge::empty_all(bool check_error, EmptyMode mode) {
  bool keep = mode != EmptyMode::All;
  if (keep && api->struct_size < offsetof(npualloc_api, empty_cache_with) + sizeof(void*)) {
    TORCH_CHECK(mode != EmptyMode::KeepHandles,
                "npualloc: empty_virt_addr_cache needs a libnpualloc with npualloc_empty_cache_with; "
                "this one is older than the bridge");
    keep = false;
  }
  std::string first;
  for (int d = 0; d < kMaxDevices; ++d) {
    npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
    if (a == nullptr) continue;
    npualloc_status st = keep ? api->empty_cache_with(a, NPUALLOC_EMPTY_KEEP_HANDLES) : api->empty_cache(a);
    if (st == NPUALLOC_ERR_UNSUPPORTED) {
      // Fixed segments: no handles to keep.
      TORCH_CHECK(mode != EmptyMode::KeepHandles,
                  "Unsupported config for empty_virt_addr_cache, please enable expandable_segments. (npualloc: ",
                  last_error(), ")");
      st = api->empty_cache(a);
    }
    if (st != NPUALLOC_OK && first.empty()) first = last_error();
  }
  // Then torch_npu's own (its workspaces, MallocBlock's cache), whatever npualloc's said.
  try {
    empty_own(check_error);
  } catch (const std::exception& e) {
    if (first.empty()) first = std::string("torch_npu's own allocator: ") + e.what();
  }
  if (!first.empty()) {
    if (check_error) {
      TORCH_CHECK(false, "npualloc: empty_cache failed: ", first);
    }
    std::fprintf(stderr, "npualloc: empty_cache: %s\n", first.c_str());
  }
}
}  // namespace npualloc_bridge

// npualloc.torch_npu's frame of one torch_npu check_uce_in_memory (Bridge::begin_uce_check):
// `ranges` holds `count` (address, length) pairs of torch_npu's copy. Returns 0, or -1 with
// nothing changed for a bad device or arguments. Never throws.
extern "C" __attribute__((visibility("default"))) int npualloc_torch_npu_bridge_begin_uce_check(
    int device, const uint64_t* ranges, size_t count) {
  if (npualloc_bridge::bridge == nullptr || device < 0 || device >= npualloc_bridge::kMaxDevices ||
      (ranges == nullptr && count != 0) || count > 4096) {
    return -1;
  }
  try {
    std::vector<std::pair<uintptr_t, size_t>> v;
    for (size_t i = 0; i < count; ++i) v.emplace_back(ranges[2 * i], ranges[2 * i + 1]);
    npualloc_bridge::bridge->begin_uce_check(device, std::move(v));
    return 0;
  } catch (...) {
    return -1;
  }
}

// Ends the frame: 1 if an ask found a failed range in npualloc's memory, 0 if not, -1 for a bad
// device. Never throws.
extern "C" __attribute__((visibility("default"))) int npualloc_torch_npu_bridge_end_uce_check(int device) {
  if (npualloc_bridge::bridge == nullptr || device < 0 || device >= npualloc_bridge::kMaxDevices) return -1;
  try {
    return npualloc_bridge::bridge->end_uce_check(device) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}
