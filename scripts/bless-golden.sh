#!/usr/bin/env bash
# Rewrites tools/tests/golden/traces.txt from a replay of every bundled trace
# (optimised build), then shows what moved. Commit the result saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
unset ACLEMU_MALLOC_ALIGN
cargo build --workspace --locked --release
NPUALLOC_BLESS=1 cargo test --locked --release -p npualloc-tools --test golden
git --no-pager diff --stat -- tools/tests/golden/traces.txt
