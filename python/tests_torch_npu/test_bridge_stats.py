"""torch.npu.memory_stats() through the torch_npu bridge: the peaks of block
counts and the cumulative requested bytes the bridge counts itself, against
npualloc's own statistics and the sizes asked (each with torch_npu's 32-byte
tail on this SoC)."""

import pytest
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
    asked = [(1 << 22) + 32, 3000 + 32, (1 << 16) + 32]
    assert st["allocation.all.peak"] == st["active.all.peak"] == 3, "three blocks were live at once"
    assert st["allocation.all.current"] == npl["active_blocks"] == 1
    assert st["requested_bytes.all.allocated"] == sum(asked)
    assert st["requested_bytes.all.freed"] == sum(asked[1:])
    assert st["requested_bytes.all.allocated"] - st["requested_bytes.all.freed"] == st["requested_bytes.all.current"]
    assert st["requested_bytes.all.current"] == npl["requested_bytes"]
    assert r["peak_after_reset"] == 1, "reset_peak_memory_stats: the peak is what is live"
    assert r["after_reset"] == [0, 0]
    assert r["after_one"] == [5000 + 32, 0, 2]
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
