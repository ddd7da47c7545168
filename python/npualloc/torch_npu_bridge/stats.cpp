// torch_npu's DeviceStats (torch.npu.memory_stats and friends) from npualloc's statistics and
// the bridge's own counts of torch_npu's live blocks and requested bytes. Each key means what
// torch_npu's own allocator means by it (NPUCachingAllocator.cpp: update_stat makes a Stat's
// "allocated" the sum of its increases and "freed" the sum of its decreases since
// resetAccumulatedStats; alloc_found_block, free and free_block say what changes when;
// get_stat_types_for_pool counts each block under "all" and its pool kind).

#include "release.h"

namespace npualloc_bridge {

namespace {

int64_t i(uint64_t v) {
  return static_cast<int64_t>(v);
}

// A cumulative counter's rise since the baseline. It never falls, but a baseline read while a
// shard moved to another pool may have counted its figures twice: no rise then, not a wrap.
uint64_t since(uint64_t now, uint64_t then) {
  return now >= then ? now - then : 0;
}

// A figure whose increases npualloc sums (`total`): since the last reset its increases are
// total - total then, its decreases those less its rise.
void cumulative(Stat& st, uint64_t now, uint64_t peak, uint64_t total, uint64_t now_then, uint64_t total_then) {
  st.current = i(now);
  st.peak = std::max(i(peak), st.current);
  st.allocated = i(since(total, total_then));
  st.freed = std::max<int64_t>(0, st.allocated - (i(now) - i(now_then)));
}

// A figure npualloc keeps only as it is now.
void current_only(Stat& st, uint64_t now) {
  st.current = st.peak = i(now);
}

// Every StatArray entry of one stat type (all, small pool, large pool) from npualloc's figures
// `s` of that type, those at the last reset `b`, and the bridge's counts `c`. `whole` is the
// aggregate: only it has npualloc's segment and reserved peaks and totals.
void fill(NCA::DeviceStats& d, size_t type, const npualloc_stats& s,
          const npualloc_stats& b, const Counts::Kind& c, bool whole) {
  // Blocks: "allocation" falls at the free, "active" only when the block is back in the cache
  // (after the events of the streams record_stream named). Their peaks are the bridge's count of
  // torch_npu's live blocks.
  Stat& allocation = d.allocation[type];
  allocation.current = i(s.active_blocks);
  allocation.peak = std::max(c.live_peak, allocation.current);
  allocation.allocated = i(since(s.num_allocs, b.num_allocs));
  allocation.freed = i(since(s.num_frees, b.num_frees));
  cumulative(d.active[type], s.active_blocks + s.pending_free_blocks, c.live_peak, s.num_allocs,
             b.active_blocks + b.pending_free_blocks, b.num_allocs);
  // Bytes of blocks as rounded (torch_npu's block size), and of blocks not yet back in the cache.
  cumulative(d.allocated_bytes[type], s.allocated_bytes, s.allocated_bytes_peak, s.allocated_bytes_total,
             b.allocated_bytes, b.allocated_bytes_total);
  cumulative(d.active_bytes[type], s.allocated_bytes + s.pending_free_bytes, s.allocated_bytes_peak,
             s.allocated_bytes_total, b.allocated_bytes + b.pending_free_bytes, b.allocated_bytes_total);
  // Segments: npualloc's, fixed ones and expandable address ranges alike (its snapshot lists each
  // as one segment), and the device memory held. torch_npu itself counts only aclrtMalloc'ed
  // segments and leaves these at 0 with expandable segments (docs/runtime-behaviour.md,
  // "How torch_npu talks to its allocator"). A pool kind's are its segments as they are now.
  if (whole) {
    cumulative(d.segment[type], s.segments, s.segments_peak, s.num_segments_created, b.segments,
               b.num_segments_created);
    cumulative(d.reserved_bytes[type], s.reserved_bytes, s.reserved_bytes_peak, s.reserved_bytes_total,
               b.reserved_bytes, b.reserved_bytes_total);
  } else {
    current_only(d.segment[type], s.segments);
    current_only(d.reserved_bytes[type], s.reserved_bytes);
  }
  // Bytes asked, without the bridge's pad: the bridge's own sums.
  Stat& requested = d.requested_bytes[type];
  requested.current = c.requested_live;
  requested.peak = std::max(c.requested_peak, c.requested_live);
  requested.allocated = c.requested_in;
  requested.freed = c.requested_out;
  // Cached pieces of split fixed segments, as torch_npu counts them (none in expandable ones).
  current_only(d.inactive_split[type], s.inactive_split_blocks);
  current_only(d.inactive_split_bytes[type], s.inactive_split_bytes);
  if (s.version < 5) {
    // A library before stats version 5 sums no bytes: their totals read 0.
    for (StatArray* a : {&d.allocated_bytes, &d.active_bytes, &d.reserved_bytes}) {
      (*a)[type].allocated = (*a)[type].freed = 0;
    }
  }
}

}  // namespace

Figures Bridge::figures_of(int device) {
  Figures f{};
  f.all = stats_of(device);
  npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  if (a != nullptr && api->struct_size >= offsetof(npualloc_api, get_kind_stats) + sizeof(void*)) {
    for (int k = 0; k < 2; ++k) {
      f.kind[k].struct_size = sizeof f.kind[k];
      check(api->get_kind_stats(a, k == 0 ? NPUALLOC_SMALL_BLOCKS : NPUALLOC_LARGE_BLOCKS, &f.kind[k]),
            "get_kind_stats");
    }
  }
  return f;
}

NCA::DeviceStats Bridge::device_stats(int device) {
  // The rejections first: each is counted after npualloc counted its refusal, so the figures read
  // next include every refusal counted here.
  int64_t rejections;
  {
    std::lock_guard<std::mutex> g(mu_);
    rejections = rejections_[device];
  }
  Figures f = figures_of(device);
  Figures b;
  Counts c;
  {
    std::lock_guard<std::mutex> g(mu_);
    b = baselines_[device];
    c = counts_[device];
  }
  NCA::DeviceStats d;
  using NCA::StatType;
  fill(d, static_cast<size_t>(StatType::AGGREGATE), f.all, b.all, c.all, true);
  fill(d, static_cast<size_t>(StatType::SMALL_POOL), f.kind[0], b.kind[0], c.kind[0], false);
  fill(d, static_cast<size_t>(StatType::LARGE_POOL), f.kind[1], b.kind[1], c.kind[1], false);
  const npualloc_stats& s = f.all;
  d.num_alloc_retries = i(since(s.num_alloc_retries, b.all.num_alloc_retries));
  // A rejection by throw_on_npumalloc_oom's rule is npualloc's out-of-memory, and torch_npu counts
  // it apart (limit.cpp).
  d.num_ooms = std::max<int64_t>(0, i(since(s.num_ooms, b.all.num_ooms)) - rejections);
  release::set_oom_rejections(d, rejections);
  // Reset with the others (NPUCachingAllocator.cpp, resetAccumulatedStats).
  release::set_device_calls(
      d, i(since(s.num_syncs, b.all.num_syncs)),
      i(since(s.num_device_mallocs + s.num_physical_mallocs, b.all.num_device_mallocs + b.all.num_physical_mallocs)),
      i(since(s.num_device_frees + s.num_physical_frees, b.all.num_device_frees + b.all.num_physical_frees)));
  // UINT64_MAX (no limit) reads as torch_npu's -1.
  d.max_split_size = static_cast<int64_t>(s.max_split_size);
  return d;
}

void Bridge::reset_accumulated(int device) {
  Figures f = figures_of(device);
  std::lock_guard<std::mutex> g(mu_);
  baselines_[device] = f;
  counts_[device].reset_accumulated();
  rejections_[device] = 0;
}

void Bridge::reset_peaks(int device) {
  check_device(device);
  npualloc_allocator* a = __atomic_load_n(&handles_[device], __ATOMIC_ACQUIRE);
  if (a != nullptr) {
    check(api->reset_peak_stats(a), "reset_peak_stats");
  }
  std::lock_guard<std::mutex> g(mu_);
  counts_[device].reset_peaks();
}

}  // namespace npualloc_bridge
