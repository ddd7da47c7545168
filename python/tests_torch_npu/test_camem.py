"""npualloc.torch_npu_sleep.CaMemAllocator (vllm-ascend's CaMemAllocator
calls over npualloc pools) under the real torch_npu 2.14 on the emulator:
weights under tag "weights" and a KV cache under "kv_cache";
sleep(offload_tags=("weights",)) gives back the device memory of both;
wake_up(tags=["weights"]) brings the weights back identical while the
KV cache's pool still refuses allocations, then wake_up(tags=["kv_cache"])
(or wake_up() in the second cycle) brings every tensor back at its
address, and the second cycle holds the same device and host memory."""

from test_bridge import run

USAGE = """
class Usage(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "malloc_bytes", "malloc_count", "physical_bytes", "physical_count", "mapped_bytes",
        "reserved_ranges", "streams", "events", "descs", "syncs")]
def device_bytes(emu):
    u = Usage()
    assert emu.aclemu_get_usage(0, ctypes.byref(u)) == 0
    return u.physical_bytes + u.malloc_bytes
def host_bytes(emu):
    b, n = ctypes.c_uint64(), ctypes.c_uint64()
    assert emu.aclemu_host_usage(ctypes.byref(b), ctypes.byref(n)) == 0
    return b.value
def pool_reserved(camem, tag):
    lib = _L.lib()
    s = _L.Stats()
    s.struct_size = ctypes.sizeof(s)
    assert lib.npualloc_pool_get_stats(camem._handle, camem.pool_of(tag), ctypes.byref(s)) == 0, _L.last_error()
    return s.reserved_bytes
"""

CYCLES = """
from npualloc.torch_npu_sleep import CaMemAllocator
emu = emulator()
camem = CaMemAllocator.get_instance()
assert CaMemAllocator.get_instance(0) is camem
# The emulator runs copies, not compute: data comes from the host.
host_w = torch.arange(1 << 20, dtype=torch.float32) * 0.5
host_w2 = torch.randn(3, 1 << 18)
with camem.use_memory_pool(tag="weights"):
    w = host_w.to("npu")
    w2 = host_w2.to("npu")
with camem.use_memory_pool(tag="kv_cache"):
    kv = torch.zeros(1 << 22, device="npu")
outside = torch.zeros(1 << 16, device="npu")
torch.npu.synchronize()
expected = (host_w, host_w2)
ptrs = [t.data_ptr() for t in (w, w2, kv, outside)]
tagged = camem.get_current_usage()
reserved = pool_reserved(camem, "weights") + pool_reserved(camem, "kv_cache")
awake = device_bytes(emu)
cycles = []
for last_wake in ("kv_cache", "all"):
    camem.sleep(offload_tags=("weights",))
    asleep = device_bytes(emu)
    asleep_host = host_bytes(emu)
    usage_asleep = camem.get_current_usage()
    # vllm-ascend's order: the weights first, then the KV cache.
    camem.wake_up(tags=["weights"])
    torch.npu.synchronize()
    weights_first = bool(torch.equal(w.cpu(), expected[0]) and torch.equal(w2.cpu(), expected[1]))
    half = device_bytes(emu)
    try:
        with camem.use_memory_pool(tag="kv_cache"):
            torch.empty(1 << 10, device="npu")
        kv_refused = "accepted"
    except Exception as e:
        kv_refused = type(e).__name__ + ": " + str(e)
    if last_wake == "all":
        camem.wake_up()
    else:
        camem.wake_up(tags=["kv_cache"])
    torch.npu.synchronize()
    cycles.append({
        "asleep": asleep, "asleep_host": asleep_host, "usage_asleep": usage_asleep,
        "weights_first": weights_first, "half": half, "kv_refused": kv_refused, "woken": device_bytes(emu),
        "ptrs": [t.data_ptr() for t in (w, w2, kv, outside)],
        "weights_same": bool(torch.equal(w.cpu(), expected[0]) and torch.equal(w2.cpu(), expected[1])),
    })
    kv.copy_(torch.full((1 << 22,), 2.0))   # the discarded KV cache is usable memory again
    assert float(kv[-1].item()) == 2.0
try:
    camem.sleep(offload_tags=(1,))
    bad_tags = "accepted"
except ValueError as e:
    bad_tags = str(e)
report({"ptrs": ptrs, "tagged": tagged, "reserved": reserved, "awake": awake, "cycles": cycles,
        "bad_tags": bad_tags, "violations": emu.aclemu_violations()})
"""


def test_sleep_offloads_weights_discards_the_kv_cache_and_wake_restores_both(run_npu):
    r = run(run_npu, USAGE + CYCLES).result
    assert r["tagged"] >= (4 << 20) + (3 << 20) + (16 << 20), r
    assert r["reserved"] >= r["tagged"], r
    first, second = r["cycles"]
    for c in r["cycles"]:
        # Both tags' device memory went back (not only the KV cache's).
        assert r["awake"] - c["asleep"] >= r["reserved"], (r["awake"], c, r["reserved"])
        assert c["usage_asleep"] == r["tagged"], c
        assert c["weights_first"], "the weights read back identical after their own wake"
        # The weights' pages are back, not the KV cache's (16 MiB more).
        assert r["awake"] - c["half"] >= 16 << 20, (r["awake"], c)
        assert c["half"] > c["asleep"], c
        assert "asleep" in c["kv_refused"], c["kv_refused"]
        assert c["ptrs"] == r["ptrs"], "every tensor keeps its address"
        assert c["weights_same"], "the offloaded weights read back identical"
        assert c["woken"] == r["awake"], c
    assert (second["asleep"], second["asleep_host"]) == (first["asleep"], first["asleep_host"]), r
    assert "strings" in r["bad_tags"], r["bad_tags"]
    assert r["violations"] == 0


def test_get_instance_needs_npualloc_as_the_allocator(run_npu):
    r = run_npu("""
        import npualloc.torch_npu as nt
        from npualloc.torch_npu_sleep import CaMemAllocator
        try:
            CaMemAllocator.get_instance()
            got = "an instance"
        except nt.TorchNpuError as e:
            got = str(e)
        try:
            CaMemAllocator(0)
            direct = "an instance"
        except TypeError as e:
            direct = str(e)
        report({"got": got, "direct": direct})
    """, "own").result
    assert "enable()" in r["got"], r
    assert "get_instance" in r["direct"], r
