// npualloc as torch_npu's NPU allocator: a full c10_npu::NPUCachingAllocator::NPUAllocator.
//
// Why a full allocator and not torch_npu's NPUPluggableAllocator with all its hooks: the pluggable
// allocator has no hook for snapshot(), recordHistory(), resetAccumulatedStats(),
// getMemoryFraction(), FreeDeviceCachedMemory(), emptyCache(MempoolId_t) or
// attachOutOfMemoryObserver() (torch_npu/csrc/npu/NPUPluggableAllocator.cpp: each warns, raises,
// or falls off the end of a non-void function), and its malloc never checks NULL, so an
// out-of-memory can only surface as a generic error. An NPUAllocator of our own serves every
// memory API torch_npu has; it is installed the way torch_npu's changeCurrentAllocator does it
// (the exported atomic c10_npu::NPUCachingAllocator::allocator, before torch_npu initializes it),
// and also as c10's PrivateUse1 allocator so that code asking c10::GetAllocator gets it too.
//
// Every call into npualloc goes through its C API's function table (npualloc_get_api), on the
// process-wide allocator of each device (npualloc_pluggable_allocator), so the pluggable entry
// points and the Python package see the same allocators. Errors of npualloc become c10 errors
// (OutOfMemoryError for an out-of-memory, with npualloc's report) where torch_npu expects them;
// nothing throws out of the functions C or Rust calls (the deleter, the release hook, install).
// The torch_npu facts this relies on: docs/runtime-behaviour.md "How torch_npu talks to its allocator".
//
// The bridge's sources (one library, compiled together by __init__.py):
//   bridge.h     the class (this file)
//   release.h    what differs between torch_npu releases: the entry points ReleaseBridge adds
//   bridge.cpp   allocation, free, record_stream bookkeeping and cache release
//   stats.cpp    torch_npu's DeviceStats from npualloc's statistics and the bridge's counts
//   limit.cpp    the memory fraction and throw_on_npumalloc_oom's rejections
//   trace.cpp    torch_npu's NPU sanitizer's callbacks
//   leaks.cpp    msleaks' reports of each block (the mstx memory calls)
//   checkpoint.cpp  pool checkpoints for npugraph trees
//   ipc.cpp      sharing blocks with other processes (torch.multiprocessing)
//   hccl.cpp     npualloc's memory registered with HCCL for zero-copy collectives
//   history.cpp  recordHistory and snapshot (npualloc's snapshot with torch_npu's stack frames)
//   pools.h      private pools (graph capture and MemPool) routing
//   boundary.cpp what C and Rust call: install, the task-queue drain, torch_npu's local helpers
//   json.h       the small JSON reader snapshot() uses

#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "npualloc.h"
#include "json.h"
#include "pools.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUFunctions.h"
#include "torch_npu/csrc/core/npu/NPUGuard.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"


namespace npualloc_bridge {

namespace NCA = c10_npu::NPUCachingAllocator;
using NCA::Stat;
using NCA::StatArray;

constexpr int kMaxDevices = NPUALLOC_PLUGGABLE_MAX_DEVICES;
constexpr size_t kAggregate = static_cast<size_t>(NCA::StatType::AGGREGATE);

// The C API table of the npualloc library install() loaded (boundary.cpp).
extern const npualloc_api* api;

inline std::string last_error() {
  const char* m = api->last_error();
  return m ? m : "";
}

// One live block: what the deleter and the snapshot need that npualloc does not keep.
struct Live {
  int device = 0;
  size_t size = 0;  // as npualloc was asked (with the tail)
  std::shared_ptr<c10::GatheredContext> context;
  // Streams record_stream named (torch_npu's NPUStream, to empty their task queue at free).
  std::vector<c10_npu::NPUStream> streams;
  // The stream it was allocated on, and the HCCL work last recorded on it
  // (recordHcclWorkForBlock): what torch_npu's erase guard compares (Bridge::erase).
  aclrtStream stream = nullptr;
  void* hccl_work = nullptr;
  // Its memory had an uncorrectable error, or markAllBlockUnsafe named its device: torch_npu's
  // checkBlockIsSafe answers false until updateBlockToSafe (a write of the whole tensor).
  bool unsafe = false;
};

// What the bridge counts itself, per device, under its lock (it already takes it for every
// allocation and free): torch_npu's live blocks and their peak, and the bytes torch_npu asked
// for, without the tail the bridge adds (torch_npu's requested_size is the size before its
// padding: NPUCachingAllocator.cpp, DeviceCachingAllocator::malloc).
// Kept for the blocks of each pool kind (PyTorch's small and large pools: rounded blocks of at
// most 1 MiB and larger ones; npualloc's rounding keeps a request of at most 1 MiB, pad included,
// at most 1 MiB) and summed for "all".
struct Counts {
  struct Kind {
    int64_t live = 0, live_peak = 0;
    int64_t requested_live = 0, requested_peak = 0;
    int64_t requested_in = 0, requested_out = 0;  // since the last reset_accumulated_memory_stats
  };
  Kind all, kind[2];

  static constexpr size_t kSmallSize = size_t{1} << 20;

  // A block of `asked` bytes (pad included) is born (+1) or freed (-1) for `requested` bytes.
  void change(size_t asked, size_t requested, int sign) {
    for (Kind* k : {&all, &kind[asked <= kSmallSize ? 0 : 1]}) {
      k->live += sign;
      k->requested_live += sign * static_cast<int64_t>(requested);
      if (sign > 0) {
        k->live_peak = std::max(k->live_peak, k->live);
        k->requested_peak = std::max(k->requested_peak, k->requested_live);
        k->requested_in += static_cast<int64_t>(requested);
      } else {
        k->requested_out += static_cast<int64_t>(requested);
      }
    }
  }

  void reset_accumulated() {
    for (Kind* k : {&all, &kind[0], &kind[1]}) k->requested_in = k->requested_out = 0;
  }

  void reset_peaks() {
    for (Kind* k : {&all, &kind[0], &kind[1]}) {
      k->live_peak = k->live;
      k->requested_peak = k->requested_live;
    }
  }
};

// npualloc's statistics of one device: the whole allocator's and each pool kind's.
struct Figures {
  npualloc_stats all, kind[2];
};

void drain_task_queue(void* user, int32_t device);


// Bridge serves every call; ReleaseBridge (release.h) is the one made, and adds the entry points
// whose presence or signature differs between torch_npu releases. The members here marked
// "release.h" are declared without `override` because some releases lack them; release.h
// checks that they override wherever a release declares them.
class Bridge : public NCA::NPUAllocator {
 public:
  // `own` is torch_npu's own allocator, which the bridge replaces (may be null).
  Bridge(size_t tail, NCA::NPUAllocator* own) : tail_(tail), own_(own) {
    for (auto& f : fractions_) f.store(1.0);
  }

  // ---- allocation -------------------------------------------------------------------------

  c10::DataPtr allocate(size_t size) override {
    int device = current_device();
    void* p = malloc_on(device, size, c10_npu::getCurrentNPUStream(device).stream(false));
    return {p, p, &deleter, c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
  }

  c10::DataPtr allocate_with_aligned(size_t size, size_t base_addr_aligned_kb) const override {
    // As torch_npu's own allocator (NPUCachingAllocator.cpp, allocate_with_aligned; called by
    // empty_with_format(..., base_addr_aligned_kb=)): the block is `aligned` bytes larger and the
    // data starts at its first multiple of `aligned`. The DataPtr's context is the block's start,
    // which the deleter and the stream calls take. 0 KB asks for no alignment.
    auto* self = const_cast<Bridge*>(this);
    if (size == 0 || base_addr_aligned_kb == 0) return self->allocate(size);
    TORCH_CHECK_VALUE(base_addr_aligned_kb <= (size_t{1} << 50),
                      "npualloc: allocate_with_aligned: an alignment of ", base_addr_aligned_kb,
                      " KB is more than any block can have");
    const size_t aligned = base_addr_aligned_kb * 1024;
    // malloc_on refuses 1 EB or more as out of memory; the sum neither wraps nor drops below it.
    const size_t request = size >= (size_t{1} << 60) ? size : size + aligned;
    int device = current_device();
    void* block = self->malloc_on(device, request, c10_npu::getCurrentNPUStream(device).stream(false));
    auto at = reinterpret_cast<uintptr_t>(block);
    void* data = reinterpret_cast<void*>((at + aligned - 1) / aligned * aligned);
    return {data, block, &deleter, c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &deleter;
  }

  void* raw_alloc(size_t nbytes) override {
    int device = current_device();
    return malloc_on(device, nbytes, c10_npu::getCurrentNPUStream(device).stream(false));
  }

  void* raw_alloc_with_stream(size_t nbytes, aclrtStream stream) override {
    return malloc_on(current_device(), nbytes, stream);
  }

  void raw_delete(void* ptr) override {
    free_block(ptr, true);
  }

  static void deleter(void* ptr);

  // ---- lifecycle, fraction, cache ---------------------------------------------------------

  void init(int device_count) override {
    // torch_npu's MallocBlock/FreeBlock (NPUBlockHandle.h, for torchair) call its own allocator
    // directly, never through the allocator torch_npu serves tensors from: it is made ready too,
    // so they work (from its own cache) instead of indexing its empty device list.
    if (own_ != nullptr) own_->init(device_count);
    api->pluggable_init(device_count);
    device_count_ = std::max(1, std::min(device_count, kMaxDevices));
    initialized_ = true;
  }

  bool initialized() override {
    return initialized_;
  }

  double memory_fraction(int device) {
    // The device's allocator holds the config's fraction: made first if need be (torch_npu's own
    // getMemoryFraction sets the device too).
    handle(device);
    return fractions_[device].load();
  }

  void setMemoryFraction(double fraction, int device) override;  // limit.cpp

  // torch_npu's throw_on_npumalloc_oom rule (limit.cpp): on or off (negative: unchanged), and the
  // fraction it reads (negative: unchanged).
  void set_rejection(int throw_on_oom, double fraction);
  // An OOM-rejection observer's arguments: device, the refused size, what the device's allocator
  // held, the device's total (torch_npu's OomRejectionObserver).
  using RejectionObserver = std::function<void(int64_t, size_t, size_t, size_t)>;
  void add_rejection_observer(RejectionObserver observer);

  // As torch_npu's own allocator (NPUCachingAllocator.cpp, emptyCacheImpl, release_blocks):
  // free_physical false unmaps the cached memory of expandable segments but keeps its physical
  // handles for later growth; fixed segments go back either way.
  void emptyCacheImpl(bool check_error, bool free_physical) {  // release.h
    empty_all(check_error, free_physical ? EmptyMode::All : EmptyMode::KeepHandlesIfExpandable);
  }
  void emptyCache(bool check_error) override {
    empty_all(check_error);
  }
  void empty_pool_cache(c10_npu::MempoolId_t mempool_id) {
    // As torch_npu's own allocator (NPUCachingAllocator.cpp, emptyCache and
    // release_cached_blocks): {0, 0} is every device's cache; another id empties only that pool,
    // and only once torch_npu released it (its MemPool's destructor calls releasePool, then
    // this). releasePool destroyed the npualloc pool, which gave its cache back then; what its
    // blocks freed since left goes back here. A pool still in use keeps its cache, and the
    // default pool's stays.
    if (mempool_id.first == 0 && mempool_id.second == 0) {
      empty_all(true);
      return;
    }
    for (int d = 0; d < kMaxDevices; ++d) {
      npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
      if (a == nullptr) continue;
      if (uint64_t pool = pools_.take_released(d, mempool_id); pool != 0) {
        check(api->pool_empty_cache(a, pool), "pool_empty_cache");
      }
    }
  }
  // As torch_npu's own (emptyVirtAddrCache): with expandable segments, emptyCacheImpl(check_error,
  // false); without, torch_npu's error, whatever check_error says.
  void emptyVirtAddrCache(bool check_error) {  // release.h
    empty_all(check_error, EmptyMode::KeepHandles);
  }
  void FreeDeviceCachedMemory(int device) override {
    // GE's out-of-memory retry: the cache of one device goes back.
    check_device(device);
    npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
    if (a != nullptr) {
      check(api->empty_cache(a), "FreeDeviceCachedMemory");
    }
  }

  void cacheInfo(int device, size_t* cached_and_free, size_t* largest_block) override {
    TORCH_CHECK(cached_and_free != nullptr && largest_block != nullptr, "npualloc: cacheInfo: an output pointer is NULL");
    npualloc_stats s = stats_of(device);
    *cached_and_free = s.segment_bytes - std::min(s.segment_bytes, s.allocated_bytes + s.pending_free_bytes);
    *largest_block = s.largest_free_block;
  }

  void* getBaseAllocation(void* ptr, size_t* size) override {
    void* base = api->pluggable_base_alloc(ptr, size);
    TORCH_CHECK(base != nullptr, "npualloc: getBaseAllocation: ", last_error());
    return base;
  }

  // ---- streams ----------------------------------------------------------------------------

  // The stream calls take a DataPtr's context, its block's start: the data of an aligned
  // allocation (allocate_with_aligned) starts inside its block.
  void recordStream(const c10::DataPtr& ptr, c10_npu::NPUStream stream) override {
    void* p = ptr.get_context();
    if (p == nullptr || ptr.get_deleter() != &deleter) {
      return;  // not ours (size 0, or another allocator's memory)
    }
    int device = device_of(p);
    check(api->record_stream(handle(device), p, stream.stream(false)), "record_stream");
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = live_.find(p);
      if (it != live_.end() &&
          std::find(it->second.streams.begin(), it->second.streams.end(), stream) == it->second.streams.end()) {
        it->second.streams.push_back(stream);
      }
    }
    trace_stream("NPURecordStreamCallbacks", p, stream.stream(false));
  }

  void eraseStream(const c10::DataPtr& ptr, c10_npu::NPUStream stream) override {
    void* p = ptr.get_context();
    if (p == nullptr || ptr.get_deleter() != &deleter) {
      return;
    }
    if (erase(p, stream, nullptr)) trace_stream("NPUEraseStreamCallbacks", p, stream.stream(false));
  }

  void eraseStreamWithBlockPtr(void* block_ptr, c10_npu::NPUStream stream, void* work_ptr) {  // release.h
    // getBlockPtr hands out the block's own address, so block_ptr is a block start.
    TORCH_CHECK(block_ptr != nullptr, "npualloc: eraseStreamWithBlockPtr: the block pointer is NULL");
    TORCH_CHECK(work_ptr != nullptr, "npualloc: eraseStreamWithBlockPtr: the HCCL work pointer is NULL");
    if (erase(block_ptr, stream, work_ptr)) trace_stream("NPUEraseStreamCallbacks", block_ptr, stream.stream(false));
  }

  void* getBlockPtr(const c10::DataPtr& ptr) {  // release.h
    return ptr.get_deleter() == &deleter ? ptr.get_context() : nullptr;
  }

  void recordHcclWorkForBlock(void* block_ptr, void* work_ptr) {  // release.h
    // The work eraseStreamWithBlockPtr must name to end the block's stream use (Bridge::erase).
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(block_ptr);
    if (it != live_.end()) {
      it->second.hccl_work = work_ptr;
    }
  }


  // ---- statistics (stats.cpp) ------------------------------------------------------------

  NCA::DeviceStats device_stats(int device);
  void reset_accumulated(int device);
  void reset_peaks(int device);

  // ---- history and snapshot (history.cpp) ------------------------------------------------

  bool isHistoryEnabled() override {
    return history_entries_ > 0;
  }

  void recordHistory(bool enabled, NCA::CreateContextFn recorder, size_t max_entries,
                     NCA::RecordContext when) override;
  NCA::SnapshotInfo snapshot_of(c10_npu::MempoolId_t mempool_id);

  // ---- private pools: graph capture and MemPool (pools.h) --------------------------------

  void beginAllocateToPool(c10::DeviceIndex device, c10_npu::MempoolId_t id,
                           std::function<bool(aclrtStream)> filter) override {
    npualloc_allocator* a = handle(device);
    pools_.begin(device, id, std::move(filter), [a](const char* config) {
      uint64_t pool = 0;
      check(api->pool_create(a, config, &pool), "pool_create");
      return pool;
    });
  }
  void endAllocateToPool(c10::DeviceIndex device, c10_npu::MempoolId_t id) override {
    pools_.end(device, id);
  }
  void releasePool(c10::DeviceIndex device, c10_npu::MempoolId_t id) override {
    if (uint64_t pool = pools_.release(device, id); pool != 0) {
      // Its cached memory goes back now; blocks still alive (graph outputs) when freed.
      check(api->pool_destroy(handle(device), pool), "pool_destroy");
    }
  }
  // A pool's live blocks listed and set back, for npugraph trees (checkpoint.cpp).
  std::shared_ptr<NCA::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10_npu::MempoolId_t id) override;
  NCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<NCA::AllocatorState> state) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10_npu::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override;

  // ---- graph capture (the entry points: release.h) ----------------------------------------

  // As torch_npu's own allocator (NPUCachingAllocator.cpp, hasCapturesUnderway): where NPUGraph
  // marks real captures (markCaptureBegin/End, after the runtime's capture begins and ends), a
  // capture is underway while one is marked on the device and its current stream is capturing
  // (is_capture_context); in releases without the marks, while a pool routing is active on the
  // device. NPUEvent::block then empties the task queues after queueing its wait.
  bool captures_underway(int device) {
    check_device(device);
    if (!marks_captures_) return pools_.routing(device);
    if (captures_[device].load() == 0) return false;
    return stream_capturing(c10_npu::getCurrentNPUStream(static_cast<c10::DeviceIndex>(device)).stream(false));
  }
  // Counted here, and passed on to torch_npu's own allocator, whose MallocBlock/FreeBlock then
  // know a capture is underway as they would without npualloc.
  template <class Own>
  void mark_capture(int device, int delta, Own&& own_mark) {
    check_device(device);
    if (delta > 0) {
      captures_[device].fetch_add(1);
    } else {
      int now = captures_[device].load();
      do {
        TORCH_CHECK(now > 0, "npualloc: markCaptureEnd on device ", device, " without a markCaptureBegin");
      } while (!captures_[device].compare_exchange_weak(now, now - 1));
    }
    if (own_ != nullptr && own_->initialized()) own_mark(*own_);
  }
  static bool stream_capturing(aclrtStream stream);

  // ---- the rest ---------------------------------------------------------------------------

  std::string name() override {
    return "npualloc";
  }

  // The header's inline versions of the next ones use torch_npu's error macros, whose helpers
  // libtorch_npu.so does not export; each is defined here with plain c10 errors instead.
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    aclError err = aclrtMemcpy(dest, count, src, count, ACL_MEMCPY_DEVICE_TO_DEVICE);
    TORCH_CHECK(err == ACL_SUCCESS, "npualloc: aclrtMemcpy (device to device, ", count, " bytes) failed: ", err);
  }

  std::pair<size_t, size_t> memory_info(int device) {
    size_t free_bytes = 0, total_bytes = 0;
    aclError err = device_memory(device, free_bytes, total_bytes);
    TORCH_CHECK(err == ACL_SUCCESS, "npualloc: aclrtGetMemInfo failed: ", err);
    return {free_bytes, total_bytes};
  }

  // aclrtGetMemInfo's free and total bytes of `device`'s memory (made current for the call).
  static aclError device_memory(int device, size_t& free_bytes, size_t& total_bytes) {
    c10_npu::NPUGuard guard(static_cast<c10::DeviceIndex>(device));
    return aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total_bytes);
  }

  void record_c10_stream(const c10::DataPtr& ptr, c10::Stream stream) {
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "npualloc: record_stream expects an NPU stream, got ",
                c10::DeviceTypeName(stream.device_type()));
    recordStream(ptr, c10_npu::NPUStream(stream));
  }

  int pool_use_count(int device, c10_npu::MempoolId_t id) {
    return pools_.use_count(device, id);
  }
  // Also called by ~MemPool (MemPool.cpp) with false, before releasePool: clearing it never throws.
  // One change at a time, so the bridge's record and npualloc's pool end with the same setting.
  void set_use_on_oom(int device, c10_npu::MempoolId_t id, bool use_on_oom) {
    check_device(device);
    std::lock_guard<std::mutex> g(use_on_oom_mu_);
    uint64_t pool = pools_.set_use_on_oom(device, id, use_on_oom);
    npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
    if (pool == 0 || a == nullptr) return;
    std::string error = "this npualloc library cannot change it once the pool served an allocation";
    if (api->struct_size >= offsetof(npualloc_api, pool_set_use_on_oom) + sizeof(void*)) {
      if (api->pool_set_use_on_oom(a, pool, use_on_oom ? 1 : 0) == NPUALLOC_OK) return;
      error = last_error();
    }
    if (use_on_oom) {
      pools_.set_use_on_oom(device, id, false);  // refused: nothing changed
      TORCH_CHECK(false, "npualloc: setUseOnOOM(true): ", error);
    }
    // Not cleared, the pool's cache may still go to other requests that run out of memory until
    // the releasePool that follows gives it back.
    std::fprintf(stderr, "npualloc: setUseOnOOM(false): %s\n", error.c_str());
  }
  // MemPool(no_split=True): the pool's npualloc pool gets no_split (each block 2 MiB-aligned memory
  // of its own, never cut from a larger cached block, as torch_npu's own allocator never splits the
  // pool's blocks).
  void set_no_split(int device, c10_npu::MempoolId_t id) {
    check_device(device);
    TORCH_CHECK(pools_.set_no_split(device, id), "npualloc: setNoSplit on pool (", id.first, ", ", id.second,
                ") of device ", device,
                ", which torch_npu did not create or which served allocations already: npualloc fixes a "
                "pool's no_split when the pool is made, at its first allocation");
  }
  void incref_pool(int device, c10_npu::MempoolId_t id, bool own_allocator) {
    TORCH_CHECK(!own_allocator, "npualloc: a MemPool with its own allocator is not supported");
    pools_.incref(device, id);
  }


  void attachOutOfMemoryObserver(NCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> g(mu_);
    oom_observers_.push_back(std::move(observer));
  }

  // ---- uncorrectable memory errors (bridge.cpp) ----------------------------------------------

  // torch_npu's check_uce_in_memory (Module.cpp) asks, after a UCE, whether the failed ranges lie
  // in memory the allocator holds (once, and again after emptyCache, to tell cached memory from
  // live tensors); blocks found there are unsafe until rewritten (NPURecovery.cpp).
  bool checkUceInMemPool(int device) override;
  // One check_uce_in_memory, as npualloc.torch_npu frames it: the failed ranges of torch_npu's
  // copy (_npu_get_uce_addr, which its library does not export to C++), then the asks, then
  // whether an ask found one in npualloc's memory (Python then sets torch_npu's data-unsafe
  // flag). Without a frame the asks read the runtime's list and each counts as a first ask.
  void begin_uce_check(int device, std::vector<std::pair<uintptr_t, size_t>> ranges);
  bool end_uce_check(int device);
  std::vector<std::pair<uintptr_t, size_t>> runtime_uce_ranges(int device);
  bool checkBlockIsSafe(const c10::DataPtr& ptr) override {
    void* p = ptr.get_context();
    if (p == nullptr || ptr.get_deleter() != &deleter) return true;  // not ours
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    return it == live_.end() || !it->second.unsafe;
  }
  void markAllBlockUnsafe(int device) override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [p, live] : live_) {
      if (live.device == device) live.unsafe = true;
    }
  }
  void updateBlockToSafe(const c10::DataPtr& ptr) override {
    void* p = ptr.get_context();
    if (p == nullptr || ptr.get_deleter() != &deleter) return;
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    if (it != live_.end()) it->second.unsafe = false;
  }
  // torch_npu's frees events its own allocator keeps for cross-stream frees; npualloc's are its
  // own and end with the work they wait for.
  void cleanEvent() override {}

  // ---- sharing with other processes (ipc.cpp) ----------------------------------------------

  // torch_npu's shareIpcHandle / getIpcDevPtr (StorageSharing.cpp's _share_npu_ and
  // _new_shared_npu, for torch.multiprocessing and reduce_tensor): the handle string is
  // npualloc_ipc_export's 128 bytes, the offset that of `ptr` in its block.
  std::pair<ptrdiff_t, std::string> share_ipc(void* ptr);
  std::shared_ptr<void> ipc_dev_ptr(const std::string& handle);

  // ---- registration with HCCL (hccl.cpp) --------------------------------------------------

  // torch_npu's zero-copy setup (ProcessGroupHCCL's constructor with TORCH_HCCL_ZERO_COPY=1):
  // npualloc's address ranges and physical handles on `device` are set and activated on `comm`
  // now and as they come and go (hccl_event, from on_segment).
  void buildServerMemMapForHccl(int device, std::shared_ptr<c10d_npu::HCCLComm> comm) override;
  struct HcclBinding;

  // ---- trace trackers ---------------------------------------------------------------------

  // attachAllocatorTraceTracker (the release's entry point is ReleaseBridge's): torch_npu's own
  // allocator calls its trackers for every trace entry, under its lock. npualloc tells the bridge
  // of its device memory as it comes and goes (npualloc_set_segment_observer), and the bridge
  // passes each piece on as torch_npu names it: SEGMENT_MAP / SEGMENT_UNMAP for expandable
  // segments, SEGMENT_ALLOC / SEGMENT_FREE for fixed ones (what registering libraries use).
  // Block entries (ALLOC, FREE_REQUESTED, FREE_COMPLETED) are not passed on: npualloc's hot path
  // calls no host code. Trackers run on the thread that grew or gave back memory, with that
  // stream's npualloc pool locked, so, as torch_npu says of its own, they must not call PyTorch.
  using TraceTracker = std::function<void(const NCA::TraceEntry&)>;
  void attach_tracker(TraceTracker tracker);
  static void on_segment(void* user, int32_t device, npualloc_segment_event event, void* addr, size_t size,
                         void* drv_handle, uint64_t pool) noexcept;

  // ---- internals --------------------------------------------------------------------------

  void free_block(void* ptr, bool throw_errors);
  npualloc_allocator* handle(int device);

 protected:
  size_t tail_;
  // The check_uce_in_memory under way per device (under mu_): its ranges, asks so far, and
  // whether one found a range in npualloc's memory.
  struct UceCheck {
    bool framed = false;
    std::vector<std::pair<uintptr_t, size_t>> ranges;
    int asks = 0;
    bool found = false;
  };
  std::array<UceCheck, kMaxDevices> uce_{};
  // torch_npu's own allocator: it serves only MallocBlock/FreeBlock, and its emptyCache also
  // empties torch_npu's NPUWorkspaceAllocator (op workspaces), which libtorch_npu.so does not
  // export; so the bridge's cache emptying and its out-of-memory retry call it.
  NCA::NPUAllocator* own_;
  void empty_own(bool check_error);
  bool initialized_ = false;
  int device_count_ = 1;
  // The memory limits (limit.cpp). limit_mu_ orders their changes and the making of each device's
  // allocator. fractions_: torch_npu's allowed_memory_maximum per device, as a fraction (the
  // config's, then setMemoryFraction's); the rule of throw_on_npumalloc_oom and its fraction.
  std::mutex limit_mu_;
  std::array<std::atomic<double>, kMaxDevices> fractions_{};
  std::atomic<bool> throw_on_oom_{false};
  std::atomic<double> throw_fraction_{1.0};
  // What npualloc's limit is known to be per device (under limit_mu_): unknown with a library
  // before statistics version 7 until setMemoryFraction sets it.
  struct Applied {
    bool known = false;
    double fraction = 1.0;
  };
  std::array<Applied, kMaxDevices> limits_{};
  void adopt_limit(int device, npualloc_allocator* a);
  void apply_limit(int device, npualloc_allocator* a);
  // Whether npualloc's refusal of `size` bytes is a rejection by the rule; it is then counted and
  // the observers are told.
  bool rejects(int device, size_t size);
  std::array<std::atomic<int>, kMaxDevices> captures_{};  // real captures marked, per device
  bool marks_captures_ = false;  // the release's NPUGraph marks them (release::marks_captures)
  std::array<npualloc_allocator*, kMaxDevices> handles_{};
  // The trace trackers attached (only added to); `tracked_` once there is one.
  std::mutex trackers_mu_;
  std::vector<TraceTracker> trackers_;
  std::atomic<bool> tracked_{false};
  // Whether this libnpualloc has the segment observer (API 0.4).
  static bool observes_segments();
  // One segment event for the device's HCCL registration, if it has one (hccl.cpp).
  void hccl_event(int32_t device, npualloc_segment_event event, void* addr, size_t size, void* handle) noexcept;
  // Each device's HCCL registration, set once and kept for the process's life.
  std::array<std::atomic<HcclBinding*>, kMaxDevices> hccl_{};
  // npualloc's statistics at the last reset_accumulated_memory_stats, per device: its cumulative
  // counters, and the current figures whose changes since then tell what was freed.
  std::array<Figures, kMaxDevices> baselines_{};
  std::array<Counts, kMaxDevices> counts_{};
  std::mutex mu_;
  std::unordered_map<void*, Live> live_;
  // Contexts of recorded allocations, per address, oldest first (matched to the history's
  // alloc entries from the newest, so entries the history dropped do not shift them).
  // Stack frames of history entries, oldest first per address: of allocations (alloc) and, with
  // RecordContext::ALL, of frees (free_requested).
  using Contexts = std::unordered_map<int64_t, std::deque<std::shared_ptr<c10::GatheredContext>>>;
  Contexts trace_contexts_;
  Contexts free_contexts_;
  size_t trace_context_count_ = 0;
  void keep_context(Contexts& where, void* p, std::shared_ptr<c10::GatheredContext> context);
  std::atomic<size_t> history_entries_{0};
  NCA::CreateContextFn recorder_ = nullptr;
  NCA::RecordContext when_ = NCA::RecordContext::NEVER;
  std::vector<NCA::OutOfMemoryObserver> oom_observers_;
  // Rejections by the throw_on_npumalloc_oom rule since the last reset_accumulated_memory_stats,
  // per device, and the observers of each (under mu_).
  std::array<int64_t, kMaxDevices> rejections_{};
  std::vector<RejectionObserver> rejection_observers_;
  GraphPools pools_;

  static int current_device() {
    return static_cast<int>(c10_npu::current_device());
  }

  void check_device(int device) const {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "npualloc: device ", device, " is not in 0..", kMaxDevices);
  }

  // checkpoint.cpp: the live blocks of npualloc pool `pool` (none for 0), and the npualloc
  // pool of torch_npu's pool `id` (which must exist) for a checkpoint call.
  std::vector<npualloc_live_block> pool_live_blocks(int device, uint64_t pool);
  uint64_t checkpointed_pool(const char* what, int device, MempoolKey id);

  static void check(npualloc_status st, const char* what) {
    TORCH_CHECK(st == NPUALLOC_OK, "npualloc: ", what, " failed (", api->status_name(st), "): ", last_error());
  }

  // A device torch_npu never allocated on has no allocator: all zeroes, and none is created
  // (creating one would touch that device).
  npualloc_stats stats_of(int device) {
    check_device(device);
    npualloc_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
    if (a == nullptr) s.max_split_size = max_split_size();
    if (a != nullptr) {
      check(api->get_stats(a, &s), "get_stats");
      if (s.version < 3) {
        // A library older than the segment counts (stats version 3): its aclrtMalloc counts are
        // the fixed segments', and the current count the only peak known.
        s.segments_peak = s.segments;
        s.num_segments_created = s.num_device_mallocs;
        s.num_segments_released = s.num_device_frees;
      }
      if (s.version < 5) {
        // Older still (before stats version 5): no cumulative bytes (they read 0) and no
        // max_split_size, which then is "none".
        s.max_split_size = UINT64_MAX;
      }
    }
    return s;
  }

  // Every device's allocator has NPUALLOC_CONF's max_split_size: any one's (none made yet: no
  // limit known, -1).
  uint64_t max_split_size() {
    for (int d = 0; d < kMaxDevices; ++d) {
      npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
      npualloc_stats s{};
      s.struct_size = sizeof s;
      if (a != nullptr && api->get_stats(a, &s) == NPUALLOC_OK && s.version >= 5) return s.max_split_size;
    }
    return UINT64_MAX;
  }

  // stats_of, and each pool kind's statistics (zeroes from a library without them).
  Figures figures_of(int device);

  int device_of(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    return it == live_.end() ? current_device() : it->second.device;
  }

  void* malloc_on(int device, size_t size, aclrtStream stream);

 public:
  void set_tracing(bool on) {
    tracing_.store(on, std::memory_order_relaxed);
  }

 private:
  // torch_npu's sanitizer's callbacks (trace.cpp), called with no bridge lock held.
  template <typename... Args>
  void fire(const char* registry, Args... args);
  void trace_alloc(void* p);
  void trace_free(void* p);
  void trace_stream(const char* registry, void* p, aclrtStream stream);
  std::atomic<bool> tracing_{false};
  // msleaks' view of each block (leaks.cpp): nothing unless msleaks runs the process.
  void leaks_alloc(int device, void* p);
  void leaks_free(int device, void* p);
  std::mutex use_on_oom_mu_;
  // Imports by handle string, while any tensor uses one (torch_npu's ipcMemHandle_to_devptr):
  // a handle imported again while alive is the same mapping.
  std::mutex ipc_mu_;
  std::unordered_map<std::string, std::weak_ptr<void>> ipc_imports_;
  bool has_ipc() const;

  bool erase(void* p, c10_npu::NPUStream stream, const void* work);
  // What empty_all gives back: everything; the cache keeping physical handles (refused with fixed
  // segments, as emptyVirtAddrCache); or keeping them where segments are expandable.
  enum class EmptyMode { All, KeepHandles, KeepHandlesIfExpandable };
  void empty_all(bool check_error, EmptyMode mode = EmptyMode::All);
  void add_snapshot(int device, const Json& snap, NCA::SnapshotInfo& info);
};

// The one Bridge, made by npualloc_torch_npu_bridge_install (boundary.cpp); never destroyed.
extern Bridge* bridge;

}  // namespace npualloc_bridge
