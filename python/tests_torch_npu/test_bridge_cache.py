"""The torch_npu bridge's memory APIs Python cannot call directly:
c10_npu::NPUCachingAllocator::FreeDeviceCachedMemory, which torch_npu's op
launcher calls when an op fails with out-of-memory the first time
(NpuUtils::IsOomError). It is an inline function of torch_npu's
NPUCachingAllocator.h (``allocator.load()->FreeDeviceCachedMemory(device)``)
and libtorch_npu.so exports neither it nor IsOomError, so the test compiles a
one-function caller against the installed headers, exactly as torch_npu's own
code is compiled, and calls it through ctypes."""

import textwrap

from test_bridge import HELPERS, run

CALLER = r'''
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
extern "C" __attribute__((visibility("default"))) int call_free_device_cached_memory(int device) {
  try {
    c10_npu::NPUCachingAllocator::FreeDeviceCachedMemory(device);
    return 0;
  } catch (...) {
    return 1;
  }
}
'''

# Builds the caller with the bridge's own compiler command (same headers,
# ABI and libraries), in the child's scratch directory.
BUILD_CALLER = """
import subprocess
from pathlib import Path
import npualloc.torch_npu_bridge as _B
def free_device_cached_memory_caller():
    src = Path("caller.cpp").resolve()
    src.write_text(CALLER)
    out = Path("caller.so").resolve()
    cmd = _B.build_command(out, torch, torch_npu)
    cmd[cmd.index(str(_B.HERE / _B.UNIT))] = str(src)
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lib = ctypes.CDLL(str(out))
    lib.call_free_device_cached_memory.argtypes = [ctypes.c_int]
    return lib.call_free_device_cached_memory
"""


def test_free_device_cached_memory_gives_back_the_cache_and_keeps_live_blocks(run_npu):
    r = run(run_npu, "CALLER = " + repr(CALLER) + "\n" + BUILD_CALLER + textwrap.dedent("""
        call = free_device_cached_memory_caller()
        keep = torch.full((1 << 20,), 3.0).to("npu")           # live, 4 MiB
        torch.npu.synchronize()
        with_keep = npl_stats()
        cached = torch.empty(64 << 20, dtype=torch.uint8, device="npu")
        del cached                                             # 64 MiB in the cache
        torch.npu.synchronize()
        before = npl_stats()
        rc = call(0)
        after = npl_stats()
        out = {"rc": rc, "with_keep": with_keep, "before": before, "after": after,
               "keep": float(keep.cpu().sum()), "allocated_torch": torch.npu.memory_allocated(),
               "reserved_torch": torch.npu.memory_reserved(),
               "bad_device": call(100000)}
        # Again with nothing cached: nothing changes.
        out["rc_again"] = call(0)
        out["again"] = npl_stats()
        report(out)
    """)).result
    b, a = r["before"], r["after"]
    assert r["rc"] == 0
    # All the cached block added went back; what is left is what the live
    # block's handle held before it (the handle it shares is pinned by it).
    assert b["reserved_bytes"] >= r["with_keep"]["reserved_bytes"] + (32 << 20), "the cached block grew the pool"
    assert a["reserved_bytes"] == r["with_keep"]["reserved_bytes"], "the cached block's memory went back"
    assert a["num_device_frees"] > b["num_device_frees"] or a["num_physical_frees"] > b["num_physical_frees"]
    assert a["allocated_bytes"] == b["allocated_bytes"] > 4 << 20, "the live block stayed"
    assert a["active_blocks"] == b["active_blocks"] == 1
    assert r["keep"] == 3.0 * (1 << 20), "the live block's data is intact"
    assert r["allocated_torch"] == a["allocated_bytes"] and r["reserved_torch"] == a["reserved_bytes"]
    assert r["bad_device"] == 1, "a device out of range raises (a c10 error), nothing else"
    assert r["rc_again"] == 0 and r["again"]["reserved_bytes"] == a["reserved_bytes"]
