"""scripts/replay-torch-npu.py: a trace replayed through torch_npu's own
caching allocator on the emulator, in both configurations, against what
NPUCachingAllocator.cpp must do with it: every request padded by 32 bytes
and rounded to 512; a request of 1 MiB or less from the small pool (2 MiB
segments or pages), a larger one under kMinLargeAlloc (10 MiB) from a
20 MiB segment (kLargeBuffer) or, with expandable segments, 20 MiB pages
mapped into one reserved range per pool; a freed block reused; with
--tensors, record_stream."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import DEVICE_CALL_COUNTS

MIB = 1 << 20
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "replay-torch-npu.py"

TRACE = """# acl-trace v1
# source: hand-made: a 4 MiB block, a small one, the first freed and its block reused
a 0 4194304 0
a 1 3000 0
f 0
a 2 4194304 0
w 0
f 1
"""
PEAK_REQUESTED = 4 * MIB + 3000


# The trace with block 0 used on stream 1 too (record_stream, --tensors only).
TRACE_U = TRACE.replace("a 1 3000 0\n", "a 1 3000 1\nu 0 1\n").replace("w 0", "w 1")

# 3, 40, 100 and 7 MiB, the 100 MiB block freed: what empty_cache keeps of it.
TRACE_KEPT = """# acl-trace v1
a 0 3145728 0
a 1 41943040 0
a 2 104857600 0
a 3 7340032 0
f 2
"""

# Every replay the tests read: name -> (arguments, trace). Each is a child
# python importing torch (about 3 s); the fixture runs them two at a time,
# the bisection (several children in turn) first.
RUNS = {
    "min_capacity": (["--min-capacity"], TRACE),
    "default": ([], TRACE),
    "expandable": (["--conf", "expandable"], TRACE),
    "oom": (["--device-memory", "21M"], TRACE),
    "oom_stop": (["--device-memory", "21M", "--stop-on-oom"], TRACE),
    "tensors_u": (["--tensors"], TRACE_U),
    "tensors": (["--tensors"], TRACE),
    "kept_own": (["--conf", "expandable", "--empty-cache-every", "3"], TRACE_KEPT),
    "kept_npualloc": (["--npualloc", "max_handle_mb:2", "--empty-cache-every", "3"], TRACE_KEPT),
}


def replay(directory, args, trace):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "t.trace"
    path.write_text(trace)
    env = {k: v for k, v in os.environ.items() if k not in ("NPUALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF")}
    done = subprocess.run([sys.executable, str(SCRIPT), *args, str(path)], capture_output=True, text=True,
                          env=env, cwd=directory, timeout=300)
    lines = [ln[len("RESULT "):] for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    return done, json.loads(lines[-1]) if lines else None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("replays")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(replay, base / name, args, trace) for name, (args, trace) in RUNS.items()}
        done = {name: f.result() for name, f in futures.items()}

    def result(name):
        out, r = done[name]
        assert out.returncode == 0 and r, f"{name}: exit {out.returncode}\n{out.stdout}\n{out.stderr[-4000:]}"
        return r

    return result


def test_default_config_mallocs_a_20_mib_and_a_2_mib_segment(runs):
    r = runs("default")
    assert r["api"] == "raw"
    assert (r["ops"], r["ops_replayed"], r["ooms"], r["num_ooms"]) == (6, 6, 0, 0)
    assert r["peak_requested"] == PEAK_REQUESTED
    # 4 MiB + 32 -> 4 MiB + 512, the block reused; 3000 + 32 -> 3072.
    assert r["peak_allocated"] == 4 * MIB + 512 + 3072
    assert r["peak_reserved"] == r["peak_reserved_emu"] == 20 * MIB + 2 * MIB
    assert r["calls"]["aclrtMallocAlign32"] == 2
    if DEVICE_CALL_COUNTS:
        assert r["num_device_alloc"] == 2 and r["num_device_free"] == 0
    calls = r["calls"]
    assert calls["aclrtMalloc"] == calls["aclrtMallocPhysical"] == calls["aclrtMapMem"] == 0
    # w 0 is the one stream synchronization (the replay ends with a device one).
    assert calls["aclrtSynchronizeStream"] + calls["aclrtSynchronizeStreamWithTimeout"] == 1
    assert r["violations"] == 0


def test_expandable_segments_map_one_20_mib_and_one_2_mib_page(runs):
    r = runs("expandable")
    assert r["conf"] == "expandable_segments:True" and r["ooms"] == 0
    assert r["peak_requested"] == PEAK_REQUESTED
    assert r["peak_reserved"] == r["peak_reserved_emu"] == 20 * MIB + 2 * MIB
    calls = r["calls"]
    assert calls["aclrtMallocPhysical"] == calls["aclrtMapMem"] == 2
    assert r["num_device_alloc"] == (2 if DEVICE_CALL_COUNTS else 0)
    # torch_npu's 512-byte probe at initialization, then one range per pool.
    assert calls["aclrtReserveMemAddress"] == 3 and calls["aclrtReleaseMemAddress"] == 1
    assert calls["aclrtMallocAlign32"] == calls["aclrtMalloc"] == calls["aclrtUnmapMem"] == 0
    assert r["violations"] == 0


def test_an_oom_is_raised_counted_and_not_retried_forever(runs):
    # 21 MiB: the 20 MiB segment fits, the small pool's 2 MiB one does not;
    # nothing is cached to free (block 0 is live), so the request fails.
    r = runs("oom")
    assert r["ooms"] == r["num_ooms"] == 1 and r["first_oom_op"] == 1
    assert r["ops_replayed"] == 6, "the replay goes on past an OOM without --stop-on-oom"
    assert r["peak_reserved"] == 20 * MIB
    # Block 0's segment, then one failed try and one more after releasing
    # the (empty) cache, then the error.
    assert r["calls"]["aclrtMallocAlign32"] == 3 and r["num_alloc_retries"] == 1, r
    r = runs("oom_stop")
    assert (r["ooms"], r["ops_replayed"]) == (1, 1)


def test_min_capacity_is_the_two_segments(runs):
    r = runs("min_capacity")
    # Both segments are live at once (ids 0 and 1): 22 MiB, to 1 MiB.
    assert 22 * MIB <= r["min_capacity"] <= 23 * MIB, r
    assert r["min_capacity_probes"] >= 2 and r["peak_reserved"] == 22 * MIB


def test_tensors_replay_record_stream(runs):
    # Block 0 is used on stream 1 too: its free records an event there, the
    # next allocation on stream 0 queries it (stream 1 has no work: done)
    # and reuses the block, as Tensor.record_stream must.
    r = runs("tensors_u")
    assert (r["api"], r["streams"], r["ops"], r["ooms"]) == ("tensor", 2, 7, 0)
    assert r["peak_reserved"] == 22 * MIB and r["num_device_alloc"] == (2 if DEVICE_CALL_COUNTS else 0)
    assert r["calls"]["aclrtRecordEvent"] == 1 and r["calls"]["aclrtQueryEventStatus"] >= 1, r["calls"]
    # Without the u line a tensor replay records no event.
    r = runs("tensors")
    assert r["calls"]["aclrtRecordEvent"] == 0 and r["peak_reserved"] == 22 * MIB


@pytest.mark.parametrize("line,message", [
    ("u 2 1", "'u' (record_stream) is not supported"),
    ("f 7", "bad event"),
    ("a 9 0 0", "bad event"),
])
def test_bad_or_unsupported_events_are_refused(tmp_path, line, message):
    done, r = replay(tmp_path, [], TRACE + line + "\n")
    assert done.returncode == 2 and r is None
    assert message in done.stderr and ":9:" in done.stderr, done.stderr


def test_what_empty_cache_keeps_under_both_allocators(runs):
    # A call after the third event and one at the end.
    own, ours = runs("kept_own"), runs("kept_npualloc")
    assert (own["allocator"], ours["allocator"]) == ("torch_npu", "npualloc")
    assert ours["conf"] == "max_handle_mb:2"
    assert len(own["empty_cache"]) == len(ours["empty_cache"]) == 2
    # torch_npu's own 20 MiB handles: after the last call, the live blocks
    # (about [0, 43) and [143, 150) MiB) keep four of them.
    last = own["empty_cache"][-1]
    assert last["held"] == 4 * 20 * MIB and last["needed"] < last["held"], own["empty_cache"]
    assert own["kept_x_worst"] == round(last["held"] / last["needed"], 4) > 1.4, own
    # npualloc with handles of one page keeps exactly the pages live blocks touch.
    for call in ours["empty_cache"]:
        assert call["held"] == call["needed"] > 0, ours["empty_cache"]
    assert ours["kept_x"] == ours["kept_x_worst"] == 1.0, ours
    assert ours["calls"]["aclrtMapMem"] > own["calls"]["aclrtMapMem"], (ours["calls"], own["calls"])
