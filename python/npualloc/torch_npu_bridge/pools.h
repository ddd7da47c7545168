// torch_npu's private memory pools (graph capture's beginAllocateToPool / endAllocateToPool /
// releasePool, and MemPool's createOrIncrefPool / setUseOnOOM / use_mem_pool) over npualloc's
// pools (npualloc_pool_create / begin / end / destroy).
//
// torch_npu names a pool by a MempoolId_t and routes allocations to it with a filter: a
// function of the allocation's stream (NPUGraph: "is this stream capturing my graph?";
// use_mem_pool: "is the caller the thread that entered the context?"). npualloc's routes are by
// stream or by thread, so the bridge keeps torch_npu's routes here and asks the filters itself,
// newest first, for each allocation while any route is active; a match is served inside a
// thread route of the matched pool (npualloc_pool_begin(a, pool, NULL) ... pool_end), which
// covers exactly that one allocation. Frees need nothing: npualloc returns a block to its pool.
// A pool's npualloc pool is created at its first route (with MemPool's use_on_oom and no_split,
// set right after creation, in its config; a later use_on_oom change goes to
// npualloc_pool_set_use_on_oom) and destroyed when torch_npu's use count falls to 0 (live
// blocks stay valid; their memory goes back when freed), as PyTorch frees a private pool then.

#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "npualloc.h"

namespace npualloc_bridge {

using MempoolKey = std::pair<unsigned long long, unsigned long long>;

class GraphPools {
 public:
  using Filter = std::function<bool(aclrtStream)>;

  // True while some route is active (read without the lock by every allocation).
  bool any() const {
    return active_.load(std::memory_order_relaxed) > 0;
  }

  // MemPool's creation, or another owner of an existing pool: one more use.
  void incref(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    pools_[{device, id}].uses += 1;
  }

  // MemPool's use_on_oom (set right after its creation, cleared by its destructor), kept for the
  // npualloc pool's creation; returns the npualloc pool made already (0: none yet, or a pool
  // torch_npu does not know), whose setting the caller changes too.
  uint64_t set_use_on_oom(int device, MempoolKey id, bool on) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    if (it == pools_.end()) return 0;
    it->second.use_on_oom = on;
    return it->second.npualloc_id;
  }

  // MemPool(no_split=True) (setNoSplit, right after its creation): kept for the npualloc pool's
  // creation. False when torch_npu does not know the pool or its npualloc pool exists already
  // (its blocks' shape is fixed when it is made).
  bool set_no_split(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    if (it == pools_.end() || it->second.npualloc_id != 0) return false;
    it->second.no_split = true;
    return true;
  }

  // beginAllocateToPool: one more use, and a route. `create` makes the npualloc pool from its
  // config string when it has none yet (it may throw; nothing changes then).
  void begin(int device, MempoolKey id, Filter filter, const std::function<uint64_t(const char*)>& create) {
    std::lock_guard<std::mutex> g(mu_);
    Pool& p = pools_[{device, id}];
    if (p.npualloc_id == 0) {
      try {
        std::string config = p.use_on_oom ? "use_on_oom:true" : "";
        if (p.no_split) config += config.empty() ? "no_split:true" : ",no_split:true";
        p.npualloc_id = create(config.empty() ? nullptr : config.c_str());
      } catch (...) {
        if (p.uses == 0) pools_.erase({device, id});
        throw;
      }
    }
    p.uses += 1;
    {
      std::lock_guard<std::mutex> ids(ids_mu_);
      ids_[{device, p.npualloc_id}] = id;
    }
    routes_.push_back(Route{device, id, std::move(filter)});
    active_.fetch_add(1, std::memory_order_relaxed);
  }

  // endAllocateToPool: the pool's route goes (the newest one, if it has several).
  void end(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
      if (it->device == device && it->id == id) {
        routes_.erase(std::next(it).base());
        active_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
    }
  }

  // releasePool: one use less; returns the npualloc pool to destroy when none is left (0: none).
  // A released pool is remembered for the emptyCache(mempool_id) torch_npu's MemPool calls next
  // (the most recent ones only: a graph's reset calls none).
  uint64_t release(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    if (it == pools_.end() || --it->second.uses > 0) return 0;
    uint64_t pool = it->second.npualloc_id;
    pools_.erase(it);
    {
      std::lock_guard<std::mutex> ids(ids_mu_);
      ids_.erase({device, pool});
    }
    if (pool != 0) {
      released_.push_back({{device, id}, pool});
      if (released_.size() > kReleasedKept) released_.erase(released_.begin());
    }
    return pool;
  }

  // emptyCache(mempool_id): the npualloc pool of a pool torch_npu released (0: none, which
  // includes a pool still in use), forgotten once asked for.
  uint64_t take_released(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = released_.begin(); it != released_.end(); ++it) {
      if (it->first == std::make_pair(device, id)) {
        uint64_t pool = it->second;
        released_.erase(it);
        return pool;
      }
    }
    return 0;
  }

  int use_count(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    return it == pools_.end() ? 0 : it->second.uses;
  }

  // The npualloc pool an allocation on `stream` goes to (0: the default pool): the newest route
  // of `device` whose filter accepts the stream.
  uint64_t route(int device, aclrtStream stream) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
      if (it->device == device && it->filter(stream)) {
        return pools_[{device, it->id}].npualloc_id;
      }
    }
    return 0;
  }

  // Whether a route of `device` is active (beginAllocateToPool without its end yet).
  bool routing(int device) {
    if (!any()) return false;
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& r : routes_) {
      if (r.device == device) return true;
    }
    return false;
  }

  // The same from a segment event, which npualloc sends with a shard of its locked (and maybe
  // inside wake, which pool_create waits for while mu_ is held): only the leaf lock ids_mu_.
  MempoolKey torch_id_of_event(int device, uint64_t pool) {
    if (pool == 0) return {0, 0};
    std::lock_guard<std::mutex> g(ids_mu_);
    auto it = ids_.find({device, pool});
    return it == ids_.end() ? MempoolKey{0, 0} : it->second;
  }

  // Whether torch_npu made pool `id` of `device` (a MemPool's or a graph's, not released), and
  // its npualloc pool (0 until the pool's first allocation).
  std::pair<bool, uint64_t> lookup(int device, MempoolKey id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    return it == pools_.end() ? std::make_pair(false, uint64_t{0}) : std::make_pair(true, it->second.npualloc_id);
  }

  // torch_npu's id of npualloc pool `pool` of `device` ({0, 0} for the default pool or one
  // torch_npu no longer names).
  MempoolKey torch_id(int device, uint64_t pool) {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& kv : pools_) {
      if (kv.first.first == device && kv.second.npualloc_id == pool && pool != 0) return kv.first.second;
    }
    return {0, 0};
  }

 private:
  struct Pool {
    uint64_t npualloc_id = 0;
    int uses = 0;
    bool use_on_oom = false;
    bool no_split = false;
  };
  struct Route {
    int device;
    MempoolKey id;
    Filter filter;
  };
  std::mutex mu_;
  std::map<std::pair<int, MempoolKey>, Pool> pools_;
  // torch_npu's id of each npualloc pool, under a lock of its own that is never held across a
  // call into npualloc (written under mu_, read alone).
  std::mutex ids_mu_;
  std::map<std::pair<int, uint64_t>, MempoolKey> ids_;
  std::vector<Route> routes_;  // oldest first
  static constexpr size_t kReleasedKept = 64;
  std::vector<std::pair<std::pair<int, MempoolKey>, uint64_t>> released_;  // oldest first
  std::atomic<int> active_{0};
};

}  // namespace npualloc_bridge
