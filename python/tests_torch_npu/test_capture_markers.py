"""Whether a graph capture is underway, as torch_npu's NPUEvent::block asks it
(c10_npu::NPUCachingAllocator::hasCapturesUnderway), under both allocators in the real
torch_npu: where NPUGraph marks real captures (markCaptureBegin/End, 2.13 on) only a running
capture counts; before, an active pool routing (use_mem_pool) counts too."""

import pytest

from conftest import CAPTURE_QUERY
from test_bridge import run

PROBE = """
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
extern "C" int probe_captures(int device) {
  try {
    return c10_npu::NPUCachingAllocator::hasCapturesUnderway(static_cast<c10::DeviceIndex>(device)) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}
"""

PROGRAM = """
import ctypes
probe = ctypes.CDLL(PROBE_PATH)
query = lambda: probe.probe_captures(0)
static = torch.zeros(1 << 16, device="npu")
torch.npu.synchronize()
answers = {"idle": query()}
pool = torch.npu.MemPool()
with torch.npu.use_mem_pool(pool):
    answers["mem_pool"] = query()
g = torch.npu.NPUGraph()
with torch.npu.graph(g):
    answers["capturing"] = query()
    t = torch.empty_like(static)
    t.copy_(static)
answers["after"] = query()
report(answers)
"""


@pytest.mark.skipif(not CAPTURE_QUERY, reason="this torch_npu never asks whether a capture is underway")
def test_captures_underway_answer_as_torch_npus_own_allocator(run_npu, cpp_probe):
    code = f"PROBE_PATH = {str(cpp_probe(PROBE))!r}\n" + PROGRAM
    own = run_npu(code, "own").result
    ours = run(run_npu, code).result
    assert own["capturing"] == 1 and own["idle"] == own["after"] == 0, own
    assert ours == own, f"torch_npu's own allocator: {own}\nnpualloc: {ours}"
