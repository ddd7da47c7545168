"""torch_npu.npu.memory of the stand-in: the pluggable-allocator API."""

import ctypes

import torch_npu._C as _C


class _NPUAllocator:
    def __init__(self, allocator):
        self._allocator = allocator

    def allocator(self):
        return self._allocator


class NPUPluggableAllocator(_NPUAllocator):
    """An allocator from a shared library: its alloc and free functions are
    looked up by name with ctypes, as torch_npu does."""

    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        _C.calls.append(("NPUPluggableAllocator", (path_to_so_file, alloc_fn_name, free_fn_name)))
        library = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(library, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(library, free_fn_name), ctypes.c_void_p).value
        if alloc_fn is None:
            raise RuntimeError("alloc_fn is None")
        if free_fn is None:
            raise RuntimeError("free_fn is None")
        self._allocator = _C._npu_customAllocator(alloc_fn, free_fn)


def change_current_allocator(allocator):
    _C._npu_changeCurrentAllocator(allocator.allocator())


def _get_current_allocator():
    return _NPUAllocator(_C._npu_getAllocator())
