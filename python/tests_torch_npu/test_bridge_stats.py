"""torch.npu.memory_stats() through the torch_npu bridge: the peaks of block
counts and the requested bytes the bridge counts itself, against npualloc's
own statistics and the sizes asked (torch_npu's requested size is the one
asked, without the 32 bytes it pads each request with on this SoC), and every
key against torch_npu's own allocator on the same program."""

import pytest
from conftest import DEVICE_CALL_COUNTS
from test_bridge import run


def test_block_count_peaks_and_cumulative_requested_bytes(run_npu):
    r = run(run_npu, """
        sizes = [1 << 22, 3000, 1 << 16]
        ts = [torch.empty(n, dtype=torch.uint8, device="npu") for n in sizes]
        del ts[1:]                                      # one live, two freed
        st = torch.npu.memory_stats()
        out = {"npl": npl_stats(), "st": {k: v for k, v in st.items() if k.startswith(("allocation.all",
               "active.all", "requested_bytes.all"))}}
        torch.npu.reset_peak_memory_stats()
        out["peak_after_reset"] = torch.npu.memory_stats()["allocation.all.peak"]
        torch.npu.reset_accumulated_memory_stats()
        st = torch.npu.memory_stats()
        out["after_reset"] = [st["requested_bytes.all.allocated"], st["requested_bytes.all.freed"]]
        w = torch.empty(5000, dtype=torch.uint8, device="npu")
        st = torch.npu.memory_stats()
        out["after_one"] = [st["requested_bytes.all.allocated"], st["requested_bytes.all.freed"],
                            st["allocation.all.peak"]]
        summary = torch.npu.memory_summary()
        out["allocs_line"] = [l for l in summary.splitlines() if "Allocations" in l]
        report(out)
    """).result
    st, npl = r["st"], r["npl"]
    asked = [1 << 22, 3000, 1 << 16]
    assert st["allocation.all.peak"] == st["active.all.peak"] == 3, "three blocks were live at once"
    assert st["allocation.all.current"] == npl["active_blocks"] == 1
    assert st["requested_bytes.all.allocated"] == sum(asked)
    assert st["requested_bytes.all.freed"] == sum(asked[1:])
    assert st["requested_bytes.all.allocated"] - st["requested_bytes.all.freed"] == st["requested_bytes.all.current"]
    assert st["requested_bytes.all.current"] == npl["requested_bytes"] - 32, "npualloc was asked for the pad too"
    assert r["peak_after_reset"] == 1, "reset_peak_memory_stats: the peak is what is live"
    assert r["after_reset"] == [0, 0]
    assert r["after_one"] == [5000, 0, 2]
    assert int(r["allocs_line"][0].split("|")[2]) == 2, "memory_summary's peak column shows it"


@pytest.mark.parametrize("conf", ["expandable_segments:false", "expandable_segments:true"])
def test_segment_counts_agree_with_each_other_and_npualloc(run_npu, conf):
    """segment.all.*: current, peak, allocated and freed never contradict
    each other, in fixed and expandable mode (where a segment is an address
    range with handles mapped into it, and no aclrtMalloc is made)."""
    r = run(run_npu, """
        def seg():
            st = torch.npu.memory_stats()
            return {k: st["segment.all." + k] for k in ("current", "peak", "allocated", "freed")}
        torch.npu.reset_accumulated_memory_stats()      # before anything exists
        ts = [torch.empty(n, dtype=torch.uint8, device="npu") for n in (3000, 1 << 22, 64 << 20)]
        out = {"live": seg(), "npl_live": npl_stats()["segments"]}
        del ts
        torch.npu.empty_cache()
        out["emptied"], out["npl_emptied"] = seg(), npl_stats()["segments"]
        line = [l for l in torch.npu.memory_summary().splitlines() if "NPU reserved segments" in l][0]
        out["summary"] = [int(f.strip()) for f in line.split("|")[2:6]]
        torch.npu.reset_peak_memory_stats()
        out["peak_reset"] = seg()
        report(out)
    """, env={"NPUALLOC_CONF": conf}).result
    live, emptied = r["live"], r["emptied"]
    assert live["current"] == r["npl_live"] >= 1
    assert live["allocated"] - live["freed"] == live["current"], live
    assert live["peak"] >= live["current"]
    assert emptied["current"] == r["npl_emptied"]
    assert emptied["allocated"] - emptied["freed"] == emptied["current"], emptied
    assert emptied["allocated"] >= live["allocated"] and emptied["freed"] >= live["current"] - emptied["current"]
    assert emptied["peak"] >= live["current"], "the peak remembers the segments given back"
    assert r["summary"] == [emptied["current"], emptied["peak"], emptied["allocated"], emptied["freed"]]
    assert r["peak_reset"]["peak"] == r["peak_reset"]["current"] == emptied["current"]


# One workload under torch_npu's own allocator and under npualloc: the keys of
# memory_stats() that must agree, and why each other key may differ.
WORKLOAD = """
    torch.npu.reset_accumulated_memory_stats()
    at_reset = torch.npu.memory_stats()
    u8 = dict(dtype=torch.uint8, device="npu")
    ts = [torch.empty(n, **u8) for n in (100, 3000, 600_000, 2 << 20, 5 << 20, 30 << 20, 1 << 16)]
    del ts[1], ts[2]                                   # a small and a large block freed
    keep = torch.empty(1000, **u8)
    torch.npu.reset_peak_memory_stats()
    for n in (7 << 20, 700, 3 << 20):                  # peaks after the reset
        t = torch.empty(n, **u8)
        del t
    del ts[0]
    report({"end": torch.npu.memory_stats(), "at_reset": at_reset, "unused": torch.npu.memory_stats(1)})
"""

# Per key prefix: why npualloc's figure may differ from torch_npu's own.
MAY_DIFFER = {
    "reserved_bytes.": "npualloc's segments (sizes, expandable ranges) are its own",
    "segment.": "npualloc's segments (sizes, expandable ranges) are its own",
    "num_device_alloc": "npualloc's segments (sizes, expandable ranges) are its own",
    "num_device_free": "npualloc's segments (sizes, expandable ranges) are its own",
    "inactive_split.": "cached pieces depend on the segments; npualloc keeps their current count only",
    "inactive_split_bytes.": "cached pieces depend on the segments; npualloc keeps their current bytes only",
    "allocated_bytes.small_pool.peak": "npualloc takes a pool kind's peak when the total peaks",
    "allocated_bytes.large_pool.peak": "npualloc takes a pool kind's peak when the total peaks",
    "active_bytes.small_pool.peak": "npualloc takes a pool kind's peak when the total peaks",
    "active_bytes.large_pool.peak": "npualloc takes a pool kind's peak when the total peaks",
}


@pytest.mark.parametrize("conf", ["expandable_segments:false", "expandable_segments:true"])
def test_memory_stats_agree_with_torch_npus_own_allocator(run_npu, conf):
    own_run = run_npu(WORKLOAD, "own").result
    own = own_run["end"]
    r = run(run_npu, WORKLOAD, env={"NPUALLOC_CONF": conf}).result
    npl, at_reset = r["end"], r["at_reset"]
    # A device never used has no allocator yet: its statistics are zeroes, its limit none.
    assert r["unused"]["max_split_size"] == own_run["unused"]["max_split_size"] == -1
    assert r["unused"]["allocated_bytes.all.current"] == 0
    # The accumulated counters torch_npu resets (resetAccumulatedStats) read 0 right after.
    reset = ("num_ooms", "num_alloc_retries")
    if DEVICE_CALL_COUNTS:
        reset += ("num_device_alloc", "num_device_free", "num_sync_all_streams")
    else:
        assert not {"num_device_alloc", "num_device_free", "num_sync_all_streams"} & own.keys()
    for key in reset:
        assert at_reset[key] == 0, (key, at_reset[key])
    assert own.keys() == npl.keys(), f"keys only torch_npu has: {sorted(own.keys() - npl.keys())}, " \
                                     f"only npualloc: {sorted(npl.keys() - own.keys())}"
    differ = {}
    for key, value in own.items():
        if any(key.startswith(p) for p in MAY_DIFFER):
            continue
        if npl[key] != value:
            differ[key] = (value, npl[key])
    assert not differ, f"(torch_npu, npualloc) of keys that must agree: {differ}"
    # The workload moves every figure that must agree (a key stuck at 0 in both agrees vacuously).
    for stat in ("allocation", "active", "allocated_bytes", "active_bytes", "requested_bytes"):
        for kind in ("all", "small_pool", "large_pool"):
            assert all(own[f"{stat}.{kind}.{f}"] > 0 for f in ("current", "peak", "allocated", "freed")), stat
    assert own["max_split_size"] == -1
    # What may differ still holds together: a kind's peaks are no lower than what it holds, and
    # the kinds' current segments and reserved bytes add up to npualloc's own (fixed mode: no
    # unmapped handles cached, which belong to no kind).
    for stat in ("allocated_bytes", "active_bytes"):
        for kind in ("small_pool", "large_pool"):
            assert npl[f"{stat}.{kind}.current"] <= npl[f"{stat}.{kind}.peak"] <= npl[f"{stat}.all.peak"]
    if conf == "expandable_segments:false":
        for stat in ("reserved_bytes", "segment", "inactive_split", "inactive_split_bytes"):
            assert npl[f"{stat}.small_pool.current"] + npl[f"{stat}.large_pool.current"] == npl[f"{stat}.all.current"]
    for stat in ("reserved_bytes", "segment"):
        st = {f: npl[f"{stat}.all.{f}"] for f in ("current", "peak", "allocated", "freed")}
        assert st["allocated"] - st["freed"] == st["current"] - at_reset[f"{stat}.all.current"], (stat, st)
        assert st["current"] <= st["peak"], (stat, st)
    if conf == "expandable_segments:true":
        assert npl["inactive_split.all.current"] == npl["inactive_split_bytes.all.current"] == 0
    else:
        assert npl["inactive_split.all.current"] >= 1, "a freed piece of a segment others share"
