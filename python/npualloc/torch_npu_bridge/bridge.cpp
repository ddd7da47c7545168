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

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
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
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;

constexpr int kMaxDevices = NPUALLOC_PLUGGABLE_MAX_DEVICES;
constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

const npualloc_api* api = nullptr;

std::string last_error() {
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
};

// Counters at the last reset_accumulated_memory_stats, per device.
struct Baseline {
  uint64_t allocs = 0, frees = 0, device_mallocs = 0, device_frees = 0, retries = 0, ooms = 0, syncs = 0;
};

// What the bridge counts itself, per device, under its lock (it already takes it for every
// allocation and free): torch_npu's live blocks and their peak, and the cumulative bytes asked
// (npualloc keeps neither: counting them in npualloc's shards would add to its cache-hit path).
struct Counts {
  int64_t live = 0, live_peak = 0;
  int64_t requested_in = 0, requested_out = 0;  // since the last reset_accumulated_memory_stats
};

void drain_task_queue(void* user, int32_t device);

class Bridge final : public NCA::NPUAllocator {
 public:
  explicit Bridge(size_t tail) : tail_(tail) {
    fractions_.fill(1.0);
  }

  // ---- allocation -------------------------------------------------------------------------

  c10::DataPtr allocate(size_t size) override {
    int device = current_device();
    void* p = malloc_on(device, size, c10_npu::getCurrentNPUStream(device).stream(false));
    return {p, p, &deleter, c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
  }

  c10::DataPtr allocate_with_aligned(size_t size, size_t base_addr_aligned_kb) const override {
    // npualloc aligns every block to 512 bytes; a larger base alignment is not offered.
    TORCH_CHECK(
        base_addr_aligned_kb * 1024 <= 512,
        "npualloc: allocate_with_aligned(", size, ", ", base_addr_aligned_kb,
        " KB) is not supported: npualloc's blocks are 512-byte aligned");
    return const_cast<Bridge*>(this)->allocate(size);
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
    api->pluggable_init(device_count);
    device_count_ = std::max(1, std::min(device_count, kMaxDevices));
    initialized_ = true;
  }

  bool initialized() override {
    return initialized_;
  }

  double getMemoryFraction(int device) override {
    check_device(device);
    return fractions_[device];
  }

  void setMemoryFraction(double fraction, int device) override {
    npualloc_allocator* a = handle(device);
    check(api->set_memory_fraction(a, fraction), "set_memory_fraction");
    fractions_[device] = fraction;
  }

  void emptyCacheImpl(bool check_error, bool /*free_physical*/) override {
    // npualloc gives back whole segments and unmapped handles alike.
    empty_all(check_error);
  }
  void emptyCache(bool check_error) override {
    empty_all(check_error);
  }
  void emptyCache(c10_npu::MempoolId_t mempool_id) override {
    // A private pool keeps its cached memory until torch_npu releases the pool (releasePool),
    // when npualloc gives it back: emptying one pool's cache alone is not offered; the default
    // pool's goes back here, as for emptyCache().
    empty_all(true);
    (void)mempool_id;
  }
  void emptyVirtAddrCache(bool check_error) override {
    empty_all(check_error);
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

  void recordStream(const c10::DataPtr& ptr, c10_npu::NPUStream stream) override {
    void* p = ptr.get();
    if (p == nullptr || ptr.get_deleter() != &deleter) {
      return;  // not ours (size 0, or another allocator's memory)
    }
    int device = device_of(p);
    check(api->record_stream(handle(device), p, stream.stream(false)), "record_stream");
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    if (it != live_.end() &&
        std::find(it->second.streams.begin(), it->second.streams.end(), stream) == it->second.streams.end()) {
      it->second.streams.push_back(stream);
    }
  }

  void eraseStream(const c10::DataPtr& ptr, c10_npu::NPUStream stream) override {
    void* p = ptr.get();
    if (p == nullptr || ptr.get_deleter() != &deleter) {
      return;
    }
    erase(p, stream);
  }

  void eraseStreamWithBlockPtr(void* block_ptr, c10_npu::NPUStream stream, void* /*work_ptr*/) override {
    // getBlockPtr hands out the block's own address, so block_ptr is a block start.
    if (block_ptr != nullptr) {
      erase(block_ptr, stream);
    }
  }

  void* getBlockPtr(const c10::DataPtr& ptr) override {
    return ptr.get_deleter() == &deleter ? ptr.get() : nullptr;
  }

  void recordHcclWorkForBlock(void* /*block_ptr*/, void* /*work_ptr*/) override {
    // torch_npu's allocator keeps HCCL work objects per block for its MULTI_STREAM_MEMORY_REUSE
    // modes; npualloc orders cross-stream reuse by events (record_stream), so there is nothing
    // to keep: the HCCL stream's use is waited for through the event recorded at free.
  }

  // ---- statistics -------------------------------------------------------------------------

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    npualloc_stats s = stats_of(device);
    Baseline b;
    Counts c;
    {
      std::lock_guard<std::mutex> g(mu_);
      b = baselines_[device];
      c = counts_[device];
    }
    c10::CachingDeviceAllocator::DeviceStats d;
    auto set = [](StatArray& a, int64_t current, int64_t peak, int64_t allocated, int64_t freed) {
      Stat& st = a[kAggregate];
      st.current = current;
      st.peak = std::max(peak, current);
      st.allocated = allocated;
      st.freed = freed;
    };
    auto i = [](uint64_t v) { return static_cast<int64_t>(v); };
    // Block counts: the peak is the bridge's count of torch_npu's live blocks. npualloc keeps no
    // peak of segment counts: segment.peak reads as current (a lower bound).
    set(d.allocation, i(s.active_blocks), c.live_peak, i(s.num_allocs - b.allocs), i(s.num_frees - b.frees));
    set(d.segment, i(s.segments), i(s.segments), i(s.num_device_mallocs - b.device_mallocs),
        i(s.num_device_frees - b.device_frees));
    set(d.active, i(s.active_blocks), c.live_peak, i(s.num_allocs - b.allocs), i(s.num_frees - b.frees));
    // Bytes: requested bytes asked and given back are the bridge's sums. npualloc keeps no
    // cumulative totals of rounded or reserved bytes (they would cost its cache-hit path), so
    // "allocated"/"freed" of allocated_bytes, active_bytes and reserved_bytes read 0.
    set(d.allocated_bytes, i(s.allocated_bytes), i(s.allocated_bytes_peak), 0, 0);
    set(d.reserved_bytes, i(s.reserved_bytes), i(s.reserved_bytes_peak), 0, 0);
    set(d.active_bytes, i(s.allocated_bytes + s.pending_free_bytes), i(s.allocated_bytes_peak), 0, 0);
    set(d.requested_bytes, i(s.requested_bytes), i(s.requested_bytes_peak), c.requested_in, c.requested_out);
    uint64_t in_use = s.allocated_bytes + s.pending_free_bytes;
    set(d.inactive_split_bytes, i(s.segment_bytes > in_use ? s.segment_bytes - in_use : 0), 0, 0, 0);
    d.num_alloc_retries = i(s.num_alloc_retries - b.retries);
    d.num_ooms = i(s.num_ooms - b.ooms);
    d.num_sync_all_streams = i(s.num_syncs - b.syncs);
    d.num_device_alloc = i(s.num_device_mallocs + s.num_physical_mallocs);
    d.num_device_free = i(s.num_device_frees + s.num_physical_frees);
    return d;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    npualloc_stats s = stats_of(device);
    std::lock_guard<std::mutex> g(mu_);
    baselines_[device] = Baseline{s.num_allocs,       s.num_frees,         s.num_device_mallocs, s.num_device_frees,
                                  s.num_alloc_retries, s.num_ooms, s.num_syncs};
    counts_[device].requested_in = counts_[device].requested_out = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device(device);
    npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
    if (a != nullptr) {
      check(api->reset_peak_stats(a), "reset_peak_stats");
    }
    std::lock_guard<std::mutex> g(mu_);
    counts_[device].live_peak = counts_[device].live;
  }

  // ---- history and snapshot ---------------------------------------------------------------

  bool isHistoryEnabled() override {
    return history_entries_ > 0;
  }

  void recordHistory(bool enabled, NCA::CreateContextFn recorder, size_t max_entries,
                     NCA::RecordContext when) override {
    size_t entries = enabled ? std::max<size_t>(max_entries, 1) : 0;
    // Devices without an allocator yet get the setting when it is created (handle()).
    history_entries_.store(entries);
    for (int d = 0; d < kMaxDevices; ++d) {
      npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
      if (a != nullptr) check(api->record_history(a, entries), "record_history");
    }
    std::lock_guard<std::mutex> g(mu_);
    recorder_ = enabled ? recorder : nullptr;
    when_ = enabled ? when : NCA::RecordContext::NEVER;
    if (!enabled) {
      trace_contexts_.clear();
      free_contexts_.clear();
      trace_context_count_ = 0;
      for (auto& kv : live_) kv.second.context.reset();
    }
  }

  NCA::SnapshotInfo snapshot(c10_npu::MempoolId_t mempool_id) override {
    NCA::SnapshotInfo info;
    // torch_npu merges its workspace allocator's traces into device_traces by index, one per
    // device it initialized: the list has an entry for every device.
    info.device_traces.resize(device_count_);
    for (int d = 0; d < device_count_; ++d) {
      // Only devices torch_npu allocated on have an allocator; none is created here.
      npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
      if (a == nullptr) continue;
      char* text = nullptr;
      check(api->snapshot_pytorch_json(a, &text), "snapshot");
      std::string json(text);
      api->string_free(text);
      add_snapshot(d, JsonReader(json).parse(), info);
    }
    if (mempool_id.first != 0 || mempool_id.second != 0) {
      // MemPool.snapshot(): that pool's segments only.
      auto& segs = info.segments;
      segs.erase(std::remove_if(segs.begin(), segs.end(),
                                [&](const NCA::SegmentInfo& seg) { return seg.owner_private_pool_id != mempool_id; }),
                 segs.end());
    }
    return info;
  }

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
  std::shared_ptr<NCA::AllocatorState> getCheckpointState(c10::DeviceIndex, c10_npu::MempoolId_t) override {
    no_pools("graph-pool checkpoints (getCheckpointState)");
  }
  NCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex, std::shared_ptr<NCA::AllocatorState>) override {
    no_pools("graph-pool checkpoints (setCheckpointPoolState)");
  }

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

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    c10_npu::NPUGuard guard(device);
    size_t free_bytes = 0, total_bytes = 0;
    aclError err = aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total_bytes);
    TORCH_CHECK(err == ACL_SUCCESS, "npualloc: aclrtGetMemInfo failed: ", err);
    return {free_bytes, total_bytes};
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "npualloc: record_stream expects an NPU stream, got ",
                c10::DeviceTypeName(stream.device_type()));
    recordStream(ptr, c10_npu::NPUStream(stream));
  }

  int getPoolUseCount(c10::DeviceIndex device, c10_npu::MempoolId_t id) override {
    return pools_.use_count(device, id);
  }
  void setUseOnOOM(c10::DeviceIndex device, c10_npu::MempoolId_t id, bool use_on_oom) override {
    TORCH_CHECK(pools_.set_use_on_oom(device, id, use_on_oom),
                "npualloc: setUseOnOOM: a pool's use_on_oom is fixed once it has served an allocation");
  }
  void setNoSplit(c10::DeviceIndex, c10_npu::MempoolId_t) override {
    no_pools("MemPool(no_split=True) (setNoSplit)");
  }
  bool checkPoolLiveAllocations(c10::DeviceIndex, c10_npu::MempoolId_t, const std::unordered_set<void*>&) override {
    no_pools("memory pools (checkPoolLiveAllocations)");
  }
  void createOrIncrefPool(c10::DeviceIndex device, c10_npu::MempoolId_t id,
                          std::shared_ptr<NPUAllocator> allocator) override {
    TORCH_CHECK(allocator == nullptr, "npualloc: a MemPool with its own allocator is not supported");
    pools_.incref(device, id);
  }

  std::shared_ptr<void> getIpcDevPtr(std::string /*handle*/) override {
    TORCH_CHECK(false, "npualloc does not share memory between processes (getIpcDevPtr)");
  }
  NCA::ShareableHandle shareIpcHandle(void*) override {
    TORCH_CHECK(false, "npualloc does not share memory between processes (shareIpcHandle)");
  }

  void attachOutOfMemoryObserver(NCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> g(mu_);
    oom_observers_.push_back(std::move(observer));
  }
  void attachOomRejectionObserver(NCA::OomRejectionObserver /*observer*/) override {
    // npualloc has no preemptive rejection (torch_npu's throw_on_npumalloc_oom): never called.
  }
  void attachAllocatorTraceTracker(NCA::AllocatorTraceTracker /*tracker*/) override {
    TORCH_CHECK(false, "npualloc does not report allocator trace events to PyTorch (attachAllocatorTraceTracker)");
  }

  // UCE (uncorrectable memory error) tracking is torch_npu's own allocator's: npualloc does not
  // mark blocks, so every block reads as safe and none sits in a failed pool.
  bool checkUceInMemPool(int) override {
    return false;
  }
  bool checkBlockIsSafe(const c10::DataPtr&) override {
    return true;
  }
  void markAllBlockUnsafe(int) override {}
  void updateBlockToSafe(const c10::DataPtr&) override {}
  void cleanEvent() override {}

  // ---- internals --------------------------------------------------------------------------

  void free_block(void* ptr, bool throw_errors);
  npualloc_allocator* handle(int device);

 private:
  size_t tail_;
  bool initialized_ = false;
  int device_count_ = 1;
  std::array<double, kMaxDevices> fractions_{};
  std::array<npualloc_allocator*, kMaxDevices> handles_{};
  std::array<Baseline, kMaxDevices> baselines_{};
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
  GraphPools pools_;

  static int current_device() {
    return static_cast<int>(c10_npu::current_device());
  }

  void check_device(int device) const {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "npualloc: device ", device, " is not in 0..", kMaxDevices);
  }

  static void check(npualloc_status st, const char* what) {
    TORCH_CHECK(st == NPUALLOC_OK, "npualloc: ", what, " failed (", api->status_name(st), "): ", last_error());
  }

  [[noreturn]] static void no_pools(const char* what) {
    TORCH_CHECK(false, "npualloc does not support ", what,
                ": use torch_npu's own allocator (do not call npualloc.torch_npu.enable()) for it.");
  }

  // A device torch_npu never allocated on has no allocator: all zeroes, and none is created
  // (creating one would touch that device).
  npualloc_stats stats_of(int device) {
    check_device(device);
    npualloc_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
    if (a != nullptr) {
      check(api->get_stats(a, &s), "get_stats");
    }
    return s;
  }

  int device_of(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    return it == live_.end() ? current_device() : it->second.device;
  }

  void* malloc_on(int device, size_t size, aclrtStream stream);
  void erase(void* p, c10_npu::NPUStream stream);
  void empty_all(bool check_error);
  void add_snapshot(int device, const Json& snap, NCA::SnapshotInfo& info);
};

Bridge* bridge = nullptr;

npualloc_allocator* Bridge::handle(int device) {
  check_device(device);
  npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  if (a != nullptr) {
    return a;
  }
  check(api->pluggable_allocator(device, &a), "creating the device's allocator");
  // torch_npu's task queue is emptied before npualloc synchronizes to give memory back.
  check(api->set_before_release(a, &drain_task_queue, nullptr), "set_before_release");
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
  if (pool != 0) {
    check(api->pool_begin(a, pool, nullptr), "pool_begin");
    st = api->malloc(a, size + tail_, stream, &p);
    if (st != NPUALLOC_OK) error = last_error();
    check(api->pool_end(a, pool, nullptr), "pool_end");
  } else {
    st = api->malloc(a, size + tail_, stream, &p);
    if (st != NPUALLOC_OK) error = last_error();
  }
  if (st == NPUALLOC_ERR_OUT_OF_MEMORY) {
    std::string report = error;
    std::vector<NCA::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> g(mu_);
      observers = oom_observers_;
    }
    if (!observers.empty()) {
      npualloc_stats s = stats_of(device);
      size_t free_bytes = 0, total_bytes = 0;
      if (aclrtGetMemInfo(ACL_HBM_MEM, &free_bytes, &total_bytes) != ACL_SUCCESS) free_bytes = total_bytes = 0;
      for (auto& o : observers) {
        o(device, static_cast<int64_t>(s.allocated_bytes), static_cast<int64_t>(total_bytes),
          static_cast<int64_t>(free_bytes));
      }
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory (npualloc). ", report);
  }
  TORCH_CHECK(st == NPUALLOC_OK, "npualloc: malloc failed (", api->status_name(st), "): ", error);
  std::lock_guard<std::mutex> g(mu_);
  Live& live = live_[p];
  live = Live{device, size + tail_, context, {}};
  Counts& c = counts_[device];
  c.live_peak = std::max(c.live_peak, ++c.live);
  c.requested_in += static_cast<int64_t>(size + tail_);
  if (context && (when == NCA::RecordContext::ALLOC || when == NCA::RecordContext::ALL)) {
    keep_context(trace_contexts_, p, context);
  }
  return p;
}

// With mu_ held.
void Bridge::keep_context(Contexts& where, void* p, std::shared_ptr<c10::GatheredContext> context) {
  where[reinterpret_cast<int64_t>(p)].push_back(std::move(context));
  if (++trace_context_count_ > 2 * history_entries_.load() + 1024) {
    // Bounded: drop the oldest context of every address.
    for (Contexts* m : {&trace_contexts_, &free_contexts_}) {
      for (auto it = m->begin(); it != m->end();) {
        it->second.pop_front();
        --trace_context_count_;
        it = it->second.empty() ? m->erase(it) : std::next(it);
      }
    }
  }
}

void Bridge::free_block(void* ptr, bool throw_errors) {
  if (ptr == nullptr) {
    return;
  }
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
    Counts& c = counts_[live.device];
    --c.live;
    c.requested_out += static_cast<int64_t>(live.size);
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

void Bridge::erase(void* p, c10_npu::NPUStream stream) {
  int device = device_of(p);
  check(api->erase_stream(handle(device), p, stream.stream(false)), "erase_stream");
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(p);
  if (it != live_.end()) {
    auto& v = it->second.streams;
    v.erase(std::remove(v.begin(), v.end(), stream), v.end());
  }
}

void Bridge::empty_all(bool check_error) {
  std::string first;
  for (int d = 0; d < kMaxDevices; ++d) {
    npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
    if (a == nullptr) continue;
    npualloc_status st = api->empty_cache(a);
    if (st != NPUALLOC_OK && first.empty()) first = last_error();
  }
  if (!first.empty()) {
    if (check_error) {
      TORCH_CHECK(false, "npualloc: empty_cache failed: ", first);
    }
    std::fprintf(stderr, "npualloc: empty_cache: %s\n", first.c_str());
  }
}

NCA::TraceEntry::Action action_of(const std::string& name, bool* known) {
  using A = NCA::TraceEntry::Action;
  static const std::unordered_map<std::string, A> names = {
      {"alloc", A::ALLOC},
      {"free_requested", A::FREE_REQUESTED},
      {"free_completed", A::FREE_COMPLETED},
      {"segment_alloc", A::SEGMENT_ALLOC},
      {"segment_free", A::SEGMENT_FREE},
      {"segment_map", A::SEGMENT_MAP},
      {"segment_unmap", A::SEGMENT_UNMAP},
      {"snapshot", A::SNAPSHOT},
      {"oom", A::OOM},
  };
  auto it = names.find(name);
  *known = it != names.end();
  return *known ? it->second : A::ALLOC;
}

void Bridge::add_snapshot(int device, const Json& snap, NCA::SnapshotInfo& info) {
  std::lock_guard<std::mutex> g(mu_);
  for (const Json& seg : snap["segments"].items) {
    NCA::SegmentInfo s;
    s.device = device;
    s.address = seg["address"].as_int();
    s.stream = reinterpret_cast<aclrtStream>(seg["stream"].as_int());
    s.total_size = seg["total_size"].as_int();
    s.requested_size = seg["requested_size"].as_int();
    s.allocated_size = seg["allocated_size"].as_int();
    s.active_size = seg["active_size"].as_int();
    s.is_large = seg["segment_type"].text == "large";
    s.is_expandable = seg["is_expandable"].truthy();
    const auto& pool_id = seg["segment_pool_id"].items;
    if (pool_id.size() == 2) {
      s.owner_private_pool_id = pools_.torch_id(device, static_cast<uint64_t>(pool_id[1].as_int()));
    }
    // Blocks tile their segment in order, as torch_npu's snapshot converter assumes.
    int64_t address = s.address;
    for (const Json& blk : seg["blocks"].items) {
      NCA::BlockInfo b;
      b.size = blk["size"].as_int();
      b.requested_size = blk["requested_size"].as_int();
      const std::string& state = blk["state"].text;
      b.allocated = state == "active_allocated";
      b.active = b.allocated || state == "active_pending_free";
      if (b.allocated) {
        auto it = live_.find(reinterpret_cast<void*>(address));
        if (it != live_.end()) b.context_when_allocated = it->second.context;
      }
      address += b.size;
      s.blocks.push_back(std::move(b));
    }
    info.segments.push_back(std::move(s));
  }
  const Json& traces = snap["device_traces"];
  if (device >= static_cast<int>(traces.items.size())) {
    return;
  }
  std::vector<NCA::TraceEntry> entries;
  std::unordered_map<int64_t, size_t> taken, taken_free;  // contexts used per address, from the newest
  const auto& items = traces.items[device].items;
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    const Json& e = *it;
    bool known = false;
    auto action = action_of(e["action"].text, &known);
    if (!known) continue;
    int64_t addr = action == NCA::TraceEntry::OOM ? e["device_free"].as_int() : e["addr"].as_int();
    std::shared_ptr<c10::GatheredContext> context;
    if (action == NCA::TraceEntry::ALLOC || action == NCA::TraceEntry::FREE_REQUESTED) {
      bool alloc = action == NCA::TraceEntry::ALLOC;
      Contexts& from = alloc ? trace_contexts_ : free_contexts_;
      auto found = from.find(addr);
      size_t& n = (alloc ? taken : taken_free)[addr];
      if (found != from.end() && n < found->second.size()) {
        context = found->second[found->second.size() - 1 - n];
        ++n;
      }
    }
    entries.emplace_back(action, device, addr, static_cast<size_t>(e["size"].as_int()),
                         reinterpret_cast<aclrtStream>(e["stream"].as_int()), c10_npu::MempoolId_t{0, 0},
                         std::move(context));
  }
  std::reverse(entries.begin(), entries.end());
  info.device_traces[device] = std::move(entries);
}

void drain_task_queue(void* /*user*/, int32_t device) {
  // Called by npualloc (Rust) before it synchronizes to give memory back: nothing may escape.
  // npuSynchronizeDevice empties every stream's task queue (when TASK_QUEUE_ENABLE is on) and
  // synchronizes the device, as torch_npu's own allocator does before releasing cached blocks
  // (NPUCachingAllocator.cpp: "Make sure taskqueue is empty, then execute release_cached_blocks").
  try {
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
      return 1;
    }
    NCA::NPUAllocator* current = NCA::allocator.load();
    if (current != nullptr && current->initialized()) {
      write_error(err, err_len, "torch_npu has already initialized its allocator (" + current->name() +
                                    "); it can be replaced only before the first NPU use");
      return 1;
    }
    api = table;
    // Never destroyed: torch_npu's allocators live until the process exits, and tensors freed at
    // exit still call the deleter.
    bridge = new Bridge(tail);
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
