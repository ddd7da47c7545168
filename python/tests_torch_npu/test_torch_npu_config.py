"""PYTORCH_NPU_ALLOC_CONF as torch_npu's users write it, under both allocators in the real
torch_npu: what torch_npu's own allocator accepts, npualloc serves; what it refuses, npualloc
refuses, saying which variable it read."""

import pytest

from test_bridge import run

SEGMENTS = """
x = torch.zeros(3 << 20, dtype=torch.uint8, device="npu")
out = {"sum": x.cpu().sum().item()}
if "npl_stats" in globals():
    s = npl_stats()
    # aclrtMalloc segments, no mapped pages.
    out.update(fixed=s["num_device_mallocs"] > 0, expandable=s["num_maps"] > 0)
report(out)
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_a_split_limit_alone_is_served_with_fixed_segments(run_npu, allocator):
    # torch_npu's segments are fixed unless expandable_segments:True, so its users set
    # max_split_size_mb alone; npualloc reads it the same way there.
    env = {"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128"}
    done = run(run_npu, SEGMENTS, allocator, env=env) if allocator == "npualloc" else run_npu(SEGMENTS, "own", env=env)
    assert done.result["sum"] == 0, done.result
    if allocator == "npualloc":
        assert done.result["fixed"] and not done.result["expandable"], done.result
        assert "fixed segments (expandable_segments:false), as torch_npu reads max_split_size_mb" in done.stderr


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_a_split_limit_with_expandable_segments_is_refused_by_both(run_npu, allocator):
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128"}
    code = """
    try:
        torch.zeros(4, device="npu")
        report({"raised": None})
    except Exception as e:
        report({"raised": type(e).__name__, "message": str(e)})
    """
    if allocator == "own":
        r = run_npu(code, "own", env=env).result
        assert r["raised"] == "RuntimeError" and "max_split_size_mb" in r["message"], r
        return
    # enable() checks the config before anything is installed.
    done = run_npu("""
    import npualloc.torch_npu
    try:
        npualloc.torch_npu.enable()
        report({"raised": None})
    except Exception as e:
        report({"raised": type(e).__name__, "message": str(e)})
    """, "own", env=env)
    r = done.result
    assert r["raised"] == "ValueError", r
    assert "PYTORCH_NPU_ALLOC_CONF='expandable_segments:True,max_split_size_mb:128'" in r["message"], r
    assert "max_split_size_mb" in r["message"], r
