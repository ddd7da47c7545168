"""The torch_npu bridge's memory history: with context="all" the stack frames
of a free are recorded too and reach torch.npu.memory._snapshot() on the
free_requested entry; with context="alloc" only allocations carry frames."""

import textwrap

import pytest

from conftest import POOL_IN_TRACE
from test_bridge import run

CODE = """
    torch.npu.memory._record_memory_history(max_entries=1000, stacks="python", context=CONTEXT)
    holder = []
    def make_the_tensor():
        holder.append(torch.empty(3 << 20, dtype=torch.uint8, device="npu"))
    def drop_the_tensor():
        holder.clear()
    make_the_tensor()
    addr = holder[0].data_ptr()
    drop_the_tensor()
    snap = torch.npu.memory._snapshot()
    torch.npu.memory._record_memory_history(enabled=None)
    mine = [t for t in snap["device_traces"][0] if t["addr"] == addr]
    report({"actions": [t["action"] for t in mine],
            "frames": {t["action"]: [f["name"] for f in t.get("frames", [])] for t in mine},
            "npl_frees": npl_stats()["num_frees"]})
"""


@pytest.mark.parametrize("context", ["all", "alloc"])
def test_free_entries_carry_the_frees_frames_with_context_all(run_npu, context):
    r = run(run_npu, f"CONTEXT = {context!r}\n" + textwrap.dedent(CODE)).result
    assert [a for a in r["actions"] if a in ("alloc", "free_requested")] == ["alloc", "free_requested"], r["actions"]
    assert r["npl_frees"] == 1
    assert "make_the_tensor" in r["frames"]["alloc"], r["frames"]
    if context == "all":
        assert "drop_the_tensor" in r["frames"]["free_requested"], r["frames"]
        assert "make_the_tensor" not in r["frames"]["free_requested"], "the free's own frames, not the allocation's"
    else:
        assert r["frames"]["free_requested"] == [], r["frames"]


def test_dump_snapshot_writes_the_file_then_fails_on_the_emulator(run_npu):
    """torch_npu's _dump_snapshot pickles _snapshot() first, then saves the
    device's memory-usage table (aclrtGetMemUsageInfo) and, when that fails,
    starts its profiler (torch_npu/npu/memory.py, _dump_snapshot). The
    emulator has neither, so the call raises after the file is written; the
    README says so and gives the way that works. When this test fails because
    the call no longer raises, the README's "What works" list can drop that note."""
    r = run(run_npu, """
        import pickle
        torch.npu.memory._record_memory_history(max_entries=1000)
        def make_the_tensor():
            return torch.empty(3 << 20, dtype=torch.uint8, device="npu")
        x = make_the_tensor()
        try:
            torch.npu.memory._dump_snapshot("snap.pickle")
            raised = None
        except RuntimeError as e:
            raised = str(e)
        with open("snap.pickle", "rb") as f:
            dumped = pickle.load(f)
        # The README's way: _snapshot() pickled by hand, the same dict.
        with open("by_hand.pickle", "wb") as f:
            pickle.dump(torch.npu.memory._snapshot(), f)
        with open("by_hand.pickle", "rb") as f:
            by_hand = pickle.load(f)
        def allocs(snap):
            return [[fr["name"] for fr in t["frames"]] for t in snap["device_traces"][0]
                    if t["action"] == "alloc" and t["addr"] == x.data_ptr()]
        report({"raised": raised, "dumped": allocs(dumped), "by_hand": allocs(by_hand),
                "segments": len(by_hand["segments"])})
    """).result
    assert r["raised"] is not None and "libmsprofiler" in r["raised"], r["raised"]
    for name in ("dumped", "by_hand"):
        assert len(r[name]) == 1 and "make_the_tensor" in r[name][0], (name, r[name])
    assert r["segments"] >= 1


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_the_default_history_keeps_every_allocations_frames(run_npu, allocator):
    """_record_memory_history's default max_entries is sys.maxsize (and
    OOM_SNAPSHOT_ENABLE passes UINT64_MAX): every allocation keeps its frames."""
    r = run(run_npu, """
        torch.npu.memory._record_memory_history(stacks="python")
        def make_one():
            return torch.empty(4096, dtype=torch.uint8, device="npu")
        keep = [make_one() for _ in range(3000)]
        snap = torch.npu.memory._snapshot()
        torch.npu.memory._record_memory_history(enabled=None)
        allocs = [t for t in snap["device_traces"][0] if t["action"] == "alloc"]
        framed = [t for t in allocs if any(f["name"] == "make_one" for f in t.get("frames", []))]
        report({"allocs": len(allocs), "framed": len(framed)})
    """, allocator).result
    assert r["allocs"] >= 3000
    assert r["framed"] == 3000, r


@pytest.mark.skipif(not POOL_IN_TRACE, reason="this torch_npu's trace entries carry no pool")
@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_trace_entries_carry_their_pool(run_npu, allocator):
    # As torch_npu's own allocator tags them (TraceEntry's mempool): a MemPool's allocation and
    # free carry its id, the default pool's (0, 0).
    r = run(run_npu, """
        torch.npu.memory._record_memory_history(max_entries=1000)
        pool = torch.npu.MemPool()
        with torch.npu.use_mem_pool(pool):
            x = torch.empty(1 << 20, dtype=torch.uint8, device="npu")
        y = torch.empty(1 << 20, dtype=torch.uint8, device="npu")
        addrs = {"pool": x.data_ptr(), "default": y.data_ptr()}
        del x, y
        snap = torch.npu.memory._snapshot()
        torch.npu.memory._record_memory_history(enabled=None)
        got = {name: sorted({(t["action"], tuple(t["pool_id"])) for t in snap["device_traces"][0]
                             if t.get("addr") == a and t["action"] in ("alloc", "free_requested")})
               for name, a in addrs.items()}
        report({"got": got, "pool": list(pool.id)})
    """, allocator).result
    pool = tuple(r["pool"])
    assert r["got"]["pool"] == [["alloc", list(pool)], ["free_requested", list(pool)]], r
    assert r["got"]["default"] == [["alloc", [0, 0]], ["free_requested", [0, 0]]], r
