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


def test_an_offload_pool_sleeps_and_wakes(emu):
    with npualloc.CachingAllocator(device=0, config="expandable_segments:true") as a:
        pool = npualloc.Pool(a, "sleep:offload")
        with pool:
            weights = a.malloc(24 * MIB)
            scratch = a.malloc(8 * MIB)
        _fill(weights.addr, 24 * MIB, 0x3C)
        kept = a.malloc(2 * MIB)  # the default pool keeps
        _fill(kept.addr, 2 * MIB, 0x11)
        total, in_pool = a.stats()["reserved_bytes"], pool.stats()["reserved_bytes"]
        assert in_pool >= 32 * MIB
        a.sleep()
        assert pool.stats()["reserved_bytes"] == 0
        # What stays is the default pool's handle under `kept`, as before.
        assert a.stats()["reserved_bytes"] == total - in_pool
        with pool:
            with pytest.raises(ValueError, match="asleep"):
                a.malloc(4096)
        a.free(scratch)  # a sleeping block may be freed
        assert _reads(kept.addr, 2 * MIB, 0x11)
        a.wake()
        assert _reads(weights.addr, 24 * MIB, 0x3C)
        assert pool.stats()["reserved_bytes"] >= 24 * MIB
        a.free(weights)
        a.free(kept)


def test_pools_wake_one_at_a_time(emu):
    """wake(pools=[...]) wakes only those pools (npualloc_wake_with): the
    weights read back and serve while the KV cache pool still refuses
    allocations; the KV cache wakes next; bad lists are refused."""
    with npualloc.CachingAllocator(device=0, config="expandable_segments:true") as a:
        weights, kv = npualloc.Pool(a, "sleep:offload"), npualloc.Pool(a, "sleep:discard")
        with weights:
            w = a.malloc(12 * MIB)
        with kv:
            k = a.malloc(20 * MIB)
        _fill(w.addr, 12 * MIB, 0x2B)
        a.sleep()
        assert weights.stats()["reserved_bytes"] == 0 and kv.stats()["reserved_bytes"] == 0
        with pytest.raises(ValueError, match="does not exist"):
            a.wake(pools=[weights, 9999])
        with pytest.raises(TypeError, match="pool ids"):
            a.wake(pools=["weights"])
        assert weights.stats()["reserved_bytes"] == 0, "nothing was woken"
        a.wake(pools=[weights])
        assert _reads(w.addr, 12 * MIB, 0x2B)
        assert weights.stats()["reserved_bytes"] >= 12 * MIB
        assert kv.stats()["reserved_bytes"] == 0
        with kv:
            with pytest.raises(ValueError, match="asleep"):
                a.malloc(4096)
        with weights:
            a.free(a.malloc(MIB))  # the weights pool serves
        a.wake(pools=[kv.id])
        with kv:
            a.free(a.malloc(MIB))  # awake
        _fill(k.addr, 20 * MIB, 0x01)
        assert _reads(k.addr, 20 * MIB, 0x01) and _reads(w.addr, 12 * MIB, 0x2B)
        a.free(w)
        a.free(k)


def test_sleep_after_a_partial_wake_is_refused():
    """sleep() while wake(pools=...) left some pools asleep raises
    ValueError saying to wake them first, changing nothing: the woken pool
    keeps its memory; once every pool is awake, sleep works again."""
    with npualloc.CachingAllocator(device=0, config="expandable_segments:true") as a:
        weights, kv = npualloc.Pool(a, "sleep:offload"), npualloc.Pool(a, "sleep:discard")
        with weights:
            w = a.malloc(4 * MIB)
        with kv:
            k = a.malloc(4 * MIB)
        a.sleep()
        a.wake(pools=[weights])
        with pytest.raises(ValueError, match="wake them first"):
            a.sleep()
        assert weights.stats()["reserved_bytes"] >= 4 * MIB, "the refused sleep took the woken pool's memory"
        a.wake()
        a.sleep()
        assert weights.stats()["reserved_bytes"] == 0
        a.wake()
        a.free(w)
        a.free(k)
