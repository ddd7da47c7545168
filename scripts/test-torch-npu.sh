#!/usr/bin/env bash
# test-torch-npu.sh [DIR]: for each torch_npu release in
# $NPUALLOC_TORCH_NPU_RELEASES (default "2.14.0 2.12.0.post3 2.8.0.post5":
# releases on both sides of torch_npu's interface change in 2.13, and the
# oldest family whose torch PyPI has, with CUDA 12's library layout), sets up
# (or brings up to date) the real release and its torch on the ACL emulator
# with scripts/setup-torch-npu.sh (DIR as there; the wheels are shared), then
# runs python/tests_torch_npu/ with that venv's pytest.
#
# The setups run one after another (they share the download directory and
# cargo's target directory); each release's suite starts when its setup ends,
# at most $NPUALLOC_TORCH_NPU_JOBS at a time (default: all of them: a suite's
# tests run one child process at a time, and a child often waits for another
# process, so one suite keeps little more than one CPU busy). Tests marked
# `once` run in the first release only. Each suite's output is printed whole
# when it ends, with its slowest tests.
#
# When a release's wheels cannot be downloaded, the other releases' suites
# still run; then it prints a SKIPPED banner naming it and exits 0, or fails
# in CI (scripts/skip.sh). Every other failure fails,
# and so does a run that collects no tests. Called by test.sh; works on its
# own from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
# shellcheck source=scripts/skip.sh
source scripts/skip.sh

read -r -a releases <<<"${NPUALLOC_TORCH_NPU_RELEASES:-2.14.0 2.12.0.post3 2.8.0.post5}"
if ((${#releases[@]} == 0)); then
    echo "test-torch-npu.sh: NPUALLOC_TORCH_NPU_RELEASES names no release" >&2
    exit 2
fi
jobs=${NPUALLOC_TORCH_NPU_JOBS:-${#releases[@]}}
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
    echo "test-torch-npu.sh: NPUALLOC_TORCH_NPU_JOBS=$jobs is not a positive number" >&2
    exit 2
fi
# Waiting for whichever suite ends first (wait -n -p) needs bash 5.1.
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    jobs=1
fi
work=$(mktemp -d)

# One suite, run in the background: from its own scratch directory, so that
# the checkout's python/npualloc is not imported instead of the installed
# package, and in a session of its own (setsid: its process group is the
# pid the caller gets, so that the suite and every process it started can be
# stopped together). Tests marked `once` check what no release changes (the
# harness library's own calls, the release range's refusal, a documented
# command): only the first release's suite runs them.
suite() {  # suite INDEX
    local select=()
    if (($1 > 0)); then
        select=(-m "not once")
    fi
    mkdir -p "$work/run-$1"
    cd "$work/run-$1"
    exec setsid --wait env -u NPUALLOC_ACL_LIBRARY -u NPUALLOC_CONF TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
        "${pythons[$1]}" -m pytest -q -p no:cacheprovider --durations=12 --durations-min=15 \
        ${select[@]+"${select[@]}"} "$root/python/tests_torch_npu" >"$work/suite-$1.log" 2>&1
}
report() {  # report INDEX STATUS
    echo "== torch_npu ${ready[$1]}: the suite (exit $2, $((SECONDS - started[$1]))s)"
    cat "$work/suite-$1.log"
    ((failed += $2 != 0)) || true
}

declare -A running=()  # pid -> index
started=()             # index -> when its suite started (SECONDS)
failed=0
wait_one() {  # waits for one running suite and reports it
    local status=0 done_pid
    if ((jobs == 1)); then
        done_pid=${!running[*]}
        wait "$done_pid" || status=$?
    else
        wait -n -p done_pid "${!running[@]}" || status=$?
    fi
    report "${running[$done_pid]}" "$status"
    unset "running[$done_pid]"
}
# A suite still running when this script stops early (a failed setup, an
# interrupt) is stopped with it, with every process it started.
stop_suites() {
    local pid
    if ((${#running[@]} > 0)); then
        # A suite that has not reached its setsid yet is not a group: it is stopped alone.
        for pid in "${!running[@]}"; do
            kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
        done
    fi
    rm -rf "$work"
}
trap stop_suites EXIT

# Each release's suite starts as soon as its setup ends, while the next
# release is set up. A release whose wheels cannot be downloaded is left out
# and named at the end (a SKIPPED banner); the others still run.
pythons=() ready=() skipped=()
for release in "${releases[@]}"; do
    echo "== torch_npu $release (the real one) on the emulator: setup"
    status=0
    bash scripts/setup-torch-npu.sh "${1:-}" "$release" | tee "$work/setup.log" || status=${PIPESTATUS[0]}
    if [[ $status -eq 75 ]]; then
        skipped+=("$release")
        continue
    elif [[ $status -ne 0 ]]; then
        echo "setup-torch-npu.sh failed for torch_npu $release (exit $status)" >&2
        exit "$status"
    fi
    index=${#ready[@]}
    ready+=("$release")
    pythons+=("$(tail -n 1 "$work/setup.log")")
    while ((${#running[@]} >= jobs)); do
        wait_one
    done
    started[index]=$SECONDS
    suite "$index" &
    running[$!]=$index
done
while ((${#running[@]} > 0)); do
    wait_one
done
if ((failed > 0)); then
    echo "test-torch-npu.sh: the suite failed in $failed of ${#ready[@]} torch_npu releases (above)" >&2
    exit 1
fi
if ((${#ready[@]} > 0)); then
    echo "== torch_npu: the suite passed in ${ready[*]}"
fi
if ((${#skipped[@]} > 0)); then
    npualloc_skip "torch_npu tests in ${skipped[*]}" "could not download those releases or their torch; see above"
fi
