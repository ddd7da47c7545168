"""A stand-in for ``ge.allocator`` with the same abstract interface."""

import abc


class Allocator(abc.ABC):
    @abc.abstractmethod
    def malloc(self, size):
        ...

    @abc.abstractmethod
    def free(self, block):
        ...
