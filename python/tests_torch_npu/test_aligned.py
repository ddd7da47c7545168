"""Aligned allocation (torch_npu.empty_with_format(..., base_addr_aligned_kb=K), which reaches
the allocator's allocate_with_aligned) under both allocators in the real torch_npu: the data
starts on a K KiB boundary, holds what is written, takes a stream use and gives its whole block
back when freed."""

import pytest

from test_bridge import run

ALIGNED = """
import torch_npu
base = torch.npu.memory_allocated()
side = torch.npu.Stream()
out = {"kb": {}}
for kb in KBS:
    t = torch_npu.empty_with_format((1000,), dtype=torch.float32, device="npu", acl_format=2,
                                    base_addr_aligned_kb=kb)
    t.copy_(torch.arange(1000, dtype=torch.float32))
    with torch.npu.stream(side):
        t.record_stream(side)
    out["kb"][kb] = {
        "offset": t.data_ptr() % (kb * 1024) if kb else 0,
        "sum": t.cpu().sum().item(),
        "held": torch.npu.memory_allocated() - base,
    }
    del t
    torch.npu.synchronize()
out["after"] = torch.npu.memory_allocated() - base
if ALLOCATOR == "npualloc":
    # torch_npu's own allocator multiplies the KB by 1024 unchecked (it wraps to 0 here).
    try:
        torch_npu.empty_with_format((4,), dtype=torch.float32, device="npu", acl_format=2,
                                    base_addr_aligned_kb=1 << 60)
        out["huge"] = None
    except Exception as e:
        out["huge"] = type(e).__name__
    out["violations"] = emulator().aclemu_violations()
report(out)
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_aligned_allocation_starts_on_the_boundary_and_frees_its_block(run_npu, allocator):
    # torch_npu's own allocator takes the stream use by the data pointer, which it finds only when
    # the data starts at the block's start, and divides by the alignment (0 KB: SIGFPE); npualloc
    # takes the block's start from the DataPtr, and 0 KB as no alignment.
    kbs = (1, 2, 16) if allocator == "own" else (0, 1, 2, 16)
    code = f"ALLOCATOR = {allocator!r}\nKBS = {kbs!r}\n" + ALIGNED
    if allocator == "own":
        code = code.replace("    with torch.npu.stream(side):\n        t.record_stream(side)\n", "")
    r = run(run_npu, code, allocator).result
    expected_sum = sum(range(1000))
    for kb, got in r["kb"].items():
        assert got["offset"] == 0, (kb, got)
        assert got["sum"] == expected_sum, (kb, got)
        # The block holds the request and the alignment it may need (2 KiB: 4000 + 2048 bytes).
        assert got["held"] >= 4000 + int(kb) * 1024, (kb, got)
    assert r["after"] == 0, r
    if allocator == "npualloc":
        assert r["huge"] == "ValueError", r
        assert r["violations"] == 0, r
