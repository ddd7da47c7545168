// History and snapshot: recordHistory turns npualloc's history on for every device, and snapshot
// turns npualloc's snapshot (PyTorch's JSON layout) into torch_npu's SnapshotInfo, with the stack
// frames torch_npu's recorder gathered (npualloc keeps none) matched to its blocks and entries.

#include "release.h"

namespace npualloc_bridge {

void Bridge::recordHistory(bool enabled, NCA::CreateContextFn recorder, size_t max_entries,
                           NCA::RecordContext when) {
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

NCA::SnapshotInfo Bridge::snapshot_of(c10_npu::MempoolId_t mempool_id) {
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

// With mu_ held.
void Bridge::keep_context(Contexts& where, void* p, std::shared_ptr<c10::GatheredContext> context) {
  where[reinterpret_cast<int64_t>(p)].push_back(std::move(context));
  // torch_npu's defaults ask for SIZE_MAX entries (sys.maxsize from Python, UINT64_MAX from
  // OOM_SNAPSHOT_ENABLE): the bound saturates rather than wraps to a small number.
  size_t entries = history_entries_.load();
  size_t bound = entries > (SIZE_MAX - 1024) / 2 ? SIZE_MAX : 2 * entries + 1024;
  if (++trace_context_count_ > bound) {
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
  std::unordered_map<uint64_t, c10_npu::MempoolId_t> torch_ids;  // torch_npu's id of each npualloc pool met
  auto torch_pool = [&](const Json& e) -> c10_npu::MempoolId_t {
    const auto& id = e["pool_id"].items;
    uint64_t pool = id.size() == 2 ? static_cast<uint64_t>(id[1].as_int()) : 0;
    if (pool == 0) return {0, 0};
    auto found = torch_ids.find(pool);
    if (found == torch_ids.end()) found = torch_ids.emplace(pool, pools_.torch_id(device, pool)).first;
    return found->second;
  };
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
    entries.push_back(release::trace_entry(action, device, addr, static_cast<size_t>(e["size"].as_int()),
                                           reinterpret_cast<aclrtStream>(e["stream"].as_int()),
                                           torch_pool(e), std::move(context)));
  }
  std::reverse(entries.begin(), entries.end());
  info.device_traces[device] = std::move(entries);
}

bool Bridge::observes_segments() {
  return api->struct_size >= offsetof(npualloc_api, for_each_segment) + sizeof(void*);
}

void Bridge::attach_tracker(TraceTracker tracker) {
  TORCH_CHECK(observes_segments(),
              "npualloc: attachAllocatorTraceTracker needs a libnpualloc with npualloc_set_segment_observer; "
              "this one is older than the bridge");
  std::lock_guard<std::mutex> g(trackers_mu_);
  trackers_.push_back(std::move(tracker));
  tracked_.store(true, std::memory_order_release);
}

void Bridge::on_segment(void* user, int32_t device, npualloc_segment_event event, void* addr, size_t size,
                        void* drv_handle, uint64_t pool) noexcept {
  auto* self = static_cast<Bridge*>(user);
  self->hccl_event(device, event, addr, size, drv_handle);
  if (!self->tracked_.load(std::memory_order_acquire)) return;
  using A = NCA::TraceEntry::Action;
  A action;
  switch (event) {
    case NPUALLOC_SEGMENT_MAP:
      action = drv_handle != nullptr ? A::SEGMENT_MAP : A::SEGMENT_ALLOC;
      break;
    case NPUALLOC_SEGMENT_UNMAP:
      action = drv_handle != nullptr ? A::SEGMENT_UNMAP : A::SEGMENT_FREE;
      break;
    default:
      return;  // torch_npu's own allocator reports no address reservation
  }
  // Called from npualloc's Rust code: nothing may unwind out of here.
  try {
    std::vector<TraceTracker> trackers;
    {
      std::lock_guard<std::mutex> g(self->trackers_mu_);
      trackers = self->trackers_;
    }
    auto entry = release::trace_entry(action, device, static_cast<int64_t>(reinterpret_cast<uintptr_t>(addr)),
                                      size, nullptr, self->pools_.torch_id_of_event(device, pool), nullptr);
    for (const auto& t : trackers) t(entry);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npualloc: an allocator trace tracker threw (%s); the exception was dropped\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "npualloc: an allocator trace tracker threw; the exception was dropped\n");
  }
}

}  // namespace npualloc_bridge
