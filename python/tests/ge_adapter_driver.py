"""Drives npualloc's per-stream views of one CachingAllocator through GE's
ctypes callback adapter the way GE's C++ side calls it (run by test_ge_adapter.py in a subprocess whose
PYTHONPATH holds a ``ge`` package with the adapter).

GE's ``PyCallbackAllocator::Malloc`` (ge_api_c_wrapper/c_session.cc) calls
``block = malloc_func(NULL, size)``, fails only if ``block`` is NULL, then
``addr = get_addr_func(block)`` and wraps both in a MemBlock; ``Free`` calls
``free_func(NULL, block)``. The function pointers are called here as C
calls: ctypes function objects built from the callbacks' addresses.

Prints one line per check and exits non-zero on the first failure."""

import ctypes
import os
import sys

import ge._capi._allocator_callback_adapter as adapter
import ge.allocator
from ge._capi.pysession_wrapper import c_func_t_free, c_func_t_get_addr, c_func_t_malloc

import npualloc

raised = []
sys.unraisablehook = lambda u: raised.append(f"{u.exc_type.__name__}: {u.exc_value}")


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what} (exceptions inside callbacks: {raised})")
    print("ok", what)


def as_c_function(func_type, callback):
    return func_type(ctypes.cast(callback, ctypes.c_void_p).value)


emu = ctypes.CDLL(os.environ["NPUALLOC_ACL_LIBRARY"])
emu.aclemu_set_device_memory.argtypes = [ctypes.c_int32, ctypes.c_uint64]
check(emu.aclrtSetDevice(0) == 0, "set device")

class Counting(npualloc.StreamAllocator):
    """A user's subclass: its malloc returns what super().malloc returns."""

    calls = 0

    def malloc(self, size):
        Counting.calls += 1
        return super().malloc(size)


class CallbacksOf:
    """GE's adapter for one registered allocator, called as GE's C++ calls it."""

    def __init__(self, allocator):
        check(isinstance(allocator, ge.allocator.Allocator), f"{allocator!r} passes GE's isinstance check")
        self.callbacks, self.key, _ = adapter.create_allocator_c_callbacks(allocator)
        self.malloc = as_c_function(c_func_t_malloc, self.callbacks.c_malloc)
        self.free = as_c_function(c_func_t_free, self.callbacks.c_free)
        self.get_addr = as_c_function(c_func_t_get_addr, self.callbacks.c_get_addr)

    def request(self, size):
        """PyCallbackAllocator::Malloc: (handle, address); None for a NULL handle."""
        handle = self.malloc(None, size)
        return (handle, self.get_addr(handle)) if handle is not None else (None, None)


MIB = 1 << 20
streams = []
for _ in range(2):
    s = ctypes.c_void_p()
    check(emu.aclrtCreateStream(ctypes.byref(s)) == 0, "create a stream")
    streams.append(s.value)

# One allocator for the device, a view per stream, as GE registers them; a
# subclass's view on the first.
alloc = npualloc.CachingAllocator(config="")
first = CallbacksOf(Counting(alloc, streams[0]))
second = CallbacksOf(alloc.for_stream(streams[1]))

# A served request: a handle, and the block's address behind it.
handle, addr = first.request(3 * MIB)
check(handle is not None and addr, "a served request gives a block handle and its address")
check(alloc.stats()["allocated_bytes"] == 3 * MIB, "the block is live in npualloc")
check(alloc.query(addr)["stream"] == streams[0], "the block is ordered on the view's stream")
first.free(None, handle)
check(alloc.stats()["allocated_bytes"] == 0, "free through the handle returns it")

# One cache for both streams: on a 1 GiB device, 1000 MiB cached by the first
# stream's view serve the second stream's 700 MiB request.
check(emu.aclemu_set_device_memory(0, 1 << 30) == 0, "cap the device at 1 GiB")
handle, addr = first.request(1000 * MIB)
check(addr, "1000 MiB on the first stream")
first.free(None, handle)
check(alloc.stats()["reserved_bytes"] >= 1000 * MIB, "the first stream's 1000 MiB stay cached")
handle, addr = second.request(700 * MIB)
check(not raised and addr, "the second stream's 700 MiB request is served from the one cache")
check(alloc.query(addr)["stream"] == streams[1], "that block is ordered on the second stream")
second.free(None, handle)

# A refused request, through the subclass: no exception inside the callback,
# and GE reads a NULL address.
calls = Counting.calls
handle, addr = first.request(2 << 30)
check(Counting.calls == calls + 1, "the subclass's malloc was the one GE called")
check(not raised, "a refused request raises nothing inside the callback")
check(handle is None or not addr, "a refused request reaches GE as NULL through a subclass")
check(isinstance(first.callbacks._allocator.last_refusal, MemoryError), "the view keeps the refusal's error")
if handle is not None:
    first.free(None, handle)
check(not raised, "freeing the refused block raises nothing inside the callback")
check(alloc.stats()["num_ooms"] >= 1, "npualloc counted the refusal")

# Size 0 (a ValueError when called directly) is refused the same way.
handle, addr = second.request(0)
check(not raised and (handle is None or not addr), "size 0 through the adapter reaches GE as NULL")
if handle is not None:
    second.free(None, handle)

# Called directly, the allocator's own malloc raises MemoryError.
try:
    alloc.malloc(2 << 30)
except MemoryError:
    print("ok direct malloc raises MemoryError")
else:
    sys.exit("FAILED: direct malloc of 2 GiB on a 1 GiB device did not raise")

# Blocks are GE's MemBlocks too, and GE's own MemBlock is taken back by
# address and size.
view = alloc.for_stream(streams[0])
block = view.malloc(4096)
check(isinstance(block, ge.allocator.MemBlock) and isinstance(block, npualloc.MemBlock), "a block is GE's MemBlock too")
try:
    alloc.free(ge.allocator.MemBlock(block.addr, 8192))
except ValueError as e:
    check("not a live block" in str(e), "GE's MemBlock of another size is refused, nothing freed")
else:
    sys.exit("FAILED: GE's MemBlock of another size was taken")
check(alloc.stats()["allocated_bytes"] == 4096, "still live after the refusal")
view.free(ge.allocator.MemBlock(block.addr, block.size))
check(alloc.stats()["allocated_bytes"] == 0, "GE's own MemBlock frees the live block it names")
try:
    view.free(block)
except ValueError as e:
    check("already freed" in str(e), "npualloc's block of it is then already freed")
else:
    sys.exit("FAILED: a block freed through GE's MemBlock was freed again")

check(emu.aclemu_set_device_memory(0, 8 << 30) == 0, "restore the device")
alloc.close()
for cb in (first, second):
    adapter.rollback_allocator_c_callbacks(cb.key)
for s in streams:
    check(emu.aclrtDestroyStream(ctypes.c_void_p(s)) == 0, "destroy a stream")
print("done")
