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


SETTINGS = """
import warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    torch.npu.memory._set_allocator_settings("expandable_segments:False")
notices = [str(w.message) for w in seen if "npualloc" in str(w.message)]
# A key of torch_npu's host allocator, which stays torch_npu's: no word from npualloc, whether this
# release takes the key at run time or refuses it.
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    try:
        torch.npu.memory._set_allocator_settings("pinned_max_round_threshold_mb:64")
    except Exception:
        pass
host_notices = [str(w.message) for w in seen if "npualloc" in str(w.message)]
try:
    torch.npu.memory._set_allocator_settings("no_such_key:1")
    refused = None
except Exception as e:  # torch_npu's own check, whatever its exception type
    refused = type(e).__name__
x = torch.zeros(3 << 20, dtype=torch.uint8, device="npu")
s = npl_stats()
report({"notices": notices, "host_notices": host_notices, "refused": refused, "sum": x.cpu().sum().item(),
        "expandable": s["num_maps"] > 0 and s["num_device_mallocs"] == 0})
"""


def test_run_time_settings_say_npualloc_keeps_its_config(run_npu):
    # torch_npu's _set_allocator_settings changes its own allocator's settings; with npualloc
    # serving, the caller hears that npualloc's stay, and torch_npu still refuses what it refuses.
    r = run(run_npu, SETTINGS).result
    assert len(r["notices"]) == 1, r
    assert "expandable_segments" in r["notices"][0] and "reads its config once" in r["notices"][0], r
    assert r["refused"] is not None, r
    assert r["host_notices"] == [], r
    assert r["sum"] == 0, r
    assert r["expandable"], ("npualloc kept its expandable segments", r)


ENABLE = """
import ctypes
import npualloc.torch_npu
from npualloc import _lib

def switch():
    # Whether the library reads PYTORCH_ALLOC_CONF, read by setting it back as found.
    was = ctypes.c_int32(-1)
    _lib.lib().npualloc_read_pytorch_alloc_conf(0, ctypes.byref(was))
    _lib.lib().npualloc_read_pytorch_alloc_conf(was.value, None)
    return was.value

try:
    npualloc.torch_npu.enable()
    torch.zeros(4, device="npu")
    report({"raised": None, "switch": switch()})
except Exception as e:
    report({"raised": type(e).__name__, "message": str(e), "switch": switch()})
"""


def test_pytorch_alloc_conf_is_read_where_torch_npu_reads_it(run_npu):
    # torch_npu 2.12 and later read PYTORCH_ALLOC_CONF when PYTORCH_NPU_ALLOC_CONF is unset
    # (NPUAllocatorConfig::instance); earlier releases do not. torch_npu's own allocator tells which
    # this release is: it refuses a split limit with expandable segments only when it reads them.
    pair = {"PYTORCH_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128"}
    own = run_npu("""
    try:
        torch.zeros(4, device="npu")
        report({"raised": None})
    except Exception as e:
        report({"raised": type(e).__name__, "message": str(e)})
    """, "own", env=pair).result
    reads = own["raised"] is not None
    assert not reads or "max_split_size_mb" in own["message"], own

    ours = run_npu(ENABLE, "own", env=pair).result
    # A refused enable() leaves the library as it found it.
    assert ours["switch"] == 0, ours
    if reads:
        assert ours["raised"] == "ValueError", ours
        assert "PYTORCH_ALLOC_CONF='expandable_segments:True,max_split_size_mb:128'" in ours["message"], ours
        assert "max_split_size_mb" in ours["message"], ours
    else:
        assert ours["raised"] is None, ours

    # What torch_npu's own allocator accepts there, npualloc serves, read the same way.
    done = run(run_npu, SEGMENTS, "npualloc", env={"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"})
    r = done.result
    assert r["sum"] == 0, r
    said = "npualloc: NPUALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are unset; config from PYTORCH_ALLOC_CONF="
    if reads:
        assert r["fixed"] and not r["expandable"], r
        assert said in done.stderr, done.stderr[-2000:]
    else:
        assert r["expandable"] and not r["fixed"], r
        assert "PYTORCH_ALLOC_CONF" not in done.stderr, done.stderr[-2000:]
    # Both set: a torch_npu that reads both refuses the pair when it starts, under npualloc as
    # under its own allocator; one that reads only its own gets npualloc reading only that too.
    both = {"PYTORCH_NPU_ALLOC_CONF": "roundup_power2_divisions:4", "PYTORCH_ALLOC_CONF": "max_split_size_mb:128"}
    done = run(run_npu, SEGMENTS, "npualloc", env=both, check=False)
    if reads:
        assert done.returncode != 0 and "please set only one of them" in done.stderr, done.stderr[-2000:]
    else:
        assert done.result["expandable"] and not done.result["fixed"], done.result
        assert "PYTORCH_ALLOC_CONF" not in done.stderr, done.stderr[-2000:]
