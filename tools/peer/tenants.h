// tenants.h -- several replay_torch processes on one shared fake device
// (FAKECUDA_SHARED, fakecudart_shared.h), advancing in lockstep.
//
// Each of N tenants cuts its trace into TENANT_PARTS parts: part k (1-based)
// is events [n*(k-1)/PARTS, n*k/PARTS). Part k of tenant t runs when the
// shared turn counter reads (k-1)*N + t, and ends by adding one to it: in
// every round tenant 0 runs its part, then tenant 1, ... This is the
// interleaving of tools/examples/two_tenants.rs (PARTS = 1000, tenant 0 =
// its first trace), and combined_peak() below is its definition of the
// combined live peak, so both sides of the comparison see the same device
// size and the same order of events.
#pragma once
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "fakecudart_shared.h"
#include "trace_common.h"

static_assert(sizeof(fakecuda_shared) == 72, "the segment's layout is read by C and C++ alike");
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the counters are shared between processes");

static constexpr size_t TENANT_PARTS = 1000;

// Where part k of TENANT_PARTS of n events ends.
static inline size_t tenant_cut(size_t n, size_t k) { return n * k / TENANT_PARTS; }

// Live requested bytes after each event (what Prepared::requested is in the
// Rust replay tools).
static std::vector<uint64_t> live_series(const Trace& t) {
  std::vector<uint64_t> sizes, out;
  for (const TraceEvent& e : t.events)
    if (e.is_alloc == EV_ALLOC) {
      if (sizes.size() <= e.slot) sizes.resize(e.slot + 1, 0);
      sizes[e.slot] = e.size;
    }
  uint64_t live = 0;
  out.reserve(t.events.size());
  for (const TraceEvent& e : t.events) {
    if (e.is_alloc == EV_ALLOC) live += e.size;
    else if (e.is_alloc == EV_FREE) live -= sizes[e.slot];
    out.push_back(live);
  }
  return out;
}

// The peak of two traces' live requested bytes when they advance together in
// parts, A's part first in each round: A's peak within a part meets B's state
// at the part's start, B's peak meets A's at its end.
static uint64_t combined_peak(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  auto live = [](const std::vector<uint64_t>& s, size_t end) { return end == 0 ? 0 : s[end - 1]; };
  auto part_max = [&](const std::vector<uint64_t>& s, size_t lo, size_t hi) {
    return lo == hi ? live(s, lo) : *std::max_element(s.begin() + lo, s.begin() + hi);
  };
  uint64_t peak = 0;
  for (size_t k = 1; k <= TENANT_PARTS; k++) {
    size_t a0 = tenant_cut(a.size(), k - 1), a1 = tenant_cut(a.size(), k);
    size_t b0 = tenant_cut(b.size(), k - 1), b1 = tenant_cut(b.size(), k);
    peak = std::max({peak, part_max(a, a0, a1) + live(b, b0), live(a, a1) + part_max(b, b0, b1)});
  }
  return peak;
}

// One tenant's side of the lockstep.
struct Lockstep {
  fakecuda_shared* s = nullptr;
  uint32_t index = 0, count = 1;

  static long futex(std::atomic<uint32_t>* w, int op, uint32_t val, const timespec* to) {
    // Not FUTEX_PRIVATE_FLAG: the word is in memory other processes map.
    return syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), op, val, to, nullptr, 0);
  }
  // Fails when a tenant that has arrived is gone (it would never take its turn).
  bool others_alive() const {
    for (uint32_t i = 0; i < count; i++) {
      int32_t pid = s->pids[i].load();
      if (i != index && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
        fprintf(stderr, "tenant %u (pid %d) is gone; tenant %u stops\n", i, pid, index);
        return false;
      }
    }
    return true;
  }
  // Waits until *w reaches at least `target`.
  bool wait_for(std::atomic<uint32_t>& w, uint32_t target) const {
    const timespec tick = {0, 100 * 1000 * 1000};
    for (uint32_t v; (v = w.load()) < target;) {
      futex(&w, FUTEX_WAIT, v, &tick);
      if (w.load() < target && !others_alive()) return false;
    }
    return true;
  }
  // All tenants ready (after their warm-up), so no set-up runs during another's parts.
  bool start() {
    s->pids[index].store((int32_t)getpid());
    s->arrived.fetch_add(1);
    futex(&s->arrived, FUTEX_WAKE, INT32_MAX, nullptr);
    if (!wait_for(s->arrived, count)) return false;
    // Everyone waits for tenant 0's first part now: the device's peak starts
    // from here, without the warm-ups.
    if (index == 0) s->peak.store(s->used.load());
    return true;
  }
  bool begin_part(size_t k) const { return wait_for(s->turn, (uint32_t)((k - 1) * count + index)); }
  void end_part() const {
    s->turn.fetch_add(1);
    futex(&s->turn, FUTEX_WAKE, INT32_MAX, nullptr);
  }
  // Every tenant has run every part: what is held now is what the others saw.
  bool finish() const { return wait_for(s->turn, (uint32_t)(TENANT_PARTS * count)); }
};
