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
  FAKECUDA_SHARED=$SEG ./replay_torch --tenant 1/2 "$AF" >"$SEG.1" &
  local t1=$!
  sleep 1 # tenant 1 is under way first (a head start, not a timed check)
  FAKECUDA_SHARED=$SEG ./replay_torch --tenant 0/2 "$AF" >"$SEG.0" &
  local t0=$! status=0
  # Whichever stops first: a failure stops the other (it would wait for turns).
  wait -n "$t0" "$t1" || { status=1; kill "$t0" "$t1" 2>/dev/null; }
  wait "$t0" || status=1
  wait "$t1" || status=1
  rm -f "/dev/shm/$SEG"
  [ $status = 0 ] && grep -q '^TENANT.*"ooms":0,' "$SEG.0" && grep -q '^TENANT.*"ooms":1,' "$SEG.1" &&
    grep -q "^TENANT.*\"shared_peak\":$1}" "$SEG.0"
}
check "tenants: lockstep, tenant 0 first; the second 60% is refused (default)" tenants $((600 * MIB))
check "tenants: the same with expandable segments (cuMemCreate)" \
  env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True bash -c "$(declare -f tenants); SEG=$SEG AF=$AF tenants $CAP 2>/dev/null"
rm -f "$SEG.0" "$SEG.1"

# A tenant that fails or dies stops the others, wherever it is; the waits are
# guarded by `timeout` (a hang fails the check: the rc is 124, not 1).
# failing_tenant: tenant 1's trace does not exist, so it fails before its
# warm-up; tenant 0 must stop saying so.
failing_tenant() {
  rm -f "/dev/shm/$SEG"
  FAKECUDA_SHARED=$SEG timeout 120 ./replay_torch --tenant 1/2 traces/no-such.trace 2>/dev/null &
  local t1=$! rc0=0 rc1=0
  FAKECUDA_SHARED=$SEG timeout 120 ./replay_torch --tenant 0/2 "$AF" >/dev/null 2>"$SEG.err" || rc0=$?
  wait "$t1" || rc1=$?
  rm -f "/dev/shm/$SEG"
  [ $rc0 = 1 ] && [ $rc1 = 1 ] && grep -q '^tenant 1 (pid [0-9]*) failed; tenant 0 stops' "$SEG.err"
}
check "tenants: one failing before it arrives stops the other" failing_tenant
# zombie_tenant: tenant 1 is killed and not reaped (its parent, a sleep,
# never waits), after it has joined; tenant 0 must see it gone.
zombie_tenant() {
  rm -f "/dev/shm/$SEG"
  (FAKECUDA_SHARED=$SEG ./replay_torch --tenant 1/2 "$AF" >/dev/null 2>&1 & exec sleep 300) &
  local parent=$! pid=0 rc0=0 state
  # pids[1] (offset 40 of the segment) once tenant 1 has joined
  for _ in $(seq 600); do
    [ -e "/dev/shm/$SEG" ] && pid=$(od -An -t d4 -j 40 -N 4 "/dev/shm/$SEG" | tr -d ' ')
    [ "${pid:-0}" -gt 0 ] && break
    sleep 0.1
  done
  [ "${pid:-0}" -gt 0 ] && kill -KILL "$pid"
  for _ in $(seq 100); do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [ "$state" = Z ] && break
    sleep 0.1
  done
  FAKECUDA_SHARED=$SEG timeout 120 ./replay_torch --tenant 0/2 "$AF" >/dev/null 2>"$SEG.err" || rc0=$?
  kill "$parent" 2>/dev/null
  wait "$parent" 2>/dev/null
  rm -f "/dev/shm/$SEG"
  [ "$state" = Z ] && [ $rc0 = 1 ] && grep -q "^tenant 1 (pid $pid) is gone; tenant 0 stops" "$SEG.err"
}
check "tenants: one killed and not reaped (a zombie) stops the other" zombie_tenant
# absent_tenant: tenant 1 never starts; tenant 0's wait ends at TENANT_WAIT_S.
absent_tenant() {
  rm -f "/dev/shm/$SEG"
  local rc0=0
  TENANT_WAIT_S=1 FAKECUDA_SHARED=$SEG timeout 120 ./replay_torch --tenant 0/2 "$AF" >/dev/null 2>"$SEG.err" ||
    rc0=$?
  rm -f "/dev/shm/$SEG"
  [ $rc0 = 1 ] && grep -q '^tenant 0: waited 1 s for the other tenants to arrive; tenant 1 has not joined' "$SEG.err"
}
check "tenants: a tenant that never joins ends the wait at TENANT_WAIT_S" absent_tenant
rm -f "$SEG.err"
check "combined live peak: both 60% in part 500 (1200 MiB)" \
  bash -c "./replay_torch --combined-peak $AF $AF 1.5 | grep -qx 'combined live peak $((1200 * MIB)) B' &&
           ./replay_torch --combined-peak $AF $AF 1.5 | grep -qx 'capacity $((1800 * MIB)) B (room 1.5000)'"
unset FAKECUDA_MEM_BYTES

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
