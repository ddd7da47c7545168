"""The real torch 2.14 and torch_npu 2.14 on the emulator: import, devices,
allocation, copies with their data checked (one to another device, which torch_npu orders with IPC
events), a side stream, torch.zeros, an interprocess event; with torch_npu's own allocator and with
npualloc's."""

import pytest

SMOKE = """
n = torch.npu.device_count()
host = torch.arange(1 << 16, dtype=torch.float32)
dev = host.to("npu")                      # H2D
back = dev.cpu()                          # D2H
copy = torch.empty_like(dev)
copy.copy_(dev)                           # D2D
side = torch.npu.Stream()
with torch.npu.stream(side):
    filled = torch.empty(1 << 20, device="npu")
    filled.copy_(torch.full((1 << 20,), 3.0))
side.synchronize()
filled.record_stream(side)
zeros = torch.zeros(1000, device="npu")
other = torch.ones(10).to("npu:1")
# Device to device across cards: torch_npu orders the two devices' streams with IPC events.
across = dev.to("npu:1")
interprocess = torch.npu.Event(interprocess=True)
interprocess.record()
torch.npu.synchronize()
report({
    "count": n,
    "device": str(dev.device),
    "h2d_d2h": torch.equal(back, host),
    "d2d": torch.equal(copy.cpu(), host),
    "side_stream": side != torch.npu.current_stream(),
    "side_data": bool((filled.cpu() == 3.0).all()),
    "zeros": zeros.cpu().abs().sum().item(),
    "other_device": [str(other.device), other.cpu().sum().item()],
    "across": [str(across.device), torch.equal(across.cpu(), host)],
    "ipc_event": [interprocess.query(), len(interprocess.ipc_handle())],
})
"""


@pytest.mark.parametrize("allocator", ["own", "npualloc"])
def test_tensors_copies_and_a_side_stream(run_npu, allocator):
    r = run_npu(SMOKE, allocator).result
    assert r["count"] == 8
    assert r["device"] == "npu:0"
    assert r["h2d_d2h"], "data changed on the way to the device and back"
    assert r["d2d"], "device-to-device copy changed the data"
    assert r["side_stream"]
    assert r["side_data"], "a copy on the side stream lost its data"
    assert r["zeros"] == 0.0
    assert r["other_device"] == ["npu:1", 10.0]
    assert r["across"] == ["npu:1", True], "a copy to another device changed the data"
    assert r["ipc_event"] == [True, 64], "an interprocess event: complete after a synchronize, 64-byte handle"


def test_npualloc_serves_torch_npu(run_npu):
    """With npualloc enabled, the tensors' memory comes from npualloc: its
    snapshot of device 0 holds an active block of the tensor's size."""
    r = run_npu("""
        import npualloc.torch_npu as nt
        x = torch.empty(1 << 20, dtype=torch.uint8, device="npu")
        snap = nt._snapshot(0)
        blocks = [b for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
        report({"enabled": nt.is_enabled(), "sizes": [b["size"] for b in blocks],
                "ptr_in": any(seg["address"] <= x.data_ptr() < seg["address"] + seg["total_size"]
                              for seg in snap["segments"])})
    """, "npualloc").result
    assert r["enabled"]
    assert r["ptr_in"], "the tensor's address is not inside an npualloc segment"
    assert any(size >= 1 << 20 for size in r["sizes"])


def test_own_allocator_counts_its_memory(run_npu):
    """torch_npu's own caching allocator, on the emulator's aclrtMalloc."""
    r = run_npu("""
        x = torch.empty(1 << 20, device="npu")
        live = torch.npu.memory_allocated()
        del x
        after = torch.npu.memory_allocated()
        reserved = torch.npu.memory_reserved()
        torch.npu.empty_cache()
        report({"live": live, "after": after, "reserved": reserved, "emptied": torch.npu.memory_reserved()})
    """).result
    assert r["live"] >= 4 << 20
    assert r["after"] == 0
    assert r["reserved"] >= 4 << 20
    assert r["emptied"] == 0
