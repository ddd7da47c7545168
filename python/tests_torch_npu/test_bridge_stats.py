"""torch.npu.memory_stats() through the torch_npu bridge: the peaks of block
counts and the cumulative requested bytes the bridge counts itself, against
npualloc's own statistics and the sizes asked (each with torch_npu's 32-byte
tail on this SoC)."""

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
