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
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
