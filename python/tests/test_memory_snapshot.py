"""Snapshots in PyTorch's format, opened with PyTorch's own
torch/cuda/_memory_viz.py (scripts/fetch-memory-viz.py finds or fetches it;
scripts/test-python.sh passes its path in NPUALLOC_MEMORY_VIZ), and what it
reports checked against the allocator's statistics."""

import base64
import ctypes
import importlib.util
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import npualloc
import npualloc.memory
import npualloc.torch_npu as nt
from npualloc import _lib


def _viz_path():
    given = os.environ.get("NPUALLOC_MEMORY_VIZ")
    if given:
        return Path(given)
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        found = Path(list(spec.submodule_search_locations)[0]) / "cuda" / "_memory_viz.py"
        if found.is_file():
            return found
    return None


@pytest.fixture(scope="module")
def viz():
    path = _viz_path()
    if path is None or not path.is_file():
        pytest.skip(
            "PyTorch's _memory_viz.py is not available: no torch is installed and NPUALLOC_MEMORY_VIZ is unset "
            "(scripts/test-python.sh sets it from scripts/fetch-memory-viz.py, which needs PyPI)"
        )
    spec = importlib.util.spec_from_file_location("_memory_viz_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.__path__ = str(path)
    return module


def _workload(alloc, stream_sizes=(512, 4000, 700_000, 3 << 20, 25 << 20)):
    """A scripted sequence: 40 allocations of mixed sizes, every third freed."""
    live = [alloc.malloc(stream_sizes[i % len(stream_sizes)] + i) for i in range(40)]
    for block in live[::3]:
        alloc.free(block)
    return [b for i, b in enumerate(live) if i % 3]


def _run_cli(viz, command, path):
    out = subprocess.run(
        [sys.executable, viz.__path__, command, str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _actions(snap, name):
    return [e for trace in snap["device_traces"] for e in trace if e["action"] == name]


@pytest.mark.parametrize("config", ["expandable_segments:false", "expandable_segments:true"])
def test_snapshot_opens_in_memory_viz_with_the_allocators_numbers(emu, viz, tmp_path, config):
    with npualloc.CachingAllocator(device=0, config=config) as alloc:
        npualloc.memory.record_history(alloc)
        kept = _workload(alloc)
        stats = alloc.stats()
        path = tmp_path / "snap.pickle"
        npualloc.memory.dump_snapshot(alloc, path)
        for block in kept:
            alloc.free(block)

    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert set(snap) == {"segments", "device_traces"}
    segments = snap["segments"]
    blocks = [b for s in segments for b in s["blocks"]]
    assert all(s["segment_pool_id"] == (0, 0) for s in segments)
    assert all(s["is_expandable"] == config.endswith("true") for s in segments)
    assert sum(b["state"] == "active_allocated" for b in blocks) == stats["active_blocks"] == len(kept)
    assert sum(s["allocated_size"] for s in segments) == stats["allocated_bytes"]
    # Nothing is unmapped in this workload, so no physical page sits cached
    # outside a segment: the segments hold exactly what is reserved.
    assert sum(s["total_size"] for s in segments) == stats["reserved_bytes"]
    if config.endswith("false"):
        assert len(segments) == stats["segments"]

    # `stats`: segsum, which also raises if blocks do not add up to segments.
    text = _run_cli(viz, "stats", path)
    assert f"segments: {len(segments)}\n" in text
    assert f"total_reserved: {viz.Bytes(stats['reserved_bytes'])}\n" in text
    # PyTorch counts the bytes asked for as allocated.
    assert f"total_allocated: {viz.Bytes(stats['requested_bytes'])}\n" in text

    # `trace`: one line per event, the allocations live at the end in total.
    text = _run_cli(viz, "trace", path)
    trace = snap["device_traces"][0]
    assert text.startswith(f"Device 0 ----------------\n{len(trace)} entries\n")
    grow = "segment_alloc" if config.endswith("false") else "segment_map"
    assert len(_actions(snap, grow)) > 0
    if grow == "segment_alloc":
        assert text.count(" = cudaMalloc(") == len(_actions(snap, "segment_alloc"))
    assert len(re.findall(r"^\w+ = \w+\[\d+:", text, re.M)) == 40
    assert len(re.findall(r"^del ", text, re.M)) == 40 - len(kept)
    assert text.count("# free completed for ") == 40 - len(kept)
    assert len(_actions(snap, "alloc")) == 40
    assert len(_actions(snap, "free_requested")) == len(_actions(snap, "free_completed")) == 40 - len(kept)
    assert _actions(snap, "snapshot")[-1] is trace[-1]

    # The plots embed the snapshot for the viewer's page.
    for html, kind in (
        (viz.trace_plot(snap), "Active Memory Timeline"),
        (viz.trace_plot(snap, plot_segments=True), "Active Cached Memory Timeline"),
        (viz.segment_plot(snap), "Allocator State History"),
    ):
        assert repr(kind) in html
        encoded = re.search(r'"base64": "([^"]+)"', html).group(1)
        assert pickle.loads(base64.b64decode(encoded).rstrip(b"\0")) == snap


def test_history_bounds_and_off(emu):
    with npualloc.CachingAllocator(device=0, config="expandable_segments:false") as alloc:
        npualloc.memory.record_history(alloc, max_entries=5)
        _workload(alloc)
        trace = npualloc.memory.snapshot(alloc)["device_traces"][0]
        # The last five events, then the snapshot's own entry.
        assert len(trace) == 5 and trace[-1]["action"] == "snapshot"
        assert all(e["frames"] == [] and e["time_us"] > 0 for e in trace)
        npualloc.memory.record_history(alloc, None)
        assert npualloc.memory.snapshot(alloc)["device_traces"][0] == []
        with pytest.raises(ValueError, match="must not be negative"):
            npualloc.memory.record_history(alloc, -1)
        for bad in (1.5, "10", True):
            with pytest.raises(TypeError, match="max_entries must be an int"):
                npualloc.memory.record_history(alloc, bad)


def test_torch_names_act_on_the_pluggable_allocator(emu, tmp_path):
    malloc_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
    free_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
    lib = _lib.lib()
    malloc = malloc_fn(ctypes.cast(lib.npualloc_pluggable_malloc, ctypes.c_void_p).value)
    free = free_fn(ctypes.cast(lib.npualloc_pluggable_free, ctypes.c_void_p).value)

    nt._record_memory_history(max_entries=1000, device=0)
    ptr = malloc(12345, 0, None)
    assert ptr, _lib.last_error()
    free(ptr, 12345, 0, None)
    path = tmp_path / "torch.pickle"
    nt._dump_snapshot(str(path), device=0)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    mine = [(e["action"], e["size"]) for e in snap["device_traces"][0] if e.get("addr") == ptr]
    assert ("alloc", 12345) in mine and ("free_completed", 12345) in mine
    assert nt._snapshot(device="npu:0")["device_traces"][0][-1]["action"] == "snapshot"
    nt._record_memory_history(enabled=None, device=0)
    assert nt._snapshot(device=0)["device_traces"][0] == []
    with pytest.raises(ValueError):
        nt._record_memory_history(enabled="everything", device=0)
    with pytest.raises(ValueError):
        nt._record_memory_history(device=-1)
