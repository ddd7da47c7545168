"""A stand-in for GE's Python package: only ``ge.allocator`` (tests only)."""
