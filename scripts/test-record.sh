#!/usr/bin/env bash
# The trace recorder (tools/record/): its checks against the profiler's record
# of real CPU runs (tools/record/tests/, under a minute). They need torch and
# transformers: RECORD_PYTHON names a Python that has both (default python3);
# without them this prints a SKIPPED line saying so and succeeds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${RECORD_PYTHON:-python3}
echo "== the trace recorder against the profiler ($python)"
if ! "$python" -c "import torch, transformers, pytest" >/dev/null 2>&1; then
    echo "SKIPPED: tools/record tests ($python lacks torch, transformers or pytest; set RECORD_PYTHON)"
    exit 0
fi
"$python" -m pytest -q -p no:cacheprovider -p no:warnings tools/record/tests
