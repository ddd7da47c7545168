"""CachingAllocator.sleep() / wake() (npualloc_sleep / npualloc_wake) on the
emulator: the allocator's default pool keeps its blocks, so sleep gives back
the cached memory and leaves every live block's bytes; wake and repeated
calls are accepted; a closed allocator refuses both."""

import ctypes

import pytest

import npualloc

MIB = 1 << 20


def _fill(addr, size, byte):
    # The emulator's device memory is host memory.
    ctypes.memset(addr, byte, size)


def _reads(addr, size, byte):
    return ctypes.string_at(addr, size) == bytes([byte]) * size


@pytest.mark.parametrize("config", ["expandable_segments:true", "expandable_segments:false"])
def test_sleep_gives_back_the_cache_and_keeps_blocks(emu, config):
    with npualloc.CachingAllocator(device=0, config=config) as a:
        live = a.malloc(3 * MIB)
        _fill(live.addr, 3 * MIB, 0x5A)
        spare = a.malloc(64 * MIB)
        a.free(spare)
        before = a.stats()
        assert before["reserved_bytes"] >= before["allocated_bytes"] + 64 * MIB
        a.wake()  # awake already: nothing happens
        a.sleep()
        asleep = a.stats()
        assert asleep["reserved_bytes"] < 64 * MIB, asleep
        assert asleep["allocated_bytes"] == before["allocated_bytes"]
        a.sleep()  # asleep already: nothing happens
        # The default pool keeps: it serves requests while asleep.
        more = a.malloc(MIB)
        a.free(more)
        assert _reads(live.addr, 3 * MIB, 0x5A)
        a.wake()
        assert _reads(live.addr, 3 * MIB, 0x5A)
        a.free(live)


def test_a_closed_allocator_refuses_sleep_and_wake(emu):
    a = npualloc.CachingAllocator(device=0)
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.sleep()
    with pytest.raises(ValueError, match="closed"):
        a.wake()
