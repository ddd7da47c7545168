#!/usr/bin/env bash
# bench-scale.sh -- the tables of BENCHMARKS.md, "Traces at real scale": the 7B
# traces of traces/scale/ replayed on a 64 GiB device by npualloc (defaults and
# the PyTorch policy, npualloc-replay) and by the real PyTorch caching allocator
# (the peer's replay_torch, default and expandable segments, FAKECUDA_MEM_GIB=64),
# each with min capacity by bisection. A trace with u/w events is replayed a
# second time with them removed (NAME-no-uw: the same allocations on the same
# streams, but no free waits for another stream), which is what deferral costs.
#
#   PEER=<peer dir> scripts/bench-scale.sh [TRACE...]   default: traces/scale/*.trace.gz
#
# Prints each table with the wall-clock seconds it took to make; the last one
# is the device-call part under the equal costs of bench-costs.sh, modelled
# exactly (each side's calls times one cost table, per event).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PEER:-}" ] || { echo "set PEER to the peer's build directory (scripts/build-peer.sh)" >&2; exit 2; }
[ $# -gt 0 ] || set -- traces/scale/*.trace.gz
cargo build --release --quiet -p acl-emu
cargo build --release --quiet -p npualloc-tools --bin npualloc-replay
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
MIB=1048576

field() { sed -n 's/^RESULT //p' | tr ',{}' '\n\n\n' | sed -n "s/^\"$1\"://p" | sed -n 1p; }

runs=()
for t in "$@"; do
  runs+=("$t")
  if [ "$(zcat "$t" | grep -c '^[uw] ')" -gt 0 ]; then
    s="$work/$(basename "$t" .trace.gz)-no-uw.trace.gz"
    zcat "$t" | grep -v '^[uw] ' | gzip -1 >"$s"
    runs+=("$s")
  fi
done

echo "== npualloc (npualloc-replay --repeat 3 --baseline pytorch)"
start=$(date +%s.%N)
target/release/npualloc-replay --repeat 3 --baseline pytorch "${runs[@]}"
echo "table made in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

echo
echo "== PyTorch caching allocator ($PEER/replay_torch, 64 GiB)"
start=$(date +%s.%N)
printf '%-40s %-12s %8s %13s %13s %9s %8s %8s %8s %6s\n' trace conf "ns/op" "peak rsv MiB" "min cap MiB" "cap secs" \
  mallocs creates events syncs
for t in "${runs[@]}"; do
  for conf in "" "expandable_segments:True"; do
    best="" out=""
    for _ in 1 2 3; do
      out=$(FAKECUDA_MEM_GIB=64 PYTORCH_CUDA_ALLOC_CONF=$conf "$PEER/replay_torch" "$t")
      ns=$(field ns_per_op <<<"$out")
      best=$(awk -v a="$ns" -v b="$best" 'BEGIN { print (b == "" || a < b) ? a : b }')
    done
    c0=$(date +%s.%N)
    cap=$(PYTORCH_CUDA_ALLOC_CONF=$conf scripts/peer-min-capacity.sh "$PEER/replay_torch" "$t" |
          sed -n 's/min_capacity_bytes=\([0-9]*\).*/\1/p')
    csecs=$(awk -v a="$c0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    label=default
    [ -z "$conf" ] || label=expandable
    printf '%s\n' "$out" >"$work/peer.$(basename "$t").$label"
    echo "$best" >"$work/peer.$(basename "$t").$label.best"
    printf '%-40s %-12s %8s %13.1f %13.1f %9s %8s %8s %8s %6s\n' "$(basename "$t")" "$label" \
      "$best" "$(awk -v b="$(field peak_reserved <<<"$out")" -v m=$MIB 'BEGIN { print b / m }')" \
      "$(awk -v b="$cap" -v m=$MIB 'BEGIN { print b / m }')" "$csecs" "$(field cuda_malloc_calls <<<"$out")" \
      "$(field cu_mem_create_calls <<<"$out")" "$(field event_records <<<"$out")" "$(field syncs <<<"$out")"
  done
done
echo "table made in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

echo
echo "== Device calls under equal costs, modelled (scripts/equal_costs.py: calls x cost table / events, the trace's waits left out)"
start=$(date +%s.%N)
target/release/npualloc-replay --json --repeat 3 --no-min-capacity "${runs[@]}" >"$work/npu.json"
python3 - "$work" "${runs[@]}" <<'EOF'
import json, os, sys
sys.path.insert(0, "scripts")
import equal_costs

work, traces = sys.argv[1], sys.argv[2:]
cost = equal_costs.parse_cost(equal_costs.EQUAL_ACL)
rows = {r["trace"]: r for r in json.load(open(f"{work}/npu.json"))["reports"]}
wait_ns = cost["aclrtSynchronizeStream"]
print("Calls: what the cost table charges, the trace's waits left out. Host: ns/op without costs, best of 3 (measured).")
print("Host + calls: the host figure plus the modelled calls and the trace's waits, an estimate of the equal-costs ns/op.\n")
print("| trace | npualloc calls | calls ns/op: npualloc / PyTorch / exp. | calls ratio to the faster | host ns/op: npualloc / PyTorch / exp. | host + calls ratio to the faster |")
print("|---|---:|---|---:|---|---:|")
for t in traces:
    name = os.path.basename(t)
    r = rows[name]
    waits = equal_costs.trace_waits(t)
    ours = equal_costs.npu_ns_per_op(r, cost, waits)
    pd, pe = (equal_costs.peer_ns_per_op(equal_costs.peer_calls(open(f"{work}/peer.{name}.{c}").read()), cost)
              for c in ("default", "expandable"))
    hn = r["ns_per_op"]
    hd, he = (float(open(f"{work}/peer.{name}.{c}.best").read()) for c in ("default", "expandable"))
    calls = sum(n for k, n in r["acl_calls"].items() if cost.get(k)) - waits
    w = waits * wait_ns / r["ops"]
    total = (hn + ours + w) / min(hd + pd + w, he + pe + w)
    print(f"| {name} | {calls} | {ours:.1f} / {pd:.1f} / {pe:.1f} | {ours / min(pd, pe):.2f}x "
          f"| {hn:.1f} / {hd:.1f} / {he:.1f} | {total:.2f}x |")
EOF
echo "table made in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
