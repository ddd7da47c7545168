"""An uncorrectable memory error (UCE) under both allocators in the real torch_npu: the emulator
fails the next synchronize with ACL_ERROR_RT_DEVICE_MEM_ERROR and lists the failed range
(aclrtGetMemUceInfo), torch_npu turns that into "UCE ERROR", and check_uce_in_memory asks the
allocator whether the range is in its memory: 3 for a live tensor (whose block is then unsafe until
rewritten), 2 for cached memory that emptyCache gives back, 1 for memory the allocator does not
hold (torch_npu's Module.cpp, THNPModule_check_uce_in_memory_wrap; NPUCachingAllocator.cpp,
checkUceInMemPool). npualloc must answer as torch_npu's own allocator does."""

import pytest

from test_bridge import run

UCE = """
emu = emulator()
emu.aclemu_inject_uce.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]
emu.aclrtGetMemUceInfo.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
emu.aclrtMemUceRepair.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
keep = torch.empty(1 << 20, device="npu")  # 4 MiB, alive throughout
results = {}
for where in ("outside", "cached", "live"):
    if where == "live":
        target = keep.data_ptr() + 4096
    elif where == "cached":
        gone = torch.empty(16 << 20, device="npu")  # 64 MiB, freed before the error
        target = gone.data_ptr() + 4096
        del gone
    else:
        target = keep.data_ptr() + (1 << 40)  # memory no allocator holds
    torch.npu.synchronize()
    assert emu.aclemu_inject_uce(0, target, 64) == 0
    try:
        torch.npu.synchronize()
        error = ""
    except RuntimeError as e:
        error = str(e)
    answer = torch_npu.npu.check_uce_in_memory(0)
    out = {"uce_error": "UCE ERROR" in error, "answer": answer,
           "safe": torch_npu._C._check_npu_data_ptr(keep.untyped_storage()),
           "flag": torch_npu._C._get_npu_data_unsafe_flag()}
    torch_npu._C._update_npu_data_ptr(keep.untyped_storage())
    out["safe_after_update"] = torch_npu._C._check_npu_data_ptr(keep.untyped_storage())
    torch_npu._C._mark_all_npu_data_ptr_unsafe(0)
    out["safe_after_mark_all"] = torch_npu._C._check_npu_data_ptr(keep.untyped_storage())
    results[where] = out
    # Repaired, and the process's flag and the tensor cleared, for the next case.
    info = (ctypes.c_size_t * 16 * 128)()
    n = ctypes.c_size_t()
    assert emu.aclrtGetMemUceInfo(0, info, 128, ctypes.byref(n)) == 0
    assert emu.aclrtMemUceRepair(0, info, n.value) == 0
    torch_npu._C._set_npu_data_unsafe_flag(False)
    torch_npu._C._update_npu_data_ptr(keep.untyped_storage())
report(results)
"""

EXPECTED = {
    "live": {"answer": 3, "safe": False, "flag": True},
    "cached": {"answer": 2, "safe": True, "flag": True},
    "outside": {"answer": 1, "safe": True, "flag": False},
}


def test_check_uce_in_memory_answers_as_torch_npus_own_allocator(run_npu):
    own = run(run_npu, UCE, "own").result
    ours = run(run_npu, UCE, "npualloc").result
    assert ours == own, ("npualloc answers as torch_npu's own allocator", own, ours)
    for where, expected in EXPECTED.items():
        got = ours[where]
        assert got["uce_error"], (where, got)
        for key, value in expected.items():
            assert got[key] == value, (where, key, got)
        assert got["safe_after_update"] and not got["safe_after_mark_all"], (where, got)
