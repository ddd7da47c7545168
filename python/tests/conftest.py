"""Test setup: the ACL emulator as runtime, and the package under test.

By default the package is imported from this checkout (python/npualloc/,
its library from target/). With NPUALLOC_TEST_INSTALLED=1 (scripts/test.sh)
it must come from the environment's site-packages, as pip installed it."""

import ctypes
import os
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
ROOT = PYTHON_DIR.parent
INSTALLED = os.environ.get("NPUALLOC_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(PYTHON_DIR))


def _emulator():
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not target.is_absolute():
        target = ROOT / target
    for profile in ("debug", "release"):
        path = target / profile / "libascendcl.so"
        if path.is_file():
            return path
    return None


if "NPUALLOC_ACL_LIBRARY" not in os.environ:
    found = _emulator()
    if found is not None:
        os.environ["NPUALLOC_ACL_LIBRARY"] = str(found)
os.environ.setdefault("ACLEMU_DEVICE_MEMORY", "8g")
os.environ.pop("NPUALLOC_CONF", None)
os.environ.pop("PYTORCH_NPU_ALLOC_CONF", None)  # read when NPUALLOC_CONF is unset


@pytest.fixture(scope="session")
def emu():
    """The emulator library (the same instance npualloc loads)."""
    path = os.environ.get("NPUALLOC_ACL_LIBRARY")
    if not path or not Path(path).is_file():
        reason = "the ACL emulator is not built (cargo build --workspace)"
        ci = os.environ.get("CI", "")
        if ci not in ("", "false") and os.environ.get("NPUALLOC_ALLOW_SKIP") != "1":
            pytest.fail(f"{reason} (in CI a skip fails; NPUALLOC_ALLOW_SKIP=1 allows it)")
        pytest.skip(reason)
    lib = ctypes.CDLL(path)
    lib.aclemu_set_device_memory.argtypes = [ctypes.c_int32, ctypes.c_uint64]
    lib.aclemu_set_device_memory.restype = ctypes.c_int32
    lib.aclrtCreateStream.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.aclrtCreateStream.restype = ctypes.c_int32
    lib.aclrtDestroyStream.argtypes = [ctypes.c_void_p]
    lib.aclrtDestroyStream.restype = ctypes.c_int32
    lib.aclrtSetDevice.argtypes = [ctypes.c_int32]
    lib.aclrtSetDevice.restype = ctypes.c_int32
    assert lib.aclrtSetDevice(0) == 0
    return lib


def pytest_report_header(config):
    import npualloc

    try:
        library = npualloc.find_library()
    except OSError as e:
        library = f"not found ({e})"
    return [f"npualloc package: {Path(npualloc.__file__).parent}", f"npualloc library: {library}"]
