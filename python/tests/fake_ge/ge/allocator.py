"""A stand-in for ``ge.allocator`` with the same interface (tests only):
``Allocator`` (abstract ``malloc``/``free``) and ``MemBlock`` (``addr``,
``size``)."""

import abc


class MemBlock:
    def __init__(self, addr, size):
        self._addr = addr
        self._size = size

    @property
    def addr(self):
        return self._addr

    @property
    def size(self):
        return self._size


class Allocator(abc.ABC):
    @abc.abstractmethod
    def malloc(self, size):
        ...

    @abc.abstractmethod
    def free(self, block):
        ...
