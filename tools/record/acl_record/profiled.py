"""The reference recording: a real CPU run under the PyTorch profiler.

The profiler with `profile_memory=True` records every allocation and free
of the CPU allocator (address, size, time) and the operator it happened in.
Two kinds are left out because a device run does not make them as device
allocations and the fake-tensor tracker cannot see them:
- memory no operator asked for: numbers the Python binding wraps as
  tensors, and host tensors made in C++ code such as the CPU generator's
  state that activation checkpointing saves (`torch.get_rng_state()`), and
- scratch memory of a kernel: freed before the operator that took it
  returned, where that operator is the one the dispatch mode sees (the
  outermost enclosing operator that is not composite, see `_maker`), such as
  a workspace, a number converted to the tensor's dtype, or the long copy of
  a bool input that the CPU cumsum makes for itself.
"""

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from .trace import TraceEvents

_COMPOSITE = {}


def _composite(name):
    """Whether the operator decomposes into others above the dispatch mode
    (a CompositeImplicitAutograd kernel, for any of its overloads): the
    tracker then sees the operators it calls, not it."""
    if name not in _COMPOSITE:
        key = "CompositeImplicitAutograd"
        try:
            packet = getattr(torch.ops.aten, name.split("::", 1)[1])
            names = [f"{name}.{o}" if o != "default" else name for o in packet.overloads()]
            _COMPOSITE[name] = any(torch._C._dispatch_has_kernel_for_dispatch_key(n, key) for n in names)
        except (AttributeError, RuntimeError):
            _COMPOSITE[name] = False
    return _COMPOSITE[name]


def _maker(node):
    """The operator the tracker sees around the allocation: going down from
    the outermost operator enclosing it (below any scope that is not an
    operator, such as an autograd node), the first that is not composite.
    None for memory no operator asked for."""
    chain = []
    op = node.parent
    while op is not None and op.name.startswith("aten::"):
        chain.append(op)
        op = op.parent
    for op in reversed(chain):
        if not _composite(op.name):
            return op
    return chain[0] if chain else None


def profiled_events(fn):
    """Runs `fn()` on the CPU under the profiler; returns (events, dropped).

    `events` is a TraceEvents of the allocations made by operators (stream
    0), `dropped` the sizes left out by the rules above.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    nodes = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.tag == _EventType.Allocation:
            nodes.append(n)
    nodes.sort(key=lambda n: n.start_time_ns)
    # Pair each allocation with its free (same address, next free after it).
    raw = []  # [size, made by no operator, maker, free time or None]
    live = {}
    for n in nodes:
        ef = n.extra_fields
        if ef.alloc_size > 0:
            direct = n.parent is None or not n.parent.name.startswith("aten::")
            rec = [ef.alloc_size, direct, _maker(n), None]
            live[ef.ptr] = rec
            raw.append(("a", rec))
        elif ef.ptr in live:
            rec = live.pop(ef.ptr)
            rec[3] = n.start_time_ns
            raw.append(("f", rec))
    kept = set()
    dropped = []
    for kind, rec in raw:
        if kind != "a":
            continue
        size, wrapped, maker, freed = rec
        scratch = maker is not None and freed is not None and freed <= maker.end_time_ns
        if wrapped or scratch:
            dropped.append(size)
        else:
            kept.add(id(rec))
    events = TraceEvents()
    ids = {}
    for kind, rec in raw:
        if id(rec) not in kept:
            continue
        if kind == "a":
            ids[id(rec)] = events.alloc(rec[0], 0)
        else:
            events.free(ids[id(rec)])
    del result
    return events, dropped
