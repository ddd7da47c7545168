"""The C API's stream and block calls as CachingAllocator methods:
record_stream, erase_stream, forget_stream, query, set_memory_fraction,
reset_peak_stats; and the config read from PYTORCH_NPU_ALLOC_CONF (and
PYTORCH_ALLOC_CONF, when the host says it reads it)."""

import ctypes
import os
import subprocess
import sys

import pytest

import npualloc
from conftest import PYTHON_DIR

MIB = 1 << 20


def _stream(emu):
    emu.aclemu_stream_hold.argtypes = [ctypes.c_void_p]
    emu.aclemu_stream_release.argtypes = [ctypes.c_void_p]
    emu.aclrtMemcpy2dAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p]
    emu.aclrtSynchronizeStream.argtypes = [ctypes.c_void_p]
    stream = ctypes.c_void_p()
    assert emu.aclrtCreateStream(ctypes.byref(stream)) == 0
    return stream


@pytest.mark.parametrize("erase", [False, True])
def test_record_stream_delays_the_free_until_erased(emu, erase):
    other = _stream(emu)
    host = ctypes.create_string_buffer(4096)
    try:
        with npualloc.CachingAllocator(config="") as alloc:
            block = alloc.malloc(4096)
            alloc.record_stream(block, other.value)
            # Work on `other` that reads the block, not finished yet.
            assert emu.aclemu_stream_hold(other) == 0
            assert emu.aclrtMemcpy2dAsync(host, 4096, block.addr, 4096, 4096, 1, 2, other) == 0
            if erase:
                alloc.erase_stream(block, other.value)
            alloc.free(block)
            pending = alloc.stats()["pending_free_bytes"]
            if erase:
                assert pending == 0, "an erased stream is not waited for"
            else:
                assert pending >= 4096, "the free waits for the recorded stream's work"
            emu.aclemu_stream_release(other)
            assert emu.aclrtSynchronizeStream(other) == 0
    finally:
        emu.aclemu_stream_release(other)
        assert emu.aclrtDestroyStream(other) == 0


def test_record_and_erase_refuse_what_is_not_a_live_block(emu):
    with npualloc.CachingAllocator(config="") as alloc:
        block = alloc.malloc(4096)
        alloc.free(block)
        with pytest.raises(ValueError, match="unknown pointer"):
            alloc.record_stream(block, None)
        with pytest.raises(ValueError, match="unknown pointer"):
            alloc.erase_stream(block, None)
        for bad in ("0x10", 1.5, None):
            with pytest.raises(TypeError, match="MemBlock or an address"):
                alloc.record_stream(bad, None)
        with pytest.raises(ValueError, match="an address is 0 to 2"):
            alloc.record_stream(-1, None)
        with pytest.raises(ValueError, match="stream"):
            alloc.record_stream(alloc.malloc(512), -1)


def test_query_describes_the_block_holding_an_address(emu):
    stream = _stream(emu)
    try:
        with npualloc.CachingAllocator(config="", stream=stream.value) as alloc:
            block = alloc.malloc(1000)
            info = alloc.query(block)
            assert info == {"addr": block.addr, "size": info["size"], "requested": 1000, "stream": stream.value}
            assert info["size"] >= 1000
            assert alloc.query(block.addr + 999)["addr"] == block.addr
            alloc.free(block)
            with pytest.raises(ValueError, match="unknown pointer"):
                alloc.query(block)
    finally:
        assert emu.aclrtDestroyStream(stream) == 0


def test_forget_stream_gives_back_what_is_cached_for_it(emu):
    stream = _stream(emu)
    try:
        with npualloc.CachingAllocator(config="", stream=stream.value) as alloc:
            alloc.free(alloc.malloc(4 * MIB))
            assert alloc.stats()["reserved_bytes"] > 0
            alloc.forget_stream(0xdead000)  # never served: nothing changes
            assert alloc.stats()["reserved_bytes"] > 0
            alloc.forget_stream(stream.value)
            assert alloc.stats()["reserved_bytes"] == 0
            # The stream can be used again afterwards.
            alloc.free(alloc.malloc(4096))
    finally:
        assert emu.aclrtDestroyStream(stream) == 0


def test_set_memory_fraction_caps_reserved_memory(emu):
    assert emu.aclemu_set_device_memory(0, 64 * MIB) == 0
    try:
        with npualloc.CachingAllocator(config="expandable_segments:false") as alloc:
            alloc.set_memory_fraction(0.5)
            with pytest.raises(MemoryError, match="fraction"):
                alloc.malloc(40 * MIB)
            alloc.set_memory_fraction(1)
            alloc.free(alloc.malloc(40 * MIB))
            for bad in (-0.1, 1.5, float("nan")):
                with pytest.raises(ValueError, match="fraction"):
                    alloc.set_memory_fraction(bad)
            for bad in ("0.5", None, True):
                with pytest.raises(TypeError, match="fraction must be a number"):
                    alloc.set_memory_fraction(bad)
    finally:
        assert emu.aclemu_set_device_memory(0, 8 << 30) == 0


def test_reset_peak_stats(emu):
    with npualloc.CachingAllocator(config="") as alloc:
        alloc.free(alloc.malloc(MIB))
        assert alloc.stats()["allocated_bytes_peak"] >= MIB
        alloc.reset_peak_stats()
        assert alloc.stats()["allocated_bytes_peak"] == 0


def test_closed_allocator_refuses_the_new_calls(emu):
    alloc = npualloc.CachingAllocator(config="")
    block = alloc.malloc(512)
    alloc.close()
    for call in (lambda: alloc.record_stream(block, None), lambda: alloc.erase_stream(block, None),
                 lambda: alloc.forget_stream(None), lambda: alloc.query(block),
                 lambda: alloc.set_memory_fraction(0.5), alloc.reset_peak_stats):
        with pytest.raises(ValueError, match="closed"):
            call()


def _run(code, **env_vars):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NPUALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    env.update(env_vars)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR)] + sys.path)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


_FRACTION_PROBE = """
import npualloc
a = npualloc.CachingAllocator()
try:
    a.malloc(40 << 20)
    print("fits")
except MemoryError:
    print("capped")
"""


def test_torch_npu_config_is_read_when_npualloc_conf_is_unset(emu):
    conf = "expandable_segments:False,per_process_memory_fraction:0.5,base_addr_aligned_kb:16"
    out = _run(_FRACTION_PROBE, ACLEMU_DEVICE_MEMORY="64m", PYTORCH_NPU_ALLOC_CONF=conf)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "capped"
    assert (f"npualloc: NPUALLOC_CONF is unset; config from PYTORCH_NPU_ALLOC_CONF='{conf}'; "
            "ignored torch_npu-only keys: base_addr_aligned_kb") in out.stderr
    # NPUALLOC_CONF, when set, wins and says the other is not read.
    out = _run(_FRACTION_PROBE, ACLEMU_DEVICE_MEMORY="64m", PYTORCH_NPU_ALLOC_CONF=conf, NPUALLOC_CONF="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "fits"
    assert "PYTORCH_NPU_ALLOC_CONF is set too and is not read" in out.stderr
    # A key npualloc lacks that is not torch_npu's own is refused, naming the variable.
    out = _run("import npualloc; npualloc.CachingAllocator()", PYTORCH_NPU_ALLOC_CONF="no_such_key:1")
    assert out.returncode != 0
    assert "no_such_key" in out.stderr and "in PYTORCH_NPU_ALLOC_CONF" in out.stderr


_GENERIC_PROBE = """
import ctypes, sys
import npualloc
from npualloc import _lib
previous = ctypes.c_int32(-1)
if len(sys.argv) > 1:
    assert _lib.lib().npualloc_read_pytorch_alloc_conf(1, ctypes.byref(previous)) == 0
""" + _FRACTION_PROBE + """
print("previous", previous.value)
"""


def test_pytorch_alloc_conf_is_read_only_when_the_host_says_so(emu):
    conf = "per_process_memory_fraction:0.5,segment_size_mb:8"
    # A C host, or a torch_npu before 2.12: PYTORCH_ALLOC_CONF is not npualloc's to read.
    out = _run(_GENERIC_PROBE, ACLEMU_DEVICE_MEMORY="64m", PYTORCH_ALLOC_CONF=conf)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fits", "previous", "-1"]
    assert "PYTORCH_ALLOC_CONF" not in out.stderr
    # Turned on, it is read as torch_npu reads it, after the two others.
    code = _GENERIC_PROBE.replace("len(sys.argv) > 1", "True")
    out = _run(code, ACLEMU_DEVICE_MEMORY="64m", PYTORCH_ALLOC_CONF=conf)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["capped", "previous", "0"]
    assert ("npualloc: NPUALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are unset; config from "
            f"PYTORCH_ALLOC_CONF='{conf}'; ignored torch_npu-only keys: segment_size_mb") in out.stderr
    out = _run(code, ACLEMU_DEVICE_MEMORY="64m", PYTORCH_ALLOC_CONF=conf, PYTORCH_NPU_ALLOC_CONF="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "fits"
    assert "(PYTORCH_ALLOC_CONF is set too and is not read)" in out.stderr
    out = _run(code, PYTORCH_ALLOC_CONF="no_such_key:1")
    assert out.returncode != 0
    assert "in PYTORCH_ALLOC_CONF, read because NPUALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are unset" in out.stderr
