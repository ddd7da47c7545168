"""The torch_npu bridge (npualloc.torch_npu.enable()) under the real
torch_npu 2.14 on the emulator: every torch.npu memory API against
npualloc's own statistics, record_stream, out-of-memory, empty_cache with
the task queue on, the 32-byte tail, snapshots with stack frames, tensors alive at exit
(graph capture and MemPool: test_graphs.py)."""

import textwrap

import pytest

# What every child gets: npualloc's statistics of device 0 (the allocator
# torch_npu allocates from) and the emulator's test controls.
HELPERS = """
import ctypes
import os
import npualloc._lib as _L
import npualloc.torch_npu as nt
def npl_stats(device=0):
    lib = _L.lib()
    a = ctypes.c_void_p()
    lib.npualloc_pluggable_allocator.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    assert lib.npualloc_pluggable_allocator(device, ctypes.byref(a)) == 0, _L.last_error()
    s = _L.Stats()
    s.struct_size = ctypes.sizeof(s)
    lib.npualloc_get_stats.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    assert lib.npualloc_get_stats(a, ctypes.byref(s)) == 0, _L.last_error()
    return {name: getattr(s, name) for name, _ in _L.Stats._fields_}
def emulator():
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if path.endswith("/libascendcl.so"):
            emu = ctypes.CDLL(path)
            emu.aclemu_violations.restype = ctypes.c_int64
            return emu
    raise RuntimeError("no libascendcl.so loaded")
"""


def run(run_npu, code, allocator="npualloc", **kw):
    return run_npu(HELPERS + textwrap.dedent(code), allocator, **kw)


def test_memory_apis_report_npualloc_statistics(run_npu):
    r = run(run_npu, """
        x = torch.empty(1 << 20, device="npu")          # 4 MiB
        y = torch.empty(3000, dtype=torch.uint8, device="npu")
        del y
        s = npl_stats()
        st = torch.npu.memory_stats()
        summary = torch.npu.memory_summary()
        out = {
            "npl": s,
            "allocated": torch.npu.memory_allocated(), "reserved": torch.npu.memory_reserved(),
            "max_allocated": torch.npu.max_memory_allocated(), "max_reserved": torch.npu.max_memory_reserved(),
            "stats": {k: st[k] for k in ("allocation.all.current", "allocation.all.allocated",
                                          "allocation.all.freed", "requested_bytes.all.current",
                                          "requested_bytes.all.peak", "active_bytes.all.current",
                                          "segment.all.current", "num_ooms", "num_alloc_retries")},
            "summary_has_header": "PyTorch NPU memory summary" in summary,
        }
        z = torch.empty(8 << 20, dtype=torch.uint8, device="npu")
        del z
        torch.npu.reset_peak_memory_stats()
        out["peak_after_reset"] = torch.npu.max_memory_allocated()
        out["allocated_after_reset"] = torch.npu.memory_allocated()
        torch.npu.reset_accumulated_memory_stats()
        st = torch.npu.memory_stats()
        out["counts_after_reset"] = [st["allocation.all.allocated"], st["allocation.all.freed"]]
        out["current_after_reset"] = st["allocation.all.current"]
        out["backend"] = torch.npu.get_allocator_backend()
        report(out)
    """).result
    s = r["npl"]
    assert r["allocated"] == s["allocated_bytes"] > 4 << 20
    assert r["reserved"] == s["reserved_bytes"] >= r["allocated"]
    assert r["max_allocated"] == s["allocated_bytes_peak"]
    assert r["max_reserved"] == s["reserved_bytes_peak"]
    st = r["stats"]
    assert st["allocation.all.current"] == s["active_blocks"] == 1
    assert (st["allocation.all.allocated"], st["allocation.all.freed"]) == (s["num_allocs"], s["num_frees"]) == (2, 1)
    # npualloc is asked for torch_npu's 32-byte pad too; torch_npu's requested bytes leave it out.
    assert st["requested_bytes.all.current"] == s["requested_bytes"] - 32 == 4 << 20
    assert st["requested_bytes.all.peak"] == s["requested_bytes_peak"] - 2 * 32
    assert st["active_bytes.all.current"] == s["allocated_bytes"] + s["pending_free_bytes"]
    assert st["segment.all.current"] == s["segments"]
    assert (st["num_ooms"], st["num_alloc_retries"]) == (s["num_ooms"], s["num_alloc_retries"]) == (0, 0)
    assert r["summary_has_header"]
    assert r["peak_after_reset"] == r["allocated_after_reset"] == r["allocated"], "reset_peak_memory_stats"
    assert r["counts_after_reset"] == [0, 0], "reset_accumulated_memory_stats zeroes the counts"
    assert r["current_after_reset"] == 1, "and leaves what is live"
    assert r["backend"] == "npualloc"


def test_the_32_byte_tail_matches_torch_npus_own_allocator(run_npu):
    code = """
        x = torch.empty(1 << 20, device="npu")          # 4194304 bytes asked
        report({"allocated": torch.npu.memory_allocated(),
                "requested": torch.npu.memory_stats()["requested_bytes.all.current"],
                "tail": nt.pad_bytes() if nt.is_enabled() else None})
    """
    own = run(run_npu, code, "own").result
    ours = run(run_npu, code).result
    assert ours["tail"] == 32, "this SoC (Ascend910B-class, not Ascend950) pads by 32"
    assert ours["requested"] == own["requested"] == 1 << 22, "the size asked, without the pad"
    assert ours["allocated"] == own["allocated"] == 4194816, "the same block size as torch_npu's own allocator"


def test_memory_fraction_set_and_get_and_out_of_memory(run_npu):
    r = run(run_npu, """
        keep = torch.empty(1 << 20, device="npu")
        torch.npu.set_per_process_memory_fraction(0.25)
        out = {"fraction": torch.npu.get_per_process_memory_fraction()}
        try:
            # Half the device: over the fraction, within one reservation of address space.
            torch.empty(torch.npu.mem_get_info()[1] // 2, dtype=torch.uint8, device="npu")
            out["raised"] = None
        except torch.OutOfMemoryError as e:
            out["raised"] = "OutOfMemoryError"
            out["message"] = str(e)
        except Exception as e:
            out["raised"] = type(e).__name__
        after = torch.full((1 << 20,), 1.0).to("npu")
        out["next_works"] = after.cpu().sum().item()
        out["num_ooms"] = torch.npu.memory_stats()["num_ooms"]
        out["npl_ooms"] = npl_stats()["num_ooms"]
        report(out)
    """).result
    assert r["fraction"] == 0.25
    assert r["raised"] == "OutOfMemoryError"
    assert "npualloc" in r["message"] and "cannot allocate" in r["message"], r["message"]
    assert "This allocator holds" in r["message"], "npualloc's report reaches the user"
    assert r["next_works"] == float(1 << 20)
    assert r["num_ooms"] == r["npl_ooms"] == 1


RECORD_STREAM = """
    emu = emulator()
    N = 1 << 20
    x = torch.full((N,), 7.0).to("npu")
    side = torch.npu.Stream()
    torch.npu.synchronize()
    assert emu.aclemu_stream_hold(ctypes.c_void_p(side.npu_stream)) == 0
    with torch.npu.stream(side):
        y = torch.empty_like(x)
        y.copy_(x)                        # queued on the held side stream: reads x later
    x.record_stream(side)
    xp = x.data_ptr()
    del x                                 # the side stream still needs x's block
    z = torch.full((N,), 1.0).to("npu")   # same size on the main stream
    zp = z.data_ptr()
    torch.npu.current_stream().synchronize()
    emu.aclemu_stream_release(ctypes.c_void_p(side.npu_stream))
    try:
        side.synchronize()
    except RuntimeError:
        pass
    report({"reused": xp == zp, "violations": emu.aclemu_violations(), "y": float(y.cpu()[0])})
"""

WITHOUT_BRIDGE = """
    # torch_npu's NPUPluggableAllocator on the same library, without the
    # bridge: it has no usable record_stream hook.
    lib = str(_L.find_library())
    pa = torch_npu.npu.memory.NPUPluggableAllocator(lib, "npualloc_pluggable_malloc", "npualloc_pluggable_free")
    torch_npu.npu.memory.change_current_allocator(pa)
    emulator().aclemu_set_violation_abort(0)   # the race below may be a violation: count it
"""


def test_record_stream_keeps_a_block_a_held_side_stream_still_reads(run_npu):
    r = run(run_npu, RECORD_STREAM).result
    assert not r["reused"], "the block waited for the side stream"
    assert r["violations"] == 0
    assert r["y"] == 7.0, "the side stream read the data it was given"


def test_without_the_bridge_the_same_record_stream_is_lost(run_npu):
    r = run(run_npu, WITHOUT_BRIDGE + RECORD_STREAM, "own").result
    assert r["reused"], "the pluggable allocator reused the block at once"
    assert r["violations"] > 0 or r["y"] != 7.0, "the side stream's copy read overwritten memory"


def test_erase_stream_ends_the_wait(run_npu):
    r = run(run_npu, """
        emu = emulator()
        N = 1 << 20
        x = torch.empty(N, device="npu")
        side = torch.npu.Stream()
        torch.npu.synchronize()
        assert emu.aclemu_stream_hold(ctypes.c_void_p(side.npu_stream)) == 0
        x.record_stream(side)
        erased = hasattr(torch_npu, "erase_stream")
        if erased:
            torch_npu.erase_stream(x, side)
        xp = x.data_ptr()
        del x
        pending = npl_stats()["pending_free_bytes"]
        z = torch.empty(N, device="npu")
        emu.aclemu_stream_release(ctypes.c_void_p(side.npu_stream))
        report({"erased": erased, "pending": pending, "reused": z.data_ptr() == xp})
    """).result
    if not r["erased"]:
        pytest.skip("this torch_npu exposes no eraseStream to Python")
    assert r["pending"] == 0 and r["reused"], "after erase_stream the free did not wait for the side stream"


def test_empty_cache_with_the_task_queue_gives_back_nothing_queued_work_needs(run_npu):
    # Fails without the before-release hook (npualloc's empty_cache only reaps pending frees
    # whose events completed, so x's block stays). It does not tell the hook's task-queue
    # drain from its device synchronize: by the time of empty_cache the free has already
    # emptied the side stream's queue (record_stream's streams are drained at free), and a
    # hook that only synchronized the device passes too.
    r = run(run_npu, """
        emu = emulator()
        N = 1 << 20
        side = torch.npu.Stream()
        x = torch.full((N,), 5.0).to("npu")
        torch.npu.synchronize()
        assert emu.aclemu_stream_hold(ctypes.c_void_p(side.npu_stream)) == 0
        with torch.npu.stream(side):
            y = torch.empty_like(x)
            y.copy_(x)                    # queued (task queue, then the held stream)
        x.record_stream(side)
        del x
        before = npl_stats()["reserved_bytes"]
        # x's block waits for the held side stream. empty_cache first empties torch_npu's task
        # queue and synchronizes the device (the before-release hook), which completes the
        # side stream's copy; only then is x's memory given back.
        torch.npu.empty_cache()
        after = npl_stats()["reserved_bytes"]
        y_now = float(y.cpu()[0])
        emu.aclemu_stream_release(ctypes.c_void_p(side.npu_stream))
        side.synchronize()
        torch.npu.empty_cache()
        report({"task_queue": os.environ.get("TASK_QUEUE_ENABLE", "default"), "before": before, "after": after,
                "y_now": y_now,
                "violations": emu.aclemu_violations(), "y": float(y.cpu()[0]),
                "pending_after": npl_stats()["pending_free_bytes"]})
    """, env={"TASK_QUEUE_ENABLE": "1"}).result
    assert r["task_queue"] == "1"
    assert r["after"] < r["before"], "x's memory went back once the side stream's copy had run"
    assert r["y_now"] == 5.0, "the copy ran before x's memory went back"
    assert r["violations"] == 0
    assert r["y"] == 5.0
    assert r["pending_after"] == 0


def test_snapshot_and_history_with_python_frames(run_npu):
    r = run(run_npu, """
        torch.npu.memory._record_memory_history(max_entries=1000, stacks="python")
        def make_the_tensor():
            return torch.empty(3 << 20, dtype=torch.uint8, device="npu")
        w = make_the_tensor()
        snap = torch.npu.memory._snapshot()
        blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        allocs = [t for t in snap["device_traces"][0] if t["action"] == "alloc"]
        torch.npu.memory._record_memory_history(enabled=None)
        report({
            "block_sizes": [b["size"] for b in blocks],
            "block_frames": [f["name"] for b in blocks for f in b["frames"]],
            "alloc_sizes": [t["size"] for t in allocs],
            "alloc_frames": [f["name"] for t in allocs for f in t["frames"]],
            "traces": len(snap["device_traces"]),
            "npl_allocated": npl_stats()["allocated_bytes"],
            "segments_total": sum(s["total_size"] for s in snap["segments"]),
            "npl_segment_bytes": npl_stats()["segment_bytes"],
            "history": torch_npu._C._npu_isHistoryEnabled(),
        })
    """).result
    assert (3 << 20) + 32 <= max(r["block_sizes"])
    assert "make_the_tensor" in r["block_frames"], r["block_frames"]
    assert (3 << 20) + 32 in r["alloc_sizes"]
    assert "make_the_tensor" in r["alloc_frames"], r["alloc_frames"]
    assert r["traces"] == 8, "one trace list per device torch_npu initialized"
    assert r["segments_total"] == r["npl_segment_bytes"]
    assert r["history"] is False


def test_tensors_alive_at_exit(run_npu):
    r = run(run_npu, """
        import sys
        keep = [torch.empty(1 << 20, device="npu") for _ in range(3)]
        side = torch.npu.Stream()
        with torch.npu.stream(side):
            keep.append(torch.empty(1 << 18, device="npu"))
        keep[-1].record_stream(torch.npu.current_stream())
        report({"live": npl_stats()["active_blocks"]})
    """)
    assert r.result["live"] == 4
    assert r.returncode == 0
    assert "npualloc: free" not in r.stderr, r.stderr[-2000:]


def test_enable_after_the_npu_is_initialized_is_refused(run_npu):
    r = run(run_npu, """
        x = torch.empty(8, device="npu")
        try:
            nt.enable()
            report({"raised": None})
        except nt.TorchNpuError as e:
            report({"raised": str(e), "enabled": nt.is_enabled()})
    """, "own").result
    assert r["raised"] and "already initialized" in r["raised"]
    assert r["enabled"] is False


def test_enable_config_goes_to_npualloc_conf_and_a_refused_one_changes_nothing(run_npu):
    r = run(run_npu, """
        try:
            nt.enable(config="no_such_key:1")
            out = {"raised": None}
        except ValueError as e:
            out = {"raised": str(e), "enabled": nt.is_enabled(), "conf": os.environ.get("NPUALLOC_CONF")}
        nt.enable(config="expandable_segments:false")
        x = torch.empty(1 << 20, device="npu")
        out["conf_after"] = os.environ.get("NPUALLOC_CONF")
        out["segments"] = npl_stats()["segments"]
        nt.enable(config="expandable_segments:false")   # the same again: nothing happens
        try:
            nt.enable(config="expandable_segments:true")
            out["other"] = None
        except nt.TorchNpuError as e:
            out["other"] = str(e)
        report(out)
    """, "own").result
    assert "no_such_key" in r["raised"] and r["enabled"] is False and r["conf"] is None
    assert r["conf_after"] == "expandable_segments:false"
    assert r["segments"] == 1
    assert "already torch_npu's allocator" in r["other"]


def test_statistics_of_a_device_never_used_are_zero(run_npu):
    r = run(run_npu, """
        x = torch.empty(1 << 20, device="npu")
        st = torch.npu.memory_stats(3)
        torch.npu.reset_peak_memory_stats(3)
        report({"allocated3": torch.npu.memory_allocated(3), "reserved3": torch.npu.memory_reserved(3),
                "allocs3": st.get("allocation.all.allocated", 0), "allocated0": torch.npu.memory_allocated(0)})
    """).result
    assert (r["allocated3"], r["reserved3"], r["allocs3"]) == (0, 0, 0)
    assert r["allocated0"] > 0


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_the_oom_observer_gets_the_refused_request_and_the_memory_allowed(run_npu, allocator):
    """torch_npu calls an out-of-memory observer with the device, the refused
    allocation, the memory the process may use (the fraction's share when one
    is set) and the device's free memory (NPUCachingAllocator.cpp,
    DeviceCachingAllocator::malloc)."""
    r = run(run_npu, """
        seen = []
        torch_npu._C._npu_attach_out_of_memory_observer(lambda *args: seen.append(args))
        free, total = torch.npu.mem_get_info()
        torch.npu.set_per_process_memory_fraction(0.5)
        request = total // 2 + (64 << 20)
        try:
            torch.empty(request, dtype=torch.uint8, device="npu")
            raised = False
        except torch.OutOfMemoryError:
            raised = True
        report({"raised": raised, "seen": seen, "request": request, "total": total})
    """, allocator).result
    assert r["raised"] and r["seen"], r
    device, alloc, allowed, free = r["seen"][-1]
    assert device == 0
    # torch_npu reports the segment it tried to allocate (the request, padded and
    # rounded to 2 MiB); npualloc the request as it was asked (with the pad).
    assert r["request"] <= alloc <= r["request"] + (2 << 20), (alloc, r["request"])
    assert allowed == int(0.5 * r["total"])
    assert 0 < free <= r["total"]


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
@pytest.mark.parametrize("size", [1 << 61, (1 << 63) - 1])
def test_a_request_no_device_holds_is_an_out_of_memory_error(run_npu, allocator, size):
    # torch_npu's own allocator reports it as torch.OutOfMemoryError; npualloc refuses sizes over
    # its largest request as one too.
    r = run(run_npu, f"""
        try:
            torch.empty({size}, dtype=torch.uint8, device="npu")
            out = {{"raised": None}}
        except Exception as e:
            out = {{"raised": type(e).__name__, "message": str(e)[:300]}}
        out["next_works"] = torch.full((4,), 1.0).to("npu").cpu().sum().item()
        report(out)
    """, allocator).result
    assert r["raised"] == "OutOfMemoryError", r
    assert r["next_works"] == 4.0
