"""Graph-pool checkpoints in the real torch_npu, under both allocators: what npugraph trees
(torch_npu/npu/_graph_tree.py) do with a private pool. After a recording they take the pool's
state (_npu_getCheckpointState); before recording a new branch after replays they set the pool
back to it (_npu_setCheckpointPoolState: the tensors of the later branch are stale and lose their
deleters, the checkpoint's blocks are live again and go to the storages named), and they check
which blocks are live (_npu_checkPoolLiveAllocations). With npualloc each call reached a stub
that raised; now the same steps must give the same answers as torch_npu's own allocator."""

import pytest

from test_bridge import run

STEPS = """
C = torch_npu._C
emu = emulator()
violations = emu.aclemu_violations()
dev = torch.npu.current_device()
pool = torch.npu.MemPool()


def in_pool(n):
    with torch.npu.use_mem_pool(pool):
        return torch.empty(n, dtype=torch.uint8, device="npu")


def put(t, v):
    t.copy_(torch.full((t.numel(),), v, dtype=torch.uint8))


def seen(t):
    return sorted(set(t.cpu()[::4096].tolist()) | {int(t.cpu()[-1])})


def span(t):
    s = t.untyped_storage()
    return (s.data_ptr(), s.data_ptr() + s.nbytes())


base = torch.npu.memory_allocated()
# The "recording": outputs of both pool kinds, one tensor dead already.
x, y, z = in_pool(3 << 20), in_pool(200 << 10), in_pool(5 << 20)
gone = in_pool(2 << 20)
del gone
for t, v in ((x, 1), (y, 2), (z, 3)):
    put(t, v)
torch.npu.synchronize()
ptrs = {span(t)[0] for t in (x, y, z)}
x_ptr, x_bytes = x.untyped_storage().data_ptr(), x.untyped_storage().nbytes()
at_point = torch.npu.memory_allocated() - base
state = C._npu_getCheckpointState(dev, pool.id)
out = {"live_at_point": C._npu_checkPoolLiveAllocations(dev, pool.id, ptrs)}

# A later branch: x dies, new tensors come, the first in x's memory.
del x
w, v = in_pool(1536 << 10), in_pool(100 << 10)
put(w, 5)
torch.npu.synchronize()
out["w_in_x"] = span(w)[0] == x_ptr
out["live_later"] = C._npu_checkPoolLiveAllocations(dev, pool.id, ptrs)
out["later_now"] = C._npu_checkPoolLiveAllocations(dev, pool.id, ptrs - {x_ptr} | {span(w)[0], span(v)[0]})

# Set back, as the tree does before recording a new branch: w and v are stale, x comes back as a
# storage made from its address, which takes the deleter of x's block.
x_storage = C._construct_storage_from_data_pointer(x_ptr, torch.device("npu", dev), x_bytes)
C._npu_setCheckpointPoolState(dev, state, [w.untyped_storage()._cdata, v.untyped_storage()._cdata],
                              [x_storage._cdata])
out["restored"] = C._npu_checkPoolLiveAllocations(dev, pool.id, ptrs)
out["standard_deleter"] = C._has_Standard_Deleter(x_storage._cdata)
out["allocated_restored"] = torch.npu.memory_allocated() - base == at_point
del w, v  # stale: freeing them frees nothing
out["allocated_after_stale"] = torch.npu.memory_allocated() - base == at_point
x2 = torch.empty(0, dtype=torch.uint8, device="npu").set_(x_storage)
put(x2, 9)
# The new branch's tensors keep off the restored blocks.
fresh = [in_pool(n) for n in (3 << 20, 100 << 10, 2 << 20, 150 << 10)]
for t in fresh:
    put(t, 7)
torch.npu.synchronize()
spans = sorted(span(t) for t in [x2, y, z] + fresh)
out["disjoint"] = all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
out["kept"] = [seen(y), seen(z), seen(x2)]
# A refused state: another pool's.
other = torch.npu.MemPool()
with torch.npu.use_mem_pool(other):
    o = torch.empty(1 << 20, device="npu")
try:
    C._npu_setCheckpointPoolState(dev, C._npu_getCheckpointState(dev, other.id), [], [])
    out["other_pool"] = "accepted"
except RuntimeError:
    out["other_pool"] = "refused"
del o
# The restored block frees like any other.
del x2, x_storage, fresh, t, y, z
torch.npu.synchronize()
out["allocated_end"] = torch.npu.memory_allocated() - base
out["violations"] = emu.aclemu_violations() - violations
report(out)
"""


@pytest.mark.parametrize("config", ["expandable_segments:False", "expandable_segments:True"])
def test_a_graph_pool_is_set_back_to_its_checkpoint_as_with_torch_npus_allocator(run_npu, config):
    env = {"PYTORCH_NPU_ALLOC_CONF": config}
    own = run(run_npu, STEPS, "own", env=env).result
    mine = run(run_npu, STEPS, "npualloc", env=env).result
    expected = {
        "live_at_point": True, "w_in_x": True, "live_later": False, "later_now": True, "restored": True,
        "standard_deleter": True, "allocated_restored": True, "allocated_after_stale": True, "disjoint": True,
        "kept": [[2], [3], [9]], "other_pool": "accepted", "allocated_end": 0, "violations": 0,
    }
    assert own == expected, own
    assert mine == expected, mine
