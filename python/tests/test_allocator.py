import ctypes
import os
import subprocess
import sys

import pytest

import npualloc
from conftest import PYTHON_DIR

MIB = 1 << 20


def test_memblock_is_read_only():
    b = npualloc.MemBlock(0x1000, 64)
    assert (b.addr, b.size) == (0x1000, 64)
    with pytest.raises(AttributeError):
        b.addr = 5
    with pytest.raises(AttributeError):
        b.size = 5


def test_malloc_free_stats_snapshot(emu):
    with npualloc.CachingAllocator(device=0, config="") as alloc:
        blocks = [alloc.malloc(size) for size in (1, 512, 4096, 3 * MIB)]
        for b in blocks:
            assert b.addr % 512 == 0
        s = alloc.stats()
        assert s["active_blocks"] == 4
        assert s["requested_bytes"] == 1 + 512 + 4096 + 3 * MIB
        snap = alloc.snapshot()
        assert isinstance(snap, dict) and snap
        # One table gives the struct's fields and the snapshot's keys.
        assert {k: v for k, v in s.items() if k != "version"} == snap["stats"]
        assert s["version"] == 7 and s["segment_bytes"] + s["cached_handle_bytes"] == s["reserved_bytes"]
        assert s["memory_limit"] == 2**64 - 1, "no memory fraction: no limit"
        for b in blocks:
            alloc.free(b)
        s = alloc.stats()
        assert s["allocated_bytes"] == 0 and s["num_allocs"] == s["num_frees"] == 4
        alloc.empty_cache()
        assert alloc.stats()["reserved_bytes"] == 0


def test_bad_sizes_raise_value_error_and_wrong_types_type_error(emu):
    with npualloc.CachingAllocator(config="") as alloc:
        before = alloc.stats()
        for bad in (0, -1, 2**64, 2**64 - 1):
            with pytest.raises(ValueError):
                alloc.malloc(bad)
        for bad in (1.5, "10", True, None):
            with pytest.raises(TypeError, match="size must be an int"):
                alloc.malloc(bad)
        assert alloc.stats() == before


def test_double_and_foreign_free_refused(emu):
    with npualloc.CachingAllocator(config="") as a, npualloc.CachingAllocator(config="") as b:
        block = a.malloc(4096)
        theirs = b.malloc(4096)
        before = a.stats()
        with pytest.raises(ValueError):
            a.free(theirs)
        with pytest.raises(ValueError):
            a.free(npualloc.MemBlock(0x1234, 16))
        with pytest.raises(ValueError):
            a.free(npualloc.MemBlock(0, 16))
        with pytest.raises(ValueError):
            a.free(npualloc.MemBlock(block.addr + 512, 16))
        with pytest.raises(TypeError, match="expected a MemBlock"):
            a.free("not a block")
        assert a.stats() == before
        a.free(block)
        after = a.stats()
        with pytest.raises(ValueError, match="already freed"):
            a.free(block)
        assert a.stats() == after
        b.free(theirs)


def test_a_freed_block_is_refused_after_its_address_went_to_a_newer_block(emu):
    with npualloc.CachingAllocator(config="") as a:
        b = a.malloc(4096)
        a.free(b)
        c = a.malloc(4096)
        assert c.addr == b.addr, "the test needs the address handed out again"
        before = a.stats()
        with pytest.raises(ValueError, match="already freed"):
            a.free(b)
        with pytest.raises(ValueError, match="not a block of this allocator"):
            a.free(npualloc.MemBlock(c.addr, c.size))
        assert a.stats() == before
        assert before["active_blocks"] == 1
        a.free(c)
        assert a.stats()["active_blocks"] == 0


def test_a_block_of_a_closed_allocator_is_not_the_new_ones(emu):
    old = npualloc.CachingAllocator(config="")
    stale = old.malloc(4096)
    old.close()
    with npualloc.CachingAllocator(config="") as a:
        live = a.malloc(4096)
        before = a.stats()
        with pytest.raises(ValueError, match="not a block of this allocator"):
            a.free(stale)
        assert a.stats() == before
        a.free(live)


def test_memory_error_when_the_device_is_full(emu):
    assert emu.aclemu_set_device_memory(0, 64 * MIB) == 0
    try:
        with npualloc.CachingAllocator(config="") as alloc:
            blocks = []
            with pytest.raises(MemoryError):
                for _ in range(64):
                    blocks.append(alloc.malloc(8 * MIB))
            assert 4 <= len(blocks) <= 8
            assert alloc.stats()["num_ooms"] >= 1
            alloc.free(blocks.pop())
            blocks.append(alloc.malloc(8 * MIB))
            for b in blocks:
                alloc.free(b)
    finally:
        assert emu.aclemu_set_device_memory(0, 8 << 30) == 0


def test_bad_sizes_are_value_errors_and_sizes_the_device_lacks_memory_errors(emu):
    # As CachingAllocator.malloc's docstring says: from 2**60 bytes on the size
    # itself is refused; below that, a size larger than the device is out of memory.
    with npualloc.CachingAllocator(config="") as alloc:
        before = alloc.stats()
        for size in (0, -1, 1 << 60, (1 << 64) - 1):
            with pytest.raises(ValueError):
                alloc.malloc(size)
        assert alloc.stats() == before
        for size in ((1 << 60) - 1, 1 << 40):   # 1 << 40: a TiB, more than the emulated device
            with pytest.raises(MemoryError, match="out of memory"):
                alloc.malloc(size)
        assert alloc.stats()["allocated_bytes"] == 0


def test_closed_allocator_refuses_work(emu):
    alloc = npualloc.CachingAllocator(config="")
    alloc.malloc(4096)  # a live block: close releases it
    alloc.close()
    alloc.close()
    with pytest.raises(ValueError):
        alloc.malloc(16)


def test_bad_config(emu):
    with pytest.raises(npualloc.NpuallocError, match="no_such_key"):
        npualloc.CachingAllocator(config="no_such_key:1")
    # C would stop reading at the NUL and never see the bad key.
    with pytest.raises(ValueError, match="NUL"):
        npualloc.CachingAllocator(config="reuse_cache_mb:8\0,no_such_key:1")


def test_views_share_one_cache(emu):
    """Each view orders its blocks on its own stream; a block of one view
    is freed through another, or through the allocator."""
    import ctypes

    streams = []
    for _ in range(2):
        s = ctypes.c_void_p()
        assert emu.aclrtCreateStream(ctypes.byref(s)) == 0
        streams.append(s.value)
    try:
        with npualloc.CachingAllocator(config="") as alloc:
            views = [alloc.for_stream(s) for s in streams]
            blocks = [v.malloc(1 << 20) for v in views]
            assert [alloc.query(b)["stream"] for b in blocks] == streams
            views[1].free(blocks[0])
            alloc.free(blocks[1])
            assert alloc.stats()["allocated_bytes"] == 0
            with pytest.raises(ValueError, match="already freed"):
                views[0].free(blocks[0])
            # A refusal is a false block with address 0, the error kept.
            refused = views[0].malloc(0)
            assert not refused and refused.addr == 0
            assert isinstance(views[0].last_refusal, ValueError)
            views[0].free(refused)
            with pytest.raises(TypeError):
                npualloc.StreamAllocator(object(), None)
            with pytest.raises(ValueError):
                alloc.for_stream(0xDEAD000)
    finally:
        for s in streams:
            assert emu.aclrtDestroyStream(ctypes.c_void_p(s)) == 0

def _stream_work(emu):
    """A held stream with a device-to-host copy of `block` queued on it."""
    import ctypes

    emu.aclemu_stream_hold.argtypes = [ctypes.c_void_p]
    emu.aclemu_stream_release.argtypes = [ctypes.c_void_p]
    emu.aclrtStreamQuery.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
    emu.aclrtMemcpy2dAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p]
    emu.aclemu_violations.restype = ctypes.c_int64
    host = ctypes.create_string_buffer(4096)

    def queue_copy(stream, block):
        assert emu.aclrtMemcpy2dAsync(host, 4096, block.addr, 4096, 4096, 1, 2, stream) == 0

    def idle(stream):
        status = ctypes.c_uint32(7)
        assert emu.aclrtStreamQuery(stream, ctypes.byref(status)) == 0
        return status.value == 0

    return queue_copy, idle, host


@pytest.mark.parametrize("ending", ["empty_cache", "close"])
def test_allocator_serves_and_synchronizes_its_stream(emu, ending):
    import ctypes

    queue_copy, idle, _host = _stream_work(emu)
    stream = ctypes.c_void_p()
    assert emu.aclrtCreateStream(ctypes.byref(stream)) == 0
    violations = emu.aclemu_violations()
    try:
        alloc = npualloc.CachingAllocator(config="", stream=stream.value)
        assert alloc.stream == stream.value
        block = alloc.malloc(4096)
        assert [seg["stream"] for seg in alloc.snapshot()["segments"]] == [stream.value]
        assert emu.aclemu_stream_hold(stream) == 0
        queue_copy(stream, block)
        assert not idle(stream)
        if ending == "empty_cache":
            alloc.free(block)
            alloc.empty_cache()
            assert alloc.stats()["reserved_bytes"] == 0
        alloc.close()
        # Memory went back only after the stream it served was synchronized.
        assert idle(stream)
        assert emu.aclemu_violations() == violations
    finally:
        emu.aclemu_stream_release(stream)
        assert emu.aclrtDestroyStream(stream) == 0


def test_device_and_config_arguments_are_checked(emu):
    count = ctypes.c_uint32()
    assert emu.aclrtGetDeviceCount(ctypes.byref(count)) == 0 and count.value > 0
    # An id the runtime does not have names the ids it has; ids past 32 bits
    # are refused before the runtime is asked (no truncation to a real id).
    with pytest.raises(ValueError, match=f"it has {count.value} device\\(s\\), 0 to {count.value - 1}"):
        npualloc.CachingAllocator(device=count.value, config="")
    for bad in (-1, 2**31, 2**32 + 1, 2**40):
        with pytest.raises(ValueError, match="device must be a device id"):
            npualloc.CachingAllocator(device=bad, config="")
    for bad in ("0", 1.0, True, None):
        with pytest.raises(TypeError, match="device must be a device id"):
            npualloc.CachingAllocator(device=bad, config="")
    for bad in (b"expandable_segments:false", 1, ["expandable_segments:false"]):
        with pytest.raises(TypeError, match="config must be a str"):
            npualloc.CachingAllocator(config=bad)
    with pytest.raises(ValueError, match="NUL"):
        npualloc.CachingAllocator(config="expandable_segments:false\0x")
    # An integer scalar of another library (numpy's, torch's) is an int.
    class Index:
        def __init__(self, value):
            self.value = value

        def __index__(self):
            return self.value

    with npualloc.CachingAllocator(device=Index(count.value - 1), config="expandable_segments:false") as alloc:
        assert alloc.device == count.value - 1
        alloc.free(alloc.malloc(Index(4096)))
    with npualloc.CachingAllocator(config="") as alloc:
        for bad in ("x", None, 1.5):
            with pytest.raises(TypeError, match="expected a CachingAllocator"):
                npualloc.Pool(bad)
        for bad in (b"sleep:offload", 3):
            with pytest.raises(TypeError, match="config must be a str"):
                npualloc.Pool(alloc, config=bad)


def test_stream_argument_is_checked(emu):
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match="stream"):
            npualloc.CachingAllocator(config="", stream=bad)
    for bad in (1.5, "0x10", True):
        with pytest.raises(TypeError, match="stream"):
            npualloc.CachingAllocator(config="", stream=bad)
    with npualloc.CachingAllocator(config="") as alloc:
        assert alloc.stream == 0


def test_an_unknown_stream_is_refused_at_construction(emu):
    import ctypes

    # What a malloc on that stream says (through an allocator of the default stream).
    with npualloc.CachingAllocator(config="") as alloc:
        out = ctypes.c_void_p()
        lib = npualloc._lib.lib()
        status = lib.npualloc_malloc(alloc._live(), 4096, ctypes.c_void_p(0xDEAD0), ctypes.byref(out))
        assert status == npualloc._lib.ERR_INVALID_ARGUMENT
        malloc_says = npualloc._lib.last_error()
    assert "not a live stream" in malloc_says, malloc_says
    with pytest.raises(ValueError) as refused:
        npualloc.CachingAllocator(config="", stream=0xDEAD0)
    assert str(refused.value) == malloc_says
    # A stream destroyed before the allocator is made is refused the same way.
    stream = ctypes.c_void_p()
    assert emu.aclrtCreateStream(ctypes.byref(stream)) == 0
    assert emu.aclrtDestroyStream(stream) == 0
    with pytest.raises(ValueError, match="not a live stream"):
        npualloc.CachingAllocator(config="", stream=stream.value)
    # A live one is accepted and served.
    assert emu.aclrtCreateStream(ctypes.byref(stream)) == 0
    try:
        with npualloc.CachingAllocator(config="", stream=stream.value) as alloc:
            alloc.free(alloc.malloc(4096))
    finally:
        assert emu.aclrtDestroyStream(stream) == 0


def test_out_of_memory_retry_synchronizes_the_allocators_stream(emu):
    import ctypes

    queue_copy, idle, _host = _stream_work(emu)
    stream = ctypes.c_void_p()
    assert emu.aclrtCreateStream(ctypes.byref(stream)) == 0
    violations = emu.aclemu_violations()
    assert emu.aclemu_set_device_memory(0, 64 * MIB) == 0
    try:
        # Fixed segments: a freed 40 MiB segment cannot grow into 50 MiB.
        with npualloc.CachingAllocator(config="expandable_segments:false", stream=stream.value) as alloc:
            block = alloc.malloc(40 * MIB)
            assert emu.aclemu_stream_hold(stream) == 0
            queue_copy(stream, block)
            alloc.free(block)
            # Only by releasing the cached 40 MiB does 50 MiB fit: the retry
            # must synchronize the stream the cached block was used on.
            big = alloc.malloc(50 * MIB)
            assert idle(stream)
            assert emu.aclemu_violations() == violations
            alloc.free(big)
    finally:
        emu.aclemu_stream_release(stream)
        assert emu.aclemu_set_device_memory(0, 8 << 30) == 0
        assert emu.aclrtDestroyStream(stream) == 0


def test_allocators_of_one_device_share_free_cache(emu):
    """Before refusing, an allocator asks the device's other npualloc
    allocators in the process to give back their free cache: on a 1 GiB
    device, 1000 MiB cached by one allocator let another serve 700 MiB."""
    import ctypes

    emu.aclemu_set_device_memory.argtypes = [ctypes.c_int32, ctypes.c_uint64]
    assert emu.aclemu_set_device_memory(0, 1 << 30) == 0
    try:
        with npualloc.CachingAllocator(config="") as first, npualloc.CachingAllocator(config="") as second:
            first.free(first.malloc(1000 * MIB))
            assert first.stats()["reserved_bytes"] >= 1000 * MIB
            block = second.malloc(700 * MIB)
            assert first.stats()["reserved_bytes"] < 1000 * MIB
            # A request that the other's cache cannot make room for is
            # still refused, saying what was tried; that cache went back.
            second.free(second.malloc(200 * MIB))
            assert second.stats()["reserved_bytes"] >= 900 * MIB
            with pytest.raises(MemoryError, match="other npualloc allocators"):
                first.malloc(900 * MIB)
            assert second.stats()["reserved_bytes"] < 900 * MIB
            second.free(block)
            first.free(first.malloc(100 * MIB))
    finally:
        assert emu.aclemu_set_device_memory(0, 8 << 30) == 0


def test_empty_cache_keeping_handles(emu):
    """keep_handles unmaps the cache but keeps its physical handles, which
    the next growth maps again without a new physical allocation; a plain
    empty_cache then frees them."""
    with npualloc.CachingAllocator(config="expandable_segments:true") as alloc:
        alloc.free(alloc.malloc(100 * MIB))
        before = alloc.stats()
        alloc.empty_cache(keep_handles=True)
        kept = alloc.stats()
        assert kept["segment_bytes"] == 0
        assert kept["cached_handle_bytes"] >= 100 * MIB
        assert kept["num_physical_frees"] == before["num_physical_frees"]
        block = alloc.malloc(100 * MIB)
        again = alloc.stats()
        assert again["num_physical_mallocs"] == before["num_physical_mallocs"], "the kept handles were mapped again"
        alloc.free(block)
        alloc.empty_cache()
        after = alloc.stats()
        assert after["reserved_bytes"] == 0 and after["cached_handle_bytes"] == 0
        with pytest.raises(TypeError):
            alloc.empty_cache(keep_handles=1)
    with npualloc.CachingAllocator(config="expandable_segments:false") as alloc:
        alloc.free(alloc.malloc(10 * MIB))
        reserved = alloc.stats()["reserved_bytes"]
        with pytest.raises(npualloc.NpuallocError, match="fixed segments"):
            alloc.empty_cache(keep_handles=True)
        assert alloc.stats()["reserved_bytes"] == reserved, "nothing changed"
