#!/usr/bin/env bash
# bench-two-tenants.sh -- two allocators on one device, npualloc beside PyTorch
# (BENCHMARKS.md "Two allocators on one device").
#
#   cargo build --release --workspace && cargo build --release -p npualloc-tools --examples
#   PEER=<peer build dir> scripts/bench-two-tenants.sh [TRACE_A TRACE_B]
#
# Two traces (default: traces/bench/serve-bert-gpt2 and gpt2-train) replay at
# once on one device of ROOM x their combined live peak, each advancing a
# thousandth of its events in turn (A's part first in every round):
#   - npualloc: tools/examples/two_tenants.rs, two DeviceAllocators of one
#     process on one emulated device;
#   - PyTorch (default and expandable_segments:True): two replay_torch
#     processes, one allocator each, on one fake device whose capacity they
#     share (FAKECUDA_SHARED, tools/peer/fakecudart_shared.h), in lockstep
#     (replay_torch --tenant, tools/peer/tenants.h).
# Both sides compute the combined live peak and the device size the same way;
# the script checks that they agree to the byte. Printed per ROOM and
# allocator: each tenant's peak reserved (x its own live peak), device handles
# (npualloc: physical + device mallocs; PyTorch: cudaMalloc + cuMemCreate),
# OOMs (failed requests; a trace goes on past them), and whether both fit
# (no OOM). Then, per allocator, the smallest ROOM where both fit, by
# bisection to ROOM_STEP. A run that fails (either tenant, either side) stops
# the script with status 1 and says which allocator, ROOM and tenant failed
# and what it printed on stderr; no row is printed for it.
#
# Env: PEER (peer build dir, required), EXAMPLES (default target/release/examples),
#      ROOMS (default "1.10 1.08 1.07 1.06 1.05"), ROOM_STEP (default 0.005),
#      ROOM_MAX (default 4: the bisection's upper end).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
A=${1:-$ROOT/traces/bench/serve-bert-gpt2.trace.gz}
B=${2:-$ROOT/traces/bench/gpt2-train.trace.gz}
PEER=${PEER:?set PEER to a peer build (scripts/build-peer.sh)}
EXAMPLES=${EXAMPLES:-$ROOT/target/release/examples}
ROOMS=${ROOMS:-1.10 1.08 1.07 1.06 1.05}
STEP=${ROOM_STEP:-0.005}
ROOM_MAX=${ROOM_MAX:-4}
TT=$EXAMPLES/two_tenants
RT=$PEER/replay_torch
for f in "$TT" "$RT"; do
  [ -x "$f" ] || { echo "missing $f (see the usage at the top of $0)" >&2; exit 1; }
done
WORK=$(mktemp -d)
SEG=two-tenants-$$
trap 'rm -rf "$WORK"; rm -f /dev/shm/$SEG-*' EXIT
MIB=1048576

# The peer's device size for ROOM, checked against two_tenants' to the byte.
capacity() {
  "$RT" --combined-peak "$A" "$B" "$1" | awk '/^capacity/{print $2}'
}

# failed WHAT FILE: says WHAT failed, with FILE (its stderr) indented, and exits 1.
failed() {
  echo "$1" >&2
  sed 's/^/    /' "$2" >&2
  exit 1
}

# npualloc ROOM: two_tenants' two table rows as "rsv_mib x handles ooms" lines.
npualloc_rows() {
  local out cap rows
  out=$("$TT" "$A" "$B" "$1" 2>"$WORK/tt.err") ||
    failed "npualloc at ROOM $1: two_tenants failed (status $?; it names the tenant):" "$WORK/tt.err"
  cap=$(sed -n 's/.*(\([0-9]*\) B = .*/\1/p' <<<"$out")
  [ "$cap" = "$(capacity "$1")" ] || {
    echo "the device sizes differ at ROOM $1: two_tenants $cap B, peer $(capacity "$1") B" >&2
    exit 1
  }
  rows=$(awk -F'|' '/\.trace/{gsub(/ /,""); print $4, $5, $7, $8}' <<<"$out")
  awk 'NF != 4 {bad = 1} END {exit bad || NR != 2}' <<<"$rows" || {
    echo "npualloc at ROOM $1: two_tenants printed no row per tenant:" >&2
    sed 's/^/    /' <<<"$out" >&2
    exit 1
  }
  echo "$rows"
}

# pytorch CONF ROOM: the two replay_torch tenants, same format.
n_pair=0
pytorch_rows() {
  local conf=$1 cap seg pids=() t status=0 rc=(0 0) traces=("$A" "$B")
  cap=$(capacity "$2")
  n_pair=$((n_pair + 1))
  seg=$SEG-$n_pair
  rm -f "/dev/shm/$seg"
  for t in 0 1; do
    PYTORCH_CUDA_ALLOC_CONF=$conf FAKECUDA_SHARED=$seg FAKECUDA_MEM_BYTES=$cap \
      "$RT" --tenant $t/2 "${traces[$t]}" >"$WORK/t$t" 2>"$WORK/e$t" &
    pids+=($!)
  done
  # Whichever tenant stops first: when it failed, stop the other too (it
  # stops by itself once it sees the failure, tools/peer/tenants.h; this is
  # for a tenant that cannot see it). Polled, not `wait -n`: bash 5.2's
  # `wait -n PID...` in a command substitution says "no such job" on stderr
  # when both have already ended.
  local first=
  while [ -z "$first" ]; do
    for t in 0 1; do kill -0 "${pids[$t]}" 2>/dev/null || first=${first:-$t}; done
    [ -n "$first" ] || sleep 0.05
  done
  for t in "$first" $((1 - first)); do
    wait "${pids[$t]}" || {
      rc[$t]=$?
      [ $status != 0 ] || kill "${pids[@]}" 2>/dev/null || true
      status=1
    }
  done
  rm -f "/dev/shm/$seg"
  if [ $status != 0 ]; then
    echo "pytorch${conf:+ ($conf)} at ROOM $2: replay_torch tenants failed:" >&2
    for t in 0 1; do
      case ${rc[$t]} in
        0) echo "  tenant $t ($(name "${traces[$t]}")): finished" >&2 ;;
        143) echo "  tenant $t ($(name "${traces[$t]}")): stopped by this script after the other failed" >&2 ;;
        *) echo "  tenant $t ($(name "${traces[$t]}")): failed, status ${rc[$t]}:" >&2 ;;
      esac
      sed 's/^/    /' "$WORK/e$t" >&2
    done
    exit 1
  fi
  for t in 0 1; do
    grep -q '^TENANT ' "$WORK/t$t" ||
      failed "pytorch${conf:+ ($conf)} at ROOM $2: tenant $t ($(name "${traces[$t]}")) printed no TENANT line; its stderr:" "$WORK/e$t"
    python3 -c '
import json, sys
r = json.loads(sys.stdin.read().split("TENANT ", 1)[1].splitlines()[0])
print("%.1f %.3f %d %d" % (r["peak_reserved"] / 1048576, r["peak_reserved"] / r["peak_live"],
                           r["handles"], r["ooms"]))' <"$WORK/t$t"
  done
}

rows() { # ALLOCATOR ROOM
  case $1 in
    npualloc) npualloc_rows "$2" ;;
    pytorch) pytorch_rows "" "$2" ;;
    pytorch-exp) pytorch_rows expandable_segments:True "$2" ;;
  esac
}
fits() { # a failed run stops the script (not read as "does not fit")
  local out
  out=$(rows "$1" "$2") || exit 1
  awk '$4 != 0 {bad = 1} END {exit bad}' <<<"$out"
}

name() { basename "$1" .trace.gz; }
peak=$("$RT" --combined-peak "$A" "$B" 1 | awk '/^combined/{print $4}')
echo "combined live peak $peak B ($(awk -v p="$peak" -v m=$MIB 'BEGIN{printf "%.1f", p/m}') MiB)," \
  "tenant 0 $(name "$A"), tenant 1 $(name "$B")"
echo
echo "| ROOM | allocator | $(name "$A") peak rsv MiB (x live) | handles | OOMs | $(name "$B") peak rsv MiB (x live) | handles | OOMs | both fit |"
echo "|---|---|---|---:|---:|---|---:|---:|---|"
for room in $ROOMS; do
  for alloc in npualloc pytorch pytorch-exp; do
    # Its own step: a failed run prints its error and stops here, with no row.
    out=$(rows "$alloc" "$room") || exit 1
    awk -v room="$room" -v alloc="$alloc" -v a="$(name "$A")" -v b="$(name "$B")" '
      { rsv[NR] = $1; x[NR] = $2; h[NR] = $3; o[NR] = $4 }
      END {
        fit = (o[1] == 0 && o[2] == 0) ? "yes" : "no:" (o[1] ? " " a : "") (o[2] ? " " b : "")
        printf "| %s | %s | %s (%s) | %s | %s | %s (%s) | %s | %s | %s |\n",
          room, alloc, rsv[1], x[1], h[1], o[1], rsv[2], x[2], h[2], o[2], fit
      }' <<<"$out"
  done
done

# Alone on 64 GiB: what each tenant holds without the other.
echo
echo "alone on 64 GiB, peak reserved MiB ($(name "$A"), $(name "$B")):"
out=$("$TT" "$A" "$B" 1.10 2>"$WORK/tt.err") ||
  failed "npualloc alone: two_tenants failed (status $?; it names the trace):" "$WORK/tt.err"
awk -F'|' '/\.trace/{gsub(/ /,""); s = s " " $6} END {print "  npualloc" s}' <<<"$out"
for conf in "" expandable_segments:True; do
  s=""
  for trace in "$A" "$B"; do
    out=$(PYTORCH_CUDA_ALLOC_CONF=$conf FAKECUDA_MEM_GIB=64 "$RT" "$trace" 2>"$WORK/rt.err") ||
      failed "pytorch${conf:+ ($conf)} alone: replay_torch $(name "$trace") failed (status $?):" "$WORK/rt.err"
    s="$s $(sed -n 's/.*"peak_reserved":\([0-9]*\).*/\1/p' <<<"$out" | awk -v m=$MIB '{printf "%.1f", $1/m}')"
  done
  echo "  pytorch${conf:+ ($conf)}$s"
done

# The smallest ROOM where both fit: bisection (it assumes that a larger device
# never makes a tenant fail; the table above shows the listed ROOMs).
echo
echo "smallest ROOM where both fit (bisection to $STEP between 1 and $ROOM_MAX):"
for alloc in npualloc pytorch pytorch-exp; do
  lo=1 hi=
  for try in 1.10 1.25 1.5 2 3 "$ROOM_MAX"; do
    if fits "$alloc" "$try"; then hi=$try; break; fi
    lo=$try
  done
  if [ -z "$hi" ]; then
    echo "  $alloc: not even at $ROOM_MAX"
    continue
  fi
  while awk -v l="$lo" -v h="$hi" -v s="$STEP" 'BEGIN{exit !(h - l > s)}'; do
    mid=$(awk -v l="$lo" -v h="$hi" 'BEGIN{printf "%.4f", (l + h) / 2}')
    if fits "$alloc" "$mid"; then hi=$mid; else lo=$mid; fi
  done
  echo "  $alloc: $hi (not at $lo)"
done
