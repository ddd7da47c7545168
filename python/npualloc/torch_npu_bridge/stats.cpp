// torch_npu's DeviceStats (torch.npu.memory_stats and friends) from npualloc's statistics and
// the bridge's own counts of torch_npu's live blocks and requested bytes. Each key means what
// torch_npu's own allocator means by it (NPUCachingAllocator.cpp: update_stat makes a Stat's
// "allocated" the sum of its increases and "freed" the sum of its decreases since
// resetAccumulatedStats; alloc_found_block, free and free_block say what changes when). Keys
// torch_npu keeps per pool kind (small_pool, large_pool) carry only the aggregate here.

#include "bridge.h"

namespace npualloc_bridge {

namespace {

int64_t i(uint64_t v) {
  return static_cast<int64_t>(v);
}

// A figure whose increases npualloc sums (`total`, since the allocator was made): since the
// last reset its increases are total - total then, its decreases those less its rise.
void cumulative(Stat& st, uint64_t now, uint64_t peak, uint64_t total, uint64_t now_then, uint64_t total_then) {
  st.current = i(now);
  st.peak = std::max(i(peak), st.current);
  st.allocated = i(total - total_then);
  st.freed = st.allocated - (i(now) - i(now_then));
}

}  // namespace

c10::CachingDeviceAllocator::DeviceStats Bridge::getDeviceStats(c10::DeviceIndex device) {
  npualloc_stats s = stats_of(device);
  npualloc_stats b;
  Counts c;
  {
    std::lock_guard<std::mutex> g(mu_);
    b = baselines_[device];
    c = counts_[device];
  }
  c10::CachingDeviceAllocator::DeviceStats d;
  auto all = [](StatArray& a) -> Stat& { return a[kAggregate]; };
  // Blocks: "allocation" falls at the free, "active" only when the block is back in the cache
  // (after the events of the streams record_stream named). The peaks are the bridge's count of
  // torch_npu's live blocks.
  Stat& allocation = all(d.allocation);
  allocation.current = i(s.active_blocks);
  allocation.peak = std::max(c.live_peak, allocation.current);
  allocation.allocated = i(s.num_allocs - b.num_allocs);
  allocation.freed = i(s.num_frees - b.num_frees);
  cumulative(all(d.active), s.active_blocks + s.pending_free_blocks, c.live_peak, s.num_allocs,
             b.active_blocks + b.pending_free_blocks, b.num_allocs);
  // Segments: npualloc's, fixed ones and expandable address ranges alike (its snapshot lists each
  // as one segment). torch_npu itself counts only aclrtMalloc'ed segments and leaves these at 0
  // with expandable segments (docs/runtime-behaviour.md "How torch_npu talks to its allocator").
  cumulative(all(d.segment), s.segments, s.segments_peak, s.num_segments_created, b.segments,
             b.num_segments_created);
  // Bytes of blocks as rounded (torch_npu's block size), of blocks not yet back in the cache,
  // and of device memory held.
  cumulative(all(d.allocated_bytes), s.allocated_bytes, s.allocated_bytes_peak, s.allocated_bytes_total,
             b.allocated_bytes, b.allocated_bytes_total);
  cumulative(all(d.active_bytes), s.allocated_bytes + s.pending_free_bytes, s.allocated_bytes_peak,
             s.allocated_bytes_total, b.allocated_bytes + b.pending_free_bytes, b.allocated_bytes_total);
  cumulative(all(d.reserved_bytes), s.reserved_bytes, s.reserved_bytes_peak, s.reserved_bytes_total,
             b.reserved_bytes, b.reserved_bytes_total);
  // Bytes asked, without the bridge's tail: the bridge's own sums.
  Stat& requested = all(d.requested_bytes);
  requested.current = c.requested_live;
  requested.peak = std::max(c.requested_peak, c.requested_live);
  requested.allocated = c.requested_in;
  requested.freed = c.requested_out;
  // Cached pieces of split fixed segments, as torch_npu counts them (none in expandable ones).
  Stat& split = all(d.inactive_split);
  split.current = split.peak = i(s.inactive_split_blocks);
  Stat& split_bytes = all(d.inactive_split_bytes);
  split_bytes.current = split_bytes.peak = i(s.inactive_split_bytes);
  d.num_alloc_retries = i(s.num_alloc_retries - b.num_alloc_retries);
  d.num_ooms = i(s.num_ooms - b.num_ooms);
  d.num_sync_all_streams = i(s.num_syncs - b.num_syncs);
  d.num_device_alloc = i(s.num_device_mallocs + s.num_physical_mallocs);
  d.num_device_free = i(s.num_device_frees + s.num_physical_frees);
  // UINT64_MAX (no limit) reads as torch_npu's -1.
  d.max_split_size = static_cast<int64_t>(s.max_split_size);
  return d;
}

void Bridge::resetAccumulatedStats(c10::DeviceIndex device) {
  npualloc_stats s = stats_of(device);
  std::lock_guard<std::mutex> g(mu_);
  baselines_[device] = s;
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
  counts_[device].requested_peak = counts_[device].requested_live;
}

}  // namespace npualloc_bridge
