// torch_npu's DeviceStats (torch.npu.memory_stats and friends) from npualloc's statistics and
// the bridge's own counts of torch_npu's live blocks and requested bytes.

#include "bridge.h"

namespace npualloc_bridge {

c10::CachingDeviceAllocator::DeviceStats Bridge::getDeviceStats(c10::DeviceIndex device) {
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
  // Block counts: the peak is the bridge's count of torch_npu's live blocks.
  set(d.allocation, i(s.active_blocks), c.live_peak, i(s.num_allocs - b.allocs), i(s.num_frees - b.frees));
  // Segments: npualloc's, fixed ones and expandable address ranges alike (its snapshot lists each
  // as one segment), with its peak and its counts of segments made and given back, so
  // allocated - freed is what changed since the last reset. torch_npu itself counts only
  // aclrtMalloc'ed segments and leaves these at 0 with expandable segments
  // (docs/runtime-behaviour.md "How torch_npu talks to its allocator").
  set(d.segment, i(s.segments), i(s.segments_peak), i(s.num_segments_created - b.segments_created),
      i(s.num_segments_released - b.segments_released));
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

void Bridge::resetAccumulatedStats(c10::DeviceIndex device) {
  npualloc_stats s = stats_of(device);
  std::lock_guard<std::mutex> g(mu_);
  baselines_[device] = Baseline{s.num_allocs,        s.num_frees, s.num_segments_created, s.num_segments_released,
                                s.num_alloc_retries, s.num_ooms,  s.num_syncs};
  counts_[device].requested_in = counts_[device].requested_out = 0;
}

void Bridge::resetPeakStats(c10::DeviceIndex device) {
  check_device(device);
  npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  if (a != nullptr) {
    check(api->reset_peak_stats(a), "reset_peak_stats");
  }
  std::lock_guard<std::mutex> g(mu_);
  counts_[device].live_peak = counts_[device].live;
}

}  // namespace npualloc_bridge
