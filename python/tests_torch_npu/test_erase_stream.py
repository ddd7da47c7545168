"""torch_npu's erase-stream guard, under both allocators.

HCCL's work objects end a tensor's stream use when the collective is done:
``WorkHCCL::synchronize`` makes the current stream wait for the collective's
end event and then calls the allocator's ``eraseStream`` (or, with
``MULTI_STREAM_MEMORY_REUSE=3``, ``eraseStreamWithBlockPtr`` with the work
that last used the block). torch_npu's allocator erases the use only when the
current stream is the block's own stream and, with a work, only for the work
recorded on the block: work queued on any other stream could take the block
before the collective ends ("New tensor creation may use the block before HCCL
op is complete", NPUCachingAllocator.cpp, ``eraseStream``).

The recorded stream is held (the emulator's aclemu_stream_hold: its work stays
queued, as while a collective runs), so a block whose use was erased too early
is handed out again at once; one whose use stays waits for the held stream."""

import pytest

from conftest import EMULATOR, ERASE_BY_BLOCK

STREAMS = f"EMULATOR = {str(EMULATOR)!r}\n" + """
import ctypes, os, sysconfig
emu = ctypes.CDLL(EMULATOR)
emu.aclemu_stream_hold.argtypes = emu.aclemu_stream_release.argtypes = [ctypes.c_void_p]
n = 1 << 20
s1 = torch.npu.Stream()          # the blocks' own stream
s2 = torch.npu.Stream()          # the collective's stream, held
def take_on_s1():
    with torch.npu.stream(s1):
        return torch.empty(n, device="npu")
def finish(freed):
    z = take_on_s1()
    reused = z.data_ptr() == freed
    released = emu.aclemu_stream_release(ctypes.c_void_p(s2.npu_stream))
    torch.npu.synchronize()
    report({"reused": reused, "released": released})
x = take_on_s1()
torch.npu.synchronize()
assert emu.aclemu_stream_hold(ctypes.c_void_p(s2.npu_stream)) == 0
x.record_stream(s2)
"""

ERASE = STREAMS + """
with torch.npu.stream(CURRENT()):
    torch_npu.erase_stream(x, s2)
freed = x.data_ptr()
del x
finish(freed)
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_erase_on_the_blocks_own_stream_ends_the_wait(run_npu, allocator):
    r = run_npu("CURRENT = lambda: s1\n" + ERASE, allocator).result
    assert r["reused"], "after the erase on the block's own stream the free still waited for the held stream"
    assert r["released"] == 0


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_erase_on_another_stream_keeps_the_wait(run_npu, allocator):
    r = run_npu("CURRENT = torch.npu.default_stream\n" + ERASE, allocator).result
    assert not r["reused"], "the erase from another stream let the block be taken while the held stream used it"
    assert r["released"] == 0


# ProcessGroupHCCL's calls with MULTI_STREAM_MEMORY_REUSE=3 (getBlockPtr,
# recordHcclWorkForBlock, eraseStreamWithBlockPtr) exist only in C++: a probe
# compiled against the installed torch_npu's headers makes them the same way,
# through the inline functions of NPUCachingAllocator.h.
PROBE = r"""
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace NCA = c10_npu::NPUCachingAllocator;

extern "C" {
__attribute__((visibility("default"))) void* probe_block_ptr(PyObject* tensor) {
  try {
    return NCA::getBlockPtr(THPVariable_Unpack(tensor).storage().data_ptr());
  } catch (...) {
    return nullptr;
  }
}
__attribute__((visibility("default"))) int probe_record_work(void* block, void* work) {
  try {
    NCA::recordHcclWorkForBlock(block, work);
    return 0;
  } catch (...) {
    return 1;
  }
}
__attribute__((visibility("default"))) int probe_erase(void* block, int64_t id, int64_t index, int64_t type,
                                                       void* work) {
  try {
    auto s = c10_npu::NPUStream::unpack3(id, static_cast<c10::DeviceIndex>(index), static_cast<c10::DeviceType>(type));
    NCA::eraseStreamWithBlockPtr(block, s, work);
    return 0;
  } catch (...) {
    return 1;
  }
}
}
"""

WORK = STREAMS + """
probe = ctypes.CDLL(PROBE_LIB)
probe.probe_block_ptr.argtypes = [ctypes.py_object]
probe.probe_block_ptr.restype = ctypes.c_void_p
probe.probe_record_work.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
probe.probe_erase.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
def erase(block, work):
    with torch.npu.stream(s1):
        assert probe.probe_erase(block, s2.stream_id, s2.device_index, int(s2.device_type), work) == 0
block = probe.probe_block_ptr(x)
assert block
assert probe.probe_record_work(block, 0x1000) == 0
"""


@pytest.fixture
def probe_lib(cpp_probe):
    return str(cpp_probe(PROBE, libs=("torch_python", "torch", "torch_cpu")))


@pytest.mark.skipif(not ERASE_BY_BLOCK, reason="this torch_npu has no eraseStreamWithBlockPtr")
@pytest.mark.parametrize("allocator", ["own", "npualloc"])
@pytest.mark.parametrize("work,ends", [(0x1000, True), (0x2000, False)], ids=["recorded_work", "another_work"])
def test_an_erase_with_a_work_ends_the_wait_only_for_the_recorded_work(run_npu, probe_lib, allocator, work, ends):
    r = run_npu(f"PROBE_LIB = {probe_lib!r}\n" + WORK + f"""
erase(block, {work})
freed = x.data_ptr()
del x
finish(freed)
""", allocator).result
    assert r["reused"] == ends, ("the erase with the block's recorded work did not end the wait" if ends else
                                 "an erase for another HCCL work let the block be taken while the held stream used it")


@pytest.mark.skipif(not ERASE_BY_BLOCK, reason="this torch_npu has no eraseStreamWithBlockPtr")
def test_a_stale_erase_leaves_the_blocks_next_tenant_alone(run_npu, probe_lib):
    # x's work ends and x goes; y takes x's memory on s1 and the held stream
    # uses it; the old work's erase for x's block arrives late. npualloc's
    # block pointer is the block's address, which y now holds. (Not run under
    # torch_npu's own allocator: there y is a new Block split off the cached
    # one, and the old pointer names the remainder, so the case does not arise.)
    allocator = "npualloc"
    r = run_npu(f"PROBE_LIB = {probe_lib!r}\n" + WORK + """
erase(block, 0x1000)
freed = x.data_ptr()
del x
y = take_on_s1()
assert y.data_ptr() == freed
y.record_stream(s2)
erase(block, 0x1000)
del y
finish(freed)
""", allocator).result
    assert not r["reused"], "a stale erase for the block's previous tenant ended the new tenant's wait"
