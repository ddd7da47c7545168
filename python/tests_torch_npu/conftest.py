"""Fixtures for the tests of the real torch_npu on the ACL emulator.

These tests run in the venv scripts/setup-torch-npu.sh makes (its python is
the last line that script prints); scripts/test-torch-npu.sh sets it up and
runs them. Each test runs its torch code in a child process of that python
(``run_npu``): torch_npu fixes its allocator at the first NPU allocation, so
torch_npu's own allocator and npualloc's (``npualloc.torch_npu.enable()``)
cannot share a process, and a crash of torch_npu must fail one test, not end
the session."""

import json
import mmap
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

SITE = Path(sysconfig.get_paths()["purelib"])
# The wrapper libascendcl.so the setup installed next to torch_npu: npualloc
# must load this one, not a second copy of the emulator.
# The setup puts it (and the emulator, libaclemu.so) in torch_npu.libs/, or in torch_npu/lib/
# where torch_npu's RPATH does not name torch_npu.libs.
WRAPPER = next((d / "libascendcl.so" for d in (SITE / "torch_npu.libs", SITE / "torch_npu" / "lib")
                if (d / "libaclemu.so").is_file()), SITE / "torch_npu.libs" / "libascendcl.so")
EMULATOR = WRAPPER.parent / "libaclemu.so"

# What the installed torch_npu has, read from its files: the allocator header the bridge is
# compiled against (torch_npu_bridge/release.h reads the same declarations) and its Python. Releases
# do not add these in version order (2.12.0.post3 has MemPool reference counting that 2.12.0
# lacks), so the suite asks the files, not the version. Outside the harness's venv (no torch_npu)
# every test is skipped anyway, and every feature reads as present.
_NPU = SITE / "torch_npu"
_CORE = _NPU / "include" / "torch_npu" / "csrc" / "core" / "npu"


def _declares(pattern, *paths):
    """Whether any of `paths` (default: the allocator's header) has `pattern`."""
    if not _NPU.is_dir():
        return True
    paths = paths or (_CORE / "NPUCachingAllocator.h",)
    return any(p.is_file() and re.search(pattern, p.read_text()) for p in paths)


# memory_stats() counts device allocations, frees and syncs: DeviceStats is c10's (2.13 on).
DEVICE_CALL_COUNTS = _declares(r"using c10::CachingDeviceAllocator::DeviceStats|num_device_alloc")
# memory_snapshot() of one pool: snapshot(MempoolId_t).
POOL_SNAPSHOT = _declares(r"snapshot\(\s*MempoolId_t")
# MemPool(use_on_oom=True): setUseOnOOM.
USE_ON_OOM = _declares(r"\bsetUseOnOOM\(")
# A deleted MemPool releases its pool (~MemPool calls releasePool, then emptyCache of its id);
# before, a MemPool's memory stays in its pool for the process's life.
POOLS_RELEASED = _declares(r"~MemPool\(\)", _CORE / "NPUCachingAllocator.h", _CORE / "MemPool.h")
# The snapshot's trace entries carry their pool ("pool_id", from TraceEntry's mempool; Module.cpp
# of 2.13 on, not of every release whose header has the field): the key's string in the library.
def _library_has(needle, lib=_NPU / "lib" / "libtorch_npu.so"):
    if not lib.is_file():
        return True
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(needle) >= 0


POOL_IN_TRACE = _library_has(b"\0pool_id\0")
# torch's device-generic torch._C._accelerator_setAllocatorSettings reaches torch_npu's parser: the
# hook torch_npu registers (REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK) calls c10's registration.
PARSE_HOOK = _library_has(b"registerDeviceConfigParserHook")
# MemPool(no_split=True): setNoSplit.
NO_SPLIT = _declares(r"\bsetNoSplit\(")
# NPUEvent::block asks the allocator whether a graph capture is underway (not in every post).
CAPTURE_QUERY = _declares(r"\bhasCapturesUnderway\(")
# HCCL's work ends a block's stream use by the block's address (eraseStreamWithBlockPtr).
ERASE_BY_BLOCK = _declares(r"\beraseStreamWithBlockPtr\(")
# PYTORCH_NPU_ALLOC_CONF's per_process_memory_fraction, and throw_on_npumalloc_oom's rule.
FRACTION_IN_CONFIG = _declares(r"\bper_process_memory_fraction\b", _CORE / "NPUAllocatorConfig.h")
THROW_ON_OOM = _declares(r"\bthrow_on_npumalloc_oom\b", _CORE / "NPUAllocatorConfig.h")
# The sanitizer's trace has record_stream and erase events (2.9 on).
STREAM_TRACE = _declares(r"\bNPURecordStreamCallbacks\b", _NPU / "utils" / "_npu_trace.py")

PRELUDE = {
    "own": "import npu_emu, torch, torch_npu\n",
    "npualloc": "import npu_emu, torch, torch_npu\nimport npualloc.torch_npu\nnpualloc.torch_npu.enable()\n",
}


HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "once: checks nothing the torch_npu release changes; scripts/test-torch-npu.sh runs it in its "
        "first release only")


def skips_fail():
    """In CI (``CI`` set, not ``false``) a skipped suite is a failure unless
    ``NPUALLOC_ALLOW_SKIP=1`` (as scripts/skip.sh)."""
    ci = os.environ.get("CI", "")
    return ci not in ("", "false") and os.environ.get("NPUALLOC_ALLOW_SKIP") != "1"


def pytest_collection_modifyitems(config, items):
    """Outside the harness's venv these tests are skipped, each with the
    reason (pytest counts and lists skips; -rs prints the reason); in CI
    that fails the run instead."""
    if (SITE / "npu_emu.py").is_file() and WRAPPER.is_file():
        return
    reason = (f"torch_npu tests: {sys.executable} is not the torch_npu harness's venv; "
              "run scripts/test-torch-npu.sh")
    if skips_fail() and any(HERE in Path(str(i.fspath)).resolve().parents for i in items):
        raise pytest.UsageError(f"{reason} (in CI a skip fails; NPUALLOC_ALLOW_SKIP=1 allows it)")
    skip = pytest.mark.skip(reason=f"SKIPPED: {reason}")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


class NpuRun:
    """What a child process printed: ``result`` is the JSON object of the
    last stdout line that starts with ``RESULT ``, if any."""

    def __init__(self, done):
        self.returncode = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr
        lines = [line[len("RESULT "):] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        self.result = json.loads(lines[-1]) if lines else None


def _child_env():
    env = dict(os.environ)
    env.pop("NPUALLOC_CONF", None)
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", NPUALLOC_ACL_LIBRARY=str(WRAPPER))
    return env


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory):
    """The session's fork server (forkserver.py), or None when NPUALLOC_TEST_FORKSERVER=0 or
    outside the harness's venv."""
    if os.environ.get("NPUALLOC_TEST_FORKSERVER", "1") == "0" or not (SITE / "npu_emu.py").is_file():
        yield None
        return
    from forkserver import Server

    server = Server(sys.executable, _child_env(), tmp_path_factory.mktemp("forkserver"))
    yield server
    server.close()


@pytest.fixture
def run_npu(tmp_path, fork_server):
    """``run_npu(code, allocator="own" | "npualloc", env=None, check=True)``:
    runs ``code`` (dedented) after importing npu_emu, torch and torch_npu
    (and, for "npualloc", after ``npualloc.torch_npu.enable()``) in a child
    python of this venv, forked from the fork server when its environment
    allows (forkserver.py), else a fresh one; ``report(obj)`` in the code
    prints the result line. With ``check`` a non-zero exit fails the test
    with the child's output."""

    def run(code, allocator="own", env=None, check=True, timeout=600):
        script = tmp_path / f"npu_{allocator}.py"
        report = "import json as _json\ndef report(obj):\n    print('RESULT ' + _json.dumps(obj), flush=True)\n"
        script.write_text(PRELUDE[allocator] + report + textwrap.dedent(code))
        child_env = _child_env()
        child_env.update(env or {})
        if fork_server is not None and fork_server.serves(child_env):
            out_path, err_path = tmp_path / f"npu_{allocator}.out", tmp_path / f"npu_{allocator}.err"
            try:
                status = fork_server.run(script, tmp_path, child_env, out_path, err_path, timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired([str(script)], timeout) from None
            done = subprocess.CompletedProcess([str(script)], status, out_path.read_text(errors="replace"),
                                               err_path.read_text(errors="replace"))
        else:
            done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=child_env,
                                  cwd=tmp_path, timeout=timeout)
        out = NpuRun(done)
        if check and done.returncode != 0:
            pytest.fail(f"torch_npu child ({allocator}) exited with {done.returncode}\n"
                        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-8000:]}")
        return out

    return run


_probes = {}


@pytest.fixture
def cpp_probe(tmp_path_factory):
    """``cpp_probe(source, libs=())``: the path of a shared library compiled from C++ ``source``
    against the installed torch and torch_npu headers as the bridge is (its compiler, language
    standard, include directories and torch's C++ ABI) and linked with libc10, libtorch_npu and
    ``libs``, for a child to load with ctypes: torch_npu's C++-only entry points (inline
    functions of its headers) reached as a C++ caller reaches them. Each source is compiled once
    per session."""

    def build(source, libs=()):
        from npualloc.torch_npu_bridge import compile_flags

        key = (source, tuple(libs))
        if "abi" not in _probes:
            # torch's C++ ABI (wheels before 2.7 use the old one), asked of torch itself.
            env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
            done = subprocess.run([sys.executable, "-c", "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"],
                                  capture_output=True, text=True, env=env)
            assert done.returncode == 0, done.stderr[-2000:]
            _probes["abi"] = done.stdout.split()[-1]
        if key not in _probes:
            out = tmp_path_factory.mktemp("probe")
            src, lib = out / "probe.cpp", out / "libprobe.so"
            src.write_text(textwrap.dedent(source))
            dirs = [SITE / "torch" / "lib", SITE / "torch_npu" / "lib"]
            cxx = os.environ.get("CXX") or "c++"  # the bridge's compiler (torch_npu_bridge.library)
            command = ([cxx, "-O0", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={_probes['abi']}"]
                       + compile_flags(SITE / "torch", SITE / "torch_npu")
                       + [str(src), "-o", str(lib)] + [f"-L{d}" for d in dirs]
                       + [f"-l{name}" for name in ("c10", "torch_npu", *libs)]
                       + [f"-Wl,-rpath,{d}" for d in dirs])
            done = subprocess.run(command, capture_output=True, text=True)
            assert done.returncode == 0, f"the probe did not compile:\n{' '.join(command)}\n{done.stderr[-4000:]}"
            _probes[key] = lib
        return _probes[key]

    return build
