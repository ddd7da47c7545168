"""Aligned allocation (torch_npu.empty_with_format(..., base_addr_aligned_kb=K), which reaches
the allocator's allocate_with_aligned) under both allocators in the real torch_npu: the data
starts on a K KiB boundary, holds what is written, takes a stream use and gives its whole block
back when freed."""

import pytest

from conftest import EMULATOR
from test_bridge import run

ALIGNED = f"EMULATOR = {str(EMULATOR)!r}\n" + """
import ctypes
import torch_npu
emu = ctypes.CDLL(EMULATOR)
emu.aclemu_stream_hold.argtypes = emu.aclemu_stream_release.argtypes = [ctypes.c_void_p]
emu.aclemu_violations.restype = ctypes.c_int64
base = torch.npu.memory_allocated()
side = torch.npu.Stream()
out = {"kb": {}}
for kb in KBS:
    t = torch_npu.empty_with_format((1000,), dtype=torch.float32, device="npu", acl_format=2,
                                    base_addr_aligned_kb=kb)
    t.copy_(torch.arange(1000, dtype=torch.float32))
    got = {"offset": t.data_ptr() % (kb * 1024) if kb else 0, "sum": t.cpu().sum().item(),
           "held": torch.npu.memory_allocated() - base}
    if STREAM_USE:
        # The held side stream reads t: its block must wait for it after t goes.
        assert emu.aclemu_stream_hold(ctypes.c_void_p(side.npu_stream)) == 0
        with torch.npu.stream(side):
            copy = torch.empty(1000, dtype=torch.float32, device="npu")
            copy.copy_(t)
        t.record_stream(side)
        freed = t.data_ptr()
        del t
        u = torch_npu.empty_with_format((1000,), dtype=torch.float32, device="npu", acl_format=2,
                                        base_addr_aligned_kb=kb)
        got["reused_while_held"] = u.data_ptr() == freed
        assert emu.aclemu_stream_release(ctypes.c_void_p(side.npu_stream)) == 0
        torch.npu.synchronize()
        got["copy_sum"] = copy.cpu().sum().item()
        del u, copy
    else:
        del t
    torch.npu.synchronize()
    out["kb"][kb] = got
out["after"] = torch.npu.memory_allocated() - base
if STREAM_USE:
    # torch_npu's own allocator multiplies the KB by 1024 unchecked (it wraps to 0 here).
    try:
        torch_npu.empty_with_format((4,), dtype=torch.float32, device="npu", acl_format=2,
                                    base_addr_aligned_kb=1 << 60)
        out["huge"] = None
    except Exception as e:
        out["huge"] = type(e).__name__
    out["violations"] = emu.aclemu_violations()
report(out)
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_aligned_allocation_starts_on_the_boundary_and_frees_its_block(run_npu, allocator):
    # torch_npu's own allocator takes the stream use by the data pointer, which it finds only when
    # the data starts at the block's start, and divides by the alignment (0 KB: SIGFPE); npualloc
    # takes the block's start from the DataPtr, and 0 KB as no alignment.
    ours = allocator == "npualloc"
    kbs = (0, 1, 2, 16) if ours else (1, 2, 16)
    code = f"KBS = {kbs!r}\nSTREAM_USE = {ours!r}\n" + ALIGNED
    r = run(run_npu, code, allocator).result
    expected_sum = sum(range(1000))
    for kb, got in r["kb"].items():
        assert got["offset"] == 0, (kb, got)
        assert got["sum"] == expected_sum, (kb, got)
        # The block holds the request and the alignment it may need (2 KiB: 4000 + 2048 bytes).
        assert got["held"] >= 4000 + int(kb) * 1024, (kb, got)
        if ours:
            assert not got["reused_while_held"], ("a block the side stream still read was handed out", kb, got)
            assert got["copy_sum"] == expected_sum, (kb, got)
    assert r["after"] == 0, r
    if ours:
        assert r["huge"] == "ValueError", r
        assert r["violations"] == 0, r
