"""A stand-in for torch_npu, enough of it to test npualloc.torch_npu.

It follows torch_npu 2.x's allocator API: torch_npu.npu.memory's
NPUPluggableAllocator(path, alloc_fn_name, free_fn_name) (the functions
looked up with ctypes), its allocator()'s set_*_fn setters taking function
addresses, change_current_allocator refusing once the NPU is initialized,
torch_npu.npu.is_initialized. Every call is recorded in ``_C.calls``; the
hooks it was given are called through ctypes with torch_npu's C types when a
test drives ``_C.raw_alloc`` and friends, as torch_npu's allocator would.
"""

__version__ = "2.14.0.stand-in"

from . import _C  # noqa: E402,F401
from . import npu  # noqa: E402,F401
