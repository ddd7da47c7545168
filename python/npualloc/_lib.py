"""Loads libnpualloc.so and declares the C functions the package uses."""

import ctypes
import os
from pathlib import Path

LIBRARY_NAME = "libnpualloc.so"

OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_BAD_CONFIG = 2
ERR_UNKNOWN_POINTER = 3
ERR_OUT_OF_MEMORY = 100


def _checkout_target():
    """The cargo target directory when this package is imported from a
    checkout of the repository (python/npualloc/), else None."""
    root = Path(__file__).resolve().parent.parent.parent
    if not (root / "Cargo.toml").is_file() or not (root / "python" / "setup.py").is_file():
        return None
    target = Path(os.environ.get("CARGO_TARGET_DIR") or root / "target")
    return target if target.is_absolute() else root / target


def _candidates():
    env = os.environ.get("NPUALLOC_LIBRARY")
    if env:
        yield Path(env)
        return
    # An installed package (pip install ./python) carries its own copy.
    yield Path(__file__).resolve().parent / LIBRARY_NAME
    target = _checkout_target()
    if target is not None:
        for profile in ("release", "debug"):
            yield target / profile / LIBRARY_NAME


def find_library():
    """The path of libnpualloc.so: $NPUALLOC_LIBRARY when set, else the copy
    inside this package, else (imported from a checkout) the build tree's
    target/{release,debug}/."""
    tried = []
    for path in _candidates():
        if path.is_file():
            return path
        tried.append(str(path))
    if os.environ.get("NPUALLOC_LIBRARY"):
        hint = "NPUALLOC_LIBRARY names no file"
    elif _checkout_target() is not None:
        hint = "build it with `cargo build --release -p npualloc --lib`, or set NPUALLOC_LIBRARY"
    else:
        hint = "this installation lacks its library: reinstall with `pip install ./python` from a checkout, or set NPUALLOC_LIBRARY"
    raise OSError(f"{LIBRARY_NAME} not found (tried: {', '.join(tried)}); {hint}")


class Stats(ctypes.Structure):
    # npualloc_stats: the names and order are the library's statistics table
    # (src/core/report/stats.rs); a Rust test checks this list against it.
    _fields_ = [("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64)
        for name in (
            "allocated_bytes", "allocated_bytes_peak", "requested_bytes", "requested_bytes_peak",
            "reserved_bytes", "reserved_bytes_peak", "active_blocks", "segments",
            "num_allocs", "num_frees", "num_device_mallocs", "num_device_frees",
            "num_maps", "num_unmaps", "num_alloc_retries", "num_ooms", "num_syncs",
            "largest_free_block", "num_physical_mallocs", "num_physical_frees", "pending_free_bytes",
            "segment_bytes", "cached_handle_bytes", "address_space_bytes",
            "segments_peak", "num_segments_created", "num_segments_released",
            "num_handle_moves", "allocated_bytes_total", "reserved_bytes_total", "pending_free_blocks",
            "inactive_split_blocks", "inactive_split_bytes", "max_split_size",
            "exported_blocks", "held_for_importers_bytes", "memory_limit",
        )
    ]


class BlockInfo(ctypes.Structure):
    # npualloc_block_info (include/npualloc.h).
    _fields_ = [
        ("addr", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("requested", ctypes.c_uint64),
        ("stream", ctypes.c_void_p),
    ]


class IpcHandle(ctypes.Structure):
    # npualloc_ipc_handle (include/npualloc.h).
    _fields_ = [("bytes", ctypes.c_ubyte * 128)]


_lib = None


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        handle = ctypes.CDLL(str(find_library()))
        P, S, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32
        status = ctypes.c_int32
        sigs = {
            "npualloc_status_name": (ctypes.c_char_p, [status]),
            "npualloc_last_error": (ctypes.c_char_p, []),
            "npualloc_create": (status, [ctypes.c_char_p, I, ctypes.POINTER(P)]),
            "npualloc_destroy": (status, [P]),
            "npualloc_malloc": (status, [P, S, P, ctypes.POINTER(P)]),
            "npualloc_free": (status, [P, P]),
            "npualloc_empty_cache": (status, [P]),
            "npualloc_empty_cache_with": (status, [P, ctypes.c_uint32]),
            "npualloc_sleep": (status, [P]),
            "npualloc_wake": (status, [P]),
            "npualloc_sleep_with": (status, [P, ctypes.POINTER(ctypes.c_uint64), S,
                                             ctypes.POINTER(ctypes.c_uint64), S]),
            "npualloc_wake_with": (status, [P, ctypes.POINTER(ctypes.c_uint64), S]),
            "npualloc_pluggable_allocator": (status, [ctypes.c_int, ctypes.POINTER(P)]),
            "npualloc_get_stats": (status, [P, ctypes.POINTER(Stats)]),
            "npualloc_get_kind_stats": (status, [P, ctypes.c_int32, ctypes.POINTER(Stats)]),
            "npualloc_snapshot_json": (status, [P, ctypes.POINTER(P)]),
            "npualloc_string_free": (None, [P]),
            "npualloc_record_history": (status, [P, S]),
            "npualloc_snapshot_pytorch_json": (status, [P, ctypes.POINTER(P)]),
            "npualloc_pluggable_record_history": (status, [ctypes.c_int, S]),
            "npualloc_pluggable_snapshot_pytorch_json": (status, [ctypes.c_int, ctypes.POINTER(P)]),
            "npualloc_version": (ctypes.c_char_p, []),
            "npualloc_pool_create": (status, [P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]),
            "npualloc_pool_begin": (status, [P, ctypes.c_uint64, P]),
            "npualloc_pool_end": (status, [P, ctypes.c_uint64, P]),
            "npualloc_pool_destroy": (status, [P, ctypes.c_uint64]),
            "npualloc_pool_get_stats": (status, [P, ctypes.c_uint64, ctypes.POINTER(Stats)]),
            "npualloc_pool_empty_cache": (status, [P, ctypes.c_uint64]),
            "npualloc_pool_set_use_on_oom": (status, [P, ctypes.c_uint64, ctypes.c_int32]),
            "npualloc_record_stream": (status, [P, P, P]),
            "npualloc_erase_stream": (status, [P, P, P]),
            "npualloc_forget_stream": (status, [P, P]),
            "npualloc_query": (status, [P, P, ctypes.POINTER(BlockInfo)]),
            "npualloc_set_memory_fraction": (status, [P, ctypes.c_double]),
            "npualloc_reset_peak_stats": (status, [P]),
            "npualloc_binding_create": (status, [P, P, ctypes.POINTER(P)]),
            "npualloc_binding_destroy": (status, [P]),
            "npualloc_ipc_export": (status, [P, P, ctypes.POINTER(IpcHandle)]),
            "npualloc_ipc_import": (status, [ctypes.POINTER(IpcHandle), I, ctypes.POINTER(P), ctypes.POINTER(S)]),
            "npualloc_ipc_close": (status, [P]),
            "npualloc_read_pytorch_alloc_conf": (status, [I, ctypes.POINTER(I)]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(handle, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = handle
    return _lib


def last_error():
    return lib().npualloc_last_error().decode("utf-8", "replace")


def status_name(status):
    return lib().npualloc_status_name(status).decode()
