"""Memory history and snapshots in PyTorch's format.

    import npualloc, npualloc.memory

    alloc = npualloc.CachingAllocator(device=0)
    npualloc.memory.record_history(alloc)          # keep the allocator's events
    ...                                            # allocate and free
    npualloc.memory.dump_snapshot(alloc, "snap.pickle")

``snapshot(alloc)`` returns the dict ``torch.cuda.memory._snapshot()``
returns (``segments`` with their ``blocks``, and ``device_traces``, with
PyTorch's key and action names), so the file ``dump_snapshot`` writes opens
in PyTorch's ``torch/cuda/_memory_viz.py`` and at pytorch.org/memory_viz.

What differs from PyTorch's: ``frames`` are always empty (the allocator sees
no Python stacks); each run of mapped pages of an expandable segment is a
segment of its own; only the allocator's own device has a trace.
"""

import ctypes
import json
import pickle
import sys

from . import _lib

__all__ = ["record_history", "snapshot", "dump_snapshot", "from_json", "DEFAULT_MAX_ENTRIES"]

# As torch's _record_memory_history: no bound unless one is given. Entries
# take about 50 bytes each in the library (several KB in PyTorch, with stacks).
DEFAULT_MAX_ENTRIES = sys.maxsize


def _check(status):
    from . import _check as check

    check(status)


def _entries(max_entries):
    if max_entries is None:
        return 0
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError(f"max_entries must be an int (0 or None: off), got {type(max_entries).__name__} {max_entries!r}")
    if max_entries < 0:
        raise ValueError(f"max_entries must not be negative, got {max_entries}")
    return min(max_entries, 2**64 - 1)


def record_history(allocator, max_entries=DEFAULT_MAX_ENTRIES):
    """Keeps the last ``max_entries`` events of ``allocator`` (a
    ``CachingAllocator``) for ``snapshot``: allocs, frees requested and
    completed, segments obtained and returned (or mapped and unmapped),
    out-of-memory failures. 0 or None turns recording off and drops them.
    A smaller bound than before keeps the newest."""
    _check(_lib.lib().npualloc_record_history(allocator._live(), _entries(max_entries)))


def _take_json(call):
    lib = _lib.lib()
    out = ctypes.c_void_p()
    _check(call(ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode()
    finally:
        lib.npualloc_string_free(out)


def from_json(text):
    """The snapshot dict from the library's JSON: as PyTorch's, with
    ``segment_pool_id`` a tuple."""
    snap = json.loads(text)
    for seg in snap["segments"]:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    return snap


def snapshot(allocator):
    """The state of ``allocator`` (a ``CachingAllocator``) and its recorded
    history, as the dict ``torch.cuda.memory._snapshot()`` returns."""
    handle = allocator._live()
    return from_json(_take_json(lambda out: _lib.lib().npualloc_snapshot_pytorch_json(handle, out)))


def dump_snapshot(allocator, filename="dump_snapshot.pickle"):
    """Writes ``snapshot(allocator)`` to ``filename`` with pickle, as
    ``torch.cuda.memory._dump_snapshot`` does."""
    snap = snapshot(allocator)
    with open(filename, "wb") as f:
        pickle.dump(snap, f)


def _pluggable_record_history(device, max_entries):
    _check(_lib.lib().npualloc_pluggable_record_history(int(device), _entries(max_entries)))


def _pluggable_snapshot(device):
    return from_json(_take_json(lambda out: _lib.lib().npualloc_pluggable_snapshot_pytorch_json(int(device), out)))
