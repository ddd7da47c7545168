"""The torch_npu bridge's memory history: with context="all" the stack frames
of a free are recorded too and reach torch.npu.memory._snapshot() on the
free_requested entry; with context="alloc" only allocations carry frames."""

import textwrap

import pytest

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
