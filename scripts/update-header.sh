#!/usr/bin/env bash
# Regenerates include/npualloc.h from the Rust sources with the pinned cbindgen
# (the same code path tests/header_current.rs checks). Commit the result.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NPUALLOC_UPDATE_HEADER=1 cargo test --locked --test header_current -- header_is_current
echo "include/npualloc.h regenerated"
