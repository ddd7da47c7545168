#!/usr/bin/env bash
# bench-costs.sh -- the replay tables under the emulator's cost model
# (BENCHMARKS.md, "Speed under equal costs"), npualloc beside the real PyTorch
# caching allocator (the peer's replay_torch on its fake CUDA runtime).
#
#   PEER=$PEER scripts/bench-costs.sh TRACE...
#
# Prints two markdown tables:
#  1. ACLEMU_COST=device: npualloc's default, page_size:20m,
#     reserved_headroom:0.02 and pytorch-policy, with device calls and
#     synchronizations; PyTorch (default and expandable segments) with the
#     profile's costs in FAKECUDA_* terms (see PEER_DEVICE_* below).
#  2. Equal costs, 20 us per malloc/free/physical/map/unmap call and 50 us
#     per synchronization on both sides: npualloc's default against the
#     faster PyTorch configuration, and its min capacity; beside the measured
#     ratio, the modelled one: the calls each side made times the same cost
#     table, per event (scripts/equal_costs.py), exact in every run.
# Every ns/op is the median of RUNS runs (default 5; the three sides'
# runs alternate), each a first pass over the trace on a fresh allocator
# (the pass that grows, cost sleeps included). Both devices
# are 64 GiB. Needs target/release/npualloc-replay (cargo build --release
# --workspace) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: PEER=DIR $0 TRACE..." >&2; exit 2; }
[ -n "${PEER:-}" ] && [ -x "$PEER/replay_torch" ] || { echo "set PEER to the directory holding replay_torch" >&2; exit 2; }
# REPLAY: another build of npualloc-replay (with its libascendcl.so beside it) to compare.
REPLAY=${REPLAY:-target/release/npualloc-replay}
RUNS=${RUNS:-5}
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive number of runs, not '$RUNS'" >&2; exit 2; }
# Spin the last 200 us of each emulated cost as the peer's fake runtime does
# (a timed sleep wakes tens of microseconds late; emu/README.md, "Cost model").
export ACLEMU_COST_SPIN=200us
[ -x "$REPLAY" ] || { echo "build first: cargo build --release --workspace" >&2; exit 2; }

EQUAL_ACL=$(cd scripts && python3 -c "import equal_costs; print(equal_costs.EQUAL_ACL)")
# The fake CUDA runtime charges FAKECUDA_MALLOC_NS for each cudaMalloc,
# cudaFree, cuMemCreate, cuMemMap, cuMemUnmap and cuMemRelease, SYNC_NS for
# each stream, device or event synchronization, EVENT_NS for each event
# record or stream wait; address reservation is free (npualloc pays 20 us).
EQUAL_PEER=(FAKECUDA_MALLOC_NS=20000 FAKECUDA_SYNC_NS=50000 FAKECUDA_EVENT_NS=0)
# The device profile with one malloc-like knob: PyTorch's default makes only
# cudaMalloc calls (aclrtMalloc: 100 us); with expandable segments each
# cuMemCreate (aclrtMallocPhysical: 50 us) comes with a cuMemMap
# (aclrtMapMem: 20 us), 35 us a call on average. Synchronizations at the
# stream's 500 us, event records at 2 us.
PEER_DEVICE_DEFAULT=(FAKECUDA_MALLOC_NS=100000 FAKECUDA_SYNC_NS=500000 FAKECUDA_EVENT_NS=2000)
PEER_DEVICE_EXPANDABLE=(FAKECUDA_MALLOC_NS=35000 FAKECUDA_SYNC_NS=500000 FAKECUDA_EVENT_NS=2000)

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# rows RUN: the reports of a --json document on stdin, one JSON line each,
# with "run": RUN first.
rows() {
    python3 -c 'import json, sys
for r in json.load(sys.stdin)["reports"]:
    print(json.dumps({"run": int(sys.argv[1]), **r}))' "$1"
}

# npualloc RUN TABLE COST TRACE ARGS...: one run, with min capacity when
# RUN is 0 (JSON lines in $OUT/TABLE.npu).
npualloc() {
    local run=$1 table=$2 cost=$3 trace=$4
    shift 4
    local min=()
    [ "$run" -eq 0 ] || min=(--no-min-capacity)
    ACLEMU_COST=$cost "$REPLAY" --json --repeat 1 "${min[@]}" "$@" "$trace" | rows "$run" >>"$OUT/$table.npu"
}

# peer RUN TABLE CONF TRACE ENV...: one run (lines in $OUT/TABLE.peer).
peer() {
    local run=$1 table=$2 conf=$3 trace=$4
    shift 4
    mkdir -p "$OUT/$table.raw"
    # The whole output is kept for the modelled calls (equal_costs.py).
    local raw
    raw="$OUT/$table.raw/$(ls "$OUT/$table.raw" | wc -l)"
    env "$@" FAKECUDA_MEM_GIB=64 PYTORCH_CUDA_ALLOC_CONF="$conf" "$PEER/replay_torch" "$trace" | tee "$raw" |
        awk -v run="$run" -v conf="$conf" -v raw="$raw" '
            /^cudaMalloc calls/ { gsub(/[(),]/, " "); mallocs = $3; frees = $7 }
            /^cuMemCreate/ { gsub(/[(),]/, " "); creates = $2; maps = $4; unmaps = $6; releases = $8 }
            /^runtime calls/ { gsub(/,/, " "); syncs = $NF }
            /^RESULT / { sub(/^RESULT /, ""); result = $0 }
            END { printf "%s\t%s\t%s %s %s %s %s %s %s\t%s\n", run, conf, mallocs, frees, creates, maps, unmaps, releases, syncs, raw; print result }' \
            >>"$OUT/$table.peer"
}

# The runs of the three sides alternate, so that a slower spell of the
# machine falls on all of them alike.
for trace in "$@"; do
    echo "device profile: $(basename "$trace")" >&2
    for ((run = 0; run < RUNS; run++)); do
        npualloc "$run" device device "$trace" --config "" --config page_size:20m --config reserved_headroom:0.02 --baseline pytorch
        peer "$run" device "" "$trace" "${PEER_DEVICE_DEFAULT[@]}"
        peer "$run" device expandable_segments:True "$trace" "${PEER_DEVICE_EXPANDABLE[@]}"
    done
    echo "equal costs: $(basename "$trace")" >&2
    for ((run = 0; run < RUNS; run++)); do
        npualloc "$run" equal "$EQUAL_ACL" "$trace"
        peer "$run" equal "" "$trace" "${EQUAL_PEER[@]}"
        peer "$run" equal expandable_segments:True "$trace" "${EQUAL_PEER[@]}"
    done
done

python3 - "$OUT" "$EQUAL_ACL" "$@" <<'EOF'
import json, os, statistics, sys
from collections import defaultdict

sys.path.insert(0, "scripts")
import equal_costs

out = sys.argv[1]
EQUAL = equal_costs.parse_cost(sys.argv[2])
WAITS = {os.path.basename(t): equal_costs.trace_waits(t) for t in sys.argv[3:]}
MIB = 1 << 20

def npu(table):
    rows = defaultdict(list)
    for line in open(f"{out}/{table}.npu"):
        r = json.loads(line)
        rows[(r["trace"], r["label"])].append(r)
    return rows

def peer(table):
    rows = defaultdict(list)
    lines = open(f"{out}/{table}.peer").read().splitlines()
    for head, result in zip(lines[0::2], lines[1::2]):
        run, conf, calls, raw = head.split("\t")
        r = json.loads(result)
        r["run"] = int(run)
        r["raw_calls"] = equal_costs.peer_calls(open(raw).read())
        m, f, c, mp, u, rel, s = (int(x or 0) for x in calls.split())
        r["calls"] = dict(mallocs=m, frees=f, creates=c, maps=mp, unmaps=u, releases=rel, syncs=s)
        rows[(r["trace"], "PyTorch exp." if conf else "PyTorch")].append(r)
    return rows

def median(rs):
    return statistics.median(r["ns_per_op"] for r in rs)

def npu_calls(r):
    parts = []
    if r["device_mallocs"] or r["device_frees"]:
        parts.append(f'{r["device_mallocs"]}/{r["device_frees"]} malloc/free')
    if r["maps"] or r["unmaps"]:
        parts.append(f'{r["maps"]}/{r["unmaps"]} map/unmap')
    if r["physical_mallocs"] or r["physical_frees"]:
        parts.append(f'{r["physical_mallocs"]}/{r["physical_frees"]} phys m/f')
    return ", ".join(parts) or "none"

def peer_calls(c):
    parts = []
    if c["mallocs"] or c["frees"]:
        parts.append(f'{c["mallocs"]}/{c["frees"]} malloc/free')
    if c["maps"] or c["unmaps"]:
        parts.append(f'{c["maps"]}/{c["unmaps"]} map/unmap')
    if c["creates"] or c["releases"]:
        parts.append(f'{c["creates"]}/{c["releases"]} create/release')
    return ", ".join(parts) or "none"

def min_cap(r):
    mc = r.get("min_capacity")
    if isinstance(mc, (int, float)) and r["peak_requested"]:
        return f'{mc / r["peak_requested"]:.3f}'
    return "-"

traces = list(dict.fromkeys(k[0] for k in npu("device")))

print("Table 1: ACLEMU_COST=device (PyTorch: the profile's costs in FAKECUDA_* terms)\n")
print("| trace | configuration | ns/op | device calls | syncs | peak rsv MiB | min cap x |")
print("|---|---|---:|---|---:|---:|---:|")
n, p = npu("device"), peer("device")
for t in traces:
    for label in ["npualloc", "npualloc[page_size:20m]", "npualloc[reserved_headroom:0.02]", "pytorch-policy"]:
        rs = n[(t, label)]
        first = next(r for r in rs if r["run"] == 0)
        print(f'| {t} | {label} | {median(rs):.1f} | {npu_calls(first)} | {first["syncs"]} | {first["peak_reserved"] / MIB:.1f} | {min_cap(first)} |')
    for label in ["PyTorch", "PyTorch exp."]:
        rs = p[(t, label)]
        print(f'| {t} | {label} | {median(rs):.1f} | {peer_calls(rs[0]["calls"])} | {rs[0]["calls"]["syncs"]} | {rs[0]["peak_reserved"] / MIB:.1f} | - |')

print("\nTable 2: equal costs (20 us per malloc/free/physical/map/unmap call, 50 us per synchronization)\n")
print("Modelled: the calls each side made times the cost table, per event, the trace's own waits left out (scripts/equal_costs.py); exact and the same in every run.\n")
print("| trace | npualloc ns/op | device calls | PyTorch ns/op | PyTorch exp. ns/op | ratio to the faster | each run's ratio | target 0.5x | modelled calls ns/op: npualloc / PyTorch / exp. | modelled ratio | min cap x | target 1.05x |")
print("|---|---:|---|---:|---:|---:|---|---|---|---:|---:|---|")
n, p = npu("equal"), peer("equal")
for t in traces:
    rs = n[(t, "npualloc")]
    first = next(r for r in rs if r["run"] == 0)
    ours, pd, pe = median(rs), median(p[(t, "PyTorch")]), median(p[(t, "PyTorch exp.")])
    ratio = ours / min(pd, pe)
    # Each run's own ratio: npualloc's run i over the faster configuration's run i.
    faster = p[(t, "PyTorch")] if pd <= pe else p[(t, "PyTorch exp.")]
    runs = {r["run"]: r["ns_per_op"] for r in faster}
    each = sorted(r["ns_per_op"] / runs[r["run"]] for r in rs if r["run"] in runs)
    spread = f"{each[0]:.2f}x-{each[-1]:.2f}x" if each else "-"
    mc = min_cap(first)
    cap_ok = "yes" if mc != "-" and float(mc) <= 1.05 else "no"
    m_ours = equal_costs.npu_ns_per_op(first, EQUAL, WAITS.get(t, 0))
    m_pd, m_pe = (equal_costs.peer_ns_per_op(p[(t, c)][0]["raw_calls"], EQUAL) for c in ("PyTorch", "PyTorch exp."))
    if None in (m_ours, m_pd, m_pe):
        modelled, m_ratio = "-", "-"
    else:
        modelled = f"{m_ours:.1f} / {m_pd:.1f} / {m_pe:.1f}"
        m_ratio = f"{m_ours / min(m_pd, m_pe):.2f}x"
    print(f'| {t} | {ours:.1f} | {npu_calls(first)} | {pd:.1f} | {pe:.1f} | {ratio:.2f}x | {spread} | {"yes" if ratio <= 0.5 else "no"} | {modelled} | {m_ratio} | {mc} | {cap_ok} |')
EOF
