"""NPU tensors sent to another process with npualloc as torch_npu's allocator in both: through a
torch.multiprocessing queue (torch_npu's storage sharing: _share_npu_ in the sender,
_new_shared_npu in the receiver, which call the allocator's shareIpcHandle and getIpcDevPtr)
and through reduce_tensor / rebuild_npu_tensor (vllm-ascend's weight transfer,
npu_ipc_engine.py). The receiver reads with .cpu() and writes with .copy_(), the sender sees the
writes, and the receiver still reads after the sender freed its tensor and emptied its cache.
With each tensor the sender sends an IPC event recorded on its stream, which the receiver's stream
waits for (torch_npu's NpuIPCSentData and _new_shared_npu), as on a card.
The emulator runs no operators: tensors are made on the host and copied over."""

import pytest

from test_bridge import run

SHARE = """
import torch.multiprocessing as mp
from torch.multiprocessing.reductions import reduce_tensor

N = 3 << 20  # 12 MiB of float32


def receiver(inbox, outbox):
    got = {}
    # Through the queue: the tensor, a view at an offset, a private pool's tensor.
    t, view, pooled = inbox.get()
    got["whole"] = bool((t.cpu() == torch.arange(N, dtype=torch.float32)).all())
    got["view"] = bool((view.cpu() == torch.arange(1000, N, dtype=torch.float32)[: view.numel()]).all())
    got["pooled"] = bool((pooled.cpu() == 5).all())
    view[:10].copy_(torch.full((10,), -1.0))
    torch.npu.synchronize()
    outbox.put("written")
    # Through reduce_tensor's arguments, rebuilt as vllm-ascend does (args[6] is the device).
    args = list(inbox.get())
    from torch_npu.multiprocessing.reductions import rebuild_npu_tensor
    args[6] = torch.npu.current_device()
    w = rebuild_npu_tensor(*args)
    got["reduced"] = bool((w.cpu() == 7).all())
    outbox.put("rebuilt")
    # The sender dropped its tensors and emptied its cache: still the same bytes here.
    assert inbox.get() == "freed"
    now = t.cpu()
    expected = torch.arange(N, dtype=torch.float32)
    expected[1000:1010] = -1.0
    got["after_free"] = bool((now == expected).all())
    got["reduced_after_free"] = bool((w.cpu() == 7).all())
    outbox.put(got)
    del t, view, pooled, w
    torch.npu.synchronize()
    outbox.put("done")


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    # A daemon: if the sender fails, the receiver does not keep the run waiting.
    p = ctx.Process(target=receiver, args=(inbox, outbox), daemon=True)
    p.start()
    t = torch.arange(N, dtype=torch.float32).to("npu")
    view = t[1000:]
    pool = torch.npu.MemPool() if hasattr(torch.npu, "MemPool") else None
    if pool is not None:
        with torch.npu.use_mem_pool(pool):
            pooled = torch.full((1 << 18,), 5.0).to("npu")
    else:
        pooled = torch.full((1 << 18,), 5.0).to("npu")
    torch.npu.synchronize()
    inbox.put((t, view, pooled))
    assert outbox.get(timeout=120) == "written"
    seen = t[1000:1010].cpu().tolist()
    w = torch.full((1 << 20,), 7.0).to("npu")
    torch.npu.synchronize()
    func, args = reduce_tensor(w)
    # The last two arguments: the IPC event's handle and whether the receiver waits for it
    # (torch_npu's NpuIPCSentData records one when the runtime has IPC events).
    event_sync = args[-1]
    inbox.put(args)
    assert outbox.get(timeout=120) == "rebuilt"
    exported = npl_stats()["exported_blocks"]
    del t, view, pooled, w
    torch.npu.synchronize()
    torch.npu.empty_cache()
    held = npl_stats()
    inbox.put("freed")
    got = outbox.get(timeout=120)
    assert outbox.get(timeout=120) == "done"
    p.join(timeout=300)
    report({"got": got, "seen": seen, "exitcode": p.exitcode, "pool": pool is not None,
            "exported": exported, "held": held["held_for_importers_bytes"], "event_sync": event_sync,
            "reserved_after": torch.npu.memory_reserved()})
"""


@pytest.mark.parametrize("config", ["expandable_segments:true", "expandable_segments:false"])
def test_tensors_cross_processes(run_npu, config):
    r = run(run_npu, SHARE, env={"NPUALLOC_CONF": config}).result
    got = r["got"]
    assert r["exitcode"] == 0, r
    assert got["whole"] and got["view"] and got["pooled"], r
    assert r["seen"] == [-1.0] * 10, ("the sender sees the receiver's writes", r)
    assert got["reduced"], r
    assert got["after_free"] and got["reduced_after_free"], ("the receiver reads after the sender freed", r)
    assert r["exported"] >= 3, r
    # The sender recorded an IPC event for the receiver to wait for (emulated across the two
    # processes), rather than synchronizing its stream.
    assert r["event_sync"] is True, r


MIXED = """
import torch.multiprocessing as mp


def receiver(inbox, outbox):
    import npualloc.torch_npu
    npualloc.torch_npu.enable()
    t = inbox.get()
    outbox.put(bool((t.cpu() == torch.arange(1 << 20, dtype=torch.float32)).all()))
    del t
    torch.npu.synchronize()
    outbox.put("done")


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=receiver, args=(inbox, outbox), daemon=True)
    p.start()
    t = torch.arange(1 << 20, dtype=torch.float32).to("npu")
    torch.npu.synchronize()
    inbox.put(t)
    ok = outbox.get(timeout=120)
    assert outbox.get(timeout=120) == "done"
    p.join(timeout=120)
    report({"ok": ok, "exitcode": p.exitcode})
"""


def test_a_tensor_of_torch_npus_own_allocator_reaches_a_process_with_npualloc(run_npu):
    # The sender keeps torch_npu's own allocator; the receiver's bridge hands the handle, which
    # is not npualloc's, to torch_npu's own allocator there.
    r = run_npu(MIXED, "own").result
    assert r == {"ok": True, "exitcode": 0}, r
