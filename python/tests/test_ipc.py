"""Sharing blocks between processes from Python: ``CachingAllocator.ipc_export``
in this process, ``npualloc.ipc_import`` in a child process started as a
real separate interpreter, in fixed and expandable mode."""

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

import npualloc

MIB = 1 << 20
MODES = ["expandable_segments:false", "expandable_segments:true"]

# The child: imports the handle given in hex, checks every byte is `want`,
# writes `put` over the first half, and closes unless told to keep it.
CHILD = textwrap.dedent(
    """
    import ctypes, sys
    import npualloc
    handle, want, put, keep = bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "keep"
    b = npualloc.ipc_import(handle, device=0)
    ok = ctypes.string_at(b.addr, b.size) [: int(sys.argv[5])] == bytes([want]) * int(sys.argv[5])
    ctypes.memset(b.addr, put, int(sys.argv[5]) // 2)
    again = npualloc.ipc_import(handle)
    again.close()
    if not keep:
        b.close()
    print("read", ok, "size", b.size, flush=True)
    if keep:
        sys.stdin.readline()
    """
)


def child(handle, want, put, size, keep=False):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in sys.path if p])
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, handle.hex(), str(want), str(put), "keep" if keep else "close", str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("config", MODES)
def test_a_child_process_reads_and_writes_an_exported_block(emu, config):
    with npualloc.CachingAllocator(config=config) as a:
        b = a.malloc(6 * MIB)
        ctypes.memset(b.addr, 0x21, 6 * MIB)
        h = a.ipc_export(b)
        assert isinstance(h, bytes) and len(h) == 128
        assert a.ipc_export(b) == h
        assert a.stats()["exported_blocks"] == 1
        p = child(h, 0x21, 0x37, 6 * MIB)
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        assert out.split()[:2] == ["read", "True"], out
        assert int(out.split()[3]) >= 6 * MIB
        assert ctypes.string_at(b.addr, 3 * MIB) == b"\x37" * (3 * MIB)
        assert ctypes.string_at(b.addr + 3 * MIB, 3 * MIB) == b"\x21" * (3 * MIB)
        a.free(b)


@pytest.mark.parametrize("config", MODES)
def test_a_freed_block_waits_for_the_importer(emu, config):
    with npualloc.CachingAllocator(config=config) as a:
        b = a.malloc(8 * MIB)
        ctypes.memset(b.addr, 0x11, 8 * MIB)
        p = child(a.ipc_export(b), 0x11, 0x12, 8 * MIB, keep=True)
        assert p.stdout.readline().split()[:2] == ["read", "True"]
        a.free(b)
        a.empty_cache()
        s = a.stats()
        assert s["held_for_importers_bytes"] == 8 * MIB and s["reserved_bytes"] >= 8 * MIB
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(timeout=120) == 0
        a.empty_cache()
        assert a.stats()["reserved_bytes"] == 0


def test_bad_handles_are_refused(emu):
    with pytest.raises(TypeError):
        npualloc.ipc_import("not bytes")
    with pytest.raises(TypeError):
        npualloc.ipc_import(b"\0" * 127)
    with pytest.raises(ValueError, match="not an npualloc IPC handle"):
        npualloc.ipc_import(b"\0" * 128)
    with npualloc.CachingAllocator() as a:
        b = a.malloc(MIB)
        with pytest.raises(ValueError, match="pointer itself"):
            npualloc.ipc_import(a.ipc_export(b))
        with pytest.raises(ValueError):
            a.ipc_export(npualloc.MemBlock(b.addr + 512, 1))
        a.free(b)
