"""torch_npu's own allocator tests that concern a replaced allocator
(Ascend/pytorch test/allocator/test_pluggable_allocator_extensions.py), run
with npualloc in place of the test's C++ allocator. Each upstream case and
what it becomes:

- test_pluggable_allocator: tensors made after the swap come from the new
  allocator and hold the right data -> npualloc's statistics show them;
- test_set_get_device_stats_fn: memory_stats_as_nested_dict() works and
  reports num_alloc_retries 0 -> the same, from npualloc's statistics;
- test_set_reset_peak_status_fn: reset_peak_memory_stats() reaches the
  allocator -> npualloc's peak drops to what is allocated now (the upstream
  stub reports 0 because it allocates nothing it counts);
- test_pluggable_allocator_after_init: once initialized the allocator cannot
  be swapped ("Can't swap an already initialized allocator") -> true of
  npualloc's bridge too, and enable() refuses after torch_npu initialized.

The rest of test/allocator/ (host allocators, throw_on_npumalloc_oom)
tests torch_npu's own caching allocator and does not apply."""


def test_tensors_after_the_swap_come_from_npualloc(run_npu):
    r = run_npu("""
        import npualloc.memory, ctypes, npualloc._lib as L
        before = torch.npu.memory_allocated()
        npu_tensor = torch.zeros(10, device="npu")
        report({"before": before, "after": torch.npu.memory_allocated(),
                "data": npu_tensor.cpu().tolist(), "backend": torch.npu.get_allocator_backend()})
    """, "npualloc").result
    assert r["before"] == 0 and r["after"] > 0
    assert r["data"] == [0.0] * 10
    assert r["backend"] == "npualloc"


def test_memory_stats_as_nested_dict(run_npu):
    r = run_npu("""
        x = torch.zeros(10, device="npu")
        d = torch.npu.memory_stats_as_nested_dict()
        report({"retries": d["num_alloc_retries"], "current": d["allocation"]["all"]["current"]})
    """, "npualloc").result
    assert r["retries"] == 0
    assert r["current"] == 1


def test_reset_peak_memory_stats(run_npu):
    r = run_npu("""
        x = torch.zeros(10, device="npu")
        big = torch.empty(1 << 22, device="npu")
        del big
        high = torch.npu.max_memory_allocated()
        torch.npu.reset_peak_memory_stats()
        report({"high": high, "peak": torch.npu.max_memory_allocated(), "now": torch.npu.memory_allocated()})
    """, "npualloc").result
    assert r["high"] > r["now"] > 0
    assert r["peak"] == r["now"]


def test_no_swap_after_init(run_npu):
    r = run_npu("""
        import npualloc._lib as L
        ori_tensor = torch.zeros(10, device="npu")
        new_alloc = torch_npu.npu.memory.NPUPluggableAllocator(
            str(L.find_library()), "npualloc_pluggable_malloc", "npualloc_pluggable_free")
        try:
            torch_npu.npu.memory.change_current_allocator(new_alloc)
            report({"raised": None})
        except RuntimeError as e:
            report({"raised": str(e), "backend": torch.npu.get_allocator_backend()})
    """, "npualloc").result
    assert r["raised"] and "Can't swap an already initialized allocator" in r["raised"]
    assert r["backend"] == "npualloc"
