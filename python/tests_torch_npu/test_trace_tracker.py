"""Allocator trace trackers (c10_npu::NPUCachingAllocator::attachAllocatorTraceTracker, what a
library that registers device memory uses), under both allocators in the real torch_npu: the
segment entries a tracker receives account for exactly the device memory the allocator holds
(memory_reserved) after every step, cover every live tensor, and name a MemPool's pool."""

import pytest

from conftest import _declares
from test_bridge import run

TRACKERS = _declares(r"\battachAllocatorTraceTracker\(")

PROBE = """
#include <mutex>
#include <vector>
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
namespace NCA = c10_npu::NPUCachingAllocator;
namespace {
std::mutex mu;
std::vector<NCA::TraceEntry> seen;
}
extern "C" int probe_attach() {
  try {
    NCA::attachAllocatorTraceTracker([](const NCA::TraceEntry& te) {
      std::lock_guard<std::mutex> g(mu);
      seen.push_back(te);
    });
    return 0;
  } catch (...) {
    return -1;
  }
}
extern "C" int probe_count() {
  std::lock_guard<std::mutex> g(mu);
  return static_cast<int>(seen.size());
}
// Field f of entry i: 0 action, 1 address, 2 size, 3 device, 4 and 5 the pool id.
extern "C" long long probe_field(int i, int f) {
  std::lock_guard<std::mutex> g(mu);
  const auto& te = seen.at(i);
  switch (f) {
    case 0: return te.action_;
    case 1: return te.addr_;
    case 2: return te.size_;
    case 3: return te.device_;
    case 4: return static_cast<long long>(te.mempool_.first);
    default: return static_cast<long long>(te.mempool_.second);
  }
}
"""

PROGRAM = """
import ctypes, gc
probe = ctypes.CDLL(PROBE_PATH)
probe.probe_field.restype = ctypes.c_longlong
torch.empty(1, device="npu")
gc.collect()
torch.npu.empty_cache()
assert probe.probe_attach() == 0, "attachAllocatorTraceTracker threw"
SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP = 3, 4, 5, 6
held = {}  # address: (size, pool) of the memory the tracker was told of
read = 0
kinds = set()
problems = []

def follow(step):
    global read
    n = probe.probe_count()
    for i in range(read, n):
        action, addr, size, device = (probe.probe_field(i, f) for f in range(4))
        pool = (probe.probe_field(i, 4), probe.probe_field(i, 5))
        if action in (SEGMENT_ALLOC, SEGMENT_MAP):
            kinds.add(action)
            if addr in held:
                problems.append(f"{step}: {addr:#x} told twice")
            held[addr] = (size, pool)
        elif action in (SEGMENT_FREE, SEGMENT_UNMAP):
            if held.pop(addr, (None,))[0] != size:
                problems.append(f"{step}: {addr:#x}+{size} freed but not held so")
        if device != 0:
            problems.append(f"{step}: device {device}")
    read = n
    told = sum(size for size, _ in held.values())
    if told != torch.npu.memory_reserved():
        problems.append(f"{step}: told of {told} bytes, memory_reserved() is {torch.npu.memory_reserved()}")

def covered(t):
    lo, hi = t.data_ptr(), t.data_ptr() + t.untyped_storage().nbytes()
    spans = sorted((a, a + s) for a, (s, _) in held.items())
    at = lo
    for a, b in spans:
        if a <= at < b:
            at = b
    return at >= hi

def pool_of(t):
    for a, (s, pool) in held.items():
        if a <= t.data_ptr() < a + s:
            return list(pool)
    return None

big = torch.empty(64 << 20, dtype=torch.uint8, device="npu")
follow("64 MiB")
small = [torch.empty(n << 10, dtype=torch.uint8, device="npu") for n in (1, 300, 3000, 9000)]
follow("small ones")
live = [big] + small
pool = torch.npu.MemPool()
with torch.npu.use_mem_pool(pool):
    pooled = torch.empty(8 << 20, dtype=torch.uint8, device="npu")
follow("in a MemPool")
uncovered = [t.numel() for t in live + [pooled] if not covered(t)]
pools = {"pooled": pool_of(pooled), "big": pool_of(big), "id": list(pool.id)}
del big, pooled, live
gc.collect()
torch.npu.empty_cache()
follow("empty_cache")
small.clear()
gc.collect()
torch.npu.empty_cache()
follow("empty_cache, nothing live")
del pool
gc.collect()
torch.npu.empty_cache()
follow("the MemPool deleted")
report({"problems": problems, "uncovered": uncovered, "pools": pools, "kinds": sorted(kinds),
        "left": sum(s for s, _ in held.values()), "reserved": torch.npu.memory_reserved()})
"""


@pytest.mark.skipif(not TRACKERS, reason="this torch_npu has no allocator trace trackers")
def test_trackers_are_told_of_every_segment_as_torch_npus_own_allocator_tells_them(run_npu, cpp_probe):
    code = f"PROBE_PATH = {str(cpp_probe(PROBE))!r}\n" + PROGRAM
    own = run_npu(code, "own").result
    ours = run(run_npu, code).result
    for name, r in (("torch_npu's own allocator", own), ("npualloc", ours)):
        assert r["problems"] == [], f"{name}: {r['problems']}"
        assert r["uncovered"] == [], f"{name}: tensors outside the memory the tracker was told of: {r}"
        assert r["pools"]["pooled"] == r["pools"]["id"], f"{name}: the MemPool's memory names another pool: {r}"
        assert r["pools"]["big"] == [0, 0], r
        assert r["left"] == r["reserved"], r
    # torch_npu's default is fixed segments (SEGMENT_ALLOC); npualloc's expandable ones map.
    assert own["kinds"] == [3], own
    assert ours["kinds"] == [5], ours


EXPANDABLE = """
torch.empty(1, device="npu")
import ctypes
probe = ctypes.CDLL(PROBE_PATH)
probe.probe_field.restype = ctypes.c_longlong
assert probe.probe_attach() == 0
t = torch.empty(64 << 20, dtype=torch.uint8, device="npu")
del t
torch.npu.empty_cache()
actions = [probe.probe_field(i, 0) for i in range(probe.probe_count())]
report(sorted(set(a for a in actions if a in (3, 4, 5, 6))))
"""


@pytest.mark.skipif(not TRACKERS, reason="this torch_npu has no allocator trace trackers")
def test_fixed_segments_are_told_as_segment_alloc_and_free(run_npu, cpp_probe):
    code = f"PROBE_PATH = {str(cpp_probe(PROBE))!r}\n" + EXPANDABLE
    fixed = {"NPUALLOC_CONF": "expandable_segments:false"}
    assert run(run_npu, code, env=fixed).result == [3, 4]
    expandable = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert run_npu(code, "own", env=expandable).result == [5, 6]
    assert run(run_npu, code).result == [5, 6]
