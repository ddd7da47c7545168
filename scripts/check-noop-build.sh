#!/usr/bin/env bash
# Checks that a build with nothing changed is a no-op: builds, then builds
# again and fails if the second build compiled, linked or reran anything.
#
#   scripts/check-noop-build.sh [cargo build args]   default: --workspace --locked
#   scripts/check-noop-build.sh --cmake BUILD_DIR    a configured CMake build tree
#
# The cargo form reads `cargo build -v`, which names every unit "Fresh" when it
# is up to date and says "Compiling" (and, with -v, "Dirty ...: why") when it
# is not; npualloc itself must be among the Fresh ones. The CMake form runs
# `cmake --build` twice (cargo runs on every CMake build and decides itself)
# and refuses any "Compiling", "Building" or "Linking" line the second time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() {
    echo "check-noop-build: a build with nothing changed did work:" >&2
    grep -E "$1" <<<"$2" >&2 || true
    exit 1
}

if [[ "${1:-}" == "--cmake" ]]; then
    dir="${2:?usage: $0 --cmake BUILD_DIR}"
    cmake --build "$dir" >/dev/null
    second="$(cmake --build "$dir" 2>&1)"
    pattern='Compiling |Building (C|CXX) object|Linking (C|CXX)'
    if grep -qE "$pattern" <<<"$second"; then
        fail "$pattern" "$second"
    fi
    echo "check-noop-build: the second 'cmake --build $dir' compiled and linked nothing"
    exit 0
fi

args=("$@")
if ((${#args[@]} == 0)); then
    args=(--workspace --locked)
fi
cargo build "${args[@]}"
second="$(cargo build -v "${args[@]}" 2>&1)"
pattern='^ *(Compiling|Dirty) |Running `[^`]*build-script-build'
if grep -qE "$pattern" <<<"$second"; then
    fail "$pattern" "$second"
fi
if ! grep -qE '^ *Fresh npualloc ' <<<"$second"; then
    echo "check-noop-build: 'cargo build -v ${args[*]}' did not report npualloc as Fresh:" >&2
    echo "$second" >&2
    exit 1
fi
echo "check-noop-build: the second 'cargo build ${args[*]}' compiled nothing (npualloc Fresh)"
