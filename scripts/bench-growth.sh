#!/usr/bin/env bash
# Before/after table of a growth-rule change, in one run:
#   PEER=DIR scripts/bench-growth.sh OLD_REPLAY TRACE...
# OLD_REPLAY is another build's npualloc-replay (its libascendcl.so next to
# it). Per trace and build: peak reserved over peak requested on the default
# 64 GiB device, min capacity, handles (= maps), and ns/op under equal costs
# (20 us per malloc/free/physical/map/unmap/reserve call, 50 us per
# synchronization), median of 3 first passes run interleaved with PyTorch's
# two configurations under the same costs; the ratio is over the faster.
# EXTRA_ACL adds costs to npualloc's side only (e.g. aclrtGetMemInfo=20us).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: PEER=DIR $0 OLD_REPLAY TRACE..." >&2; exit 2; }
[ -n "${PEER:-}" ] && [ -x "$PEER/replay_torch" ] || { echo "set PEER to the directory holding replay_torch" >&2; exit 2; }
OLD=$1
shift
NEW=target/release/npualloc-replay
[ -x "$NEW" ] && [ -x "$OLD" ] || { echo "build both replays first" >&2; exit 2; }
export ACLEMU_COST_SPIN=200us
EQUAL_ACL="aclrtMalloc=20us,aclrtFree=20us,aclrtMallocPhysical=20us,aclrtFreePhysical=20us,aclrtMapMem=20us,aclrtUnmapMem=20us,aclrtReserveMemAddress=20us,aclrtSynchronizeStream=50us,aclrtSynchronizeEvent=50us,aclrtSynchronizeDevice=50us${EXTRA_ACL:+,$EXTRA_ACL}"
EQUAL_PEER=(FAKECUDA_MALLOC_NS=20000 FAKECUDA_SYNC_NS=50000 FAKECUDA_EVENT_NS=0)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

for trace in "$@"; do
    name=$(basename "$trace" .trace.gz)
    echo "$name" >&2
    "$OLD" --json --repeat 1 "$trace" >"$OUT/$name.old.mem"
    "$NEW" --json --repeat 1 "$trace" >"$OUT/$name.new.mem"
    for run in 0 1 2; do
        ACLEMU_COST=$EQUAL_ACL "$OLD" --json --repeat 1 --no-min-capacity "$trace" >"$OUT/$name.old.$run"
        ACLEMU_COST=$EQUAL_ACL "$NEW" --json --repeat 1 --no-min-capacity "$trace" >"$OUT/$name.new.$run"
        for conf in "" expandable_segments:True; do
            env "${EQUAL_PEER[@]}" FAKECUDA_MEM_GIB=64 PYTORCH_CUDA_ALLOC_CONF="$conf" "$PEER/replay_torch" "$trace" |
                sed -n 's/^RESULT //p' >"$OUT/$name.peer${conf:+exp}.$run"
        done
    done
done

python3 - "$OUT" "$@" <<'EOF'
import json, os, statistics, sys
out, traces = sys.argv[1], sys.argv[2:]
def one(path):
    return json.load(open(path))["reports"][0]
def ns(name, side):
    return statistics.median(one(f"{out}/{name}.{side}.{r}")["ns_per_op"] for r in range(3))
def peer(name, side):
    return statistics.median(json.loads(open(f"{out}/{name}.{side}.{r}").read())["ns_per_op"] for r in range(3))
print("| trace | build | peak rsv x live (64 GiB) | PyTorch exp. peak rsv x | min cap x | handles (maps) | ns/op, equal costs | PyTorch / exp. ns/op | ratio to the faster |")
print("|---|---|---:|---:|---:|---:|---:|---|---:|")
for t in traces:
    name = os.path.basename(t)[: -len(".trace.gz")]
    pd, pe = peer(name, "peer"), peer(name, "peerexp")
    pexp = json.loads(open(f"{out}/{name}.peerexp.0").read())
    for side, label in (("old", "before"), ("new", "after")):
        m = one(f"{out}/{name}.{side}.mem")
        o = ns(name, side)
        print(f'| {name} | {label} | {m["ratio"]:.3f} | {pexp["peak_reserved"] / m["peak_requested"]:.3f} | '
              f'{m["min_capacity_x"]:.3f} | {m["physical_mallocs"]} ({m["maps"]}) | {o:.1f} | {pd:.1f} / {pe:.1f} | {o / min(pd, pe):.3f}x |')
EOF
