"""A missing record_stream is caught by the emulator.

A side stream is held (the emulator's aclemu_stream_hold: its work stays
queued, as on a busy device) while its copy still reads a tensor the main
stream frees. Without record_stream the allocator hands the block out
again at once and the next write into it lands under the queued read: the
emulator counts a violation and the side stream's synchronize reports
507000. With record_stream the block waits for the side stream."""

import pytest

from conftest import EMULATOR

CODE = f"EMULATOR = {str(EMULATOR)!r}\n" + """
import ctypes, os, sysconfig
emu = ctypes.CDLL(EMULATOR)
emu.aclemu_stream_hold.argtypes = emu.aclemu_stream_release.argtypes = [ctypes.c_void_p]
emu.aclemu_violations.restype = ctypes.c_int64
n = 1 << 20
x = torch.arange(n, dtype=torch.float32).to("npu")
torch.npu.synchronize()
side = torch.npu.Stream()
before = emu.aclemu_violations()
if not RECORD:
    emu.aclemu_set_violation_abort(0)   # the violation below is made on purpose: count it
assert emu.aclemu_stream_hold(ctypes.c_void_p(side.npu_stream)) == 0
with torch.npu.stream(side):
    y = torch.empty(n, dtype=torch.float32, device="npu")
    y.copy_(x)                      # queued: reads x's block
if RECORD:
    x.record_stream(side)
freed = x.data_ptr()
del x
z = torch.empty(n, dtype=torch.float32, device="npu")
reused = z.data_ptr() == freed
z.copy_(torch.full((n,), 7.0))      # writes z's block
violations = emu.aclemu_violations() - before
released = emu.aclemu_stream_release(ctypes.c_void_p(side.npu_stream))
torch.npu.synchronize()
report({"reused": reused, "violations": violations, "released": released,
        "y_intact": torch.equal(y.cpu(), torch.arange(n, dtype=torch.float32))})
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_without_record_stream_the_reuse_is_a_violation(run_npu, allocator):
    r = run_npu("RECORD = False\n" + CODE, allocator).result
    assert r["reused"], "the allocator did not hand the freed block out again; the test shows nothing"
    assert r["violations"] == 1
    assert r["released"] == 507000
    assert not r["y_intact"]


@pytest.mark.parametrize("allocator", [
    "own",
    "npualloc",
])
def test_record_stream_keeps_the_block_until_the_stream_is_done(run_npu, allocator):
    r = run_npu("RECORD = True\n" + CODE, allocator).result
    assert not r["reused"]
    assert r["violations"] == 0
    assert r["released"] == 0
    assert r["y_intact"]
