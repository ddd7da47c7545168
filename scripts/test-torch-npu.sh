#!/usr/bin/env bash
# test-torch-npu.sh [DIR]: for each torch_npu release in
# $NPUALLOC_TORCH_NPU_RELEASES (default "2.14.0 2.12.0.post3": the releases
# on both sides of torch_npu's interface change in 2.13), sets up (or brings
# up to date) the real release and its torch on the ACL emulator with
# scripts/setup-torch-npu.sh (DIR as there; the wheels are shared), then runs
# python/tests_torch_npu/ with that venv's pytest. When the wheels cannot be
# downloaded it prints a SKIPPED banner saying so and exits 0, or fails in CI
# (scripts/skip.sh). Every other failure fails, and so does a run that
# collects no tests. Called by test.sh; works on its own from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
# shellcheck source=scripts/skip.sh
source scripts/skip.sh

read -r -a releases <<<"${NPUALLOC_TORCH_NPU_RELEASES:-2.14.0 2.12.0.post3}"
if ((${#releases[@]} == 0)); then
    echo "test-torch-npu.sh: NPUALLOC_TORCH_NPU_RELEASES names no release" >&2
    exit 2
fi
setup_log=$(mktemp)
work=$(mktemp -d)
trap 'rm -f "$setup_log"; rm -rf "$work"' EXIT
for release in "${releases[@]}"; do
    echo "== torch_npu $release (the real one) on the emulator"
    status=0
    bash scripts/setup-torch-npu.sh "${1:-}" "$release" | tee "$setup_log" || status=${PIPESTATUS[0]}
    if [[ $status -eq 75 ]]; then
        npualloc_skip "torch_npu tests" "could not download torch_npu $release or its torch; see above"
    elif [[ $status -ne 0 ]]; then
        echo "setup-torch-npu.sh failed for torch_npu $release (exit $status)" >&2
        exit "$status"
    fi
    venv_python=$(tail -n 1 "$setup_log")
    # From a scratch directory, so that the checkout's python/npualloc is not
    # imported instead of the installed package.
    (cd "$work" && env -u NPUALLOC_ACL_LIBRARY -u NPUALLOC_CONF TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
        "$venv_python" -m pytest -q -p no:cacheprovider "$root/python/tests_torch_npu")
done
