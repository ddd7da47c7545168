#!/usr/bin/env bash
# check-torch-npu-releases.sh [RELEASE...]: compiles the torch_npu bridge
# against the headers of every torch_npu release it serves (2.6 to 2.14: each
# final release on PyPI), or of the RELEASEs named
# (tools/torch_npu/check_releases.py). Only the headers are downloaded, by
# HTTP range requests into the wheels (a few MB a release; cached in
# ${XDG_CACHE_HOME:-$HOME/.cache}/npualloc/torch-npu-headers). About 5 minutes
# on 2 cores. When PyPI cannot be reached it prints a SKIPPED banner and exits
# 0, or fails in CI (scripts/skip.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/skip.sh
source scripts/skip.sh

echo "== the torch_npu bridge compiles against every torch_npu release it serves"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/npualloc/torch-npu-headers
status=0
python3 tools/torch_npu/check_releases.py "$cache" "$@" || status=$?
if [[ $status -eq 75 ]]; then
    npualloc_skip "torch_npu release compile check" "could not download the releases' headers from PyPI; see above"
fi
exit "$status"
