"""npualloc as torch_npu's NPU memory allocator.

    import torch, torch_npu
    import npualloc.torch_npu

    npualloc.torch_npu.enable()          # before the first tensor on an NPU
    x = torch.empty(1 << 20, device="npu")
    torch.npu.memory_stats()             # every torch.npu memory API works

``enable()`` installs the torch_npu bridge (``npualloc.torch_npu_bridge``): a
small C++ library, compiled on first use against the installed torch and
torch_npu headers and cached per torch_npu version, that is a complete
torch_npu allocator (``c10_npu::NPUCachingAllocator::NPUAllocator``) serving
every request from npualloc's process-wide allocator of each device (the
one ``npualloc_pluggable_allocator`` names). ``bridge.h`` says why a full
allocator rather than torch_npu's ``NPUPluggableAllocator``.

The allocators are created on each device's first allocation, from
``NPUALLOC_CONF`` (``enable(config=...)`` sets it). The ACL runtime is found
as for ``CachingAllocator``: the ``acl_library`` config key,
``NPUALLOC_ACL_LIBRARY``, ``$ASCEND_HOME_PATH/lib64``, then the loader's search.

PyTorch's memory snapshots work through torch_npu's own functions
(``torch.npu.memory._record_memory_history``, ``_snapshot``,
``_dump_snapshot``, with Python stack frames); the functions of the same
names here do the same from npualloc's side, without frames.
"""

import ctypes
import importlib
import os
import pickle
import re
import sys
import warnings
from pathlib import Path

from . import _lib, memory as _memory

__all__ = [
    "enable", "is_enabled", "TorchNpuError", "pad_bytes",
    "_record_memory_history", "_snapshot", "_dump_snapshot",
]

# torch_npu/csrc/core/npu/NpuVariables.h: SocVersion::Ascend950.
_ASCEND950 = 260


class TorchNpuError(RuntimeError):
    """npualloc could not become torch_npu's allocator; nothing was changed."""


class _Installed:
    def __init__(self, config, library, bridge, tail, handle):
        self.config = config
        self.library = library
        self.bridge = bridge
        self.tail = tail
        self.handle = handle


_installed = None


def is_enabled():
    """True once ``enable()`` has made npualloc torch_npu's allocator."""
    return _installed is not None


def pad_bytes(torch_npu=None):
    """The bytes torch_npu's own allocator adds to every request on this SoC
    and CANN (NPUCachingAllocator.cpp ``AddPadSize``: none on Ascend950 and
    later with CANN 9.1.0 or newer, else 32); the bridge adds the same."""
    torch_npu = torch_npu or importlib.import_module("torch_npu")
    get_soc = getattr(torch_npu._C, "_npu_get_soc_version", None)
    if get_soc is None:  # a torch_npu that cannot tell pads (all SoCs before Ascend950 do)
        return 32
    soc = get_soc()
    try:
        new_cann = bool(torch_npu.npu.utils._is_gte_cann_version("9.1.0", "CANN"))
    except Exception:  # an unknown CANN version reads as older
        new_cann = False
    return 0 if (soc >= _ASCEND950 and new_cann) else 32


def enable(config=None):
    """Makes npualloc torch_npu's NPU memory allocator.

    Call it once, after ``import torch_npu`` and before anything initializes
    the NPU (the first tensor on an NPU, ``torch.npu.set_device``, ...):
    torch_npu can swap its allocator only before then.

    ``config`` is npualloc's config string (``"key:value,..."``, the
    ``NPUALLOC_CONF`` grammar); it is checked here and put in ``NPUALLOC_CONF``
    for the allocators the bridge creates. None keeps ``NPUALLOC_CONF`` as it
    is; when that is unset, torch_npu's variables are read as torch_npu reads
    them: ``PYTORCH_NPU_ALLOC_CONF``, else, in releases that read it (2.12 on),
    ``PYTORCH_ALLOC_CONF``.

    The first call in a process with a new torch_npu compiles the bridge
    (a C++20 compiler is needed: ``$CXX`` or ``c++``); later ones load it
    from the cache (see ``npualloc.torch_npu_bridge``).

    Calling it again with the same config does nothing.

    Raises ImportError when torch_npu cannot be imported, ValueError for a
    config npualloc refuses, TorchNpuError when the NPU is already
    initialized, when the bridge cannot be built or installed, or when
    npualloc was enabled with another config. Nothing is changed when it raises.
    """
    global _installed
    text = _config_text(config)
    effective = text if text is not None else os.environ.get("NPUALLOC_CONF")
    torch_npu = _import_torch_npu()

    if _installed is not None:
        if _installed.config == effective:
            return
        raise TorchNpuError(
            f"npualloc is already torch_npu's allocator, with config {_installed.config!r}; "
            f"it cannot be re-enabled with {effective!r} (the config is read once per process)"
        )
    if _npu_initialized(torch_npu):
        raise TorchNpuError(_TOO_LATE)

    # Before the config is checked: it may come from PYTORCH_ALLOC_CONF.
    reads_generic = _reads_pytorch_alloc_conf(torch_npu)
    previous = _read_pytorch_alloc_conf(reads_generic)
    try:
        _install(torch_npu, text, effective)
    except BaseException:
        _read_pytorch_alloc_conf(previous)
        raise
    _follow_the_sanitizer(torch_npu, _installed.handle)
    _pass_rejection_rule(_installed.handle, _torch_npu_env_settings(reads_generic))
    _tell_of_run_time_settings(torch_npu, _installed.handle, reads_generic)
    _follow_uce_checks(torch_npu, _installed.handle)


def _install(torch_npu, text, effective):
    global _installed
    _check_config(text)
    library = str(_lib.find_library())
    from . import torch_npu_bridge

    try:
        bridge = torch_npu_bridge.library()
    except torch_npu_bridge.UnsupportedRelease as e:
        raise TorchNpuError(str(e)) from None
    except torch_npu_bridge.BridgeBuildError as e:
        raise TorchNpuError(f"the torch_npu bridge could not be built: {e}") from e
    tail = pad_bytes(torch_npu)

    saved = os.environ.get("NPUALLOC_CONF")
    if text is not None:
        os.environ["NPUALLOC_CONF"] = text
    try:
        handle = ctypes.CDLL(str(bridge))
        install = handle.npualloc_torch_npu_bridge_install
        install.restype = ctypes.c_int
        install.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        err = ctypes.create_string_buffer(1024)
        if install(library.encode(), tail, err, len(err)) != 0:
            message = err.value.decode(errors="replace")
            if "initialized" in message:
                raise TorchNpuError(f"{_TOO_LATE} (the bridge: {message})")
            raise TorchNpuError(f"the torch_npu bridge refused to install: {message}")
    except BaseException:
        if saved is None:
            os.environ.pop("NPUALLOC_CONF", None)
        else:
            os.environ["NPUALLOC_CONF"] = saved
        raise
    _installed = _Installed(effective, library, str(bridge), tail, handle)


def _follow_uce_checks(torch_npu, handle):
    # check_uce_in_memory (Module.cpp) asks the allocator twice about the failed ranges of
    # torch_npu's copy, which its C++ library does not export: this hands the bridge that copy
    # (_npu_get_uce_addr) and frames the asks, and, as torch_npu's own allocator does
    # (NPUCachingAllocator.cpp, checkUceInMemPool), sets the process's data-unsafe flag when one
    # was found in npualloc's memory (set_npu_data_unsafe_flag is not exported either).
    try:
        original = torch_npu._C._npu_check_uce_in_memory
        get_ranges = torch_npu._C._npu_get_uce_addr
        set_flag = torch_npu._C._set_npu_data_unsafe_flag
        begin = handle.npualloc_torch_npu_bridge_begin_uce_check
        end = handle.npualloc_torch_npu_bridge_end_uce_check
    except AttributeError:
        return  # a torch_npu without UCE recovery
    begin.restype, begin.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    end.restype, end.argtypes = ctypes.c_int, [ctypes.c_int]

    def check_uce_in_memory(device):
        if not isinstance(device, int) or isinstance(device, bool):
            return original(device)  # torch_npu's own refusal
        pairs = [(int(r["ptr"]) & 0xFFFF_FFFF_FFFF_FFFF, int(r["size"])) for r in get_ranges()]
        flat = (ctypes.c_uint64 * (2 * len(pairs)))(*[v for pair in pairs for v in pair])
        if begin(device, flat, len(pairs)) != 0:
            return original(device)  # a device the bridge does not serve: torch_npu's answer
        try:
            answer = original(device)
        finally:
            found = end(device) == 1
        if found:
            set_flag(True)
        return answer

    torch_npu._C._npu_check_uce_in_memory = check_uce_in_memory


# Keys of torch_npu's run-time settings (torch.npu.memory._set_allocator_settings;
# NPUCachingAllocator.cpp, setAllocatorSettings) that tune the device allocator. npualloc reads
# its config once, when it starts, so a change of these reaches torch_npu's own allocator, which
# serves only MallocBlock/FreeBlock, and not npualloc: the caller is told. The pinned_* keys tune
# torch_npu's host allocator, which stays torch_npu's, and need no word. throw_on_npumalloc_oom
# and the per_process_memory_fraction its rule reads are passed on to the bridge (_REJECTION).
_DEVICE_SETTINGS = (
    "expandable_segments",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "release_lock_on_npumalloc",
)


def _settings(text):
    """``{key: value}`` of a torch_npu allocator settings string ("key:value,key:value"), read
    as torch_npu's ConfigTokenizer reads it: whitespace anywhere is dropped. (The items of a
    bracketed list come out as keys of their own, which no caller asks for.)"""
    out = {}
    for item in "".join(str(text or "").split()).split(","):
        key, sep, value = item.partition(":")
        if sep:
            out[key] = value
    return out


# The leading number std::stod reads (torch_npu parses the fraction with it).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _pass_rejection_rule(handle, text):
    """Hands the bridge torch_npu's throw_on_npumalloc_oom and per_process_memory_fraction from
    the settings ``text`` (what torch_npu accepted; an absent key stays as it was): the rule
    that rejects growth past that share of the device (torch_npu's NPUAllocatorConfig,
    NPUCachingAllocator.cpp alloc_block). What cannot be passed on is a warning: torch_npu has
    taken the settings by then."""
    settings = _settings(text)
    throw = settings.get("throw_on_npumalloc_oom")
    fraction = settings.get("per_process_memory_fraction")
    number = _NUMBER.match(fraction) if fraction is not None else None
    if throw is None and number is None:
        return
    rule = handle.npualloc_torch_npu_bridge_rejection
    rule.restype = ctypes.c_int
    rule.argtypes = [ctypes.c_int, ctypes.c_double]
    if rule(-1 if throw is None else int(throw == "True"), -1.0 if number is None else float(number.group())) != 0:
        warnings.warn("npualloc: the torch_npu bridge could not take throw_on_npumalloc_oom and "
                      "per_process_memory_fraction (see stderr); its limits stay as they were",
                      RuntimeWarning, stacklevel=3)


def _torch_npu_env_settings(reads_generic):
    """The allocator settings torch_npu reads when it starts: PYTORCH_NPU_ALLOC_CONF, else, in
    the releases that read it, PYTORCH_ALLOC_CONF (NPUAllocatorConfig::instance)."""
    generic = os.environ.get("PYTORCH_ALLOC_CONF") if reads_generic else None
    return os.environ.get("PYTORCH_NPU_ALLOC_CONF", generic)


def _tell_of_run_time_settings(torch_npu, handle, reads_generic):
    # torch_npu's own entry, and torch's device-generic one where it reaches torch_npu's parser.
    import torch

    entries = [(torch_npu._C, "_npu_npuCachingAllocator_set_allocator_settings")]
    if _library_mentions(torch_npu, b"registerDeviceConfigParserHook"):
        entries.append((torch._C, "_accelerator_setAllocatorSettings"))
    variables = "NPUALLOC_CONF, else PYTORCH_NPU_ALLOC_CONF" + (", else PYTORCH_ALLOC_CONF" if reads_generic else "")
    for module, name in entries:
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, _settings_told(original, handle, variables))


def _library_mentions(torch_npu, name):
    """Whether libtorch_npu.so holds `name`. torch's allocator settings reach torch_npu's
    parser where torch_npu registers it (REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK,
    NPUAllocatorConfig.cpp), which calls c10's registerDeviceConfigParserHook, a name then in
    the library's symbols; and torch_npu reads PYTORCH_ALLOC_CONF where
    NPUAllocatorConfig::instance names it (2.12 on: the name is in no earlier release's
    library)."""
    import mmap

    library = Path(torch_npu.__file__).resolve().parent / "lib" / "libtorch_npu.so"
    try:
        with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(name) != -1
    except (OSError, ValueError):
        return False


def _reads_pytorch_alloc_conf(torch_npu):
    return _library_mentions(torch_npu, b"PYTORCH_ALLOC_CONF")


def _read_pytorch_alloc_conf(on):
    """Tells the library whether a config from the environment includes PYTORCH_ALLOC_CONF;
    returns what it replaced."""
    previous = ctypes.c_int32(0)
    status = _lib.lib().npualloc_read_pytorch_alloc_conf(int(bool(on)), ctypes.byref(previous))
    if status != _lib.OK:
        raise TorchNpuError(f"npualloc could not be told whether to read PYTORCH_ALLOC_CONF: {_lib.last_error()}")
    return bool(previous.value)


def _settings_told(original, handle, variables):
    """`original` (a call that sets torch_npu's allocator settings), then npualloc told of them."""

    def set_allocator_settings(settings):
        # torch_npu checks the keys and values first: what it refuses raises as before.
        result = original(settings)
        _pass_rejection_rule(handle, settings)
        keys = list(_settings(settings))
        ignored = [k for k in _DEVICE_SETTINGS if k in keys]
        if ignored:
            warnings.warn(
                f"npualloc: {', '.join(ignored)} changed in torch_npu's settings only: npualloc, torch_npu's "
                f"allocator now, reads its config once when it starts ({variables}), so its segments "
                "and limits stay as they were; for a memory "
                "limit use torch.npu.set_per_process_memory_fraction",
                RuntimeWarning,
                stacklevel=3,
            )
        return result

    return set_allocator_settings


# torch_npu's sanitizer (torch_npu/npu/_sanitizer.py) turns its trace on with
# torch_npu._C._activate_npu_trace(mode); stream mode (0) is the one that
# reports allocations. Its state is not readable from the bridge, so the bridge
# is told: now, and at each later activation.
_STREAM_MODE = 0


def _follow_the_sanitizer(torch_npu, handle):
    # After the install, which cannot be undone: a torch_npu whose sanitizer
    # looks different gets a warning, and enable() still succeeds.
    try:
        trace = handle.npualloc_torch_npu_bridge_trace
        trace.restype, trace.argtypes = None, [ctypes.c_int]
        sanitizer = getattr(sys.modules.get("torch_npu.npu._sanitizer"), "npu_sanitizer", None)
        active = bool(getattr(sanitizer, "enabled", False))
        if active:
            trace(int(getattr(sanitizer, "mode", None) == _STREAM_MODE))
        activate = getattr(torch_npu._C, "_activate_npu_trace", None)
        if activate is None:
            return

        def activate_and_tell(mode):
            activate(mode)
            # torch_npu keeps the first activation's mode (NPUTrace::setTrace).
            if not activate_and_tell.done:
                activate_and_tell.done = True
                trace(int(mode == _STREAM_MODE))

        activate_and_tell.done = active
        torch_npu._C._activate_npu_trace = activate_and_tell
    except Exception as e:  # noqa: BLE001 - see above
        warnings.warn(f"npualloc: torch_npu's sanitizer will not see npualloc's blocks: {e}", stacklevel=3)


_TOO_LATE = (
    "torch_npu has already initialized the NPU and its allocator (a tensor was put on an "
    "NPU, or torch.npu.set_device/init ran), so it can no longer be replaced; call "
    "npualloc.torch_npu.enable() right after `import torch_npu`, before any NPU work"
)


def _config_text(config):
    if config is None:
        return None
    if not isinstance(config, str):
        raise TypeError(f"config must be a str like 'expandable_segments:True', got {type(config).__name__} {config!r}")
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
        # Without a config, the library read the first of these set (PYTORCH_ALLOC_CONF only
        # where torch_npu reads it: then the library was told to).
        if text is not None:
            source = repr(text)
        else:
            variables = ("NPUALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
            name = next((v for v in variables if v in os.environ), variables[0])
            source = f"{name}={os.environ.get(name)!r}"
        raise ValueError(f"npualloc refuses the config {source}: {_lib.last_error()}")
    if status == _lib.OK:  # not expected for device -1; never leak one
        lib.npualloc_destroy(out)


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
        raise TypeError(f"device must be an index, got {device!r}")
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
