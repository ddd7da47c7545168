"""Sleep mode for torch_npu users, shaped like vllm-ascend's ``CaMemAllocator``.

    import torch, torch_npu
    import npualloc.torch_npu
    from npualloc.torch_npu_sleep import CaMemAllocator

    npualloc.torch_npu.enable()               # npualloc serves torch_npu
    camem = CaMemAllocator.get_instance()
    with camem.use_memory_pool(tag="weights"):
        weights = torch.randn(1 << 20, device="npu")
    with camem.use_memory_pool(tag="kv_cache"):
        kv = torch.empty(1 << 24, device="npu")
    camem.sleep(offload_tags=("weights",))    # device memory of both goes back
    camem.wake_up(tags=["weights"])           # same addresses, weights restored
    camem.wake_up(tags=["kv_cache"])          # then the KV cache

Each tag is an npualloc pool of the device's process-wide allocator (the
one the torch_npu bridge serves from, ``npualloc_pluggable_allocator``).
``use_memory_pool(tag)`` routes every allocation the calling thread makes
into the tag's pool (``npualloc_pool_begin(a, pool, NULL)``), whatever
stream it is on; frees always go back to the block's own pool. ``sleep``
is ``npualloc_sleep_with``: the tags in ``offload_tags`` are copied to host
memory, the others are discarded, except ``"sleep_persistent"`` (as in
vllm-ascend), which stays on the device; allocations outside every tag (the
default pool) stay too. Every address stays valid: tensors keep their
``data_ptr()`` across a cycle, and nothing has to be re-created.

``wake_up(tags=[...])`` is ``npualloc_wake_with``: only the named tags
wake (vllm-ascend's worker wakes ``weights``, then ``kv_cache``), all of
them or, when the device cannot hold them, none.

Differences from vllm-ascend's class: it needs no C extension and no
``NPUPluggableAllocator``; npualloc copies one run of mapped pages, not one
allocation, at a time; and a wake that does not fit changes nothing
(MemoryError) instead of leaving some tensors mapped.
Offloading and discarding live tensors need expandable segments (on by
default when the runtime has virtual memory); with
``expandable_segments:false`` sleep raises NpuallocError (UNSUPPORTED,
nothing changed).
"""

import contextlib
import ctypes
import gc
import threading

from . import NpuallocError, _lib
from . import torch_npu as _torch_npu

__all__ = ["CaMemAllocator"]


def _check(status, what):
    if status == _lib.OK:
        return
    message = f"{what}: {_lib.last_error()}"
    if status == _lib.ERR_INVALID_ARGUMENT:
        raise ValueError(message)
    if status == _lib.ERR_OUT_OF_MEMORY:
        raise MemoryError(message)
    raise NpuallocError(status, message)


class CaMemAllocator:
    """Tags as npualloc pools, with vllm-ascend's ``CaMemAllocator`` calls.

    Get it with ``get_instance()`` (one per device; the device is torch_npu's
    current one unless given) after ``npualloc.torch_npu.enable()``."""

    default_tag = "default"
    # Allocations with this tag stay on the device across sleep and wake.
    sleep_persistent_tag = "sleep_persistent"

    _instances = {}
    _instances_lock = threading.Lock()

    @staticmethod
    def get_instance(device=None):
        """The instance of ``device`` (an index, ``torch.device`` or string;
        None: torch_npu's current device). TorchNpuError when npualloc is
        not torch_npu's allocator (call ``npualloc.torch_npu.enable()``)."""
        if not _torch_npu.is_enabled():
            raise _torch_npu.TorchNpuError(
                "CaMemAllocator needs npualloc as torch_npu's allocator: call npualloc.torch_npu.enable() "
                "right after `import torch_npu`"
            )
        index = _torch_npu._device(device)
        with CaMemAllocator._instances_lock:
            if index not in CaMemAllocator._instances:
                CaMemAllocator._instances[index] = CaMemAllocator(index, _token=CaMemAllocator._token)
            return CaMemAllocator._instances[index]

    _token = object()

    def __init__(self, device, _token=None):
        if _token is not CaMemAllocator._token:
            raise TypeError("CaMemAllocator is made by CaMemAllocator.get_instance(), not called directly")
        self.device = device
        self._lib = _lib.lib()
        handle = ctypes.c_void_p()
        _check(self._lib.npualloc_pluggable_allocator(device, ctypes.byref(handle)),
               f"npualloc's allocator of device {device}")
        self._handle = handle
        self._pools = {}  # tag -> npualloc pool id
        self._lock = threading.Lock()

    def _pool(self, tag):
        with self._lock:
            if tag not in self._pools:
                pool = ctypes.c_uint64()
                # Created with the default sleep mode (keep): the mode is chosen by sleep().
                _check(self._lib.npualloc_pool_create(self._handle, None, ctypes.byref(pool)),
                       f"creating the pool of tag {tag!r}")
                self._pools[tag] = pool.value
            return self._pools[tag]

    def pool_of(self, tag):
        """The npualloc pool id of ``tag`` (for ``npualloc_pool_get_stats``),
        or None when nothing was allocated under it yet."""
        return self._pools.get(tag)

    @contextlib.contextmanager
    def use_memory_pool(self, tag=None):
        """Inside the block, every NPU allocation the calling thread makes
        goes to the pool of ``tag`` (None: ``"default"``). Blocks nest; the
        innermost wins. ValueError while asleep (the tag's pool is asleep)."""
        if tag is None:
            tag = CaMemAllocator.default_tag
        if not isinstance(tag, str):
            raise TypeError(f"tag must be a str, got {tag!r}")
        pool = self._pool(tag)
        _check(self._lib.npualloc_pool_begin(self._handle, pool, None), f"routing to the pool of tag {tag!r}")
        try:
            yield
        finally:
            _check(self._lib.npualloc_pool_end(self._handle, pool, None), f"ending the route of tag {tag!r}")

    def sleep(self, offload_tags=None):
        """Gives back the device memory of every tag: the tags in
        ``offload_tags`` (a str or a tuple; None: ``("default",)``) are
        copied to host memory first, every other tag is discarded (reads as
        undefined after wake), ``"sleep_persistent"`` stays. Cached memory
        goes back too. Asleep already: nothing happens; after a
        ``wake_up(tags)`` that left some tags asleep, ValueError (wake them
        first), nothing changed. ValueError for a tag that is not a str; NpuallocError (UNSUPPORTED, nothing changed)
        without expandable segments."""
        if offload_tags is None:
            offload_tags = (CaMemAllocator.default_tag,)
        elif isinstance(offload_tags, str):
            offload_tags = (offload_tags,)
        offload_tags = tuple(offload_tags)
        if not all(isinstance(t, str) for t in offload_tags):
            raise ValueError(f"offload_tags must be strings, got {offload_tags!r}")
        gc.collect()  # tensors no longer referenced give their blocks back first
        with self._lock:
            offload = [p for t, p in self._pools.items() if t in offload_tags]
            discard = [p for t, p in self._pools.items()
                       if t not in offload_tags and t != CaMemAllocator.sleep_persistent_tag]
            off = (ctypes.c_uint64 * len(offload))(*offload)
            dis = (ctypes.c_uint64 * len(discard))(*discard)
            _check(self._lib.npualloc_sleep_with(self._handle, off, len(offload), dis, len(discard)), "sleep")

    def wake_up(self, tags=None):
        """Maps device memory under the sleeping tensors of ``tags`` (a str
        or a list; None: every tag) again at their addresses and copies the
        offloaded ones back (``npualloc_wake_with``, one pool per tag), as
        vllm-ascend wakes ``weights`` before ``kv_cache``. The tags not
        named stay asleep: allocating under them still raises ValueError.
        A tag that does not sleep (unknown, ``"sleep_persistent"``, or woken
        already) is skipped, as vllm-ascend skips it. All or nothing:
        MemoryError when the device cannot hold them, nothing changed, still
        asleep, call again later. Awake already: nothing happens."""
        with self._lock:
            if tags is None:
                _check(self._lib.npualloc_wake(self._handle), "wake_up")
                return
            if isinstance(tags, str):
                tags = [tags]
            tags = list(tags)
            if not all(isinstance(t, str) for t in tags):
                raise ValueError(f"tags must be strings, got {tags!r}")
            pools = [p for t, p in self._pools.items() if t in tags and t != CaMemAllocator.sleep_persistent_tag]
            arr = (ctypes.c_uint64 * len(pools))(*pools)
            _check(self._lib.npualloc_wake_with(self._handle, arr, len(pools)), "wake_up")

    def get_current_usage(self):
        """Bytes allocated (live, rounded) under every tag, asleep or not."""
        total = 0
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            s = _lib.Stats()
            s.struct_size = ctypes.sizeof(s)
            _check(self._lib.npualloc_pool_get_stats(self._handle, pool, ctypes.byref(s)), "pool statistics")
            total += s.allocated_bytes
        return total
