"""Where the package finds libnpualloc.so."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import npualloc
from conftest import INSTALLED, PYTHON_DIR

PACKAGE_DIR = Path(npualloc.__file__).resolve().parent


@pytest.mark.skipif(not INSTALLED, reason="checks a pip-installed package (NPUALLOC_TEST_INSTALLED=1)")
def test_installed_package_carries_its_library(monkeypatch):
    monkeypatch.delenv("NPUALLOC_LIBRARY", raising=False)
    assert PYTHON_DIR not in PACKAGE_DIR.parents, f"imported from the checkout: {PACKAGE_DIR}"
    assert "site-packages" in PACKAGE_DIR.parts
    assert npualloc.find_library() == PACKAGE_DIR / "libnpualloc.so"
    assert npualloc.version() == "0.4.0"


def test_environment_variable_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv("NPUALLOC_LIBRARY", raising=False)
    copy = tmp_path / "libnpualloc-copy.so"
    shutil.copyfile(npualloc.find_library(), copy)
    monkeypatch.setenv("NPUALLOC_LIBRARY", str(copy))
    assert npualloc.find_library() == copy


def test_environment_variable_naming_no_file(monkeypatch, tmp_path):
    missing = tmp_path / "nothing.so"
    monkeypatch.setenv("NPUALLOC_LIBRARY", str(missing))
    with pytest.raises(OSError) as e:
        npualloc.find_library()
    assert str(missing) in str(e.value)
    assert "NPUALLOC_LIBRARY names no file" in str(e.value)


def test_installed_package_without_library_says_so(tmp_path):
    # The failure the issue reported: a package outside any checkout, with no
    # library in it. The message must not send the user to target/ paths.
    site = tmp_path / "site-packages"
    shutil.copytree(PACKAGE_DIR, site / "npualloc", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("NPUALLOC_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-c", "import npualloc; npualloc.CachingAllocator(device=0)"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("OSError: libnpualloc.so not found"), done.stderr
    assert str(site / "npualloc" / "libnpualloc.so") in last
    assert "target" not in last
    assert "pip install ./python" in last


@pytest.mark.skipif(not INSTALLED, reason="checks a pip-installed package (NPUALLOC_TEST_INSTALLED=1)")
def test_installed_package_describes_itself_with_its_readme():
    from importlib.metadata import metadata

    meta = metadata("npualloc")
    assert meta["Description-Content-Type"] == "text/markdown"
    # The long description is the METADATA's body (Core metadata 2.1 and later).
    body = meta.get_payload() or meta["Description"] or ""
    assert body.strip() == (PYTHON_DIR / "README.md").read_text().strip()


def test_readme_example_without_torch_npu_runs(emu):
    text = (PYTHON_DIR / "README.md").read_text()
    after = text.split("Without torch_npu:", 1)[1]
    code = after.split("```python\n", 1)[1].split("```", 1)[0]
    env = {k: v for k, v in os.environ.items() if k != "NPUALLOC_CONF"}
    if not INSTALLED:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MemBlock(addr=0x") and done.stdout.split()[-1] == "1048576", done.stdout


def test_the_wheel_carries_every_bridge_source():
    """pyproject's package data lists every source and header of the torch_npu
    bridge, so that an installed package can build it."""
    import tomllib

    root = Path(PYTHON_DIR)
    data = tomllib.loads((root / "pyproject.toml").read_text())
    listed = set(data["tool"]["setuptools"]["package-data"]["npualloc.torch_npu_bridge"])
    here = root / "npualloc" / "torch_npu_bridge"
    present = {p.name for p in here.iterdir() if p.suffix in (".cpp", ".h")}
    assert present and listed == present, f"missing from pyproject: {present - listed}, not there: {listed - present}"


def test_the_bridge_unit_includes_every_source_once_in_order():
    """The bridge is compiled as one unit (bridge_all.cpp): it includes exactly
    the sources COMPILED names, in that order, and every .cpp beside it is one."""
    import re

    from npualloc import torch_npu_bridge as B

    text = (B.HERE / B.UNIT).read_text()
    included = tuple(re.findall(r'^#include "([^"]+)"$', text, flags=re.M))
    assert included == B.COMPILED, f"{B.UNIT} includes {included}; COMPILED is {B.COMPILED}"
    beside = {p.name for p in B.HERE.glob("*.cpp")} - {B.UNIT}
    assert beside == set(B.COMPILED), f"sources not compiled: {beside - set(B.COMPILED)}"


def test_the_served_torch_npu_releases_are_checked_by_major_and_minor():
    from npualloc import torch_npu_bridge as B

    for served in ("2.6.0", "2.6.0.post5", "2.9.0.post9", "2.12.0.post3", "2.14.0", "2.14.0+git1"):
        B.check_release(served)
    for refused in ("2.5.1.post1", "2.15.0", "1.11.0", "3.0", "", "unknown", "2"):
        with pytest.raises(B.UnsupportedRelease) as e:
            B.check_release(refused)
        assert str(e.value) == f"npualloc serves torch_npu 2.6 to 2.14; this is torch_npu {refused}"


def _setup_functions(*names):
    """Functions of python/setup.py, without running setup() (which the
    module calls when it is executed)."""
    import ast

    source = (Path(PYTHON_DIR) / "setup.py").read_text()
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in defs} == set(names), "setup.py no longer defines them"
    namespace = {"os": os, "sys": sys}
    exec(compile(ast.Module(body=defs, type_ignores=[]), "setup.py", "exec"), namespace)
    return namespace


# Run as a child whose stdout and stderr are pipes (as pip runs a build):
# prints what setup.py's check answers there.
_ASK = """
import ast, os, sys
tree = ast.parse(open(sys.argv[1]).read())
body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "output_redirected"]
ns = {"os": os, "sys": sys}
exec(compile(ast.Module(body=body, type_ignores=[]), "setup.py", "exec"), ns)
print("answer", ns["output_redirected"](), flush=True)
"""

# Stands for pip: runs the build (argv[2:]) with pipes and prints its answer
# on its own stdout.
_PIP = ("import subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(r.stdout.strip(), r.stderr.strip(), flush=True)")


def _answer(text):
    line = [x for x in text.splitlines() if x.startswith("answer")]
    assert line, text
    return line[0].split()[1]


def _answered(command, tmp_path, terminal):
    """What the build in `command` answers, run at a pseudo-terminal or with
    its output to a file."""
    log = tmp_path / ("terminal.log" if terminal else "file.log")
    if terminal:
        wrapper = [sys.executable, str(Path(PYTHON_DIR).parent / "scripts" / "in-terminal.py"), str(log)]
        done = subprocess.run(wrapper + command, capture_output=True, text=True)
    else:
        with open(log, "w") as f:
            done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT)
    assert done.returncode == 0, done
    return _answer(log.read_text())


def test_build_output_goes_to_the_terminal_only_when_pip_writes_to_one(tmp_path):
    build = [sys.executable, "-c", _ASK, str(Path(PYTHON_DIR) / "setup.py")]
    pip = [sys.executable, "-c", _PIP] + build
    # pip at a terminal: cargo's output may go there; pip's output to a file: not.
    assert _answered(pip, tmp_path, terminal=True) == "False"
    assert _answered(pip, tmp_path, terminal=False) == "True"
    # pip's output piped into another program (tee, less), at a terminal.
    piped = [sys.executable, "-c", "import subprocess, sys; "
             "r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True); "
             "print(r.stdout, flush=True)"] + pip
    assert _answered(piped, tmp_path, terminal=True) == "True"
    # setup.py run directly, its output to a file (no pipes: its own decide).
    assert _answered(build, tmp_path, terminal=False) == "True"
    # Without /proc it cannot tell, and behaves as before.
    fns = _setup_functions("output_redirected")
    assert fns["output_redirected"](proc=str(tmp_path / "no-proc")) is False
