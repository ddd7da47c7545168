"""torch_npu's own caching allocator with PYTORCH_NPU_ALLOC_CONF=
expandable_segments:True on the emulator (docs/runtime-behaviour.md, "How
torch_npu uses the virtual-memory calls"): its 512-byte probe at
initialization (made before any device is set) succeeds and is released, so
expandable segments stay on; memory then comes from reserved ranges with
physical handles mapped into them (20 MiB pages in the large pool, 2 MiB in
the small one, one range per pool), never from aclrtMalloc; a segment grows
in place; and empty_cache unmaps, frees and releases everything. The
emulator's own counters and call counts are the reference."""

import pytest

from conftest import DEVICE_CALL_COUNTS
from test_bridge import run

MIB = 1 << 20
# torch_npu's page per pool (NPUCachingAllocator.cpp: kSmallBuffer, kLargeBuffer).
SMALL_PAGE, LARGE_PAGE = 2 * MIB, 20 * MIB

CALLS = ("aclrtReserveMemAddress", "aclrtReleaseMemAddress", "aclrtMallocPhysical", "aclrtFreePhysical",
         "aclrtMapMem", "aclrtUnmapMem", "aclrtMalloc", "aclrtFree")

CODE = f"""
emu = emulator()
emu.aclemu_call_count.restype = ctypes.c_int64
emu.aclemu_call_count.argtypes = [ctypes.c_char_p]
class Usage(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "malloc_bytes", "malloc_count", "physical_bytes", "physical_count", "mapped_bytes",
        "reserved_ranges", "streams", "events", "descs", "syncs")]
def state():
    out = {{c: emu.aclemu_call_count(c.encode()) for c in {CALLS!r}}}
    if torch.npu.is_initialized():
        u = Usage()
        assert emu.aclemu_get_usage(0, ctypes.byref(u)) == 0
        out.update({{n: getattr(u, n) for n in ("malloc_count", "physical_count", "physical_bytes",
                                               "mapped_bytes", "reserved_ranges")}})
        st = torch.npu.memory_stats()
        out.update(allocated=torch.npu.memory_allocated(), reserved=torch.npu.memory_reserved(),
                   segments=st.get("segment.all.current", 0), device_allocs=st.get("num_device_alloc", 0),
                   device_frees=st.get("num_device_free", 0))
    return out
s = {{"start": state()}}
torch.npu.init()
s["init"] = state()
x = torch.empty(1 << 20, device="npu")                  # 4 MiB: the large pool
s["x"] = state()
y = torch.empty(3000, dtype=torch.uint8, device="npu")  # the small pool
s["y"] = state()
z = torch.empty(25 << 18, device="npu")                 # 25 MiB more in the large pool
s["z"] = state()
s["z_offset"] = z.data_ptr() - x.data_ptr()
del x, y, z
torch.npu.synchronize()
s["freed"] = state()
torch.npu.empty_cache()
s["emptied"] = state()
s["violations"] = emu.aclemu_violations()
report(s)
"""


@pytest.fixture
def expandable(run_npu):
    out = run(run_npu, CODE, "own", env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert "expandable_segments setting failure" not in out.stdout + out.stderr, "torch_npu fell back to False"
    return out.result


def test_the_probe_at_initialization_succeeds_and_is_released(expandable):
    start, init = expandable["start"], expandable["init"]
    assert all(start[c] == 0 for c in CALLS), start
    # parseArgs: one 512-byte reservation, released at once; nothing mapped.
    assert init["aclrtReserveMemAddress"] == 1 and init["aclrtReleaseMemAddress"] == 1, init
    assert init["reserved_ranges"] == 0 and init["mapped_bytes"] == 0 and init["reserved"] == 0


def test_memory_comes_from_mapped_pages_of_reserved_ranges(expandable):
    x, y, z = expandable["x"], expandable["y"], expandable["z"]
    # 4 MiB: one large-pool range, one 20 MiB page mapped into it.
    assert x["allocated"] == 4 * MIB + 512
    assert x["reserved"] == x["mapped_bytes"] == x["physical_bytes"] == LARGE_PAGE
    assert (x["reserved_ranges"], x["physical_count"], x["aclrtMapMem"]) == (1, 1, 1)
    assert x["aclrtReserveMemAddress"] == 2, "the probe and the large pool's range"
    # 3000 bytes: a second range (the small pool's) with one 2 MiB page.
    assert y["reserved"] == y["mapped_bytes"] == LARGE_PAGE + SMALL_PAGE
    assert (y["reserved_ranges"], y["physical_count"]) == (2, 2)
    # 25 MiB more: the large segment grows in place by one page, no new range.
    assert z["reserved"] == z["mapped_bytes"] == 2 * LARGE_PAGE + SMALL_PAGE
    assert (z["reserved_ranges"], z["physical_count"], z["aclrtReserveMemAddress"]) == (2, 3, 3)
    assert x["allocated"] <= expandable["z_offset"] < LARGE_PAGE, "z follows x in the same range"
    for st in (x, y, z):
        assert st["reserved"] % SMALL_PAGE == 0
        assert st["aclrtMalloc"] == 0 and st["malloc_count"] == 0, "no aclrtMalloc segments"
        # torch_npu counts one device allocation per mapped range (where it counts them) and no segment.
        assert st["device_allocs"] == (st["aclrtMapMem"] if DEVICE_CALL_COUNTS else 0) and st["segments"] == 0


def test_freed_memory_stays_cached_until_empty_cache_gives_it_back(expandable):
    z, freed, emptied = expandable["z"], expandable["freed"], expandable["emptied"]
    assert freed["allocated"] == 0
    assert freed["reserved"] == freed["mapped_bytes"] == z["reserved"]
    assert freed["aclrtUnmapMem"] == 0 and freed["reserved_ranges"] == 2
    assert emptied["reserved"] == 0
    assert (emptied["mapped_bytes"], emptied["physical_count"], emptied["reserved_ranges"]) == (0, 0, 0)
    # Every page unmapped and freed, every range (the probe's too) released.
    assert emptied["aclrtUnmapMem"] == emptied["aclrtMapMem"] == emptied["aclrtFreePhysical"] == 3
    assert emptied["aclrtReleaseMemAddress"] == emptied["aclrtReserveMemAddress"] == 3
    assert expandable["violations"] == 0
