"""torch_npu.npu of the stand-in."""

import torch_npu._C as _C

from . import memory  # noqa: F401
from .memory import NPUPluggableAllocator, change_current_allocator  # noqa: F401


def is_initialized():
    return _C._npu_getAllocator().initialized


def _lazy_init():
    _C._npu_init()
