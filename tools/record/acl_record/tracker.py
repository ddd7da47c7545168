"""Recording the storage allocations of model code run on fake tensors.

Under `torch._subclasses.FakeTensorMode` every tensor has a size, a dtype,
strides and a device but no memory, so a 7B model costs nothing to build
and run. A `TorchDispatchMode` above it sees every aten operator the
model's code reaches (after autograd, so the backward pass too) and the
tensors each returns. Each new storage is one allocation of its `nbytes`;
its free is when the storage itself dies, which `weakref.finalize` on the
storage's Python object observes exactly: PyTorch keeps one Python object
per storage for as long as the storage lives (the object is preserved
while C++ still holds the storage), so the callback runs when the last
tensor, view, autograd saved tensor or cache entry lets go of it, as the
caching allocator's free would.

What it does not see, by construction: memory a kernel takes for itself
inside one operator (workspaces), which never reaches the dispatcher, and
numbers wrapped as tensors by the Python binding. A device run adds its own
workspaces there; `tests/test_record.py` checks everything else against
the profiler's record of a real CPU run.
"""

import contextlib
import sys
import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .trace import TraceEvents

# The attribute kept on each storage's Python object: a one-element list
# holding its trace id (a list, so a resize can give the storage a new id
# that the finalizer then frees).
_ID = "_acl_trace_id"


# Frames between a dispatched operator's Python caller and the mode: torch's
# wrappers around __torch_dispatch__.
_WRAPPERS = ("torch/_dynamo/", "torch/_compile.py", "torch/utils/_python_dispatch.py", "torch/_ops.py")


def _python_caller():
    """The name of the Python function whose call reached the dispatcher."""
    frame = sys._getframe(3)  # above __torch_dispatch__ and this module
    while frame is not None and any(w in frame.f_code.co_filename for w in _WRAPPERS):
        frame = frame.f_back
    return frame.f_code.co_name if frame is not None else None


class StorageTracker(TorchDispatchMode):
    """Turns the storages the dispatched operators return into trace events."""

    def __init__(self, events, track=None):
        super().__init__()
        self.events = events
        self.stream = 0
        self.active = True
        # Which tensors count as device memory (default: fake tensors).
        self.track_tensor = track or (lambda t: isinstance(t, FakeTensor))
        # (old sum's holder, new sum's holder) of the engine's last add.
        self.accumulation = None

    def _freed(self, holder, nbytes):
        if not self.active or holder[0] is None:
            return
        pending = self.accumulation
        if pending is not None and pending[0] is holder:
            # The autograd engine's gradient accumulation: on plain tensors
            # it adds in place when it holds the last reference to the old
            # sum (InputBuffer's can_accumulate_inplace), which it never
            # does for a tensor subclass such as a fake tensor. The old sum
            # dying right after the add is that case: the new sum takes its
            # memory instead of an allocation of its own.
            self.accumulation = None
            new_holder = pending[1]
            if new_holder[0] is not None and self.events.merge_into(new_holder[0], holder[0]):
                new_holder[0] = holder[0]
                holder[0] = None
                return
        self.events.free(holder[0])
        holder[0] = None

    def _seen(self, t):
        if not isinstance(t, torch.Tensor) or not self.track_tensor(t):
            return
        s = t.untyped_storage()
        n = s.nbytes()
        holder = getattr(s, _ID, None)
        if holder is None:
            if n == 0:
                return
            holder = [self.events.alloc(n, self.stream)]
            setattr(s, _ID, holder)
            weakref.finalize(s, self._freed, holder, n)
        elif holder[0] is not None and self.events.sizes.get(holder[0]) != n:
            # resize_ (or an out= operator) grew the storage: the allocator
            # gives it a new block and frees the old one.
            old = holder[0]
            holder[0] = self.events.alloc(n, self.stream) if n else None
            self.events.free(old)

    def _engine_accumulation(self, func, args, kwargs, out):
        """Whether this is the autograd engine adding two gradients of one
        tensor: aten.add of two same-shaped tensors, issued from C++ while
        backward runs (the nearest Python frame is the engine's entry)."""
        if func is not torch.ops.aten.add.Tensor or kwargs or len(args) != 2:
            return False
        a, b = args
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            return False
        if a.dtype != out.dtype or a.shape != out.shape or not a.is_contiguous():
            return False
        # The engine adds in place only when it holds the last reference to
        # the old sum's storage too: no view of it alive. The count is that
        # tensor's reference plus the storage's Python object's.
        if torch._C._storage_Use_Count(a.untyped_storage()._cdata) > 2:
            return False
        return _python_caller() == "_engine_run_backward"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.accumulation = None
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            self._seen(t)
        if self._engine_accumulation(func, args, kwargs, out):
            old = getattr(args[0].untyped_storage(), _ID, None)
            new = getattr(out.untyped_storage(), _ID, None)
            if old is not None and new is not None and old is not new:
                self.accumulation = (old, new)
        # Operators that resize an argument in place (out=, resize_) return it
        # too, but not always: check mutated arguments as well.
        if func._schema.is_mutable:
            for t in tree_leaves((args, kwargs)):
                self._seen(t)
        return out

    def id_of(self, t):
        holder = getattr(t.untyped_storage(), _ID, None)
        return None if holder is None else holder[0]

    def record_stream(self, t, stream):
        """`t` is also used by work on `stream` (torch's Tensor.record_stream)."""
        tid = self.id_of(t)
        if tid is not None:
            self.events.use(tid, stream)

    def wait(self, stream):
        """The host waits for `stream` (a stream synchronize)."""
        self.events.wait(stream)

    @contextlib.contextmanager
    def on_stream(self, stream):
        """Allocations inside are made on `stream` (torch.npu.stream(s))."""
        prev, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = prev


@contextlib.contextmanager
def _eager_transformers():
    """transformers takes its eager paths although the tensors are fake.

    transformers treats a fake tensor as a sign of graph tracing
    (`is_tracing`) and then builds masks an eager run skips. Inside the
    recording it answers "not tracing", except within
    `find_packed_sequence_indices`: the eager code computes the packing
    mask, reads it (which a fake tensor cannot answer) and returns None for
    an unpacked batch, the only kind recorded here; the wrapper computes
    the same mask the traced way, drops it and returns None.
    """
    try:
        import transformers.masking_utils as masking
        import transformers.utils.import_utils as imports
    except ImportError:
        masking = imports = None
    if not (hasattr(imports, "is_fake_tensor") and hasattr(masking, "find_packed_sequence_indices")):
        # Another transformers: nothing of this to put back (the profiler
        # comparison says whether its paths match).
        yield
        return
    saved = imports.is_fake_tensor, masking.find_packed_sequence_indices
    tracing = [False]
    imports.is_fake_tensor = lambda tensor: tracing[0]

    def unpacked(position_ids):
        tracing[0] = True
        try:
            saved[1](position_ids)
        finally:
            tracing[0] = False
        return None

    masking.find_packed_sequence_indices = unpacked
    try:
        yield
    finally:
        imports.is_fake_tensor, masking.find_packed_sequence_indices = saved


@contextlib.contextmanager
def fake_recording(events=None):
    """Runs the body on fake CPU tensors and records its allocations.

    Yields the tracker; its `events` hold the trace. The fake tensors claim
    the CPU as their device, so operators choose the kernels (and therefore
    the outputs) a CPU run would, which is what the profiler comparison needs.
    """
    events = events if events is not None else TraceEvents()
    tracker = StorageTracker(events)
    with _eager_transformers(), FakeTensorMode(), tracker:
        try:
            yield tracker
        finally:
            # Storages that die after the body (the model, when the caller
            # drops it) are not part of the trace: they stay live at its end.
            tracker.active = False
