"""Drives npualloc.CachingAllocator through GE's ctypes callback adapter the
way GE's C++ side calls it (run by test_ge_adapter.py in a subprocess whose
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
from ge._capi.pysession_wrapper import c_func_t_free, c_func_t_get_addr, c_func_t_malloc

import npualloc

MIB = 1 << 20
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
stream = ctypes.c_void_p()
check(emu.aclrtCreateStream(ctypes.byref(stream)) == 0, "create a stream")

alloc = npualloc.CachingAllocator(config="", stream=stream.value)
callbacks, gc_key, _ = adapter.create_allocator_c_callbacks(alloc)
malloc_fn = as_c_function(c_func_t_malloc, callbacks.c_malloc)
free_fn = as_c_function(c_func_t_free, callbacks.c_free)
get_addr_fn = as_c_function(c_func_t_get_addr, callbacks.c_get_addr)

# A served request: a handle, and the block's address behind it.
handle = malloc_fn(None, 3 * MIB)
check(handle is not None, "a served request gives a block handle")
addr = get_addr_fn(handle)
check(addr is not None and addr != 0, "get_addr gives the block's address")
check(alloc.stats()["allocated_bytes"] == 3 * MIB, "the block is live in npualloc")
free_fn(None, handle)
check(alloc.stats()["allocated_bytes"] == 0, "free through the handle returns it")

# A refused request: the adapter lets no exception escape into ctypes, and
# GE reads a NULL address.
check(emu.aclemu_set_device_memory(0, 64 * MIB) == 0, "cap the device at 64 MiB")
alloc.empty_cache()
handle = malloc_fn(None, 1 << 30)
check(not raised, "a refused request raises nothing inside the callback")
addr = get_addr_fn(handle) if handle is not None else None
check(handle is None or not addr, "a refused request reaches GE as NULL")
if handle is not None:
    free_fn(None, handle)
check(not raised, "freeing the refused block raises nothing inside the callback")
check(alloc.stats()["num_ooms"] >= 1, "npualloc counted the refusal")

# Size 0 (a ValueError when called directly) is refused the same way.
handle = malloc_fn(None, 0)
check(not raised and (handle is None or not get_addr_fn(handle)), "size 0 through the adapter reaches GE as NULL")
if handle is not None:
    free_fn(None, handle)

# Called directly, malloc keeps GE's documented contract: MemoryError.
try:
    alloc.malloc(1 << 30)
except MemoryError:
    print("ok direct malloc raises MemoryError")
else:
    sys.exit("FAILED: direct malloc of 1 GiB on a 64 MiB device did not raise")

check(emu.aclemu_set_device_memory(0, 8 << 30) == 0, "restore the device")
alloc.close()
adapter.rollback_allocator_c_callbacks(gc_key)
check(emu.aclrtDestroyStream(stream) == 0, "destroy the stream")
print("done")
