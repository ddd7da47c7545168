"""npualloc_pluggable_malloc/free called through function pointers of the
exact C types torch_npu's NPUPluggableAllocator uses."""

import ctypes

import npualloc
from npualloc import _lib

ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
BASE_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))


def _fn(proto, name):
    lib = _lib.lib()
    return proto(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)


def test_pluggable_through_torch_function_pointers(emu):
    malloc = _fn(ALLOC_FN, "npualloc_pluggable_malloc")
    free = _fn(FREE_FN, "npualloc_pluggable_free")
    base_alloc = _fn(BASE_FN, "npualloc_pluggable_base_alloc")

    stream = ctypes.c_void_p()
    assert emu.aclrtCreateStream(ctypes.byref(stream)) == 0
    live = []
    for size in (512, 1, 4096, 1 << 20, (2 << 20) + 3):
        for s in (None, stream.value):
            ptr = malloc(size, 0, s)
            assert ptr, _lib.last_error()
            assert ptr % 512 == 0
            live.append((ptr, size, s))

    seg = ctypes.c_size_t(0)
    ptr, size, _ = live[3]
    base = base_alloc(ptr, ctypes.byref(seg))
    assert base and base <= ptr and ptr + size <= base + seg.value

    # torch passes back the size it asked for and the stream of the allocation.
    for ptr, size, s in live:
        free(ptr, size, 0, s)
        assert _lib.last_error() == ""

    # A second free is refused and changes nothing.
    ptr, size, s = live[0]
    free(ptr, size, 0, s)
    assert "unknown pointer" in _lib.last_error()
    assert not base_alloc(ptr, ctypes.byref(seg))

    # Size 0 gives NULL without an error; a bad device gives NULL with one.
    assert malloc(0, 0, None) is None
    assert malloc(64, -1, None) is None
    assert "device" in _lib.last_error()

    assert emu.aclrtDestroyStream(stream) == 0
