#!/usr/bin/env bash
# bench.sh -- regenerates the tables of BENCHMARKS.md, "Memory against peers" and
# "Host costs and the hot path" (release build).
#
#   scripts/bench.sh [TRACE...]          default: traces/*.trace.gz
#   PEER=<peer dir> scripts/bench.sh ... also replays each trace through the real
#                                        PyTorch caching allocator (replay_torch;
#                                        scripts/build-peer.sh builds it in target/peer)
#   SKIP_CRITERION=1                     skips the hot-path micro-benchmarks
#
# Output: the npualloc-replay table (npualloc defaults, PyTorch policy,
# passthrough), then per trace the peer's ns/op (best of 3), peak reserved and
# min capacity, then the criterion hot-path results.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- traces/*.trace.gz

cargo build --workspace --release --quiet
echo "== npualloc-replay (best of 3 timed runs; min capacity by bisection)"
target/release/npualloc-replay --repeat 3 --baseline pytorch --baseline passthrough "$@"

if [ -n "${PEER:-}" ]; then
  echo
  echo "== real PyTorch caching allocator ($PEER/replay_torch)"
  printf '%-32s %-26s %10s %14s %14s\n' trace conf "ns/op" "peak rsv MiB" "min cap MiB"
  for t in "$@"; do
    for conf in "" "expandable_segments:True"; do
      best=""
      for _ in 1 2 3; do
        ns=$(PYTORCH_CUDA_ALLOC_CONF=$conf "$PEER/replay_torch" "$t" | sed -n 's/.*"ns_per_op":\([0-9.]*\).*/\1/p')
        best=$(awk -v a="$ns" -v b="$best" 'BEGIN { print (b == "" || a < b) ? a : b }')
      done
      peak=$(PYTORCH_CUDA_ALLOC_CONF=$conf "$PEER/replay_torch" "$t" | sed -n 's/.*"peak_reserved":\([0-9]*\).*/\1/p')
      cap=$(PYTORCH_CUDA_ALLOC_CONF=$conf scripts/peer-min-capacity.sh "$PEER/replay_torch" "$t" |
            sed -n 's/min_capacity_bytes=\([0-9]*\).*/\1/p')
      printf '%-32s %-26s %10s %14.1f %14.1f\n' "$(basename "$t")" "${conf:-(default)}" "$best" \
        "$(awk -v b="$peak" 'BEGIN { print b / 1048576 }')" "$(awk -v b="$cap" 'BEGIN { print b / 1048576 }')"
    done
  done
fi

if [ "${SKIP_CRITERION:-0}" != 1 ]; then
  echo
  echo "== hot path (criterion)"
  cargo bench --bench hot_path 2>&1 | grep -E '^(malloc_free|trace)|time:'
fi
