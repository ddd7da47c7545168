"""The four callback types of GE's ``ge._capi.pysession_wrapper``, without
loading GE's native library (tests only).

They match the C types GE's ``c_session.cc`` calls through:
``void *malloc(void *obj, size_t size)``, ``void free(void *obj, void *block)``,
``void *get_addr(void *block)`` and ``void on_destroy(void *handle)``."""

import ctypes

c_func_t_malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
c_func_t_free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
c_func_t_get_addr = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
c_func_t_on_destroy = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
