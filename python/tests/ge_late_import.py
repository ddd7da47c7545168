"""npualloc imported before GE's package is importable (run by
test_ge_adapter.py with the ``ge`` tree as argv[1], not on PYTHONPATH):
GE's session still accepts the views, and blocks are GE's MemBlocks once
GE is loaded. Prints "done" or exits non-zero."""

import sys

import npualloc

try:
    import ge  # noqa: F401
except ImportError:
    pass
else:
    sys.exit("FAILED: the ge package was importable before the path was set")

sys.path.insert(0, sys.argv[1])
with npualloc.CachingAllocator(config="") as alloc:
    view = alloc.for_stream(None)
    import ge.allocator

    if not isinstance(view, ge.allocator.Allocator):
        sys.exit("FAILED: a view made after GE became importable is not a ge.allocator.Allocator")
    block = view.malloc(4096)
    if not isinstance(block, ge.allocator.MemBlock):
        sys.exit("FAILED: a block allocated with GE loaded is not a ge.allocator.MemBlock")
    view.free(block)
print("done")
