#!/usr/bin/env bash
# The Python package as a user gets it: builds the wheel (pip wheel ./python,
# which runs cargo build --release -p npualloc --lib in the usual target
# directory, so an up-to-date build costs nothing), installs it into a fresh
# virtual environment and runs python/tests there against the installed
# package, not the checkout (NPUALLOC_TEST_INSTALLED=1 makes the tests check
# that). The ACL runtime is the emulator, built here if it is missing.
# Called by test.sh; works on its own from any directory.
# Environment: PYTHON (default python3), CARGO_TARGET_DIR as cargo reads it;
# NPUALLOC_GE_PYTHON (optional): a directory holding GE's Python package
# source (api/python/ge in GE's repository), so test_ge_adapter.py runs
# against GE's own callback adapter instead of the stand-in.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
python=${PYTHON:-python3}

echo "== Python: the emulator as ACL runtime"
cargo build --locked -p acl-emu

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== Python: a fresh virtual environment"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"

echo "== Python: pip wheel ./python, at a terminal"
# pip hides a build's output; setup.py shows cargo's on the terminal instead,
# which the transcript must hold (a first build takes minutes).
"$venv_python" scripts/in-terminal.py "$work/build.log" \
    "$venv_python" -m pip wheel --no-deps --wheel-dir "$work/wheels" ./python
if ! grep -q "npualloc: building libnpualloc.so with cargo" "$work/build.log" ||
    ! grep -aq "Finished.*release" "$work/build.log"; then
    echo "pip wheel at a terminal did not show cargo's output there" >&2
    exit 1
fi
wheel=$(find "$work/wheels" -name 'npualloc-*.whl' -print)
echo "built $(basename "$wheel")"
"$venv_python" - "$wheel" "$work/unpacked" <<'PY'
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
names = wheel.namelist()
if "npualloc/libnpualloc.so" not in names:
    sys.exit(f"the wheel does not carry npualloc/libnpualloc.so: {names}")
wheel.extract("npualloc/libnpualloc.so", sys.argv[2])
PY
# setup.py strips the debug information from the library it ships.
sections=$(readelf -S --wide "$work/unpacked/npualloc/libnpualloc.so")
if ! grep -q ' \.text ' <<<"$sections" || grep -q ' \.debug_' <<<"$sections"; then
    echo "the wheel's libnpualloc.so is not a library without debug sections:" >&2
    echo "$sections" >&2
    exit 1
fi

echo "== Python: PyTorch's _memory_viz.py, to open snapshots with"
if viz=$("$python" scripts/fetch-memory-viz.py); then
    export NPUALLOC_MEMORY_VIZ=$viz
    echo "using $viz"
else
    # shellcheck source=scripts/skip.sh
    source scripts/skip.sh
    if [[ -n ${CI:-} && ${CI:-} != false && ${NPUALLOC_ALLOW_SKIP:-0} != 1 ]]; then
        echo "PyTorch's _memory_viz.py could not be fetched: in CI the snapshot tests that open it may not skip" >&2
        echo "(set NPUALLOC_ALLOW_SKIP=1 if this run may skip)" >&2
        exit 1
    fi
    echo "not available: the snapshot tests that open it will be skipped"
fi

echo "== Python: pip install the wheel, pytest against it"
"$venv_python" -m pip install --quiet "$wheel" pytest
status=0
# From the scratch directory: nothing of the checkout is importable from the
# working directory. NPUALLOC_LIBRARY is unset: the package must find its own.
(cd "$work" && env -u NPUALLOC_LIBRARY NPUALLOC_TEST_INSTALLED=1 \
    "$venv_python" -m pytest -q -p no:cacheprovider "$root/python/tests") || status=$?
# 5 is pytest's "no tests collected": a failure too (a suite that tests
# nothing must not pass).
if [[ $status -eq 5 ]]; then
    echo "pytest collected no tests from python/tests" >&2
fi
if [[ $status -ne 0 ]]; then
    exit "$status"
fi
