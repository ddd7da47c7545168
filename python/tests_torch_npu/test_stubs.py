"""The wrapper libascendcl.so answers only for what no test here can use.

Every generated stub notes its first call in $STUB_LOG. After the smoke
paths (import, allocation, copies, a side stream, record_stream, zeros,
empty_cache), with either allocator, every stub torch_npu reached must be of
a kind the emulator leaves out on purpose; anything else is a runtime
function the emulator should implement."""

import re

import pytest

# What the emulator leaves to the harness's stubs, and why.
LEFT_OUT = {
    "op compilation and execution (libacl_op_compiler, aclop*)": r"^libacl_op_compiler\.so |^libascendcl\.so aclop",
    "CANN op-package attributes": r"^libascendcl\.so aclGetCannAttribute",
    "graph capture (model RI)": r"^libascendcl\.so aclmdlRI",
    "dump": r"^libascendcl\.so aclmdl\w*Dump",
    "profiling": r"aclprof|Msprof",
    "HCCL": r"^libhccl\.so ",
    "CUDA (absent by design)": r"^lib(cu|nv|nccl)",
}

PATHS = """
x = torch.arange(4096, dtype=torch.float32).to("npu")
assert torch.equal(x.cpu(), torch.arange(4096, dtype=torch.float32))
s = torch.npu.Stream()
with torch.npu.stream(s):
    y = torch.empty(1 << 20, device="npu")
    y.copy_(torch.ones(1 << 20))
y.record_stream(s)
z = torch.zeros(64, device="npu")
e = torch.npu.Event()
e.record(s)
torch.npu.current_stream().wait_event(e)
del x, y, z
torch.npu.synchronize()
torch.npu.empty_cache()
report({"ok": True})
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_only_left_out_functions_reach_a_stub(run_npu, tmp_path, allocator):
    log = tmp_path / "stubs.log"
    assert run_npu(PATHS, allocator, env={"STUB_LOG": str(log)}).result == {"ok": True}
    hits = sorted(set(log.read_text().splitlines())) if log.exists() else []
    unexpected = [h for h in hits if not any(re.search(p, h) for p in LEFT_OUT.values())]
    assert not unexpected, (
        "torch_npu reached stubs for functions the emulator should implement: " + ", ".join(unexpected))
    # The log works: the CUDA registration stubs always run at import.
    assert any(h.startswith("libcudart.so.") for h in hits), hits
