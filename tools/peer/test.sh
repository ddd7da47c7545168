#!/usr/bin/env bash
# test.sh -- quick checks of the fake runtime and the harness (run in the build directory
# after scripts/build-peer.sh)
set -uo pipefail
cd "$(dirname "$0")"
T=traces/synthetic-100k.trace.gz
pass=0; fail=0
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then echo "PASS $name"; pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi; }
out() { "$@" 2>&1; }
check "torch default runs on fake cudart" bash -c "./replay_torch $T | grep -q 'FAKE' && ./replay_torch $T | grep -q 'OOMed            no'"
check "torch expandable_segments uses cuMemCreate" bash -c "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ./replay_torch $T | grep -E '^cuMemCreate +[1-9]'"
check "torch OOMs at 4 GiB capacity (peak live 4.33 GiB)" bash -c "FAKECUDA_MEM_GIB=4 ./replay_torch $T | grep -q 'OOMed            yes'"
check "torch expandable OOM path (unmap/release) at 4.4 GiB" bash -c "FAKECUDA_MEM_GIB=4.4 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ./replay_torch $T | grep -E '^cuMemCreate .*unmap [1-9]'"
check "stats agree: allocator reserved == fake cudaMalloc bookkeeping" bash -c "./replay_torch $T | grep 'peak reserved' | awk '{print \$3}' | uniq | wc -l | grep -qx 1"
check "stdin trace" bash -c "zcat $T | ./replay_torch - | grep -q 'ops replayed     100000'"
check "no warnings on stderr" bash -c "[ -z \"\$(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ./replay_torch $T 2>&1 >/dev/null)\" ]"
check "multi-stream trace" bash -c "./replay_torch traces/synthetic-4streams-100k.trace.gz | grep -q 'OOMed            no'"
# u/w events: a block used on another stream is freed through an event (one
# cudaEventRecord per recorded free), and a wait is one stream synchronize that
# the syncs count leaves out.
UW=traces/uses-and-waits.trace
printf '%s\n' '# acl-trace v1' 'a 0 4194304 0' 'u 0 1' 'f 0' 'a 1 4194304 0' 'w 1' 'f 1' 'a 2 1000 1' 'u 2 0' 'f 2' >"$UW"
check "u: record_stream makes each recorded free record an event" bash -c "./replay_torch $UW | grep -q 'cudaEventRecord 2,'"
# The trace's wait is replayed (one cudaStreamSynchronize) but is not one of the
# allocator's synchronizations: the syncs reported are 0, as npualloc-replay's.
check "w: a wait is a stream synchronize, not the allocator's" bash -c "./replay_torch $UW | grep -q 'stream/device synchronize 1 (trace waits 1), allocator syncs 0\$'"
check "w: RESULT syncs leaves out the trace's waits" bash -c "./replay_torch $UW | grep -q '\"syncs\":0}'"
check "u/w counted" bash -c "./replay_torch $UW | grep -q 'uses 2 (unknown 0), waits 1'"


# FAKECUDA_SHARED on its own (also run by scripts/test.sh where the CUDA headers are found)
if bash test-shared.sh .; then pass=$((pass+1)); else echo "FAIL test-shared.sh"; fail=$((fail+1)); fi

MIB=$((1 << 20))
CAP=$((1000 * MIB))
SEG=fakecuda-test-$$
export FAKECUDA_MEM_BYTES=$CAP

# replay_torch --tenant: two tenants in lockstep, tenant 0 first in every
# round. Each trace allocates 60% in part 500 of 1000 and frees it in part
# 1000: tenant 1, started first, must be the one refused.
AF=traces/sixty-percent.trace
printf '%s\n' '# acl-trace v1' "a 0 $((600 * MIB)) 0" 'f 0' >"$AF"
# tenants PEAK: the device's peak must be PEAK bytes (the refused tenant's
# cudaMalloc takes nothing; with expandable segments its handles fill the
# device before it gives up, so the peak is the capacity)
tenants() {
  rm -f "/dev/shm/$SEG"
  FAKECUDA_SHARED=$SEG ./replay_torch --tenant 1/2 "$AF" | grep '^TENANT' >"$SEG.1" &
  sleep 1 # tenant 1 is under way first (a head start, not a timed check)
  FAKECUDA_SHARED=$SEG ./replay_torch --tenant 0/2 "$AF" | grep '^TENANT' >"$SEG.0"
  wait
  rm -f "/dev/shm/$SEG"
  grep -q '"ooms":0,' "$SEG.0" && grep -q '"ooms":1,' "$SEG.1" &&
    grep -q "\"shared_peak\":$1}" "$SEG.0"
}
check "tenants: lockstep, tenant 0 first; the second 60% is refused (default)" tenants $((600 * MIB))
check "tenants: the same with expandable segments (cuMemCreate)" \
  env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True bash -c "$(declare -f tenants); SEG=$SEG AF=$AF tenants $CAP 2>/dev/null"
rm -f "$SEG.0" "$SEG.1"
check "combined live peak: both 60% in part 500 (1200 MiB)" \
  bash -c "./replay_torch --combined-peak $AF $AF 1.5 | grep -qx 'combined live peak $((1200 * MIB)) B' &&
           ./replay_torch --combined-peak $AF $AF 1.5 | grep -qx 'capacity $((1800 * MIB)) B (room 1.5000)'"
unset FAKECUDA_MEM_BYTES

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
