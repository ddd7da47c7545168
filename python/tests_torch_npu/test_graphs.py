"""Graph capture and MemPool with npualloc as torch_npu's allocator, under
the real torch_npu 2.14 on the emulator: torch.npu.graph captures into an
npualloc pool (the bridge's beginAllocateToPool / endAllocateToPool /
releasePool), replays stay correct while other tensors come and go and the
cache is emptied, with no emulator violation; torch.npu.MemPool with
use_mem_pool routes the thread's allocations to its pool."""

import textwrap

import pytest
from conftest import NO_SPLIT, POOL_SNAPSHOT, POOLS_RELEASED, USE_ON_OOM
from test_bridge import run

POOL_STATS = """
def pool_stats(pool, device=0):
    lib = _L.lib()
    a = ctypes.c_void_p()
    lib.npualloc_pluggable_allocator.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    assert lib.npualloc_pluggable_allocator(device, ctypes.byref(a)) == 0, _L.last_error()
    s = _L.Stats()
    s.struct_size = ctypes.sizeof(s)
    lib.npualloc_pool_get_stats.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p]
    st = lib.npualloc_pool_get_stats(a, pool, ctypes.byref(s))
    return None if st != 0 else {name: getattr(s, name) for name, _ in _L.Stats._fields_}
"""

CAPTURE = """
emu = emulator()
N = 1 << 18
static_in = torch.zeros(N, device="npu")
g = torch.npu.NPUGraph()
with torch.npu.graph(g):
    tmp = torch.empty_like(static_in)
    tmp.copy_(static_in)
    tmp2 = torch.empty_like(static_in)
    tmp2.copy_(tmp)
    del tmp                       # freed inside the capture: reusable by the capture only
    static_out = torch.empty_like(static_in)
    static_out.copy_(tmp2)
    del tmp2
graph_pool = pool_stats(1)
rounds = []
before = emu.aclemu_violations()
for i in range(5):
    static_in.copy_(torch.full((N,), float(i + 1)))
    junk = [torch.full((N,), -1.0).to("npu") for _ in range(6)]
    g.replay()
    for j in junk[::2]:
        j.copy_(junk[1])         # other work writing other blocks while the replay runs
    del junk[::2]
    torch.npu.empty_cache()
    more = torch.full((4 * N,), -3.0).to("npu")
    torch.npu.synchronize()
    rounds.append(float(static_out.cpu()[0]))
    rounds.append(float(static_out.cpu()[-1]))
    del junk, more
after_replays = emu.aclemu_violations() - before
in_pool_after = pool_stats(1)
g.reset()
report({
    "graph_pool": graph_pool, "rounds": rounds, "violations": after_replays,
    "kept": in_pool_after["reserved_bytes"], "after_reset": pool_stats(1),
    "out": float(static_out.cpu()[0]),
})
"""


def test_graph_capture_replays_into_an_npualloc_pool(run_npu):
    r = run(run_npu, POOL_STATS + CAPTURE).result
    gp = r["graph_pool"]
    assert gp is not None and gp["num_allocs"] == 3 and gp["active_blocks"] == 1, gp
    assert r["violations"] == 0, "a replay met memory freed, unmapped or handed to other tensors"
    assert r["rounds"] == [float(i + 1) for i in range(5) for _ in range(2)], r["rounds"]
    assert r["kept"] == gp["reserved_bytes"], "empty_cache took the graph's memory"
    # After reset (releasePool) the pool is destroyed: only the live output's memory stays.
    assert r["after_reset"]["active_blocks"] == 1
    assert r["out"] == 5.0


@pytest.mark.skipif(not POOL_SNAPSHOT, reason="this torch_npu snapshots no single pool")
def test_mem_pool_routes_the_threads_allocations(run_npu):
    r = run(run_npu, POOL_STATS + textwrap.dedent("""
        pool = torch.npu.MemPool()
        with torch.npu.use_mem_pool(pool):
            a = torch.empty(1 << 20, device="npu")
        b = torch.empty(1 << 20, device="npu")
        inside = pool_stats(1)
        snap = torch.npu.memory.memory_snapshot(pool.id)
        uses = pool.use_count()
        del a
        report({"inside": inside, "uses": uses, "pool_id": list(pool.id),
                "snap_pools": [list(s["segment_pool_id"]) for s in snap],
                "default_blocks": len(snap)})
    """)).result
    assert r["inside"]["active_blocks"] == 1, r["inside"]
    assert r["uses"] == 1
    assert r["snap_pools"] and all(p == r["pool_id"] for p in r["snap_pools"]), r


@pytest.mark.skipif(not POOLS_RELEASED, reason="this torch_npu never releases a MemPool's pool (no ~MemPool)")
def test_mem_pool_destruction_empties_only_its_pool(run_npu):
    # MemPool's destructor calls releasePool, then emptyCache(its id): as with torch_npu's own
    # allocator, the released pool's memory goes back and the default pool keeps its cache.
    r = run(run_npu, POOL_STATS + textwrap.dedent("""
        pool = torch.npu.MemPool()
        with torch.npu.use_mem_pool(pool):
            a = torch.empty(1 << 20, device="npu")
        b = torch.empty(4 << 20, device="npu")
        del b
        default_cached = pool_stats(0)["reserved_bytes"]
        del a
        in_pool = pool_stats(1)["reserved_bytes"]
        del pool
        import gc
        gc.collect()
        report({"default_cached": default_cached, "default_after": pool_stats(0)["reserved_bytes"],
                "in_pool": in_pool, "pool_after": pool_stats(1)["reserved_bytes"]})
    """)).result
    assert r["default_cached"] > 0, r
    assert r["default_after"] == r["default_cached"], "a MemPool's destruction emptied the default pool's cache"
    assert r["in_pool"] > 0 and r["pool_after"] == 0, r


@pytest.mark.skipif(not USE_ON_OOM, reason="this torch_npu has no MemPool(use_on_oom)")
def test_a_used_use_on_oom_pool_is_deleted_and_outlives_nothing(run_npu):
    # ~MemPool clears use_on_oom (setUseOnOOM(false)) before releasePool (MemPool.cpp): an
    # exception from it would end the process (std::terminate in a destructor). A pool alive at
    # exit goes the same way at interpreter exit.
    r = run(run_npu, POOL_STATS + textwrap.dedent("""
        pool = torch.npu.MemPool(use_on_oom=True)
        with torch.npu.use_mem_pool(pool):
            a = torch.empty(1 << 20, device="npu")
        del a
        in_pool = pool_stats(1)["reserved_bytes"]
        del pool
        import gc
        gc.collect()
        kept = torch.npu.MemPool(use_on_oom=True)      # used, and alive at exit
        with torch.npu.use_mem_pool(kept):
            b = torch.empty(1 << 20, device="npu")
        report({"in_pool": in_pool, "pool_after": pool_stats(1)["reserved_bytes"]})
    """))
    assert r.returncode == 0 and "terminate" not in r.stderr, r.stderr[-2000:]
    assert r.result["in_pool"] > 0 and r.result["pool_after"] == 0, r.result



USE_ON_OOM_SERVES = """
import ctypes, gc
torch.empty(1, device="npu")
total = torch.npu.mem_get_info()[1]
size = (total * 6 // 10) & ~((2 << 20) - 1)
pool = torch.npu.MemPool(use_on_oom=True)
with torch.npu.use_mem_pool(pool):
    a = torch.empty(size, dtype=torch.uint8, device="npu")
addr = a.data_ptr()
del a
gc.collect()
# Outside the pool: the device cannot hold a second block of this size.
b = torch.empty(size, dtype=torch.uint8, device="npu")
report({"served_from_pool": b.data_ptr() == addr, "reserved": torch.npu.memory_reserved(), "total": total})
"""


@pytest.mark.skipif(not USE_ON_OOM, reason="this torch_npu has no MemPool(use_on_oom)")
def test_a_use_on_oom_pool_serves_a_request_the_device_cannot_hold(run_npu):
    # torch_npu's own allocator, out of memory in the default pool, takes a free block of a
    # use_on_oom pool (try_mempool_fallback, NPUCachingAllocator.cpp) before releasing any cache.
    env = {"ACLEMU_DEVICE_MEMORY": "2G"}
    own = run_npu(USE_ON_OOM_SERVES, "own", env=env).result
    ours = run(run_npu, USE_ON_OOM_SERVES, env=env).result
    for name, r in (("torch_npu's own allocator", own), ("npualloc", ours)):
        assert r["served_from_pool"], f"{name}: the pool's free block did not serve the request: {r}"
        assert r["reserved"] <= r["total"], r


@pytest.mark.skipif(not NO_SPLIT, reason="this torch_npu has no MemPool(no_split=True)")
@pytest.mark.parametrize("config", ["expandable_segments:true", "expandable_segments:false"])
def test_a_no_split_pool_gives_each_tensor_whole_pages(run_npu, config):
    # Registrable memory (ADXL, HCCL): each tensor of the pool starts on a 2 MiB page and shares
    # no page with another; the default pool keeps 512-byte blocks.
    r = run(run_npu, POOL_STATS + textwrap.dedent("""
        pool = torch.npu.MemPool(no_split=True)
        with torch.npu.use_mem_pool(pool):
            ts = [torch.empty(n, dtype=torch.uint8, device="npu") for n in (1000, 3 << 20, 5000)]
        plain = [torch.empty(1000, dtype=torch.uint8, device="npu") for _ in range(2)]
        stats = pool_stats(1)
        starts = [t.data_ptr() for t in ts]
        # A cached block is taken whole: the 3 MiB tensor's 4 MiB serve a 1000-byte one.
        freed = ts[1].data_ptr()
        del ts[1]
        with torch.npu.use_mem_pool(pool):
            again = torch.empty(1000, dtype=torch.uint8, device="npu")
        report({"pool": starts, "plain": [t.data_ptr() for t in plain],
                "allocated": stats["allocated_bytes"], "blocks": stats["active_blocks"],
                "again": [again.data_ptr() - freed, pool_stats(1)["allocated_bytes"]]})
    """), env={"NPUALLOC_CONF": config}).result
    page = 2 << 20
    starts = r["pool"]
    assert all(p % page == 0 for p in starts), r
    assert r["again"] == [0, 8 << 20], ("the freed 4 MiB block, taken whole", r)
    pages = [set(range(p // page, (p + n - 1) // page + 1)) for p, n in zip(starts, (1032, (3 << 20) + 32, 5032))]
    assert not (pages[0] & pages[1]) and not (pages[0] & pages[2]) and not (pages[1] & pages[2]), r
    # 2 + 4 + 2 MiB: each request in whole pages of its own.
    assert (r["blocks"], r["allocated"]) == (3, 8 << 20), r
    assert abs(r["plain"][1] - r["plain"][0]) < page, ("the default pool still packs blocks", r)
