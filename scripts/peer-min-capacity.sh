#!/usr/bin/env bash
# peer-min-capacity.sh -- the smallest device capacity at which the real PyTorch
# caching allocator (the peer's replay_torch on its fake CUDA runtime) replays a
# trace without an OOM, by bisection over FAKECUDA_MEM_BYTES with --stop-on-oom.
# Same rule as npualloc-replay: from peak requested (never enough) up to a
# capacity shown to fit, to max(1 MiB, 0.5%).
#
#   scripts/peer-min-capacity.sh $PEER/replay_torch TRACE.trace.gz
#
# Prints: min_capacity_bytes=<n> probes=<k>. Extra environment (e.g.
# PYTORCH_CUDA_ALLOC_CONF) is passed through to the peer.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PEER_REPLAY_TORCH TRACE" >&2; exit 2; }
PEER=$1 TRACE=$2
[ -x "$PEER" ] || { echo "$PEER is not an executable" >&2; exit 1; }
MIB=$((1 << 20))

field() { # field NAME  (reads a RESULT line on stdin)
  sed -n 's/^RESULT //p' | tr ',{}' '\n\n\n' | sed -n "s/^\"$1\"://p" | sed -n 1p
}

base=$("$PEER" "$TRACE")
lo=$(field peak_live <<<"$base")
peak=$(field peak_reserved <<<"$base")
[ -n "$lo" ] && [ -n "$peak" ] || { echo "no RESULT line from $PEER" >&2; exit 1; }

probes=0
fits() { # fits CAPACITY -> 0 when the whole trace replays without an OOM
  probes=$((probes + 1))
  local out
  # The peer warns on stderr for every failed mapping while probing.
  out=$(FAKECUDA_MEM_BYTES=$1 "$PEER" --stop-on-oom "$TRACE" 2>/dev/null)
  [ "$(field ooms <<<"$out")" = 0 ]
}

hi=$((peak + peak / 64 + MIB))
until fits "$hi"; do
  lo=$hi
  hi=$((hi * 2))
  [ "$hi" -le $((1 << 40)) ] || { echo "does not fit in 1 TiB" >&2; exit 1; }
done
while :; do
  tol=$((lo / 200 > MIB ? lo / 200 : MIB))
  [ $((hi - lo)) -gt "$tol" ] || break
  mid=$((lo + (hi - lo) / 2))
  if fits "$mid"; then hi=$mid; else lo=$mid; fi
done
echo "min_capacity_bytes=$hi probes=$probes"
