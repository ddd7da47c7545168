"""npualloc as torch_npu's NPU memory allocator.

    import torch, torch_npu
    import npualloc.torch_npu

    npualloc.torch_npu.enable()          # before the first tensor on an NPU
    x = torch.empty(1 << 20, device="npu")

``enable()`` builds torch_npu's ``NPUPluggableAllocator`` from the library
this package carries (its ``npualloc_pluggable_malloc`` and
``npualloc_pluggable_free``), hands it the library's optional hooks that this
torch_npu version accepts, and makes it torch_npu's current allocator.

The allocators behind the hooks are created on each device's first
allocation, from ``NPUALLOC_CONF`` (``enable(config=...)`` sets it). The ACL
runtime is found as for ``CachingAllocator``: the ``acl_library`` config key,
``NPUALLOC_ACL_LIBRARY``, ``$ASCEND_HOME_PATH/lib64``, then the loader's search.

PyTorch's memory snapshots, under the names torch users know::

    npualloc.torch_npu._record_memory_history(max_entries=100000)
    ...
    npualloc.torch_npu._dump_snapshot("snap.pickle")   # open with _memory_viz.py

They act on the allocator of the current NPU that the hooks use (created
from ``NPUALLOC_CONF`` if it does not exist yet); see ``npualloc.memory``.
"""

import ctypes
import importlib
import os
import pickle
import sys

from . import _lib, memory as _memory

__all__ = [
    "enable", "is_enabled", "TorchNpuError", "MALLOC_FN", "FREE_FN", "HOOKS",
    "_record_memory_history", "_snapshot", "_dump_snapshot",
]

MALLOC_FN = "npualloc_pluggable_malloc"
FREE_FN = "npualloc_pluggable_free"

# (setter of NPUPluggableAllocator.allocator(), library function, the C type
# torch_npu calls it with). A setter this torch_npu lacks is skipped.
# torch_npu's record-stream, erase-stream and device-stats hooks are not set:
# the library exports no function for them (the C API's
# npualloc_record_stream takes an allocator handle, not a device).
HOOKS = (
    ("set_init_fn", "npualloc_pluggable_init", "void(int device_count)"),
    ("set_reset_fn", "npualloc_pluggable_empty_cache", "void(bool check_error)"),
    ("set_memory_fraction_fn", "npualloc_pluggable_set_memory_fraction", "void(double fraction, int device)"),
    ("set_base_alloc_fn", "npualloc_pluggable_base_alloc", "void *(void *ptr, size_t *size)"),
    ("set_reset_peak_status_fn", "npualloc_pluggable_reset_peak_stats", "void(c10::DeviceIndex device)"),
)


class TorchNpuError(RuntimeError):
    """npualloc could not become torch_npu's allocator; nothing was changed."""


class _Installed:
    def __init__(self, allocator, config, library, hooks):
        self.allocator = allocator
        self.config = config
        self.library = library
        self.hooks = hooks


_installed = None


def is_enabled():
    """True once ``enable()`` has made npualloc torch_npu's allocator."""
    return _installed is not None


def enable(config=None):
    """Makes npualloc torch_npu's NPU memory allocator; returns the
    ``NPUPluggableAllocator`` installed.

    Call it once, after ``import torch_npu`` and before anything initializes
    the NPU (the first tensor on an NPU, ``torch.npu.set_device``, ...):
    torch_npu can swap its allocator only before then.

    ``config`` is npualloc's config string (``"key:value,..."``, the
    ``NPUALLOC_CONF`` grammar); it is checked here and put in ``NPUALLOC_CONF``
    for the allocators the hooks create. None keeps ``NPUALLOC_CONF`` as it is.

    Calling it again with the same config returns the same allocator.

    Raises ImportError when torch_npu cannot be imported, ValueError for a
    config npualloc refuses, TorchNpuError when torch_npu has no pluggable
    allocators, when another pluggable allocator is installed, when the NPU
    is already initialized, or when npualloc was enabled with another config.
    Nothing is changed when it raises.
    """
    global _installed
    text = _config_text(config)
    effective = text if text is not None else os.environ.get("NPUALLOC_CONF")
    torch_npu = _import_torch_npu()
    memory = _memory_module(torch_npu)

    if _installed is not None:
        if _installed.config == effective:
            return _installed.allocator
        raise TorchNpuError(
            f"npualloc is already torch_npu's allocator, with config {_installed.config!r}; "
            f"it cannot be re-enabled with {effective!r} (the config is read once per process)"
        )
    other = _other_pluggable_allocator(torch_npu, memory)
    if other is not None:
        raise TorchNpuError(
            f"torch_npu already uses another pluggable allocator ({other!r}); torch_npu "
            "switches allocators only once per process, before the NPU is initialized"
        )
    if _npu_initialized(torch_npu):
        raise TorchNpuError(_TOO_LATE)

    _check_config(text)
    library = str(_lib.find_library())
    handle = ctypes.CDLL(library)  # the same handle torch_npu's ctypes.CDLL gets
    for name in (MALLOC_FN, FREE_FN):
        _address(handle, name, library)

    saved = os.environ.get("NPUALLOC_CONF")
    if text is not None:
        os.environ["NPUALLOC_CONF"] = text
    try:
        allocator = memory.NPUPluggableAllocator(library, MALLOC_FN, FREE_FN)
        inner = allocator.allocator()
        hooks = []
        for setter, symbol, _ in HOOKS:
            set_fn = getattr(inner, setter, None)
            if set_fn is None:
                continue
            set_fn(_address(handle, symbol, library))
            hooks.append(setter)
        try:
            memory.change_current_allocator(allocator)
        except RuntimeError as e:
            if "initialized" in str(e):
                raise TorchNpuError(f"{_TOO_LATE} (torch_npu: {e})") from e
            raise
    except BaseException:
        if saved is None:
            os.environ.pop("NPUALLOC_CONF", None)
        else:
            os.environ["NPUALLOC_CONF"] = saved
        raise
    _installed = _Installed(allocator, effective, library, tuple(hooks))
    return allocator


_TOO_LATE = (
    "torch_npu has already initialized the NPU and its allocator (a tensor was put on an "
    "NPU, or torch.npu.set_device/init ran), so it can no longer be replaced; call "
    "npualloc.torch_npu.enable() right after `import torch_npu`, before any NPU work"
)


def _config_text(config):
    if config is None:
        return None
    if not isinstance(config, str):
        raise ValueError(f"config must be a str like 'expandable_segments:True', got {config!r}")
    if "\0" in config:
        raise ValueError("the config string contains a NUL character")
    return config


def _import_torch_npu():
    try:
        return importlib.import_module("torch_npu")
    except ImportError as e:
        raise ImportError(
            "npualloc.torch_npu.enable() needs torch_npu (Ascend's PyTorch plugin: "
            f"pip install torch-npu, with a CANN install), which cannot be imported: {e}",
            name="torch_npu",
        ) from e


def _memory_module(torch_npu):
    npu = getattr(torch_npu, "npu", None)
    memory = getattr(npu, "memory", None)
    if memory is None:
        try:
            memory = importlib.import_module("torch_npu.npu.memory")
        except ImportError:
            memory = None
    missing = [n for n in ("NPUPluggableAllocator", "change_current_allocator") if not hasattr(memory, n)]
    if missing:
        version = getattr(torch_npu, "__version__", "of unknown version")
        raise TorchNpuError(
            f"this torch_npu ({version}) has no torch_npu.npu.memory.{' or '.join(missing)}; "
            "npualloc needs a torch_npu 2.x with pluggable allocators"
        )
    return memory


def _other_pluggable_allocator(torch_npu, memory):
    """The pluggable allocator torch_npu uses now, or None (its own caching
    allocator, or a torch_npu that cannot tell)."""
    current = getattr(memory, "_get_current_allocator", None)
    pluggable = getattr(getattr(torch_npu, "_C", None), "_NPUPluggableAllocator", None)
    if current is None or not isinstance(pluggable, type):
        return None
    active = current().allocator()
    return active if isinstance(active, pluggable) else None


def _npu_initialized(torch_npu):
    is_initialized = getattr(getattr(torch_npu, "npu", None), "is_initialized", None)
    return bool(is_initialized()) if callable(is_initialized) else False


def _check_config(text):
    """Refuses (ValueError) a config the library would refuse at the first
    allocation. npualloc_create parses the config before it looks at the
    device, so device -1 checks the config and creates nothing."""
    lib = _lib.lib()
    out = ctypes.c_void_p()
    status = lib.npualloc_create(None if text is None else text.encode(), -1, ctypes.byref(out))
    if status == _lib.ERR_BAD_CONFIG:
        source = repr(text) if text is not None else f"NPUALLOC_CONF={os.environ.get('NPUALLOC_CONF')!r}"
        raise ValueError(f"npualloc refuses the config {source}: {_lib.last_error()}")
    if status == _lib.OK:  # not expected for device -1; never leak one
        lib.npualloc_destroy(out)


def _address(handle, symbol, library):
    try:
        fn = getattr(handle, symbol)
    except AttributeError:
        raise TorchNpuError(f"{library} does not export {symbol}; is it an older libnpualloc?") from None
    return ctypes.cast(fn, ctypes.c_void_p).value


def _device(device):
    """``device`` as an index: an int, a ``torch.device``/string with an
    index, or None for torch_npu's current device (0 without torch_npu)."""
    if device is None:
        try:
            current = getattr(importlib.import_module("torch_npu").npu, "current_device", None)
        except (ImportError, AttributeError):
            current = None
        return int(current()) if callable(current) else 0
    if isinstance(device, bool):
        raise ValueError(f"device must be an index, got {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        index = device.rsplit(":", 1)[1] if ":" in device else None
    else:
        index = getattr(device, "index", None)
    if not isinstance(index, (int, str)):
        raise ValueError(f"device {device!r} has no index")
    return int(index)


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None, **_):
    """As ``torch.cuda.memory._record_memory_history``: ``enabled="all"`` (or
    True) keeps the last ``max_entries`` allocator events of the device;
    None, False or ``"state"`` turns the history off and drops it (the
    snapshot always shows the current state). ``context`` and ``stacks`` are
    accepted and ignored: npualloc records no stacks."""
    if enabled not in ("all", "state", None, True, False):
        raise ValueError(f"enabled must be 'all', 'state' or None, got {enabled!r}")
    on = enabled in ("all", True)
    _memory._pluggable_record_history(_device(device), max_entries if on else 0)


def _snapshot(device=None):
    """As ``torch.cuda.memory._snapshot``: the device's segments, blocks and
    recorded history, in PyTorch's format."""
    return _memory._pluggable_snapshot(_device(device))


def _dump_snapshot(filename="dump_snapshot.pickle", device=None):
    """As ``torch.cuda.memory._dump_snapshot``: ``_snapshot()`` pickled to
    ``filename``, for ``_memory_viz.py`` or pytorch.org/memory_viz."""
    snap = _snapshot(device)
    with open(filename, "wb") as f:
        pickle.dump(snap, f)
