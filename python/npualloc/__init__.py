"""npualloc: a caching device-memory allocator for Ascend NPUs (ctypes bindings).

``CachingAllocator`` follows the shape of ``ge.allocator.Allocator`` and
subclasses it when the ``ge`` package is importable::

    with npualloc.CachingAllocator(device=0) as alloc:
        block = alloc.malloc(1 << 20)
        ...
        alloc.free(block)

``npualloc.torch_npu.enable()`` makes npualloc torch_npu's NPU allocator.
The package carries libnpualloc.so; ``NPUALLOC_LIBRARY`` names another.
"""

import abc
import ctypes
import json

from . import _lib
from ._lib import find_library

__all__ = ["MemBlock", "CachingAllocator", "NpuallocError", "find_library", "version"]

try:  # pragma: no cover - depends on the environment
    from ge.allocator import Allocator as _AllocatorBase
except ImportError:

    class _AllocatorBase(abc.ABC):
        """The allocator interface of ``ge.allocator`` (used when it is absent)."""

        @abc.abstractmethod
        def malloc(self, size):
            """Allocates ``size`` bytes of device memory; returns a MemBlock."""

        @abc.abstractmethod
        def free(self, block):
            """Returns a MemBlock obtained from ``malloc``."""


Allocator = _AllocatorBase


class NpuallocError(RuntimeError):
    """A failure without a more specific Python exception."""

    def __init__(self, status, message):
        super().__init__(f"{_lib.status_name(status)}: {message}")
        self.status = status


class MemBlock:
    """A block of device memory: its address and size (read-only)."""

    __slots__ = ("_addr", "_size")

    def __init__(self, addr, size):
        self._addr = int(addr)
        self._size = int(size)

    @property
    def addr(self):
        return self._addr

    @property
    def size(self):
        return self._size

    def __repr__(self):
        return f"MemBlock(addr={self._addr:#x}, size={self._size})"

    def __eq__(self, other):
        return isinstance(other, MemBlock) and (self._addr, self._size) == (other._addr, other._size)

    def __hash__(self):
        return hash((self._addr, self._size))


def _check(status):
    if status == _lib.OK:
        return
    message = _lib.last_error()
    if status == _lib.ERR_OUT_OF_MEMORY:
        raise MemoryError(message)
    if status in (_lib.ERR_INVALID_ARGUMENT, _lib.ERR_UNKNOWN_POINTER):
        raise ValueError(message)
    raise NpuallocError(status, message)


class CachingAllocator(Allocator):
    """npualloc's caching allocator for one device.

    ``config`` is npualloc's config string (``"key:value,..."``); None reads
    ``NPUALLOC_CONF``. Use as a context manager, or call ``close()``.
    """

    def __init__(self, device=0, config=None):
        self._lib = _lib.lib()
        handle = ctypes.c_void_p()
        cfg = None if config is None else str(config)
        if cfg is not None and "\0" in cfg:
            # C would read the string only up to the NUL and ignore the rest.
            raise ValueError("the config string contains a NUL character")
        cfg = None if cfg is None else cfg.encode()
        _check(self._lib.npualloc_create(cfg, int(device), ctypes.byref(handle)))
        self._handle = handle
        self.device = int(device)

    def _live(self):
        if self._handle is None:
            raise ValueError("the allocator is closed")
        return self._handle

    def malloc(self, size):
        """``size`` bytes on the device's default stream, as a MemBlock.

        Raises MemoryError when the device is exhausted and ValueError for a
        bad size (0, negative, or larger than any device)."""
        if isinstance(size, bool) or not isinstance(size, int):
            raise ValueError(f"size must be an int, got {size!r}")
        if size <= 0 or size >= 1 << 64:
            raise ValueError(f"size must be in 1..2**64-1, got {size}")
        out = ctypes.c_void_p()
        _check(self._lib.npualloc_malloc(self._live(), size, None, ctypes.byref(out)))
        return MemBlock(out.value, size)

    def free(self, block):
        """Returns ``block``. ValueError (nothing changes) for a block this
        allocator does not own or already freed."""
        if not isinstance(block, MemBlock):
            raise ValueError(f"expected a MemBlock, got {block!r}")
        if block.addr == 0:
            # npualloc_free(a, NULL) is a no-op, as with C's free; no block
            # this allocator made has address 0, so it is not one of its own.
            raise ValueError(f"{block!r} is not a block of this allocator")
        _check(self._lib.npualloc_free(self._live(), ctypes.c_void_p(block.addr)))

    def stats(self):
        """The allocator's statistics as a dict (PyTorch memory_stats names)."""
        s = _lib.Stats()
        s.struct_size = ctypes.sizeof(_lib.Stats)
        _check(self._lib.npualloc_get_stats(self._live(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in _lib.Stats._fields_ if name != "struct_size"}

    def snapshot(self):
        """Segments, blocks and statistics, as a dict."""
        out = ctypes.c_void_p()
        _check(self._lib.npualloc_snapshot_json(self._live(), ctypes.byref(out)))
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            self._lib.npualloc_string_free(out)

    def empty_cache(self):
        """Returns cached, unused memory to the device."""
        _check(self._lib.npualloc_empty_cache(self._live()))

    def close(self):
        """Destroys the allocator (live blocks are released). Idempotent."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _check(self._lib.npualloc_destroy(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def version():
    """The library version, e.g. "0.1.0"."""
    return _lib.lib().npualloc_version().decode()
