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
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

// One tenant's side of the lockstep. A tenant joins (takes its slot in the
// segment) before it loads its trace and warms up, so that a tenant failing
// in those is seen as failed, not as late; every wait ends when another
// tenant has failed (it marks itself in `failed` when it stops on an error,
// fail()) or is gone (no such process, or exited and not yet reaped: a
// zombie answers kill(pid, 0)), and after `limit_s` seconds without
// progress (TENANT_WAIT_S, default 300: a tenant that never joins, or one
// stuck), each with a message saying which tenant it waited for.
struct Lockstep {
  fakecuda_shared* s = nullptr;
  uint32_t index = 0, count = 1;
  double limit_s = 300;
  bool joined = false;

  static long futex(std::atomic<uint32_t>* w, int op, uint32_t val, const timespec* to) {
    // Not FUTEX_PRIVATE_FLAG: the word is in memory other processes map.
    return syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), op, val, to, nullptr, 0);
  }
  static void wake(std::atomic<uint32_t>& w) { futex(&w, FUTEX_WAKE, INT32_MAX, nullptr); }
  // No such process, or one that has exited (state Z or X in /proc/PID/stat).
  static bool gone(int32_t pid) {
    if (kill(pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE* f = fopen(path, "r");
    if (!f) return errno == ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* end = strrchr(buf, ')');  // the command name may hold spaces and ')'
    return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
  }
  // Reads TENANT_WAIT_S; false (and a message) when it is not a positive number.
  bool configure() {
    const char* v = getenv("TENANT_WAIT_S");
    if (!v || !*v) return true;
    char* end;
    double d = strtod(v, &end);
    if (*end || !(d > 0) || d > 1e9) {
      fprintf(stderr, "TENANT_WAIT_S=%s: a positive number of seconds is needed\n", v);
      return false;
    }
    limit_s = d;
    return true;
  }
  // Takes this tenant's slot; false when another process holds it.
  bool join() {
    int32_t expected = 0;
    if (!s->pids[index].compare_exchange_strong(expected, (int32_t)getpid())) {
      fprintf(stderr,
              "tenant %u: the slot is taken by pid %d (two tenants with one index, or a segment "
              "left from an earlier run: remove /dev/shm/<FAKECUDA_SHARED>)\n",
              index, (int)expected);
      return false;
    }
    joined = true;
    return true;
  }
  // This tenant stops on an error: the others stop instead of waiting for it.
  void fail() {
    if (!joined) return;
    s->failed.fetch_or(1u << index);
    wake(s->arrived);
    wake(s->turn);
  }
  // Fails (with a message) when another tenant has failed or is gone.
  bool others_alive() const {
    uint32_t failed = s->failed.load();
    for (uint32_t i = 0; i < count; i++) {
      if (i == index) continue;
      int32_t pid = s->pids[i].load();
      if (failed & (1u << i)) {
        fprintf(stderr, "tenant %u (pid %d) failed; tenant %u stops\n", i, (int)pid, index);
        return false;
      }
      if (pid > 0 && gone(pid)) {
        fprintf(stderr, "tenant %u (pid %d) is gone; tenant %u stops\n", i, (int)pid, index);
        return false;
      }
    }
    return true;
  }
  // Waits until *w reaches at least `target`; `what` names the wait in the
  // message when no tenant moves it for limit_s seconds.
  bool wait_for(std::atomic<uint32_t>& w, uint32_t target, const char* what) const {
    const timespec tick = {0, 100 * 1000 * 1000};
    uint32_t seen = w.load();
    uint64_t since = mono_ns();
    for (uint32_t v; (v = w.load()) < target;) {
      if (!others_alive()) return false;
      if (v != seen) {
        seen = v;
        since = mono_ns();
      } else if ((double)(mono_ns() - since) * 1e-9 > limit_s) {
        fprintf(stderr, "tenant %u: waited %.0f s for %s", index, limit_s, what);
        for (uint32_t i = 0; i < count; i++)
          if (i != index && s->pids[i].load() == 0) fprintf(stderr, "; tenant %u has not joined", i);
        fprintf(stderr,
                " (counter at %u of %u); stopping (TENANT_WAIT_S sets the wait; every tenant names "
                "the same FAKECUDA_SHARED and capacity)\n",
                v, target);
        return false;
      }
      futex(&w, FUTEX_WAIT, v, &tick);
    }
    return true;
  }
  // All tenants ready (after their warm-up), so no set-up runs during another's parts.
  bool start() {
    s->arrived.fetch_add(1);
    wake(s->arrived);
    if (!wait_for(s->arrived, count, "the other tenants to arrive")) return false;
    // Everyone waits for tenant 0's first part now: the device's peak starts
    // from here, without the warm-ups.
    if (index == 0) s->peak.store(s->used.load());
    return true;
  }
  bool begin_part(size_t k) const {
    return wait_for(s->turn, (uint32_t)((k - 1) * count + index), "the other tenants' parts");
  }
  void end_part() const {
    s->turn.fetch_add(1);
    wake(s->turn);
  }
  // Every tenant has run every part: what is held now is what the others saw.
  bool finish() const {
    return wait_for(s->turn, (uint32_t)(TENANT_PARTS * count), "the other tenants' last parts");
  }
};
