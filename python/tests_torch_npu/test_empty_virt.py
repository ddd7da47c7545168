"""torch_npu.npu.empty_virt_addr_cache() in the real torch_npu. torch_npu's own allocator
(NPUCachingAllocator.cpp, emptyVirtAddrCache) refuses it without expandable segments and
otherwise runs emptyCacheImpl(check_error, free_physical=false): the cache's pages are unmapped
and their physical handles kept for the next growth, which maps them again; empty_cache frees
them. npualloc does the same, and its memory_reserved still counts the kept handles (device
memory it holds; torch_npu's own counts only mapped memory)."""

import pytest

from test_bridge import run

MIB = 1 << 20

KEEP = """
import torch_npu
if not hasattr(torch_npu.npu, "empty_virt_addr_cache"):
    report({"absent": True})
    raise SystemExit
torch.npu.empty_cache()
x = torch.empty(100 << 20, dtype=torch.uint8, device="npu")
del x
before = npl_stats()
torch_npu.npu.empty_virt_addr_cache()
kept = npl_stats()
y = torch.empty(100 << 20, dtype=torch.uint8, device="npu")
tail = y[-4096:]
tail.copy_(torch.full((4096,), 7, dtype=torch.uint8))
again = npl_stats()
ok = bool((tail.cpu() == 7).all().item())
del tail
del y
torch.npu.empty_cache()
after = npl_stats()
report({"before": before, "kept": kept, "again": again, "after": after, "ok": ok,
        "reserved": torch.npu.memory_reserved()})
"""

REFUSE = """
import torch_npu
if not hasattr(torch_npu.npu, "empty_virt_addr_cache"):
    report({"absent": True})
    raise SystemExit
x = torch.empty(1 << 20, device="npu")
del x
try:
    torch_npu.npu.empty_virt_addr_cache()
    report({"error": None})
except RuntimeError as e:
    report({"error": str(e)})
"""


def test_empty_virt_addr_cache_keeps_physical_handles(run_npu):
    r = run(run_npu, KEEP).result
    if r.get("absent"):
        pytest.skip("this torch_npu release has no empty_virt_addr_cache")
    before, kept, again, after = r["before"], r["kept"], r["again"], r["after"]
    assert kept["segment_bytes"] <= before["segment_bytes"] - 100 * MIB, r
    assert kept["cached_handle_bytes"] >= 100 * MIB, ("the unmapped handles were kept", r)
    assert kept["num_physical_frees"] == before["num_physical_frees"], r
    assert kept["reserved_bytes"] == before["reserved_bytes"], r
    assert again["num_physical_mallocs"] == before["num_physical_mallocs"], ("the kept handles served the growth", r)
    assert r["ok"], r
    assert after["cached_handle_bytes"] == 0 and after["segment_bytes"] == 0, ("empty_cache freed them", r)
    assert r["reserved"] == after["reserved_bytes"] == 0, r


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_empty_virt_addr_cache_needs_expandable_segments(run_npu, allocator):
    # torch_npu's own allocator's default is fixed segments; npualloc's is told so.
    env = {"NPUALLOC_CONF": "expandable_segments:false"} if allocator == "npualloc" else {}
    r = run(run_npu, REFUSE, allocator, env=env).result
    if r.get("absent"):
        pytest.skip("this torch_npu release has no empty_virt_addr_cache")
    assert r["error"] is not None, r
    assert "Unsupported config for empty_virt_addr_cache, please enable expandable_segments" in r["error"], r
