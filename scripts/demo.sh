#!/usr/bin/env bash
# Builds npualloc in release mode and runs the inference demo
# (examples/inference_demo.c) against the ACL emulator, so it works on any
# machine without an NPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ! -f examples/inference_demo.c ]]; then
    cat <<'TXT'
demo: examples/inference_demo.c does not exist yet. When it does, this script:
  1. cargo build --release --workspace --locked   (libnpualloc.so and the emulator's libascendcl.so)
  2. cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release && cmake --build build/demo --target inference_demo
  3. runs build/demo/inference_demo with NPUALLOC_ACL_LIBRARY pointing at the emulator
TXT
    exit 1
fi

# shellcheck source=scripts/ensure-tools.sh
source scripts/ensure-tools.sh
npualloc_ensure_tools

cargo build --release --workspace --locked
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
cmake --build build/demo --target inference_demo -j "$(nproc 2>/dev/null || echo 2)"

target_dir="${CARGO_TARGET_DIR:-target}"
export NPUALLOC_ACL_LIBRARY="${NPUALLOC_ACL_LIBRARY:-$(cd "$target_dir/release" && pwd)/libascendcl.so}"
export ACLEMU_DEVICE_MEMORY="${ACLEMU_DEVICE_MEMORY:-8g}"
echo "demo: running examples/inference_demo.c on the emulator ($NPUALLOC_ACL_LIBRARY)"
exec build/demo/inference_demo "$@"
