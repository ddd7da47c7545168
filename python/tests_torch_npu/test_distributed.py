"""torch.distributed with backend "hccl" in 2 processes, each on its own emulated device, with
npualloc as torch_npu's allocator in both, over the harness's emulated HCCL
(tools/torch_npu/hccl_emu.c): all_reduce of tensors from the default pool and a private pool,
broadcast, all_gather_into_tensor, reduce_scatter_tensor and barrier, in expandable and fixed mode.

HCCL's stream-use path: each collective records its tensors on the HCCL stream
(NPUCachingAllocator::recordStream) and, under the default MULTI_STREAM_MEMORY_REUSE=1,
WorkHCCL::synchronize erases that use once the current stream waits for the collective
(eraseStream), so a tensor freed after wait() goes back to the cache at once; with
MULTI_STREAM_MEMORY_REUSE=0 the use stays and the free waits for the HCCL stream.

Zero copy (TORCH_HCCL_ZERO_COPY=1 with expandable segments): torch_npu's process group hands a
communicator to the allocator (buildServerMemMapForHccl), npualloc's ranges and handles are set
and activated on it, and the emulated HCCL counts each collective whose buffers all lie in
activated memory as zero copy, as the real library decides per collective.

The emulator runs no operators: tensors are made on the host and copied over."""

import pytest

from test_bridge import run

DIST = """
import socket
import torch.distributed as dist
import torch.multiprocessing as mp

N = 1 << 18  # 1 MiB of float32


def hccl():
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if path.endswith("/libhccl.so"):
            return ctypes.CDLL(path)
    raise RuntimeError("no libhccl.so loaded")


def hccl_counts():
    zero, staged = ctypes.c_uint64(), ctypes.c_uint64()
    assert hccl().hcclemu_counts(ctypes.byref(zero), ctypes.byref(staged)) == 0
    return zero.value, staged.value


def active_bytes():
    n = ctypes.c_uint64()
    assert hccl().hcclemu_active_bytes(ctypes.byref(n)) == 0
    return n.value


def worker(rank, port, zero_copy, outbox):
    try:
        outbox.put((rank, collectives(rank, port)))
    except BaseException:
        import traceback
        outbox.put((rank, {"error": traceback.format_exc()}))
        raise


def collectives(rank, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", LOCAL_WORLD_SIZE="2")
    torch.npu.set_device(rank)
    # Memory npualloc holds before the process group exists: with zero copy, the group's
    # buildServerMemMapForHccl lists it.
    t = torch.full((N,), float(rank + 1)).to("npu")
    dist.init_process_group("hccl", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    got = {}
    dist.all_reduce(t)
    got["default_pool"] = bool((t.cpu() == 3.0).all())
    pool = torch.npu.MemPool() if hasattr(torch.npu, "MemPool") else None
    if pool is not None:
        with torch.npu.use_mem_pool(pool):
            p = (torch.arange(N, dtype=torch.float32) * (rank + 1)).to("npu")
        dist.all_reduce(p, op=dist.ReduceOp.MAX)
        got["private_pool"] = bool((p.cpu() == torch.arange(N, dtype=torch.float32) * 2).all())
    b = torch.full((N,), float(rank * 10 + 7)).to("npu")
    dist.broadcast(b, src=1)
    got["broadcast"] = bool((b.cpu() == 17.0).all())
    mine = torch.full((N,), float(rank)).to("npu")
    gathered = torch.empty(2 * N, device="npu")
    dist.all_gather_into_tensor(gathered, mine)
    got["all_gather"] = bool((gathered.cpu() == torch.cat([torch.zeros(N), torch.ones(N)])).all())
    both = torch.cat([torch.full((N,), 1.0 + rank), torch.full((N,), 10.0 + rank)]).to("npu")
    part = torch.empty(N, device="npu")
    dist.reduce_scatter_tensor(part, both)
    got["reduce_scatter"] = bool((part.cpu() == (3.0 if rank == 0 else 21.0)).all())
    # A tensor freed after the collective's wait(): its HCCL stream use erased or not. The
    # emulator reports an event recorded from now on complete only late, so a free that waits
    # for the HCCL stream stays pending while the statistics are read.
    x = torch.full((N,), 1.0).to("npu")
    dist.all_reduce(x, async_op=True).wait()
    emu = emulator()
    emu.aclemu_set_event_lag(1000)
    before = npl_stats(rank)["pending_free_blocks"]
    del x
    got["pending_after_free"] = npl_stats(rank)["pending_free_blocks"] - before
    emu.aclemu_set_event_lag(0)
    torch.npu.synchronize()
    zero, staged = hccl_counts()
    got["zero_copy"], got["staged"] = zero, staged
    # torch_npu's barrier: an all-reduce of at::ones({1}), then a device synchronize.
    dist.barrier()
    got["barrier"] = hccl_counts() != (zero, staged)
    # Memory given back is deactivated first (zero copy: the bridge's UNMAP events).
    got["active_before"] = active_bytes()
    del t, b, mine, gathered, both, part
    torch.npu.empty_cache()
    got["active_after"] = active_bytes()
    got["violations"] = emulator().aclemu_violations()
    dist.destroy_process_group()
    return got


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    outbox = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, ZERO_COPY, outbox), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(outbox.get(timeout=300) for _ in procs)
    assert not any("error" in r for r in results.values()), results
    for p in procs:
        p.join(timeout=120)
    report({"ranks": {str(k): v for k, v in results.items()}, "exitcodes": [p.exitcode for p in procs]})
"""


def distributed(run_npu, config, zero_copy=False, reuse=None):
    env = {"NPUALLOC_CONF": config}
    if zero_copy:
        env.update(TORCH_HCCL_ZERO_COPY="1", PYTORCH_NPU_ALLOC_CONF="expandable_segments:True")
    if reuse is not None:
        env["MULTI_STREAM_MEMORY_REUSE"] = str(reuse)
    r = run(run_npu, f"ZERO_COPY = {zero_copy}\n" + DIST, env=env).result
    assert r["exitcodes"] == [0, 0], r
    ranks = r["ranks"]
    assert sorted(ranks) == ["0", "1"], r
    for rank, got in ranks.items():
        for key in ("default_pool", "broadcast", "all_gather", "reduce_scatter", "barrier"):
            assert got[key], (rank, key, r)
        assert got.get("private_pool", True), (rank, r)
        assert got["violations"] == 0, (rank, r)
    return ranks


@pytest.mark.parametrize("config", ["expandable_segments:true", "expandable_segments:false"])
def test_collectives_on_npualloc_memory(run_npu, config):
    ranks = distributed(run_npu, config)
    for rank, got in ranks.items():
        # Erased at wait(): the free does not wait for the HCCL stream.
        assert got["pending_after_free"] == 0, (rank, ranks)
        # No communicator was given memory to activate: every collective staged.
        assert got["zero_copy"] == 0 and got["staged"] >= 6, (rank, ranks)


def test_without_erase_a_free_waits_for_the_hccl_stream(run_npu):
    ranks = distributed(run_npu, "expandable_segments:true", reuse=0)
    for rank, got in ranks.items():
        assert got["pending_after_free"] == 1, (rank, ranks)


def test_zero_copy_registers_npualloc_memory_with_hccl(run_npu):
    ranks = distributed(run_npu, "expandable_segments:true", zero_copy=True)
    for rank, got in ranks.items():
        # Every collective's buffers were in memory npualloc had HCCL activate, the first
        # tensor's made before the process group.
        assert got["zero_copy"] >= 6 and got["staged"] == 0, (rank, ranks)
        assert got["active_before"] > got["active_after"], (rank, ranks)
