"""npualloc: a caching device-memory allocator for Ascend NPUs (ctypes bindings).

``CachingAllocator`` is npualloc's allocator for one device: one cache that
serves every stream. GE registers an allocator per stream and its ``malloc``
names no stream, so GE is given one light view per stream, each ordering its
blocks on its own stream while every stream's cached memory serves every
other::

    alloc = npualloc.CachingAllocator(device=0)
    session.register_external_allocator(stream, alloc.for_stream(stream))

``npualloc.torch_npu.enable()`` makes npualloc torch_npu's NPU allocator.
The package carries libnpualloc.so; ``NPUALLOC_LIBRARY`` names another.
"""

import ctypes
import importlib
import json
import operator
import sys

from . import _lib
from ._lib import find_library

__all__ = [
    "MemBlock",
    "SharedBlock",
    "CachingAllocator",
    "StreamAllocator",
    "Pool",
    "NpuallocError",
    "find_library",
    "ipc_import",
    "version",
]


class NpuallocError(RuntimeError):
    """A failure without a more specific Python exception."""

    def __init__(self, status, message):
        super().__init__(f"{_lib.status_name(status)}: {message}")
        self.status = status


class MemBlock:
    """A block of device memory: its address and size (read-only).

    A block is an object with a life: ``free`` takes the very object
    ``malloc`` returned, once. A block freed before is refused as already
    freed even after its address went to a newer block, and a MemBlock made
    by hand, or one of another (or a closed) allocator, as not its own."""

    __slots__ = ("_addr", "_size", "_freed")

    def __init__(self, addr, size):
        self._addr = int(addr)
        self._size = int(size)
        self._freed = False

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


class _RefusedBlock(MemBlock):
    """What a ``StreamAllocator`` gives GE for a refused request.

    GE's adapter cannot pass an exception on (see ``StreamAllocator.malloc``);
    it reads a block's address as ``blk.addr if blk else 0``, so a false
    block with address 0 reaches GE as a NULL address. ``free`` ignores it."""

    __slots__ = ()

    def __bool__(self):
        return False


# GE's Python package, found when it is first needed rather than when npualloc
# is imported, so the order of the two imports (or a sys.path set up in
# between) does not matter.
_GE_MODULE = "ge.allocator"
# The block class malloc returns once ``ge.allocator`` is loaded: both
# npualloc's MemBlock and GE's (None: not built yet; MemBlock: GE's cannot be
# combined with ours).
_ge_block_class = None


def _ge_allocator_module(load):
    """``ge.allocator`` if loaded (or, with ``load``, importable); else None."""
    module = sys.modules.get(_GE_MODULE)
    if module is None and load:
        try:
            module = importlib.import_module(_GE_MODULE)
        except ImportError:
            return None
    return module


def _block_class():
    """The class of the blocks ``malloc`` returns: npualloc's MemBlock, and
    GE's ``ge.allocator.MemBlock`` too once a program has loaded it (a block
    is then what GE's documentation says ``malloc`` returns). Called per
    malloc: after the first answer with GE loaded, one global look-up."""
    global _ge_block_class
    if _ge_block_class is not None:
        return _ge_block_class
    module = _ge_allocator_module(load=False)
    if module is None:
        return MemBlock
    ge_block = getattr(module, "MemBlock", None)
    try:
        # GE's MemBlock keeps its fields in the instance dict; ours in slots,
        # which take precedence, so both views of a block agree.
        _ge_block_class = type("MemBlock", (MemBlock, ge_block), {"__slots__": (), "__module__": __name__})
    except TypeError:
        _ge_block_class = MemBlock  # a GE whose MemBlock has another layout
    return _ge_block_class


def _ge_memblock(block):
    """Whether ``block`` is GE's own ``ge.allocator.MemBlock`` (not ours)."""
    module = _ge_allocator_module(load=False)
    ge_block = getattr(module, "MemBlock", None) if module is not None else None
    return isinstance(ge_block, type) and isinstance(block, ge_block)


def _register_with_ge():
    """Makes ``StreamAllocator`` (and so every subclass) an instance of
    GE's ``ge.allocator.Allocator`` for GE's ``isinstance`` check, when GE is
    importable. Its ``Allocator`` is an ABC: registering a class is what
    its ``register`` is for, and needs no inheritance fixed when npualloc was
    imported."""
    module = _ge_allocator_module(load=True)
    base = getattr(module, "Allocator", None) if module is not None else None
    if base is None or issubclass(StreamAllocator, base):
        return
    register = getattr(base, "register", None)
    if register is not None:
        register(StreamAllocator)


def _int(name, value, what):
    """``value`` as an int: an int or an integer scalar (numpy's, torch's:
    ``operator.index``), not a bool; TypeError otherwise."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}") from None


def _config(config):
    """A config string as the C API takes it: None, or a str without NUL."""
    if config is None:
        return None
    if not isinstance(config, str):
        raise TypeError(f"config must be a str ('key:value,...') or None, got {type(config).__name__} {config!r}")
    if "\0" in config:
        # C would read the string only up to the NUL and ignore the rest.
        raise ValueError("the config string contains a NUL character")
    return config.encode()


def _device(device):
    """A device id as ``npualloc_create`` takes it (an int32); whether the
    runtime has it is the library's check (ValueError naming its ids)."""
    device = _int("device", device, "a device id (an int)")
    if not 0 <= device < 1 << 31:
        raise ValueError(f"device must be a device id, 0 to 2**31-1, got {device}")
    return device


def _stream_value(stream):
    if stream is None:
        return 0
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    stream = _int("stream", stream, "None or a stream address (an int, as GE takes it)")
    if not 0 <= stream < 1 << 64:
        raise ValueError(f"stream must be a stream address, 0 to 2**64-1, got {stream}")
    return stream


def _stream_ptr(stream):
    return ctypes.c_void_p(_stream_value(stream) or None)


def _block_ptr(block):
    """A MemBlock's address, or an int address, as a pointer."""
    if isinstance(block, MemBlock):
        addr = block.addr
    else:
        addr = _int("the block", block, "a MemBlock or an address (an int)")
        if not 0 <= addr < 1 << 64:
            raise ValueError(f"an address is 0 to 2**64-1, got {addr}")
    return ctypes.c_void_p(addr or None)


def _check(status):
    if status == _lib.OK:
        return
    message = _lib.last_error()
    if status == _lib.ERR_OUT_OF_MEMORY:
        raise MemoryError(message)
    if status in (_lib.ERR_INVALID_ARGUMENT, _lib.ERR_UNKNOWN_POINTER):
        raise ValueError(message)
    raise NpuallocError(status, message)


class CachingAllocator:
    """npualloc's caching allocator for one device: one cache for every stream.

    ``stream`` is the stream ``malloc`` orders its blocks on (an int
    address; a ``ctypes.c_void_p`` is read too), or None for the default
    stream. ``for_stream(s)`` gives a view that orders its blocks on ``s``
    instead: what GE registers for ``s``. A block's memory goes back to the
    device (``empty_cache``, the out-of-memory retries, ``close()``) only
    after the streams that used it are synchronized.

    ``config`` is npualloc's config string (``"key:value,..."``); None reads
    ``NPUALLOC_CONF``, or ``PYTORCH_NPU_ALLOC_CONF`` when that is unset
    (torch_npu-only keys ignored, with a line on stderr). A refused config
    raises NpuallocError (``status`` 2, NPUALLOC_ERR_BAD_CONFIG) naming the
    key. Use as a context manager, or call ``close()``. A stream the runtime
    does not know (or one of another device) raises ValueError here, with
    the message ``malloc`` would give for it; so does a device id the
    runtime does not have. A device, stream or config of the wrong type
    raises TypeError.
    """

    def __init__(self, device=0, config=None, stream=None):
        self._handle = None
        self.stream = _stream_value(stream)
        device, cfg = _device(device), _config(config)
        self._lib = _lib.lib()
        handle = ctypes.c_void_p()
        _check(self._lib.npualloc_create(cfg, device, ctypes.byref(handle)))
        self._handle = handle
        # The blocks malloc handed out and free has not taken back, by address.
        self._blocks = {}
        self.device = device
        self._stream = ctypes.c_void_p(self.stream or None)
        if self.stream:
            try:
                self._check_stream(self._stream)
            except BaseException:
                handle, self._handle = self._handle, None
                self._lib.npualloc_destroy(handle)
                raise

    def _check_stream(self, stream):
        """Refuses a stream the runtime does not know, as the first malloc
        on it would. The C API has no call that only checks a stream; making
        a binding checks it as ``npualloc_malloc`` does, and the binding,
        destroyed at once, has no other effect."""
        binding = ctypes.c_void_p()
        _check(self._lib.npualloc_binding_create(self._live(), stream, ctypes.byref(binding)))
        _check(self._lib.npualloc_binding_destroy(binding))

    def _live(self):
        if self._handle is None:
            raise ValueError("the allocator is closed")
        return self._handle

    def malloc(self, size):
        """``size`` bytes ordered on the allocator's stream, as a MemBlock.

        Raises MemoryError when the device cannot hold the request,
        TypeError for a size that is not an int, and ValueError for a bad
        one: 0 or negative, or 2**60 bytes or more (no device holds that)."""
        return self._malloc(size, self._stream)

    def _malloc(self, size, stream):
        size = _int("size", size, "an int")
        if size <= 0 or size >= 1 << 64:
            raise ValueError(f"size must be in 1..2**64-1, got {size}")
        out = ctypes.c_void_p()
        _check(self._lib.npualloc_malloc(self._live(), size, stream, ctypes.byref(out)))
        block = _block_class()(out.value, size)
        self._blocks[out.value] = block
        return block

    def for_stream(self, stream):
        """A ``StreamAllocator``: this allocator's cache, its blocks ordered
        on ``stream``. The object to register with GE for that stream."""
        return StreamAllocator(self, stream)

    def free(self, block):
        """Returns ``block``, the object ``malloc`` returned. ValueError
        (nothing changes) for a block already freed, even when a newer block
        has its address, and for one this allocator did not hand out;
        TypeError for anything but a MemBlock.

        GE's own ``ge.allocator.MemBlock`` is taken too when its address and
        size are those of a live block: it carries no more, so an old one
        whose address went to a newer block of that size frees the newer
        block (only npualloc's blocks can tell)."""
        if isinstance(block, _RefusedBlock):
            return  # a refused request given to GE: nothing to free
        if not isinstance(block, MemBlock):
            if not _ge_memblock(block):
                raise TypeError(f"expected a MemBlock, got {type(block).__name__} {block!r}")
            block = self._own_block(block)
        handle = self._live()
        # Taken out first (one step under the GIL), so two threads freeing
        # one block cannot both pass; put back if it is another block.
        held = self._blocks.pop(block.addr, None)
        if held is not block:
            if held is not None:
                self._blocks[block.addr] = held
            if block._freed:
                raise ValueError(f"{block!r} was already freed")
            raise ValueError(f"{block!r} is not a block of this allocator (blocks come from its malloc)")
        try:
            _check(self._lib.npualloc_free(handle, ctypes.c_void_p(block.addr)))
        except BaseException:
            self._blocks[block.addr] = block
            raise
        block._freed = True

    def _own_block(self, ge_block):
        """The live block GE's MemBlock ``ge_block`` names by address and size."""
        addr = _int("the block's addr", ge_block.addr, "an int")
        size = _int("the block's size", ge_block.size, "an int")
        held = self._blocks.get(addr)
        if held is None or held.size != size:
            raise ValueError(
                f"GE's MemBlock(addr={addr:#x}, size={size}) is not a live block of this allocator "
                "(its address and size must be those of a block malloc returned and free has not taken back)"
            )
        return held

    def stats(self, kind=None):
        """The allocator's statistics as a dict (PyTorch memory_stats names):
        totals over every pool; with ``kind="small"`` or ``"large"`` those
        of the blocks of at most 1 MiB or the larger ones (PyTorch's small
        and large pools; ``npualloc_get_kind_stats`` says which figures are
        kept per kind)."""
        s = _lib.Stats()
        s.struct_size = ctypes.sizeof(_lib.Stats)
        if kind is None:
            _check(self._lib.npualloc_get_stats(self._live(), ctypes.byref(s)))
        else:
            kinds = {"small": 0, "large": 1}
            if not isinstance(kind, str):
                raise TypeError(f"kind must be None, \"small\" or \"large\", not {type(kind).__name__}")
            if kind not in kinds:
                raise ValueError(f"kind must be None, \"small\" or \"large\", not {kind!r}")
            _check(self._lib.npualloc_get_kind_stats(self._live(), kinds[kind], ctypes.byref(s)))
        return _stats_dict(s)

    def snapshot(self):
        """Segments, blocks and statistics, as a dict."""
        out = ctypes.c_void_p()
        _check(self._lib.npualloc_snapshot_json(self._live(), ctypes.byref(out)))
        try:
            return json.loads(ctypes.string_at(out.value).decode())
        finally:
            self._lib.npualloc_string_free(out)

    def empty_cache(self, keep_handles=False):
        """Returns cached, unused memory to the device. With
        ``keep_handles``, the physical handles of expandable segments are
        unmapped but kept (``stats()["cached_handle_bytes"]``) for later
        growth to map again, as torch_npu's ``empty_virt_addr_cache``;
        NpuallocError (UNSUPPORTED, nothing changed) with fixed segments."""
        if not isinstance(keep_handles, bool):
            raise TypeError(f"keep_handles must be a bool, not {type(keep_handles).__name__}")
        _check(self._lib.npualloc_empty_cache_with(self._live(), _KEEP_HANDLES if keep_handles else 0))

    def sleep(self):
        """Gives back the allocator's device memory while every block's
        address stays valid (``npualloc_sleep``): cached memory goes back,
        the live blocks of ``sleep=offload`` pools are copied to host memory
        and their device memory goes back, those of ``sleep=discard`` pools
        go back without a copy, ``sleep=keep`` pools (the default) stay.
        Asleep already: nothing happens; but after ``wake(pools=...)`` left
        some pools asleep, ValueError (wake them first), nothing changed.
        While asleep, allocating from an
        offload or discard pool raises ValueError; freeing is allowed.
        NpuallocError (UNSUPPORTED, nothing changed) when an offload or
        discard pool has live blocks and segments are not expandable."""
        _check(self._lib.npualloc_sleep(self._live()))

    def wake(self, pools=None):
        """Maps device memory under every sleeping block again, at the same
        addresses, with offloaded contents restored (``npualloc_wake``).
        ``pools`` (an iterable of ``Pool`` objects or pool ids; None: every
        pool) wakes only those pools' blocks (``npualloc_wake_with``), e.g.
        the weights before the KV cache: the others stay asleep, and so
        does the allocator until every pool is awake. All or nothing:
        MemoryError when the device cannot hold them (after giving back the
        cached memory of the pools awake): nothing changed, still asleep,
        call again later. ValueError for a pool that was never created.
        Awake already (or the pools listed awake): nothing happens."""
        if pools is None:
            _check(self._lib.npualloc_wake(self._live()))
            return
        pools = list(pools)
        ids = [p.id if isinstance(p, Pool) else p for p in pools]
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 64 for i in ids):
            raise TypeError(f"pools must be Pool objects or pool ids (ints), got {list(pools)!r}")
        arr = (ctypes.c_uint64 * len(ids))(*ids)
        _check(self._lib.npualloc_wake_with(self._live(), arr, len(ids)))

    # ---- the C API's stream and block calls (npualloc_record_stream, ...) ----

    def record_stream(self, block, stream):
        """Notes that work queued on ``stream`` (an address, as for the
        constructor) uses ``block``, so freeing it waits for that work, as
        ``torch.Tensor.record_stream`` does. Recording the block's own stream
        does nothing. ValueError for a block that is not live here or a
        stream the runtime does not know."""
        _check(self._lib.npualloc_record_stream(self._live(), _block_ptr(block), _stream_ptr(stream)))

    def erase_stream(self, block, stream):
        """Undoes ``record_stream(block, stream)``: the caller ordered that
        stream's work on the block itself. A stream the block was never
        recorded on changes nothing. ValueError for a block not live here."""
        _check(self._lib.npualloc_erase_stream(self._live(), _block_ptr(block), _stream_ptr(stream)))

    def forget_stream(self, stream):
        """The program is done with ``stream`` (call before destroying it):
        the memory cached for it goes back to the device; its live blocks
        stay valid. A stream this allocator never served changes nothing."""
        _check(self._lib.npualloc_forget_stream(self._live(), _stream_ptr(stream)))

    def query(self, addr):
        """The live block containing ``addr`` (a MemBlock or any address
        inside a block), as a dict: ``addr``, ``size`` (as rounded),
        ``requested`` and ``stream`` (0: the default stream). ValueError when
        no live block contains it."""
        info = _lib.BlockInfo()
        _check(self._lib.npualloc_query(self._live(), _block_ptr(addr), ctypes.byref(info)))
        return {"addr": info.addr, "size": info.size, "requested": info.requested, "stream": info.stream or 0}

    def ipc_export(self, block):
        """The 128 bytes (``bytes``) that let another process of the host map
        ``block``'s memory with ``npualloc.ipc_import``: send them through a
        pipe, socket, file or shared memory. Exporting a block again gives
        the same bytes. While a process holds the block imported, its memory
        is neither handed out again nor given back, even after ``free``
        (which succeeds at once); a block freed before any import is no
        longer exported. ValueError for a block not live here;
        NpuallocError (RUNTIME) when the runtime refuses, e.g. for a
        physical handle a communication library registered (and so
        exported itself)."""
        out = _lib.IpcHandle()
        _check(self._lib.npualloc_ipc_export(self._live(), _block_ptr(block), ctypes.byref(out)))
        return bytes(out.bytes)

    def set_memory_fraction(self, fraction):
        """Caps the memory this allocator reserves at ``fraction`` (0 to 1)
        of the device's total; what is reserved already stays. ValueError
        for a fraction outside [0, 1] or NaN, TypeError for a non-number."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise TypeError(f"fraction must be a number in [0, 1], got {type(fraction).__name__} {fraction!r}")
        _check(self._lib.npualloc_set_memory_fraction(self._live(), float(fraction)))

    def reset_peak_stats(self):
        """Resets the ``*_peak`` statistics to the current values."""
        _check(self._lib.npualloc_reset_peak_stats(self._live()))

    def close(self):
        """Destroys the allocator (live blocks are released). Idempotent."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._blocks.clear()
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


class StreamAllocator:
    """One stream's view of a ``CachingAllocator``: the allocator GE
    registers for that stream (``alloc.for_stream(stream)``).

    Its blocks are ordered on ``stream``; they come from, and go back to,
    the one cache of ``allocator``, whose cached memory serves every
    stream's view. Views are light: make one per stream GE runs on, and
    register each before the stream's first op (GE keeps its own allocator
    for a stream that ran an op with nothing registered). An instance of
    GE's ``ge.allocator.Allocator`` once GE is importable, whenever npualloc
    was imported. ``free`` takes a block of any view of the same allocator.
    ``last_refusal`` is the error of the last request refused (None if
    none)."""

    def __init__(self, allocator, stream):
        if not isinstance(allocator, CachingAllocator):
            raise TypeError(f"expected a CachingAllocator, got {type(allocator).__name__} {allocator!r}")
        self.allocator = allocator
        self.stream = _stream_value(stream)
        self._stream = ctypes.c_void_p(self.stream or None)
        allocator._check_stream(self._stream)
        self.last_refusal = None
        _register_with_ge()

    def malloc(self, size):
        """``size`` bytes ordered on the view's stream, as a MemBlock.

        A refused request (no memory: MemoryError; a bad size: TypeError or
        ValueError; a closed allocator) returns a false block with address
        0 instead of raising; the error goes to ``last_refusal`` and stderr.
        GE documents MemoryError for ``malloc``, but its callback adapter
        (``ge/_capi/_allocator_callback_adapter.py``) catches nothing, and
        ctypes then gives GE an unspecified block handle; a block it reads
        as false reaches GE as a NULL address. The answer is the call's, so
        a subclass whose ``malloc`` returns ``super().malloc(size)`` gives
        GE the same."""
        try:
            return self.allocator._malloc(size, self._stream)
        except (MemoryError, TypeError, ValueError, NpuallocError) as e:
            self.last_refusal = e
            sys.stderr.write(f"npualloc: refused a request for {size!r} bytes on stream {self.stream:#x}: {e}\n")
            return _RefusedBlock(0, size if isinstance(size, int) and not isinstance(size, bool) else 0)

    def free(self, block):
        """Returns a block of this allocator (``CachingAllocator.free``; a
        refused request's block is ignored)."""
        self.allocator.free(block)

    def __repr__(self):
        return f"StreamAllocator(device={self.allocator.device}, stream={self.stream:#x})"


# npualloc_empty_cache_with's flag NPUALLOC_EMPTY_KEEP_HANDLES.
_KEEP_HANDLES = 1


def _stats_dict(s):
    return {name: getattr(s, name) for name, _ in _lib.Stats._fields_ if name != "struct_size"}


class Pool:
    """A private pool of a CachingAllocator (``npualloc_pool_create``).

    Used as a context manager, it routes allocations to the pool while the
    ``with`` block runs: every allocation the calling thread makes through
    the allocator (``stream=None``, like PyTorch's ``use_mem_pool``), or
    every allocation on ``stream`` from any thread (an int stream address).
    Routes nest, the innermost wins; a block always goes back to its own
    pool when freed. The pool's cached memory stays with it
    (``empty_cache`` leaves it) until ``destroy()``.

    ``config`` is the pool's config string: ``sleep`` (keep, offload,
    discard), ``use_on_oom`` (true: requests outside the pool that run
    out of memory may take its cached memory), ``alignment`` (``2m``,
    ``64k`` or bytes: every block starts on that boundary) and ``no_split``
    (true: every block is 2 MiB-aligned memory of its own, never cut from
    a larger cached block)::

        with npualloc.Pool(alloc) as pool:
            block = alloc.malloc(1 << 20)   # from the pool
        pool.stats()["allocated_bytes"]
    """

    def __init__(self, allocator, config=None, stream=None):
        if not isinstance(allocator, CachingAllocator):
            raise TypeError(f"expected a CachingAllocator, got {type(allocator).__name__} {allocator!r}")
        cfg = _config(config)
        self._allocator = allocator
        self._lib = allocator._lib
        self.stream = None if stream is None else _stream_value(stream)
        out = ctypes.c_uint64()
        _check(self._lib.npualloc_pool_create(allocator._live(), cfg, ctypes.byref(out)))
        self.id = out.value
        # Routes this object began, innermost last (so a nested `with` ends the right one).
        self._depth = 0

    def _target(self):
        return ctypes.c_void_p(self.stream or None)

    def begin(self):
        """Starts routing (see the class doc). ValueError for a destroyed pool."""
        _check(self._lib.npualloc_pool_begin(self._allocator._live(), self.id, self._target()))
        self._depth += 1

    def end(self):
        """Ends the innermost route, which must be this pool's (ValueError
        otherwise, nothing changes)."""
        _check(self._lib.npualloc_pool_end(self._allocator._live(), self.id, self._target()))
        self._depth -= 1

    def __enter__(self):
        self.begin()
        return self

    def __exit__(self, *exc):
        self.end()
        return False

    def stats(self):
        """This pool's statistics, as a dict (the names of ``CachingAllocator.stats``)."""
        s = _lib.Stats()
        s.struct_size = ctypes.sizeof(_lib.Stats)
        _check(self._lib.npualloc_pool_get_stats(self._allocator._live(), self.id, ctypes.byref(s)))
        return _stats_dict(s)

    def empty_cache(self):
        """Gives the pool's cached memory back to the device; its live blocks
        stay and the pool keeps working. A pool that served a graph capture
        keeps its memory (the graph may replay) until destroyed."""
        _check(self._lib.npualloc_pool_empty_cache(self._allocator._live(), self.id))

    def set_use_on_oom(self, on):
        """Whether requests outside the pool that run out of memory may take
        its cached memory, from now on (the config key of that name)."""
        if not isinstance(on, bool):
            raise TypeError(f"use_on_oom must be a bool, not {type(on).__name__}")
        _check(self._lib.npualloc_pool_set_use_on_oom(self._allocator._live(), self.id, int(on)))

    def destroy(self):
        """Destroys the pool: its cached memory goes back to the device;
        its live blocks stay valid until freed. ValueError while routed."""
        _check(self._lib.npualloc_pool_destroy(self._allocator._live(), self.id))


class SharedBlock:
    """Another process's block, mapped here by ``ipc_import``: ``addr`` and
    ``size`` (read-only). ``close()`` (or leaving a ``with`` block) ends the
    import; the exporter may then reuse the memory once no process holds it.
    Work queued on the memory must be finished before the close."""

    __slots__ = ("_addr", "_size", "_open")

    def __init__(self, addr, size):
        self._addr, self._size, self._open = addr, size, True

    @property
    def addr(self):
        return self._addr

    @property
    def size(self):
        return self._size

    def close(self):
        """Ends this import. Idempotent."""
        if self._open:
            self._open = False
            _check(_lib.lib().npualloc_ipc_close(ctypes.c_void_p(self._addr)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # A dropped import ends too, or the exporter's memory stays held
        # until this process exits.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing may escape a finalizer
            pass

    def __repr__(self):
        state = "" if self._open else ", closed"
        return f"SharedBlock(addr={self._addr:#x}, size={self._size}{state})"


def ipc_import(handle, device=0):
    """Maps, on ``device``, the block another process exported with
    ``CachingAllocator.ipc_export``; returns a ``SharedBlock``. This process
    needs no allocator of its own. The same memory: each side sees the
    other's writes. Importing the same bytes twice gives two imports, each
    closed once. TypeError unless ``handle`` is 128 bytes (``bytes``,
    ``bytearray`` or ``memoryview``); ValueError for bytes that are not an
    export, an export of this very process, or a block no longer exported
    (freed, or its process gone)."""
    if not isinstance(handle, (bytes, bytearray, memoryview)):
        raise TypeError(f"handle must be the 128 bytes ipc_export returned, not {type(handle).__name__}")
    raw = bytes(handle)
    if len(raw) != 128:
        raise TypeError(f"handle must be the 128 bytes ipc_export returned, got {len(raw)} bytes")
    device = _device(device)
    h = _lib.IpcHandle()
    ctypes.memmove(h.bytes, raw, 128)
    out, size = ctypes.c_void_p(), ctypes.c_size_t()
    _check(_lib.lib().npualloc_ipc_import(ctypes.byref(h), device, ctypes.byref(out), ctypes.byref(size)))
    return SharedBlock(out.value, size.value)


def version():
    """The library version, "major.minor.patch", the same as the package version."""
    return _lib.lib().npualloc_version().decode()
