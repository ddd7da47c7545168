// Graph-pool checkpoints: torch_npu's getCheckpointState, setCheckpointPoolState and
// checkPoolLiveAllocations, which npugraph trees call (torch_npu/npu/_graph_tree.py: a pool's
// state is taken after each recording and set back before a new branch is recorded after
// replays; the live allocations are checked before a replay). npualloc keeps the pool's live
// blocks (npualloc_pool_live_blocks) and sets them back (npualloc_pool_restore): the blocks live
// now are freed, the checkpoint's are live again at their addresses. What torch_npu's own
// allocator returns (NPUCachingAllocator.cpp, NpuCachingAllocator::setCheckpointPoolState):
// every block live before in `ptrs_freed` and a DataPtr for every block of the checkpoint, which
// the caller gives to the storages it names (Module.cpp, _npu_setCheckpointPoolState). A block
// live at the same address and size stays allocated in npualloc and is in both lists, as it is
// with torch_npu's allocator, which frees and allocates it again.

#include "bridge.h"

namespace npualloc_bridge {

namespace {

// The state getCheckpointState hands torch_npu: the pool and its live blocks then.
struct PoolCheckpoint : NCA::AllocatorState {
  int device = 0;
  MempoolKey id;
  std::vector<npualloc_live_block> blocks;
};

// npualloc_pool_live_blocks' function: appends each block. Called from Rust: nothing may escape
// (a failed push is a list that comes up short, which the count check after the call sees).
struct Listing {
  std::vector<npualloc_live_block> blocks;
  size_t seen = 0;
};
void collect(void* user, const npualloc_live_block* block) noexcept {
  auto* l = static_cast<Listing*>(user);
  ++l->seen;
  try {
    l->blocks.push_back(*block);
  } catch (...) {
  }
}

bool has_checkpoints() {
  return api->struct_size >= offsetof(npualloc_api, pool_restore) + sizeof(void*);
}

}  // namespace

std::vector<npualloc_live_block> Bridge::pool_live_blocks(int device, uint64_t pool) {
  Listing l;
  if (pool != 0) check(api->pool_live_blocks(handle(device), pool, &collect, &l), "pool_live_blocks");
  TORCH_CHECK(l.blocks.size() == l.seen, "npualloc: no memory to list a pool's ", l.seen, " live blocks");
  return std::move(l.blocks);
}

uint64_t Bridge::checkpointed_pool(const char* what, int device, MempoolKey id) {
  check_device(device);
  TORCH_CHECK(has_checkpoints(), "npualloc: ", what, ": this npualloc library (", api->struct_size,
              "-byte function table) cannot list or set back a pool's blocks; install a newer npualloc");
  auto [known, pool] = pools_.lookup(device, id);
  TORCH_CHECK(known, "npualloc: ", what, ": could not find pool of id (", id.first, ", ", id.second, ") on device ",
              device);
  return pool;
}

std::shared_ptr<NCA::AllocatorState> Bridge::getCheckpointState(c10::DeviceIndex device, c10_npu::MempoolId_t id) {
  uint64_t pool = checkpointed_pool("getCheckpointState", device, id);
  auto state = std::make_shared<PoolCheckpoint>();
  state->device = device;
  state->id = id;
  state->blocks = pool_live_blocks(device, pool);
  return state;
}

NCA::CheckpointDelta Bridge::setCheckpointPoolState(c10::DeviceIndex device,
                                                    std::shared_ptr<NCA::AllocatorState> as) {
  auto state = std::dynamic_pointer_cast<PoolCheckpoint>(as);
  TORCH_CHECK(state != nullptr, "npualloc: setCheckpointPoolState: the state is not one npualloc's "
                                "getCheckpointState made");
  TORCH_CHECK(state->device == device, "npualloc: setCheckpointPoolState: the state is of device ", state->device,
              ", not ", static_cast<int>(device));
  uint64_t pool = checkpointed_pool("setCheckpointPoolState", device, state->id);
  TORCH_CHECK(pool != 0 || state->blocks.empty(), "npualloc: setCheckpointPoolState: pool (", state->id.first,
              ", ", state->id.second, ") holds no memory now, and the checkpoint has blocks");
  NCA::CheckpointDelta delta;
  if (pool == 0) return delta;
  npualloc_allocator* a = handle(device);
  // The pool's blocks are read and set back under the bridge's lock, so that its record of live
  // blocks changes with npualloc's. As npugraph trees use it, nothing else allocates in or frees
  // into the pool meanwhile; the bridge does not enforce that (an allocation or free of the pool
  // on another thread calls npualloc outside this lock), where torch_npu's own allocator holds
  // its one lock throughout.
  std::lock_guard<std::mutex> g(mu_);
  std::vector<npualloc_live_block> before = pool_live_blocks(device, pool);
  check(api->pool_restore(a, pool, state->blocks.data(), state->blocks.size()), "setCheckpointPoolState");
  std::unordered_map<void*, size_t> now;
  for (const auto& b : state->blocks) now[b.ptr] = b.size;
  for (const auto& b : before) {
    delta.ptrs_freed.push_back(b.ptr);
    auto kept = now.find(b.ptr);
    if (kept != now.end() && kept->second == b.size) continue;  // still allocated: its record stays
    auto it = live_.find(b.ptr);
    if (it != live_.end()) {
      counts_[device].change(it->second.size, it->second.size - tail_, -1);
      live_.erase(it);
    }
    // npualloc's history has a free of it now: no stack frames go with it.
    if (when_ == NCA::RecordContext::ALL) keep_context(free_contexts_, b.ptr, nullptr);
  }
  for (const auto& b : state->blocks) {
    if (live_.find(b.ptr) == live_.end()) {
      live_[b.ptr] = Live{device, b.requested, nullptr, {}, b.stream, nullptr};
      counts_[device].change(b.requested, b.requested >= tail_ ? b.requested - tail_ : 0, +1);
      if (when_ == NCA::RecordContext::ALLOC || when_ == NCA::RecordContext::ALL) {
        keep_context(trace_contexts_, b.ptr, nullptr);
      }
    }
    delta.dataptrs_allocd.emplace_back(b.ptr, b.ptr, &deleter, c10::Device(c10::DeviceType::PrivateUse1, device));
  }
  return delta;
}

bool Bridge::checkPoolLiveAllocations(c10::DeviceIndex device, c10_npu::MempoolId_t id,
                                      const std::unordered_set<void*>& expected) {
  uint64_t pool = checkpointed_pool("checkPoolLiveAllocations", device, id);
  std::vector<npualloc_live_block> live = pool_live_blocks(device, pool);
  for (const auto& b : live) {
    if (expected.count(b.ptr) == 0) return false;
  }
  return live.size() == expected.size();
}

}  // namespace npualloc_bridge
