// What differs between the torch_npu releases the bridge serves (2.6 to 2.14), in one place.
//
// torch_npu's NPUAllocator interface (torch_npu/csrc/core/npu/NPUCachingAllocator.h) changed
// between releases, and not in release order: entry points come and go between the posts of one
// release (2.10.0.post7 has entry points 2.10.0 to .post6 lack; 2.9.0.post9 has more than 2.9.1).
// So nothing here reads a version number. The compiler sees the installed release's header, and
// each difference is found in it:
//   - the device argument of getDeviceStats/resetAccumulatedStats/resetPeakStats: int up to
//     2.12, c10::DeviceIndex from 2.13 (when NPUAllocator became a c10::DeviceAllocator);
//   - snapshot(): of every pool up to 2.12, snapshot(MempoolId_t) of one pool from 2.13;
//   - entry points only some releases declare: getMemoryFraction, attachAllocatorTraceTracker,
//     createOrIncrefPool, emptyCache(MempoolId_t), the HCCL erase guard's
//     eraseStreamWithBlockPtr/getBlockPtr/recordHcclWorkForBlock, and in 2.6.0 even
//     emptyCacheImpl, emptyVirtAddrCache and the IPC pair; from 2.13 on getMemoryInfo,
//     recordStream(c10::Stream), getPoolUseCount, setUseOnOOM, setNoSplit and
//     attachOomRejectionObserver (docs/runtime-behaviour.md lists which releases have which);
//   - hasCapturesUnderway (not in 2.6.x, 2.7.1, 2.7.1.post2, 2.8.0, 2.8.0.post2, 2.9.0), and
//     markCaptureBegin/End, which change what it means (marks_captures);
//   - TraceEntry's constructor takes the entry's pool in some releases;
//   - DeviceStats counts synchronizations and device allocations and frees from 2.13 on.
// An entry point a release does not declare is declared here without `override`: it is then an
// ordinary member nothing calls. The static_asserts at the end make sure that each one does
// override wherever the release declares that name, so a signature that drifts in a future
// release fails the build instead of silently leaving torch_npu's default in place.

#pragma once

#include <tuple>
#include <utility>
#include <type_traits>

#include "bridge.h"

namespace npualloc_bridge {
namespace release {

template <class M>
struct Args;
template <class R, class C, class... A>
struct Args<R (C::*)(A...)> {
  using type = std::tuple<A...>;
};

// The type of parameter I of a member function pointer type.
template <class M, size_t I = 0>
using Param = std::tuple_element_t<I, typename Args<M>::type>;

// The device argument of the statistics calls (int, or c10::DeviceIndex from 2.13).
using StatsDevice = Param<decltype(&NCA::NPUAllocator::resetPeakStats)>;

// An observer or tracker type a release may not have: the parameter type of the entry point that
// takes it, or a type no caller can name where the release has no such entry point.
struct Absent {};
template <class A>
struct TrackerOf {
  using type = Absent;
};
template <class A>
  requires requires { &A::attachAllocatorTraceTracker; }
struct TrackerOf<A> {
  using type = Param<decltype(&A::attachAllocatorTraceTracker)>;
};
template <class A>
struct RejectionObserverOf {
  using type = Absent;
};
template <class A>
  requires requires { &A::attachOomRejectionObserver; }
struct RejectionObserverOf<A> {
  using type = Param<decltype(&A::attachOomRejectionObserver)>;
};
template <class A>
struct ShareableOf {
  using type = Absent;
};
template <class A>
  requires requires { &A::shareIpcHandle; }
struct ShareableOf<A> {
  using type = decltype((std::declval<A&>().shareIpcHandle)(nullptr));
};
using Tracker = TrackerOf<NCA::NPUAllocator>::type;
using ShareableHandle = ShareableOf<NCA::NPUAllocator>::type;
using RejectionObserver = RejectionObserverOf<NCA::NPUAllocator>::type;

// A trace entry; releases before 2.9.0.post9/2.10 keep no pool in it.
template <class Entry = NCA::TraceEntry>
Entry trace_entry(typename Entry::Action action, int device, int64_t addr, size_t size, aclrtStream stream,
                  c10_npu::MempoolId_t pool, std::shared_ptr<c10::GatheredContext> context) {
  if constexpr (std::is_constructible_v<Entry, typename Entry::Action, int, int64_t, size_t, aclrtStream,
                                        c10_npu::MempoolId_t, std::shared_ptr<c10::GatheredContext>>) {
    return Entry(action, device, addr, size, stream, pool, std::move(context));
  } else {
    return Entry(action, device, addr, size, stream, std::move(context));
  }
}

// Whether NPUGraph tells the allocator about real captures (markCaptureBegin/End: 2.13 on); before,
// "a capture is underway" meant "a pool routing is active".
template <class A>
constexpr bool marks_captures = requires { &A::markCaptureBegin; };

// The counts of synchronizations and of device allocations and frees, which DeviceStats has
// from 2.13 on (torch's c10::CachingDeviceAllocator::DeviceStats).
template <class Stats>
void set_device_calls(Stats& d, int64_t syncs, int64_t allocs, int64_t frees) {
  if constexpr (requires { d.num_sync_all_streams; }) d.num_sync_all_streams = syncs;
  if constexpr (requires { d.num_device_alloc; }) d.num_device_alloc = allocs;
  if constexpr (requires { d.num_device_free; }) d.num_device_free = frees;
}

// The count of allocations refused by throw_on_npumalloc_oom's rule, which DeviceStats has
// where the release has the rule.
template <class Stats>
void set_oom_rejections(Stats& d, int64_t rejections) {
  if constexpr (requires { d.num_oom_rejections; }) d.num_oom_rejections = rejections;
}

}  // namespace release

class ReleaseBridge final : public Bridge {
 public:
  ReleaseBridge(size_t tail, NCA::NPUAllocator* own) : Bridge(tail, own) {
    marks_captures_ = release::marks_captures<NCA::NPUAllocator>;
  }
  using Bridge::emptyCache;
  using Bridge::recordStream;

  // In every release, with its device argument type.
  NCA::DeviceStats getDeviceStats(release::StatsDevice device) override {
    return device_stats(device);
  }
  void resetAccumulatedStats(release::StatsDevice device) override {
    reset_accumulated(device);
  }
  void resetPeakStats(release::StatsDevice device) override {
    reset_peaks(device);
  }

  // One of the two overrides, the other is unused.
  NCA::SnapshotInfo snapshot(c10_npu::MempoolId_t mempool_id) {
    return snapshot_of(mempool_id);
  }
  NCA::SnapshotInfo snapshot() {
    return snapshot_of({0, 0});
  }

  // Declared by some releases only (see the top of this file).
  double getMemoryFraction(int device) {
    return memory_fraction(device);
  }
  void emptyCache(c10_npu::MempoolId_t mempool_id) {
    empty_pool_cache(mempool_id);
  }
  void createOrIncrefPool(c10::DeviceIndex device, c10_npu::MempoolId_t id, std::shared_ptr<NPUAllocator> allocator) {
    incref_pool(device, id, allocator != nullptr);
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) {
    return memory_info(device);
  }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
    record_c10_stream(ptr, stream);
  }
  int getPoolUseCount(c10::DeviceIndex device, c10_npu::MempoolId_t id) {
    return pool_use_count(device, id);
  }
  // Also called by ~MemPool (MemPool.cpp) with false, before releasePool: clearing never throws.
  void setUseOnOOM(c10::DeviceIndex device, c10_npu::MempoolId_t id, bool use_on_oom) {
    set_use_on_oom(device, id, use_on_oom);
  }
  void setNoSplit(c10::DeviceIndex device, c10_npu::MempoolId_t id) {
    set_no_split(device, id);
  }
  void attachAllocatorTraceTracker(release::Tracker tracker) {
    attach_release_tracker(std::move(tracker));
  }
  // A template, so that a release without trackers (Absent) never instantiates the conversion.
  template <class T>
  void attach_release_tracker(T tracker) {
    if constexpr (!std::is_same_v<T, release::Absent>) attach_tracker(TraceTracker(std::move(tracker)));
  }
  std::shared_ptr<void> getIpcDevPtr(std::string handle) {
    return ipc_dev_ptr(handle);
  }
  release::ShareableHandle shareIpcHandle(void* ptr) {
    return share_ipc_as<release::ShareableHandle>(ptr);
  }
  // A template, so that a release without IPC (Absent) never builds the handle type.
  template <class T>
  T share_ipc_as(void* ptr) {
    if constexpr (std::is_same_v<T, release::Absent>) {
      TORCH_CHECK(false, "npualloc: this torch_npu release has no shareIpcHandle");
    } else {
      auto [offset, bytes] = share_ipc(ptr);
      return T{offset, std::move(bytes)};
    }
  }
  bool hasCapturesUnderway(c10::DeviceIndex device) {
    return captures_underway(device);
  }
  void markCaptureBegin(c10::DeviceIndex device) {
    mark_capture(device, +1, [device](auto& own) {
      if constexpr (requires { own.markCaptureBegin(device); }) own.markCaptureBegin(device);
    });
  }
  void markCaptureEnd(c10::DeviceIndex device) {
    mark_capture(device, -1, [device](auto& own) {
      if constexpr (requires { own.markCaptureEnd(device); }) own.markCaptureEnd(device);
    });
  }
  void attachOomRejectionObserver(release::RejectionObserver observer) {
    attach_release_rejection_observer(std::move(observer));
  }
  // A template, as attach_release_tracker.
  template <class T>
  void attach_release_rejection_observer(T observer) {
    if constexpr (!std::is_same_v<T, release::Absent>) add_rejection_observer(RejectionObserver(std::move(observer)));
  }
};

namespace release {

// ReleaseBridge's `name` has the signature `Sig`, and where the release declares `name` (none of
// these names is overloaded there), it declares it with `Sig`, so ReleaseBridge's member
// overrides it. (Pure virtuals need no check: a missed one leaves
// ReleaseBridge abstract, and `new ReleaseBridge` does not compile.)
template <class Sig, class A>
using Member = Sig A::*;
#define NPUALLOC_OVERRIDES_WHERE_DECLARED(name, ...)                                                  \
  template <class A>                                                                                   \
  constexpr bool overrides_##name = !requires { &A::name; } ||                                         \
                                    requires { static_cast<Member<__VA_ARGS__, A>>(&A::name); };       \
  static_assert(requires { static_cast<Member<__VA_ARGS__, ReleaseBridge>>(&ReleaseBridge::name); },   \
                "ReleaseBridge::" #name " does not have the signature its check names");             \
  static_assert(overrides_##name<NCA::NPUAllocator>,                                                   \
                "torch_npu's NPUAllocator::" #name " has a signature release.h does not know: add it there")

NPUALLOC_OVERRIDES_WHERE_DECLARED(getMemoryFraction, double(int));
NPUALLOC_OVERRIDES_WHERE_DECLARED(createOrIncrefPool,
                                  void(c10::DeviceIndex, c10_npu::MempoolId_t, std::shared_ptr<NCA::NPUAllocator>));
NPUALLOC_OVERRIDES_WHERE_DECLARED(getMemoryInfo, std::pair<size_t, size_t>(c10::DeviceIndex));
NPUALLOC_OVERRIDES_WHERE_DECLARED(getPoolUseCount, int(c10::DeviceIndex, c10_npu::MempoolId_t));
NPUALLOC_OVERRIDES_WHERE_DECLARED(setUseOnOOM, void(c10::DeviceIndex, c10_npu::MempoolId_t, bool));
NPUALLOC_OVERRIDES_WHERE_DECLARED(setNoSplit, void(c10::DeviceIndex, c10_npu::MempoolId_t));
NPUALLOC_OVERRIDES_WHERE_DECLARED(getIpcDevPtr, std::shared_ptr<void>(std::string));
NPUALLOC_OVERRIDES_WHERE_DECLARED(emptyCacheImpl, void(bool, bool));
NPUALLOC_OVERRIDES_WHERE_DECLARED(emptyVirtAddrCache, void(bool));
NPUALLOC_OVERRIDES_WHERE_DECLARED(eraseStreamWithBlockPtr, void(void*, c10_npu::NPUStream, void*));
NPUALLOC_OVERRIDES_WHERE_DECLARED(getBlockPtr, void*(const c10::DataPtr&));
NPUALLOC_OVERRIDES_WHERE_DECLARED(recordHcclWorkForBlock, void(void*, void*));
NPUALLOC_OVERRIDES_WHERE_DECLARED(hasCapturesUnderway, bool(c10::DeviceIndex));
NPUALLOC_OVERRIDES_WHERE_DECLARED(markCaptureBegin, void(c10::DeviceIndex));
NPUALLOC_OVERRIDES_WHERE_DECLARED(markCaptureEnd, void(c10::DeviceIndex));
NPUALLOC_OVERRIDES_WHERE_DECLARED(attachOomRejectionObserver, void(RejectionObserver));
#undef NPUALLOC_OVERRIDES_WHERE_DECLARED

}  // namespace release
}  // namespace npualloc_bridge
