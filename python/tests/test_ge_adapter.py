"""npualloc's per-stream views driven through GE's ctypes callback adapter.

The adapter is GE's own file when it can be found: NPUALLOC_GE_PYTHON names a
directory holding GE's ``ge`` package source (``api/python/ge`` in GE's
repository), or an installed ``ge`` package carries it. Its native library is
never loaded: the test copies ``ge/__init__.py``, ``ge/allocator/`` and
``ge/_capi/_allocator_callback_adapter.py`` into a scratch directory and
adds the stand-in's ``pysession_wrapper.py`` (the four callback types only).
Otherwise the stand-in in fake_ge/, which behaves as GE's adapter does, is
used; the test's output says which."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import INSTALLED, PYTHON_DIR

FAKE_GE = PYTHON_DIR / "tests" / "fake_ge"
ADAPTER = Path("ge") / "_capi" / "_allocator_callback_adapter.py"


def _real_ge_source():
    given = os.environ.get("NPUALLOC_GE_PYTHON")
    if given:
        root = Path(given)
        if not (root / ADAPTER).is_file():
            pytest.fail(f"NPUALLOC_GE_PYTHON={given} holds no {ADAPTER}")
        return root
    spec = importlib.util.find_spec("ge")
    if spec is not None and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0]).parent
        if (root / ADAPTER).is_file():
            return root
    return None


def _ge_tree(tmp_path):
    real = _real_ge_source()
    if real is None:
        return FAKE_GE, "stand-in"
    tree = tmp_path / "ge_python"
    (tree / "ge" / "_capi").mkdir(parents=True)
    shutil.copy(real / "ge" / "__init__.py", tree / "ge" / "__init__.py")
    shutil.copytree(real / "ge" / "allocator", tree / "ge" / "allocator")
    shutil.copy(real / "ge" / "_capi" / "__init__.py", tree / "ge" / "_capi" / "__init__.py")
    shutil.copy(real / ADAPTER, tree / ADAPTER)
    shutil.copy(FAKE_GE / "ge" / "_capi" / "pysession_wrapper.py", tree / "ge" / "_capi" / "pysession_wrapper.py")
    return tree, f"GE's adapter from {real}"


def _env(*paths):
    env = dict(os.environ)
    paths = [str(p) for p in paths]
    if not INSTALLED:
        paths.append(str(PYTHON_DIR))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def test_through_ge_adapter(emu, tmp_path):
    tree, which = _ge_tree(tmp_path)
    print(f"adapter: {which}")
    env = _env(tree, PYTHON_DIR / "tests")
    out = subprocess.run(
        [sys.executable, str(PYTHON_DIR / "tests" / "ge_adapter_driver.py")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, f"{which}\n{out.stdout}\n{out.stderr}"
    assert out.stdout.strip().endswith("done"), out.stdout
    # The refusal is reported on stderr, not lost.
    assert "npualloc: refused a request" in out.stderr, out.stderr


def test_npualloc_imported_before_ge(emu, tmp_path):
    """No import-order trap: GE made importable after npualloc was imported."""
    tree, which = _ge_tree(tmp_path)
    print(f"GE package: {which}")
    out = subprocess.run(
        [sys.executable, str(PYTHON_DIR / "tests" / "ge_late_import.py"), str(tree)],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"{which}\n{out.stdout}\n{out.stderr}"
    assert out.stdout.strip() == "done", out.stdout
