"""The stand-in of torch_npu's C extension: allocator objects and state."""

import ctypes

# torch_npu's C types for the pluggable allocator's functions.
ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
HOOK_TYPES = {
    "init": ctypes.CFUNCTYPE(None, ctypes.c_int),
    "reset": ctypes.CFUNCTYPE(None, ctypes.c_bool),
    "memory_fraction": ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int),
    "base_alloc": ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)),
    "record_stream": ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p),
    "erase_stream": ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p),
    "get_device_stats": None,  # returns a C++ object; nothing C can provide
    "reset_peak_status": ctypes.CFUNCTYPE(None, ctypes.c_int8),  # void(c10::DeviceIndex)
    "end_allocate_to_pool": None,
}

calls = []  # (what, arguments) in order
DEVICE_COUNT = 1


class _npu_NPUAllocator:
    """An allocator torch_npu knows; the native one is this base class."""

    def __init__(self, name="native caching allocator"):
        self.name = name
        self.initialized = False

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


def _setter(hook):
    def set_fn(self, func_ptr):
        # pybind11 converts the argument to uint64_t: an int, nothing else.
        if isinstance(func_ptr, bool) or not isinstance(func_ptr, int):
            raise TypeError(f"set_{hook}_fn(): incompatible function arguments: {func_ptr!r}")
        calls.append((f"set_{hook}_fn", func_ptr))
        self.hooks[hook] = func_ptr

    set_fn.__name__ = f"set_{hook}_fn"
    return set_fn


class _NPUPluggableAllocator(_npu_NPUAllocator):
    def __init__(self, alloc_fn, free_fn):
        super().__init__("pluggable")
        self.alloc_fn = alloc_fn
        self.free_fn = free_fn
        self.hooks = {}
        self.sizes = {}

    def init(self, device_count):
        if "init" in self.hooks:
            HOOK_TYPES["init"](self.hooks["init"])(device_count)
        self.initialized = True


for _hook in HOOK_TYPES:
    setattr(_NPUPluggableAllocator, f"set_{_hook}_fn", _setter(_hook))


_current = _npu_NPUAllocator()


def _npu_customAllocator(malloc_ptr, free_ptr):
    calls.append(("_npu_customAllocator", (malloc_ptr, free_ptr)))
    return _NPUPluggableAllocator(malloc_ptr, free_ptr)


def _npu_getAllocator():
    return _current


def _npu_changeCurrentAllocator(allocator):
    global _current
    calls.append(("_npu_changeCurrentAllocator", allocator))
    if _current.initialized:
        raise RuntimeError("Can't swap an already initialized allocator")
    _current = allocator


def _npu_init():
    """Lazy NPU initialization: initializes the current allocator."""
    if not _current.initialized:
        calls.append(("_npu_init", DEVICE_COUNT))
        if isinstance(_current, _NPUPluggableAllocator):
            _current.init(DEVICE_COUNT)
        else:
            _current.initialized = True


# What torch_npu's allocator does with the current allocator's functions.

def raw_alloc(size, device=0, stream=None):
    _npu_init()
    if not isinstance(_current, _NPUPluggableAllocator):
        raise RuntimeError("the stand-in allocates only through a pluggable allocator")
    ptr = ALLOC(_current.alloc_fn)(size, device, stream)
    if not ptr:
        raise MemoryError(f"NPU out of memory: tried to allocate {size} bytes")
    _current.sizes[ptr] = (size, device, stream)
    return ptr


def raw_delete(ptr):
    size, device, stream = _current.sizes.pop(ptr)
    FREE(_current.free_fn)(ptr, size, device, stream)


def hook(name):
    """The hook torch_npu was given, callable with torch_npu's C type."""
    return HOOK_TYPES[name](_current.hooks[name])


def _reset():
    """A new process, as far as the stand-in is concerned."""
    global _current
    calls.clear()
    _current = _npu_NPUAllocator()
