#!/usr/bin/env bash
# Builds npualloc in release mode and runs the inference demo
# (examples/inference_demo.c) against the ACL emulator, so it works on any
# machine without an NPU. Then, when npualloc-replay and traces/*.trace.gz are
# there, replays the traces against the PyTorch-policy and passthrough
# baselines and writes a chart to build/demo-replay.svg.
#
# The CMake build goes to build/demo (Release), so it does not flip the Debug
# build that scripts/test.sh keeps in build/. Works from any directory;
# installs missing build tools (cmake, libclang, pkg-config) with apt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/ensure-tools.sh
source scripts/ensure-tools.sh
npualloc_ensure_tools

jobs="$(nproc 2>/dev/null || echo 2)"

echo "== cargo build --release"
cargo build --release --workspace --locked
echo "== CMake (Release) in build/demo"
# NPUALLOC_CARGO_WORKSPACE: CMake's cargo step asks for the same packages as
# the build above, so it finds everything fresh instead of compiling npualloc
# again with other features (CMakeLists.txt says why).
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DNPUALLOC_CARGO_WORKSPACE=ON >/dev/null
cmake --build build/demo --target inference_demo -j "$jobs"

target_dir="${CARGO_TARGET_DIR:-target}"
release_dir="$(cd "$target_dir/release" && pwd)"
export NPUALLOC_ACL_LIBRARY="${NPUALLOC_ACL_LIBRARY:-$release_dir/libascendcl.so}"
export ACLEMU_DEVICE_MEMORY="${ACLEMU_DEVICE_MEMORY:-8g}"

echo
echo "== inference demo (examples/inference_demo.c) on the emulator: $NPUALLOC_ACL_LIBRARY"
echo
build/demo/inference_demo

echo
shopt -s nullglob
traces=(traces/*.trace.gz)
replay="$release_dir/npualloc-replay"
if [[ -x "$replay" && ${#traces[@]} -gt 0 ]]; then
    echo "== trace replay: npualloc vs PyTorch's policy vs aclrtMalloc per request (${#traces[@]} traces)"
    echo
    mkdir -p build
    "$replay" --baseline pytorch --baseline passthrough --svg build/demo-replay.svg "${traces[@]}"
    echo
    echo "demo: replay charts written to $(pwd)/build/demo-replay.svg"
elif [[ ! -x "$replay" ]]; then
    echo "demo: skipping the trace replay ($replay not built)"
else
    echo "demo: skipping the trace replay (no traces/*.trace.gz)"
fi
