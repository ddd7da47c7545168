#!/usr/bin/env bash
# Runs every test: Rust (unit, integration, header checks), the C tests through
# CMake/ctest, and the Python tests when there are any. Works from any
# directory; installs what the tests need when it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/ensure-tools.sh
source scripts/ensure-tools.sh
npualloc_ensure_tools

# Each stage's heading says when it starts, so a slow run shows where its time went.
stage() { echo "== $* (at $((SECONDS / 60))m$((SECONDS % 60))s)"; }

# The house rules that a tool can check: formatting, and clippy with every
# warning an error (Cargo.toml's [workspace.lints] adds the unsafe-code lints).
stage "cargo fmt --check and cargo clippy"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
stage "scripts: no pipe into a reader that stops early under pipefail"
bash scripts/check-pipes.sh --self-test
bash scripts/check-pipes.sh

# The real ACL headers, so the build uses them and tests/acl_headers_agree.rs
# checks our own declarations against them (it fails without them from here on).
bash scripts/fetch-acl-headers.sh
export NPUALLOC_REQUIRE_REAL_HEADERS=1

# A violation on the emulator (memory misused under queued work) aborts the
# program at the call that made it, in every suite below (Rust, C, Python,
# torch_npu); the few tests that make one on purpose turn it off for their
# own process. (.cargo/config.toml sets the same for programs cargo runs.)
export ACLEMU_VIOLATIONS=abort

stage "cargo build"
cargo build --workspace --locked
stage "a second build with nothing changed compiles nothing"
bash scripts/check-noop-build.sh --workspace --locked
stage "cargo test"
cargo test --workspace --locked
stage "concurrency stress, multi-thread C API stress, the full fault sweep and every trace's golden figures, optimised build"
cargo build --workspace --locked --release
cargo test --locked --release --test concurrency --test fault_sweep --test stress_threads
cargo test --locked --release -p npualloc-tools --test golden

stage "CMake + ctest"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"
bash scripts/check-noop-build.sh --cmake build
(cd build && ctest --output-on-failure)

# The Rust and C suites again with aclrtMalloc results only 64-byte aligned
# (a random multiple of 64 bytes past a page boundary, as documented for the
# real call), so an assumption of more alignment fails somewhere.
# The integration tests (they check the C API's contract: 512-byte aligned
# blocks, intact data, no leaks) and the emulator's own; not the unit tests,
# which pin exact byte and call counts of the default alignment, nor the
# fault sweep, which counts calls in one run to fail the n-th in the next
# (an unaligned result costs npualloc a second aclrtMalloc, at random), nor
# the golden figures, which pin those counts.
stage "integration tests + ctest with ACLEMU_MALLOC_ALIGN=random"
ACLEMU_MALLOC_ALIGN=random cargo test --workspace --locked --test '*' -- \
    --skip every_injected_fault_is_refused_cleanly --skip every_bundled_trace_replays_to_its_golden_figures
(cd build && ACLEMU_MALLOC_ALIGN=random ctest --output-on-failure)

# Every C test again under valgrind's memcheck: any memory error or definite
# leak fails its test (c_tests/valgrind.supp lists, with reasons, what is
# suppressed). The optimised build: the emulator's pattern checks touch every
# byte of every block, which the debug build makes too slow under valgrind.
stage "valgrind memcheck over the C tests"
root=$PWD
cmake -S . -B build-memcheck -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-memcheck -j "$(nproc 2>/dev/null || echo 2)"
(cd build-memcheck && ctest -T memcheck --output-on-failure \
    --overwrite "MemoryCheckCommand=$(command -v valgrind)" \
    --overwrite "MemoryCheckCommandOptions=--error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --keep-debuginfo=yes" \
    --overwrite "MemoryCheckSuppressionFile=$root/c_tests/valgrind.supp")

# The wheel builds the library in the same target directory as the optimised
# build above, so only what changed since is compiled again.
if [[ -d python/tests ]]; then
    stage "the Python package"
    bash scripts/test-python.sh
fi

# The equal-costs model of the benchmark scripts (scripts/equal_costs.py).
stage "the scripts' own checks"
python3 scripts/test_equal_costs.py

# The table of torch_npu's own memory tests run under both allocators
# (docs/torch-npu-upstream-tests.md): each test that passes only with torch_npu's own
# allocator has its reason written there; and the check's own checks.
python3 scripts/test_upstream_table.py
python3 scripts/upstream-torch-npu-tests.py --check docs/torch-npu-upstream-tests.md

# bench-two-tenants.sh's failure reports, with stand-ins for its programs.
bash scripts/test-bench-two-tenants.sh


# The PyTorch comparison harness (tools/peer/; BENCHMARKS.md, "Method"): that its C
# sources compile, and the checks of its shared fake device (tools/peer/test-shared.sh,
# no torch needed), with the CUDA runtime headers fetched once (2.4 MB of wheels,
# cached in target/cuda-headers; a loud SKIPPED banner when they cannot be). The
# full build downloads the torch wheel (scripts/build-peer.sh).
stage "the PyTorch comparison harness compiles; its shared fake device"
SYNTAX_ONLY=1 bash scripts/build-peer.sh

# The bridge against the headers of every torch_npu release from 2.6 to 2.14
# (a few MB of each wheel, cached; a loud SKIPPED line when PyPI is unreachable).
stage "the bridge against every torch_npu release's headers"
bash scripts/check-torch-npu-releases.sh

# The real torch 2.14.0 and torch_npu 2.14.0 on the emulator (about 600 MB of
# wheels, downloaded once and cached; a loud SKIPPED line when they cannot be).
stage "the real torch_npu on the emulator"
bash scripts/test-torch-npu.sh

# The trace recorder (tools/record/) against the profiler, in a venv made from
# the torch wheel above plus transformers (a loud SKIPPED line when it cannot be).
stage "the trace recorder"
bash scripts/test-record.sh

stage "all tests passed"
