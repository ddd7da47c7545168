"""torch_npu's NPU sanitizer (TORCH_NPU_SANITIZER=1, stream mode) sees
npualloc's blocks as it sees its own allocator's: the same allocation, free,
record_stream and erase events, in the same order, reach the callback
registries of torch_npu.utils._npu_trace."""

import os
import textwrap

import pytest
from conftest import STREAM_TRACE
from test_bridge import run

EVENTS = """
    import torch_npu.utils._npu_trace as trace
    seen = []
    def on(kind):
        return lambda *args: seen.append([kind] + [int(a) for a in args])
    trace.register_callback_for_npu_memory_allocation(on("alloc"), "alloc")
    trace.register_callback_for_npu_memory_deallocation(on("free"), "free")
    # Releases before 2.9 trace no record_stream or erase.
    if hasattr(trace, "register_callback_for_npu_record_stream"):
        trace.register_callback_for_npu_record_stream(on("record"), "record")
        trace.register_callback_for_npu_erase_stream(on("erase"), "erase")
    side = torch.npu.Stream()
    x = torch.empty(1000, device="npu")
    y = torch.empty(1 << 20, device="npu")
    x.record_stream(side)
    torch_npu.erase_stream(x, side)                     # on x's own stream: the use ends
    px, py, ps = x.data_ptr(), y.data_ptr(), side.npu_stream
    del x, y
    names = {px: "x", py: "y", ps: "side"}
    report([[e[0]] + [names.get(a, "?") for a in e[1:]] for e in seen])
"""


LATER = "import torch_npu.npu._sanitizer as csan\ncsan.enable_npu_sanitizer()\n"


@pytest.mark.parametrize("sanitizer", ["at import", "later", "never"])
def test_the_sanitizer_sees_the_same_events_from_both_allocators(run_npu, sanitizer):
    # torch_npu turns its sanitizer on at import whenever TORCH_NPU_SANITIZER is set, whatever
    # its value (torch_npu/_init/core/optional_features.py, _enable_sanitizer_if_needed); a
    # program may also turn it on later (torch_npu/npu/_sanitizer.py, enable_npu_sanitizer), after
    # npualloc.torch_npu.enable().
    assert "TORCH_NPU_SANITIZER" not in os.environ
    env = {"TORCH_NPU_SANITIZER": "1"} if sanitizer == "at import" else None
    code = (LATER if sanitizer == "later" else "") + textwrap.dedent(EVENTS)
    own = run_npu(code, "own", env=env).result
    ours = run(run_npu, code, env=env).result
    assert ours == own, f"torch_npu's own allocator: {own}\nnpualloc: {ours}"
    if sanitizer != "never":
        expected = [["alloc", "x"], ["free", "x"]]
        if STREAM_TRACE:
            expected += [["record", "x", "side"], ["erase", "x", "side"]]
        for event in expected:
            assert event in own, (event, own)
    else:
        assert own == [], "without the sanitizer nothing is traced"
