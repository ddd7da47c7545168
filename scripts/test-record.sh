#!/usr/bin/env bash
# The trace recorder (tools/record/): its checks against the profiler's record
# of real CPU runs (tools/record/tests/, under a minute). They need torch and
# transformers. RECORD_PYTHON names a Python that has both; without it, a venv
# is made once in NPUALLOC_RECORD_VENV (default ~/.cache/npualloc/record-venv)
# from the torch 2.14.0 wheel and CUDA stubs that scripts/setup-torch-npu.sh
# left in its directory (NPUALLOC_TORCH_NPU_DIR; test.sh runs that first), and
# transformers 5.24.0 from PyPI. When that cannot be done (no wheel, no
# network) this prints a SKIPPED banner saying why and succeeds, or fails in
# CI (scripts/skip.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "== the trace recorder against the profiler"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/npualloc
# shellcheck source=scripts/skip.sh
source scripts/skip.sh
skip() { npualloc_skip "tools/record tests" "$1"; }
has_all() { "$1" -c "import torch, transformers, pytest" >/dev/null 2>&1; }

if [[ -n ${RECORD_PYTHON:-} ]]; then
    python=$RECORD_PYTHON
    has_all "$python" || skip "$python lacks torch, transformers or pytest"
else
    venv=${NPUALLOC_RECORD_VENV:-$cache/record-venv}
    python=$venv/bin/python
    if ! has_all "$python"; then
        tnpu=${NPUALLOC_TORCH_NPU_DIR:-$cache/torch-npu}
        wheel=$(compgen -G "$tnpu/dl/torch-2.14.0-*.whl" | sed -n 1p || true)
        stubs=$(compgen -G "$tnpu/venv/lib/python3*/site-packages/nvidia" | sed -n 1p || true)
        [[ -n $wheel && -n $stubs ]] || skip "no torch wheel and CUDA stubs in $tnpu (scripts/setup-torch-npu.sh makes them)"
        rm -rf "$venv"
        python3 -m venv "$venv"
        pip=("$python" -m pip -q --disable-pip-version-check)
        "${pip[@]}" install --no-deps "$wheel"
        "${pip[@]}" install --no-warn-conflicts --no-index --find-links "$tnpu/dl/deps" numpy pyyaml sympy mpmath filelock \
            typing_extensions networkx jinja2 markupsafe fsspec pytest
        site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        # torch's CUDA build loads these from its RPATH: stubs answering "no device".
        cp -r "$stubs" "$site/"
        # --no-warn-conflicts: pip would list torch's CUDA dependencies, which the stubs stand in for.
        if ! "${pip[@]}" install --no-warn-conflicts transformers==5.24.0; then
            rm -rf "$venv"
            skip "could not install transformers 5.24.0 from PyPI"
        fi
        has_all "$python" || { echo "test-record: the venv in $venv does not import torch and transformers" >&2; exit 1; }
    fi
fi
echo "(python: $python)"
"$python" -m pytest -q -p no:cacheprovider -p no:warnings tools/record/tests
