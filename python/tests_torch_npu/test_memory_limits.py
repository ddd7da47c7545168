"""torch_npu's memory limits under npualloc, against torch_npu's own allocator in the same
script: the per-process fraction a config sets (getMemoryFraction reads it back), and
throw_on_npumalloc_oom's preemptive rejection (NPUCachingAllocator.cpp, alloc_block and
NpuCachingAllocator::malloc; NPUAllocatorConfig.cpp), set when torch_npu starts or at run time.
A rejection is an OutOfMemoryError counted in num_oom_rejections and not in num_ooms, and the
OOM-rejection observers (C++ only) get the device, the size, what was held and the device's
total. Releases before the rule (2.12 and older) have none of it."""

import textwrap

import pytest

from conftest import FRACTION_IN_CONFIG, PARSE_HOOK, THROW_ON_OOM

# A 4 GiB device: 1% of it is 41 MiB, so a 64 MiB tensor passes that share and a 400-byte one
# does not.
DEVICE = {"ACLEMU_DEVICE_MEMORY": "4G"}
SMALL = "torch.ones(10, 10, device='npu')"
LARGE = "torch.empty(64 << 20, dtype=torch.uint8, device='npu')"

needs_rule = pytest.mark.skipif(not THROW_ON_OOM, reason="this torch_npu has no throw_on_npumalloc_oom")

# Runs an allocation and says how it ended, with the counters torch_npu reports.
PROBE = f"""
def attempt(code):
    # From an empty cache: a cached block would serve the request with no new memory.
    torch.npu.empty_cache()
    before = torch.npu.memory_stats()
    out = {{}}
    try:
        eval(code)
        out["raised"] = None
    except torch.OutOfMemoryError as e:
        out["raised"] = "OutOfMemoryError"
        out["preemptive"] = "preemptively rejected" in str(e)
    after = torch.npu.memory_stats()
    out["rejections"] = after.get("num_oom_rejections", 0) - before.get("num_oom_rejections", 0)
    out["ooms"] = after.get("num_ooms", 0) - before.get("num_ooms", 0)
    return out
small, large = {SMALL!r}, {LARGE!r}
"""


# With a fraction in PYTORCH_NPU_ALLOC_CONF, torch_npu's own allocator asks aclrtGetMemInfo for the
# device's total while torch_npu initializes (DeviceCachingAllocator's constructor calls
# setMemoryFraction), before torch_npu sets a device (npu_sys_ctrl.cpp, NpuSysCtrl::Initialize),
# and the runtime refuses that call without a current context (api_impl.cc,
# ApiImpl::MemGetInfoEx: 107002). The bridge initializes torch_npu's allocator too, so either
# way the script sets the device through ACL first, as a component that initialized ACL before
# torch_npu would.
DEVICE_FIRST = """
import ctypes, os
_acl = ctypes.CDLL(os.environ["NPUALLOC_ACL_LIBRARY"])
assert _acl.aclInit(None) == 0 and _acl.aclrtSetDevice(0) == 0
"""


def both(run_npu, code, env=None, first=""):
    env = dict(DEVICE, **(env or {}))
    return {a: run_npu(first + PROBE + textwrap.dedent(code), a, env=env).result for a in ("own", "npualloc")}


@needs_rule
@pytest.mark.parametrize("entry", ["torch_npu._C._npu_npuCachingAllocator_set_allocator_settings",
                                   "torch._C._accelerator_setAllocatorSettings"])
def test_the_rule_set_at_run_time_rejects_what_passes_its_share(run_npu, entry):
    if entry.startswith("torch._C") and not PARSE_HOOK:
        pytest.skip("this torch_npu registers no parser with torch's allocator settings")
    r = both(run_npu, """
        set_settings = ENTRY
        out = {"off": attempt(large)}
        set_settings("throw_on_npumalloc_oom:True,per_process_memory_fraction:0.01")
        out["small"] = attempt(small)
        out["large"] = attempt(large)
        out["again"] = attempt(large)
        total = torch.npu.memory_stats()["num_oom_rejections"]
        torch.npu.reset_accumulated_memory_stats()
        out["total"], out["after_reset"] = total, torch.npu.memory_stats()["num_oom_rejections"]
        # The fraction alone, with the rule off, limits nothing (torch_npu reads it only for the rule).
        set_settings("throw_on_npumalloc_oom:False")
        out["rule_off"] = attempt(large)
        # The rule on again keeps the fraction it was given last.
        set_settings("throw_on_npumalloc_oom:True")
        out["rule_on"] = attempt(large)
        set_settings("per_process_memory_fraction:1.0")
        out["share_whole"] = attempt(large)
        report(out)
    """.replace("ENTRY", entry))
    assert r["npualloc"] == r["own"], r
    served = {"raised": None, "rejections": 0, "ooms": 0}
    rejected = {"raised": "OutOfMemoryError", "preemptive": True, "rejections": 1, "ooms": 0}
    assert r["own"] == {"off": served, "small": served, "large": rejected, "again": rejected, "total": 2,
                        "after_reset": 0, "rule_off": served, "rule_on": rejected, "share_whole": served}


@needs_rule
def test_the_rule_counts_the_new_segment_not_the_request(run_npu):
    # 38 MiB held of the 40.96 MiB share: a 400-byte tensor needs a new 2 MiB segment for small
    # blocks, which passes the share, so the rule rejects it though the request itself would fit.
    # (Set after the NPU is initialized: torch_npu initializes its allocator with a fraction below
    # 1 only where a device is set, see DEVICE_FIRST.)
    r = both(run_npu, """
        keep = torch.empty(38 << 20, dtype=torch.uint8, device="npu")
        torch_npu._C._npu_npuCachingAllocator_set_allocator_settings(
            "throw_on_npumalloc_oom:True,per_process_memory_fraction:0.01")
        report({"small": attempt(small), "reserved": torch.npu.memory_reserved()})
    """)
    assert r["npualloc"]["small"] == r["own"]["small"] == {
        "raised": "OutOfMemoryError", "preemptive": True, "rejections": 1, "ooms": 0}, r


@needs_rule
def test_the_rule_from_the_environment_and_the_config_fraction(run_npu):
    # torch_npu reads both keys when it starts; npualloc reads the same variable (NPUALLOC_CONF
    # unset) and takes the fraction as its memory limit, which getMemoryFraction reports. A
    # request past that limit is an ordinary out-of-memory: torch_npu checks the limit before
    # the rule (alloc_block). Once setMemoryFraction raises the limit, the rule rejects it.
    r = both(run_npu, """
        out = {"fraction": torch.npu.get_per_process_memory_fraction()}
        out["small"], out["large"] = attempt(small), attempt(large)
        torch.npu.set_per_process_memory_fraction(0.5)
        out["set"] = torch.npu.get_per_process_memory_fraction()
        out["large_after_set"] = attempt(large)
        report(out)
    """, env={"PYTORCH_NPU_ALLOC_CONF": "throw_on_npumalloc_oom:True,per_process_memory_fraction:0.01"}, first=DEVICE_FIRST)
    assert r["npualloc"] == r["own"], r
    served = {"raised": None, "rejections": 0, "ooms": 0}
    assert r["own"] == {
        "fraction": pytest.approx(0.01, rel=1e-6), "small": served,
        "large": {"raised": "OutOfMemoryError", "preemptive": False, "rejections": 0, "ooms": 1}, "set": 0.5,
        "large_after_set": {"raised": "OutOfMemoryError", "preemptive": True, "rejections": 1, "ooms": 0}}


@pytest.mark.skipif(not FRACTION_IN_CONFIG, reason="this torch_npu's config has no per_process_memory_fraction")
def test_a_configured_fraction_is_what_get_per_process_memory_fraction_reports(run_npu):
    # Without the rule, a fraction set when torch_npu starts is the limit, read back as such, and
    # a request past it is an out-of-memory (num_ooms).
    r = both(run_npu, """
        out = {"fraction": torch.npu.get_per_process_memory_fraction(), "large": attempt(large)}
        report(out)
    """, env={"PYTORCH_NPU_ALLOC_CONF": "per_process_memory_fraction:0.01"}, first=DEVICE_FIRST)
    assert r["npualloc"] == r["own"], r
    assert r["own"] == {"fraction": pytest.approx(0.01, rel=1e-6),
                        "large": {"raised": "OutOfMemoryError", "preemptive": False, "rejections": 0, "ooms": 1}}


OBSERVER = """
#include <cstdint>
#include <mutex>
#include <vector>
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"

// torch_npu's own allocator calls its observers from a thread of its own.
static std::mutex mu;
static std::vector<uint64_t> seen;

extern "C" void probe_attach() {
  c10_npu::NPUCachingAllocator::attachOomRejectionObserver(
      [](int64_t device, size_t size, size_t held, size_t total) {
        std::lock_guard<std::mutex> g(mu);
        seen.insert(seen.end(), {uint64_t(device), size, held, total});
      });
}
extern "C" int probe_count() { std::lock_guard<std::mutex> g(mu); return int(seen.size()); }
extern "C" uint64_t probe_seen(int i) { std::lock_guard<std::mutex> g(mu); return seen[i]; }
"""


@needs_rule
def test_rejection_observers_are_told(run_npu, cpp_probe):
    lib = cpp_probe(OBSERVER)
    r = both(run_npu, f"""
        import ctypes
        probe = ctypes.CDLL({str(lib)!r})
        probe.probe_seen.restype = ctypes.c_uint64
        keep = torch.empty(8 << 20, dtype=torch.uint8, device="npu")
        probe.probe_attach()
        torch_npu._C._npu_npuCachingAllocator_set_allocator_settings(
            "throw_on_npumalloc_oom:True,per_process_memory_fraction:0.01")
        out = {{"small": attempt(small), "large": attempt(large)}}
        import time
        deadline = time.monotonic() + 60
        while probe.probe_count() < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # a second call, if there were one, would show too
        out["seen"] = [probe.probe_seen(i) for i in range(probe.probe_count())]
        out["reserved"] = torch.npu.memory_reserved()
        report(out)
    """)
    for name, got in r.items():
        assert got["small"]["rejections"] == 0 and got["large"]["rejections"] == 1, (name, got)
        device, size, held, total = got["seen"]
        # One call, for the refused request: the new segment torch_npu's allocator would make for
        # it (64 MiB and the pad, rounded to 2 MiB), what the device's allocator held then, the
        # device's total.
        assert (device, size, total) == (0, 66 << 20, 4 << 30), (name, got)
        assert 8 << 20 <= held == got["reserved"], (name, got)
