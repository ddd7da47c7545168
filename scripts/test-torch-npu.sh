#!/usr/bin/env bash
# test-torch-npu.sh [DIR]: sets up (or brings up to date) the real torch 2.14.0
# and torch_npu 2.14.0 on the ACL emulator with scripts/setup-torch-npu.sh
# (DIR as there), then runs python/tests_torch_npu/ with that venv's pytest.
# When the wheels cannot be downloaded it prints a SKIPPED banner saying so
# and exits 0, or fails in CI (scripts/skip.sh). Every other failure fails,
# and so does a run that collects no tests. Called by test.sh; works on its
# own from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
# shellcheck source=scripts/skip.sh
source scripts/skip.sh

echo "== torch_npu (the real one) on the emulator"
status=0
setup_log=$(mktemp)
trap 'rm -f "$setup_log"' EXIT
bash scripts/setup-torch-npu.sh "$@" | tee "$setup_log" || status=${PIPESTATUS[0]}
if [[ $status -eq 75 ]]; then
    npualloc_skip "torch_npu tests" "could not download torch 2.14.0 / torch_npu 2.14.0; see above"
elif [[ $status -ne 0 ]]; then
    echo "setup-torch-npu.sh failed (exit $status)" >&2
    exit "$status"
fi
venv_python=$(tail -n 1 "$setup_log")

work=$(mktemp -d)
trap 'rm -f "$setup_log"; rm -rf "$work"' EXIT
# From a scratch directory, so that the checkout's python/npualloc is not
# imported instead of the installed package.
cd "$work"
env -u NPUALLOC_ACL_LIBRARY -u NPUALLOC_CONF TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
    "$venv_python" -m pytest -q -p no:cacheprovider "$root/python/tests_torch_npu"
