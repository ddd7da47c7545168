"""npualloc.Pool: a private pool routing the calling thread or a stream."""

import ctypes
import threading

import pytest

import npualloc

MIB = 1 << 20


def test_thread_route_nesting_and_stats(emu):
    with npualloc.CachingAllocator(device=0, config="expandable_segments:false") as alloc:
        outer, inner = npualloc.Pool(alloc), npualloc.Pool(alloc, config="use_on_oom:true")
        assert 0 < outer.id < inner.id
        with outer:
            a = alloc.malloc(MIB)
            with inner:
                b = alloc.malloc(MIB)
                # Another thread is not routed by this thread's pools.
                got = []
                t = threading.Thread(target=lambda: got.append(alloc.malloc(MIB)))
                t.start()
                t.join()
                with pytest.raises(ValueError, match="innermost"):
                    outer.end()
            c = alloc.malloc(MIB)
        d = alloc.malloc(MIB)
        assert outer.stats()["active_blocks"] == 2  # a, c
        assert inner.stats()["active_blocks"] == 1  # b
        assert alloc.stats()["active_blocks"] == 5, "the allocator's stats are totals"
        # A freed pool block serves the pool again, not the default pool.
        alloc.free(a)
        e = alloc.malloc(MIB)
        assert e.addr != a.addr
        with outer:
            f = alloc.malloc(MIB)
        assert f.addr == a.addr
        for blk in (b, c, d, e, f, got[0]):
            alloc.free(blk)
        alloc.empty_cache()
        assert outer.stats()["reserved_bytes"] > 0, "empty_cache leaves a pool's cache"
        inner_reserved = inner.stats()["reserved_bytes"]
        outer.empty_cache()
        assert outer.stats()["reserved_bytes"] == 0, "Pool.empty_cache gives the pool's cache back"
        assert inner.stats()["reserved_bytes"] == inner_reserved, "another pool's cache stays"
        outer.destroy()
        assert outer.stats()["reserved_bytes"] == 0
        with pytest.raises(ValueError, match="destroyed"):
            outer.begin()
        with pytest.raises(npualloc.NpuallocError, match="BAD_CONFIG"):
            npualloc.Pool(alloc, config="sleep:nap")


def test_stream_route(emu):
    s = ctypes.c_void_p()
    assert emu.aclrtCreateStream(ctypes.byref(s)) == 0
    try:
        with npualloc.CachingAllocator(device=0, config="", stream=s.value) as on_s:
            pool = npualloc.Pool(on_s, stream=s.value)
            with pool:
                # Any thread's allocation on the stream goes to the pool.
                got = []
                t = threading.Thread(target=lambda: got.append(on_s.malloc(4096)))
                t.start()
                t.join()
            assert pool.stats()["active_blocks"] == 1
            on_s.free(got[0])
            assert pool.stats()["active_blocks"] == 0
    finally:
        assert emu.aclrtDestroyStream(s) == 0


def test_snapshot_names_each_segments_pool(emu):
    with npualloc.CachingAllocator(device=0, config="expandable_segments:false") as alloc:
        pool = npualloc.Pool(alloc)
        outside = alloc.malloc(5 * MIB)
        with pool:
            inside = alloc.malloc(5 * MIB)

        def owner(block):
            segs = [s for s in alloc.snapshot()["segments"]
                    if s["address"] <= block.addr < s["address"] + s["size"]]
            assert len(segs) == 1, segs
            return segs[0]["pool"], segs[0]["stream"], segs[0]["pool_id"]

        # Same stream, same kind: only pool_id tells the two apart.
        assert owner(outside) == ("large", 0, 0)
        assert owner(inside) == ("large", 0, pool.id)
        alloc.free(outside)
        alloc.free(inside)
        pool.destroy()


def test_use_on_oom_changed_after_the_pool_served(emu):
    """Pool.set_use_on_oom: with it, a request outside the pool that finds the
    device full is served from the pool's cache (as the pool's block);
    cleared, it is not."""
    total = 256 * MIB
    assert emu.aclemu_set_device_memory(0, total) == 0
    try:
        _use_on_oom_both_ways(total)
    finally:
        assert emu.aclemu_set_device_memory(0, 8 << 30) == 0


def _use_on_oom_both_ways(total):
    with npualloc.CachingAllocator(device=0, config="expandable_segments:false") as alloc:
        pool = npualloc.Pool(alloc)
        with pool:
            alloc.free(alloc.malloc(total // 2 + MIB))
        cached = pool.stats()["reserved_bytes"]
        assert cached > total // 2
        with pytest.raises(MemoryError):
            alloc.malloc(total // 2 + MIB)
        assert pool.stats()["reserved_bytes"] == cached, "without use_on_oom the pool keeps its cache"
        pool.set_use_on_oom(True)
        block = alloc.malloc(total // 2 + MIB)
        assert pool.stats()["allocated_bytes"] >= total // 2 + MIB, "with it the pool's cache served the request"
        alloc.free(block)
        assert pool.stats()["allocated_bytes"] == 0 and pool.stats()["reserved_bytes"] == cached
        with pool:
            alloc.free(alloc.malloc(total // 2 + MIB))
        pool.set_use_on_oom(False)
        with pytest.raises(MemoryError):
            alloc.malloc(total // 2 + MIB)
        with pytest.raises(TypeError, match="bool"):
            pool.set_use_on_oom(1)
        pool.destroy()
        with pytest.raises(ValueError, match="destroyed"):
            pool.set_use_on_oom(True)


def test_stats_of_each_kind_of_block(emu):
    with npualloc.CachingAllocator(device=0, config="expandable_segments:false") as alloc:
        small, large = alloc.malloc(3000), alloc.malloc(5 * MIB)
        s, l, whole = alloc.stats("small"), alloc.stats("large"), alloc.stats()
        assert (s["requested_bytes"], l["requested_bytes"]) == (3000, 5 * MIB)
        assert (s["active_blocks"], l["active_blocks"]) == (1, 1)
        assert s["allocated_bytes"] + l["allocated_bytes"] == whole["allocated_bytes"]
        with pytest.raises(ValueError, match="small"):
            alloc.stats("medium")
        with pytest.raises(TypeError, match="small"):
            alloc.stats(0)
        alloc.free(small)
        alloc.free(large)


@pytest.mark.parametrize("config", ["expandable_segments:true", "expandable_segments:false"])
def test_aligned_and_unsplit_pools(emu, config):
    with npualloc.CachingAllocator(device=0, config=config) as alloc:
        aligned, unsplit = npualloc.Pool(alloc, config="alignment:64k"), npualloc.Pool(alloc, config="no_split:true")
        with aligned:
            small = [alloc.malloc(n) for n in (1, 1000, 70000, 3 * MIB)]
        with unsplit:
            whole = [alloc.malloc(n) for n in (1, 3 * MIB, 1000)]
        plain = alloc.malloc(1000)
        size = lambda b: alloc.query(b)["size"]  # noqa: E731 (as rounded)
        assert all(b.addr % (64 << 10) == 0 and size(b) % (64 << 10) == 0 for b in small), small
        assert [size(b) for b in whole] == [2 * MIB, 4 * MIB, 2 * MIB], whole
        assert all(b.addr % (2 * MIB) == 0 for b in whole), whole
        assert size(plain) == 1024, "the default pool keeps 512-byte blocks"
        # A cached no_split block is taken whole, never cut, in both modes.
        alloc.free(whole[1])
        with unsplit:
            again = alloc.malloc(1000)
        assert (again.addr, size(again)) == (whole[1].addr, 4 * MIB), (again, whole)
        whole[1] = again
        for b in small + whole + [plain]:
            alloc.free(b)
        for bad in ("alignment:3000", "alignment:4m", "no_split:perhaps"):
            with pytest.raises(npualloc.NpuallocError, match="BAD_CONFIG"):
                npualloc.Pool(alloc, config=bad)
