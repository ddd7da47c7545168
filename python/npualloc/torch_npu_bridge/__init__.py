"""The torch_npu bridge: npualloc as torch_npu's full NPU allocator.

The bridge (``bridge.h`` and the sources in ``SOURCES``, one library) is a
small C++ library compiled against the installed torch and torch_npu headers
(torch_npu ships no C ABI for its allocator, so the bridge must match the
exact torch_npu it runs in). ``library()`` builds it
on first use with the system's C++ compiler (``$CXX``, else ``c++``) and
caches it under ``$NPUALLOC_BRIDGE_CACHE`` (default
``~/.cache/npualloc/torch_npu_bridge``), one build per torch_npu version,
torch version, compiler and source text; later processes load the cached
file. ``python -m npualloc.torch_npu_bridge`` builds it ahead of time.

The build needs: a C++20 compiler (torch 2.x headers require C++20), the
headers torch and torch_npu wheels carry (``torch/include``,
``torch_npu/include``), Python's headers (torch's headers include them), and
``npualloc.h`` (inside the installed package, or the checkout's
``include/``). No CMake, ninja or torch.utils.cpp_extension is used.

What it relies on in torch_npu is in docs/runtime-behaviour.md "How torch_npu
talks to its allocator".
"""

import hashlib
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The bridge's sources, the one translation unit that includes them all (compiled alone: torch's
# headers are parsed once), and every file of its source (the cache key).
COMPILED = ("bridge.cpp", "stats.cpp", "limit.cpp", "history.cpp", "trace.cpp", "leaks.cpp", "ipc.cpp", "hccl.cpp",
            "checkpoint.cpp", "boundary.cpp")
UNIT = "bridge_all.cpp"
SOURCES = (UNIT,) + COMPILED + ("bridge.h", "json.h", "pools.h", "release.h")
LIBRARY = "libnpualloc_torch_npu.so"

__all__ = ["BridgeBuildError", "UnsupportedRelease", "SERVED", "check_release", "library", "build_command", "compile_flags", "cache_dir"]


class BridgeBuildError(RuntimeError):
    """The bridge could not be compiled; the message carries the compiler's output."""


class UnsupportedRelease(BridgeBuildError):
    """The installed torch_npu is not a release the bridge serves; nothing was compiled."""


# The torch_npu releases (major, minor) the bridge serves, first and last. What differs between
# them is in release.h; tools/torch_npu/check_releases.py compiles the bridge against each.
SERVED = ((2, 6), (2, 14))


def check_release(version):
    """Raises UnsupportedRelease unless torch_npu `version` (a string such as "2.8.0.post5") is
    one the bridge serves."""
    parts = str(version).split(".")
    try:
        release = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        release = None
    if release is None or not SERVED[0] <= release <= SERVED[1]:
        (a, b), (c, d) = SERVED
        raise UnsupportedRelease(f"npualloc serves torch_npu {a}.{b} to {c}.{d}; this is torch_npu {version}")


def cache_dir():
    root = os.environ.get("NPUALLOC_BRIDGE_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npualloc" / "torch_npu_bridge"


def header_dir():
    """The directory holding npualloc.h: the installed package's copy, else
    the checkout's include/."""
    for d in (HERE.parent / "include", HERE.parent.parent.parent / "include"):
        if (d / "npualloc.h").is_file():
            return d
    raise BridgeBuildError(
        "npualloc.h not found (looked in the package's include/ and the checkout's include/); "
        "reinstall npualloc with `pip install ./python` from a checkout"
    )


def _loaded_ascendcl():
    """The path of the libascendcl.so this process loaded (torch_npu loads it);
    the bridge links against it so ACL calls resolve to the same library."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
                if path.endswith("/libascendcl.so"):
                    return path
    except OSError:
        pass
    raise BridgeBuildError("libascendcl.so is not loaded in this process; import torch_npu first")


def _compiler():
    return os.environ.get("CXX") or "c++"


def _compiler_version(cxx):
    try:
        done = subprocess.run([cxx, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        raise BridgeBuildError(
            f"the C++ compiler '{cxx}' was not found: the torch_npu bridge is compiled on first use "
            "against the installed torch_npu; install g++ (Debian/Ubuntu: apt-get install g++) or set CXX"
        ) from None
    return done.stdout.splitlines()[0] if done.stdout else cxx


def compile_flags(torch_dir, npu_dir):
    """The language standard and include directories, for the headers of the torch package at
    ``torch_dir`` and the torch_npu package at ``npu_dir`` (their ``include/`` folders)."""
    includes = [
        header_dir(),
        torch_dir / "include",
        torch_dir / "include" / "torch" / "csrc" / "api" / "include",
        npu_dir / "include",
        npu_dir / "include" / "third_party" / "acl" / "inc",
        Path(sysconfig.get_paths()["include"]),
    ]
    return ["-std=c++20"] + [f"-I{d}" for d in includes]


def build_command(output, torch, torch_npu):
    """The compiler command that builds the bridge into ``output``."""
    torch_dir = Path(torch.__file__).resolve().parent
    npu_dir = Path(torch_npu.__file__).resolve().parent
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    libs = [torch_dir / "lib", npu_dir / "lib"]
    return (
        [_compiler(), "-O2", "-fPIC", "-shared", "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
        + compile_flags(torch_dir, npu_dir)
        + [str(HERE / UNIT)]
        + ["-o", str(output)]
        + [f"-L{d}" for d in libs]
        + ["-lc10", "-ltorch_npu", _loaded_ascendcl(), "-ldl"]
        + [f"-Wl,-rpath,{d}" for d in libs]
    )


def _key(torch, torch_npu, cxx):
    h = hashlib.sha256()
    for part in (
        getattr(torch_npu, "__version__", "?"),
        getattr(getattr(torch_npu, "version", None), "git_version", ""),
        torch.__version__,
        _compiler_version(cxx),
        sys.platform,
    ):
        h.update(str(part).encode() + b"\0")
    for name in SOURCES:
        h.update((HERE / name).read_bytes())
    h.update((header_dir() / "npualloc.h").read_bytes())
    version = str(getattr(torch_npu, "__version__", "unknown")).replace("/", "_")
    return f"torch_npu-{version}-{h.hexdigest()[:16]}"


def library():
    """The path of the bridge built for this torch/torch_npu, compiling it
    (about 20 s on one core) when no cached build exists. Raises BridgeBuildError."""
    import torch
    import torch_npu

    check_release(getattr(torch_npu, "__version__", "unknown"))
    cxx = _compiler()
    out_dir = cache_dir() / _key(torch, torch_npu, cxx)
    target = out_dir / LIBRARY
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    # Built under a temporary name and renamed: concurrent processes never load half a file.
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        command = build_command(tmp, torch, torch_npu)
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise BridgeBuildError(
                f"compiling the torch_npu bridge failed (exit {done.returncode}):\n{' '.join(command)}\n"
                + done.stdout[-4000:]
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
