"""The releases the bridge serves: enable() in a torch_npu it does not serve
says which it serves, in one line, before compiling anything (the release is
read from torch_npu.__version__, set here to releases outside the range)."""

import pytest

# Nothing here depends on the torch_npu release (conftest.py, the `once` marker).
pytestmark = pytest.mark.once


@pytest.mark.parametrize("version", ["2.5.1.post1", "2.15.0", "3.0.0"])
def test_enable_refuses_a_release_it_does_not_serve_before_compiling(run_npu, tmp_path, version):
    cache = tmp_path / "bridge-cache"
    r = run_npu(f"""
        import npualloc.torch_npu as nt
        torch_npu.__version__ = {version!r}
        error = None
        try:
            nt.enable()
        except nt.TorchNpuError as e:
            error = str(e)
        t = torch.zeros(4, device="npu")         # torch_npu's own allocator still serves
        report({{"error": error, "enabled": nt.is_enabled(), "sum": float(t.cpu().sum()),
                "allocated": torch.npu.memory_allocated()}})
        """, env={"NPUALLOC_BRIDGE_CACHE": str(cache)})
    assert r.result["error"] == f"npualloc serves torch_npu 2.6 to 2.14; this is torch_npu {version}"
    assert r.result["sum"] == 0.0 and r.result["enabled"] is False and r.result["allocated"] > 0
    assert not cache.exists() or not any(cache.rglob("*")), "nothing may be compiled"

