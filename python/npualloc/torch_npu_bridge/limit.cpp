// torch_npu's memory limits under npualloc: the per-process fraction and the preemptive rejection
// of throw_on_npumalloc_oom.
//
// torch_npu's own allocator has two limits (NPUCachingAllocator.cpp):
//   - allowed_memory_maximum, set from per_process_memory_fraction when a device's allocator is
//     made and by setMemoryFraction; getMemoryFraction reads it back;
//   - with throw_on_npumalloc_oom, alloc_block refuses new device memory past
//     per_process_memory_fraction (as the settings have it now, run-time changes included) of the
//     device: the request fails at once with OutOfMemoryError ("preemptively rejected"), counted
//     in num_oom_rejections (not in num_ooms), and the OOM-rejection observers are told.
// npualloc has one limit, its memory fraction, which also refuses growth past it with an
// out-of-memory. The bridge keeps the first limit per device (fractions_, read from npualloc's
// statistics when the device's allocator is made, so a config's fraction counts) and gives
// npualloc the lower of the two; when npualloc refuses a request and the rejection rule holds
// for it (what the device's allocator holds plus the request passes the rule's share), the
// refusal is a rejection. npualloc's out-of-memory ladder runs first, so a request that fits once
// the cache is given back is served where torch_npu would reject it.

#include "bridge.h"

namespace npualloc_bridge {

namespace {

size_t device_total(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  return Bridge::device_memory(device, free_bytes, total_bytes) == ACL_SUCCESS ? total_bytes : 0;
}

// The new device memory torch_npu's own allocator would obtain for a request of `size` bytes (its
// pad included): the block rounded to 512 bytes (round_size), then a 2 MiB segment for the small
// pool's blocks (up to 1 MiB), a 20 MiB one up to 10 MiB, else the block rounded to 2 MiB
// (get_allocation_size; large_segment_size_mb, which npualloc does not read, left at its default).
size_t torch_npu_growth(size_t size) {
  constexpr size_t kMiB = size_t{1} << 20;
  size_t block = std::max<size_t>(512, (size + 511) / 512 * 512);
  if (block <= kMiB) return 2 * kMiB;
  if (block < 10 * kMiB) return 20 * kMiB;
  return (block + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

}  // namespace

// Called by handle() with limit_mu_ held, before the device's allocator is published.
void Bridge::adopt_limit(int device, npualloc_allocator* a) {
  npualloc_stats s{};
  s.struct_size = sizeof s;
  double base = 1.0;
  // A library before stats version 7 does not say its limit: the bridge then leaves the limit to
  // setMemoryFraction alone, and the rule only classifies npualloc's refusals.
  bool known = api->get_stats(a, &s) == NPUALLOC_OK && s.version >= 7;
  if (known && s.memory_limit != UINT64_MAX) {
    size_t total = device_total(device);
    if (total > 0) base = std::min(1.0, static_cast<double>(s.memory_limit) / static_cast<double>(total));
  }
  fractions_[device].store(base);
  limits_[device] = {known, base};
  apply_limit(device, a);
}

// With limit_mu_ held: npualloc's limit becomes the lower of the fraction and the rule's share,
// with a call only when that changes.
void Bridge::apply_limit(int device, npualloc_allocator* a) {
  Applied& applied = limits_[device];
  if (!applied.known) return;
  double limit = fractions_[device].load();
  if (throw_on_oom_.load()) limit = std::min(limit, throw_fraction_.load());
  if (limit == applied.fraction) return;
  check(api->set_memory_fraction(a, limit), "set_memory_fraction");
  applied.fraction = limit;
}

void Bridge::setMemoryFraction(double fraction, int device) {
  npualloc_allocator* a = handle(device);
  // torch_npu's own checks (setMemoryFraction): a refused fraction changes nothing.
  TORCH_CHECK(fraction >= 0 && fraction <= 1, "invalid fraction:", fraction, ". Please set within [0, 1].");
  std::lock_guard<std::mutex> g(limit_mu_);
  fractions_[device].store(fraction);
  limits_[device] = {true, -1.0};  // known from now on, and set whatever it was
  apply_limit(device, a);
}

void Bridge::set_rejection(int throw_on_oom, double fraction) {
  std::lock_guard<std::mutex> g(limit_mu_);
  if (throw_on_oom >= 0) throw_on_oom_.store(throw_on_oom != 0);
  if (fraction >= 0) throw_fraction_.store(std::min(fraction, 1.0));
  for (int d = 0; d < kMaxDevices; ++d) {
    npualloc_allocator* a = __atomic_load_n(&handles_[d], __ATOMIC_ACQUIRE);
    if (a != nullptr) apply_limit(d, a);
  }
}

bool Bridge::rejects(int device, size_t size) {
  if (!throw_on_oom_.load()) return false;
  size_t total = device_total(device);
  if (total == 0) return false;
  size_t growth = torch_npu_growth(size);
  auto allowed = static_cast<size_t>(throw_fraction_.load() * static_cast<double>(total));
  size_t held = stats_of(device).reserved_bytes;
  if (held + growth <= allowed) return false;
  // torch_npu checks its limit first: a request past it is an ordinary out-of-memory.
  double limit = fractions_[device].load();
  if (limit < 1.0 && held + growth > static_cast<size_t>(limit * static_cast<double>(total))) return false;
  std::vector<RejectionObserver> observers;
  {
    std::lock_guard<std::mutex> g(mu_);
    ++rejections_[device];
    observers = rejection_observers_;
  }
  // torch_npu calls them from a thread of their own so as not to delay the caller; here they run
  // on the caller's thread, no bridge lock held, before the error is raised.
  for (auto& o : observers) {
    try {
      o(device, growth, held, total);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "npualloc: an OOM rejection observer failed: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "npualloc: an OOM rejection observer failed (unknown exception)\n");
    }
  }
  return true;
}

void Bridge::add_rejection_observer(RejectionObserver observer) {
  std::lock_guard<std::mutex> g(mu_);
  rejection_observers_.push_back(std::move(observer));
}

}  // namespace npualloc_bridge

// torch_npu's throw_on_npumalloc_oom (throw_on_oom: 1 on, 0 off, negative unchanged) and the
// per_process_memory_fraction its rule reads (negative: unchanged), as torch_npu's settings have
// them: npualloc.torch_npu passes them on when it enables the bridge and whenever they change at
// run time. Throws nothing.
extern "C" __attribute__((visibility("default"))) int npualloc_torch_npu_bridge_rejection(int throw_on_oom,
                                                                                          double fraction) {
  if (npualloc_bridge::bridge == nullptr) return -1;
  try {
    npualloc_bridge::bridge->set_rejection(throw_on_oom, fraction);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npualloc: throw_on_npumalloc_oom settings: %s\n", e.what());
    return -1;
  } catch (...) {
    std::fprintf(stderr, "npualloc: throw_on_npumalloc_oom settings: unknown exception\n");
    return -1;
  }
}
