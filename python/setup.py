"""Builds libnpualloc.so with cargo and ships it inside the ``npualloc`` package.

Everything else about the package is declared in pyproject.toml. The library
is loaded with ctypes, not imported as an extension module, so it does not
depend on the Python version: the wheel is tagged ``py3-none-<platform>``.

The Rust crate is this directory's parent (``../Cargo.toml``); build from a
checkout of the repository (``pip install ./python``, ``pip wheel ./python``).
Cargo's usual target directory (``CARGO_TARGET_DIR`` or ``target/``) is used,
so a build that is already up to date costs nothing.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parent / "Cargo.toml"
CRATE = "npualloc"
LIBRARY = "libnpualloc.so"
HEADER = HERE.parent / "include" / "npualloc.h"


def cargo_build():
    """Runs cargo and returns the path of the shared library it produced."""
    if not MANIFEST.is_file():
        raise SystemExit(
            f"npualloc: {MANIFEST} not found. The Python package is built from a "
            "checkout of the npualloc repository (pip install ./python); a source "
            "archive of python/ alone does not carry the Rust sources."
        )
    cargo = os.environ.get("CARGO", "cargo")
    command = [
        cargo, "build", "--release", "--locked", "-p", CRATE, "--lib",
        "--manifest-path", str(MANIFEST), "--message-format=json-render-diagnostics",
    ]
    terminal = hidden_build_terminal()
    env = dict(os.environ)
    if terminal is not None:
        # One line per crate, not a progress bar drawn over pip's own line.
        env["CARGO_TERM_PROGRESS_WHEN"] = "never"
        terminal.write(f"\nnpualloc: building {LIBRARY} with cargo (minutes the first time); its output follows\n")
        terminal.flush()
    print("npualloc: " + " ".join(command), flush=True)
    try:
        # Diagnostics go to stderr (or the terminal); stdout carries cargo's JSON messages.
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=terminal, text=True, env=env, check=False)
    except FileNotFoundError:
        raise SystemExit(
            f"npualloc: '{cargo}' not found. Building the package needs a Rust "
            "toolchain (cargo) on PATH, and libclang for bindgen "
            "(scripts/ensure-tools.sh installs it on Debian)."
        ) from None
    finally:
        if terminal is not None:
            terminal.close()
    if done.returncode != 0:
        where = "on the terminal" if terminal is not None else "above"
        raise SystemExit(f"npualloc: cargo build failed (exit {done.returncode}); its messages are {where}")
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        target = message.get("target") or {}
        if (
            message.get("reason") == "compiler-artifact"
            and target.get("name") == CRATE
            and "cdylib" in target.get("kind", [])
        ):
            for filename in message.get("filenames", []):
                if Path(filename).name == LIBRARY:
                    return Path(filename)
    raise SystemExit(f"npualloc: cargo finished but reported no {LIBRARY}")


def hidden_build_terminal():
    """The terminal to show cargo's output on when this build's own output is
    hidden, else None. pip runs the build with its output captured (shown
    with -v, or after a failure), so a first build of several minutes would
    show nothing; when the build has a terminal, cargo's messages go there
    instead. Output that reaches a terminal already, a build without one
    (CI), and a command whose output the user redirected are left as they
    are."""
    if sys.stderr.isatty() or output_redirected():
        return None
    try:
        return open("/dev/tty", "w")
    except OSError:
        return None


def output_redirected(proc="/proc"):
    """Whether the output of the command that runs this build goes somewhere
    other than a terminal (a file, a pipe into tee or less). This process's
    own stdout and stderr decide when they are not pipes (setup.py run
    directly); when they are, as pip runs its build backend, the parent's
    (pip's) do. False when that cannot be told (no /proc)."""

    def targets(pid):
        return [os.readlink(f"{proc}/{pid}/fd/{fd}") for fd in (1, 2)]

    def terminals(links):
        return all(t.startswith(("/dev/pts/", "/dev/tty", "/dev/console")) for t in links)

    try:
        own = targets("self")
        if not all(t.startswith("pipe:") for t in own):
            return not terminals(own)
        return not terminals(targets(os.getppid()))
    except OSError:
        return False


def strip_debug_info(library):
    """Drops the debug information cargo's release profile keeps (most of the
    file's size) from the copy the wheel ships; the symbol table stays."""
    objcopy = os.environ.get("OBJCOPY") or shutil.which("objcopy")
    if not objcopy:
        print(f"npualloc: objcopy (binutils) not found; {LIBRARY} keeps its debug information", flush=True)
        return
    done = subprocess.run([objcopy, "--strip-debug", str(library)], check=False)
    if done.returncode != 0:
        raise SystemExit(f"npualloc: {objcopy} --strip-debug {library} failed (exit {done.returncode})")


class BuildPy(build_py):
    """build_py, then the library next to the package's modules."""

    def run(self):
        super().run()
        library = cargo_build()
        if getattr(self, "editable_mode", False):
            # An editable install imports python/npualloc/ in place; its loader
            # falls back to the checkout's target/release/, which cargo just built.
            return
        dest = Path(self.build_lib) / "npualloc" / LIBRARY
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(library), str(dest), preserve_mode=True)
        strip_debug_info(dest)
        # The torch_npu bridge is compiled against the header where it runs.
        header = Path(self.build_lib) / "npualloc" / "include" / HEADER.name
        header.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(HEADER), str(header))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(str(Path(self.build_lib) / "npualloc" / LIBRARY))
            outputs.append(str(Path(self.build_lib) / "npualloc" / "include" / HEADER.name))
        return outputs


class BinaryDistribution(Distribution):
    """Carries a native library: installed to platlib, platform-tagged wheel."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """Any Python 3 on this platform: the library does not use the Python C API."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPy, "bdist_wheel": PlatformWheel},
)
