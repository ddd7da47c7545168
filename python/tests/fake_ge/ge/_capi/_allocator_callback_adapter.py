"""Stand-in for GE's ``ge._capi._allocator_callback_adapter`` (tests only).

Written to behave exactly as GE's adapter does, for the tests that run when
GE's own file is not available:
- ``malloc`` calls the allocator's ``malloc(size)``, keeps the returned block
  under the key ``id(block)`` and returns that key to C as the block handle;
  an exception is not caught (ctypes reports it and returns an unspecified
  value);
- ``get_addr(key)`` returns the kept block's ``addr`` if the block is true,
  else 0;
- ``free(obj, key)`` forgets the key and calls the allocator's ``free`` with
  the block, if the key was known."""

from ge.allocator import Allocator

from .pysession_wrapper import c_func_t_free, c_func_t_get_addr, c_func_t_malloc, c_func_t_on_destroy

_kept = {}


class _AllocatorCCallbacks:
    def __init__(self, allocator: Allocator):
        self._allocator = allocator
        self._blocks = {}

        def _malloc(_py_obj, size):
            block = self._allocator.malloc(size)
            self._blocks[id(block)] = block
            return id(block)

        def _free(_py_obj, block_key):
            block = self._blocks.pop(block_key, None)
            if block is not None:
                self._allocator.free(block)

        def _get_addr(block_key):
            block = self._blocks.get(block_key)
            return block.addr if block else 0

        self.c_malloc = c_func_t_malloc(_malloc)
        self.c_free = c_func_t_free(_free)
        self.c_get_addr = c_func_t_get_addr(_get_addr)


def _on_allocator_destroy(key):
    callbacks = _kept.pop(key, None)
    if callbacks is not None:
        callbacks.c_malloc = callbacks.c_free = callbacks.c_get_addr = None


_c_on_allocator_destroy = c_func_t_on_destroy(_on_allocator_destroy)


def create_allocator_c_callbacks(allocator: Allocator):
    callbacks = _AllocatorCCallbacks(allocator)
    _kept[id(callbacks)] = callbacks
    return callbacks, id(callbacks), _c_on_allocator_destroy


def rollback_allocator_c_callbacks(key: int) -> None:
    _kept.pop(key, None)
