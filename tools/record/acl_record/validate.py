"""The fake-tensor recording checked against the profiler's record of a real run.

Both record the same workload (same code, same seed): the profiler on real
CPU tensors, the tracker on fake ones. The comparison leaves out, on both
sides, allocations of at most 8 bytes (numbers made into tensors, which a
device run keeps on the host) and the profiler's kernel scratch
(`profiled.py`), then compares the sequence of events: every allocation's
size and every free, in order. Peaks are compared on everything recorded.
"""

import contextlib
import difflib

import torch

from .profiled import profiled_events
from .tracker import fake_recording

HOST_SCALAR_BYTES = 8


class NoStreams:
    """What the scenarios call on a tracker, for a run nobody tracks."""

    def record_stream(self, t, stream):
        pass

    def wait(self, stream):
        pass

    @contextlib.contextmanager
    def on_stream(self, stream):
        yield


def comparable(events):
    """The a/f events of allocations above 8 bytes, ids renumbered in order."""
    keep, out = {}, []
    for line in events.lines:
        parts = line.split()
        if parts[0] == "a":
            if int(parts[2]) > HOST_SCALAR_BYTES:
                keep[parts[1]] = len(keep)
                out.append(("a", int(parts[2])))
        elif parts[0] == "f" and parts[1] in keep:
            out.append(("f", keep[parts[1]]))
    return out


def _in_order(a, b):
    return sum(m.size for m in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks())


def compare(workload, seed=0):
    """Runs `workload(tracker)` both ways; returns the figures of the comparison."""

    def real():
        torch.manual_seed(seed)
        return workload(NoStreams())

    reference, dropped = profiled_events(real)
    torch.manual_seed(seed)
    with fake_recording() as tracker:
        kept = workload(tracker)
    fake = tracker.events
    del kept
    a, b = comparable(reference), comparable(fake)
    sa, sb = [x[1] for x in a if x[0] == "a"], [y[1] for y in b if y[0] == "a"]
    first_difference = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first_difference is None and len(a) != len(b):
        first_difference = min(len(a), len(b))
    return {
        "profiled_allocs": len(reference.alloc_sizes()),
        "fake_allocs": len(fake.alloc_sizes()),
        "compared_events": len(a),
        "profiler_dropped": len(dropped),
        "first_difference": first_difference,
        "same_sequence": a == b,
        # The sizes alone, in order (frees may move by a few events where
        # checkpointed recomputation releases saved tensors).
        "same_sizes": sa == sb,
        # Allocations of one side in the same order on the other (difflib),
        # over the larger count.
        "sizes_in_order": _in_order(sa, sb) / max(len(sa), len(sb), 1),
        "matching_events": sum(m.size for m in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks()),
        "profiled_peak": reference.peak,
        "fake_peak": fake.peak,
        "peak_ratio": fake.peak / reference.peak if reference.peak else float("nan"),
    }
