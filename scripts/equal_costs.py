"""The device-call part of a replay under a cost table, modelled exactly.

A replay's measured ns/op under charged costs moves with the machine's load
(a busy-waited cost that loses its core costs a scheduling quantum). The
calls each side made are exact, so the calls times one cost table, per
event, is the part of the figure the allocator decides, the same in every
run. Used by scripts/bench-costs.sh and scripts/bench-scale.sh.

- npualloc: the `acl_calls` of an `npualloc-replay --json` row (the calls of
  each ACL function, counted by the emulator in the observed run).
- PyTorch: the call lines `replay_torch` prints (the fake CUDA runtime's
  counters), each call charged as the ACL call it stands for: cudaMalloc
  and cudaFree as aclrtMalloc and aclrtFree, cuMemCreate and cuMemRelease as
  aclrtMallocPhysical and aclrtFreePhysical, cuMemMap and cuMemUnmap as
  aclrtMapMem and aclrtUnmapMem, cuMemAddressReserve as
  aclrtReserveMemAddress, a stream or device synchronization as
  aclrtSynchronizeStream; failed cudaMalloc and cuMemCreate calls are
  charged too (the fake runtime charges them).

The trace's own waits (`w` events, one stream synchronization each on both
sides) are left out of both: they are the same calls on both sides and no
allocator's choice.
"""

import gzip
import re

US = 1000

# The equal costs of BENCHMARKS.md, "Method": 20 us per
# malloc/free/physical/map/unmap call and address reservation, 50 us per
# synchronization. ACLEMU_COST syntax; scripts/bench-costs.sh charges it.
EQUAL_ACL = ("aclrtMalloc=20us,aclrtFree=20us,aclrtMallocPhysical=20us,aclrtFreePhysical=20us,"
             "aclrtMapMem=20us,aclrtUnmapMem=20us,aclrtReserveMemAddress=20us,"
             "aclrtSynchronizeStream=50us,aclrtSynchronizeEvent=50us,aclrtSynchronizeDevice=50us")


def parse_cost(text):
    """'aclrtMalloc=20us,aclrtFree=20us,...' -> {name: ns}."""
    table = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, value = part.split("=")
        m = re.fullmatch(r"([0-9.]+)(ns|us|ms)", value)
        if not m:
            raise ValueError(f"cost {part!r}: want NAME=<n>ns|us|ms")
        table[name] = float(m.group(1)) * {"ns": 1, "us": US, "ms": US * US}[m.group(2)]
    return table


def trace_waits(path):
    """The `w` events of a trace (.trace or .trace.gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return sum(1 for line in f if line.startswith("w "))


def npu_ns_per_op(row, cost, waits):
    """Modelled device-call ns/op of an npualloc-replay --json row, or None
    when the emulator did not count calls."""
    calls = row.get("acl_calls") or {}
    if not calls:
        return None
    ns = sum(n * cost.get(name, 0.0) for name, n in calls.items())
    ns -= waits * cost.get("aclrtSynchronizeStream", 0.0)
    return ns / row["ops"]


def peer_calls(text):
    """Call counts from replay_torch's output: mallocs, frees, failed_mallocs,
    creates, maps, unmaps, releases, failed_creates, reserves, syncs, waits,
    ops."""
    def grab(pattern, names):
        m = re.search(pattern, text)
        return {n: int(v) for n, v in zip(names, m.groups())} if m else {n: 0 for n in names}

    c = {}
    c.update(grab(r"cudaMalloc calls (\d+) \(segments \d+, cudaFree (\d+), failed cudaMalloc (\d+)\)",
                  ["mallocs", "frees", "failed_mallocs"]))
    c.update(grab(r"cuMemCreate\s+(\d+) \(map (\d+), unmap (\d+), release (\d+), failed (\d+), VA reserve (\d+)\)",
                  ["creates", "maps", "unmaps", "releases", "failed_creates", "reserves"]))
    c.update(grab(r"stream/device synchronize (\d+)", ["syncs"]))
    c.update(grab(r"stream events\s+uses \d+ \(unknown \d+\), waits (\d+)", ["waits"]))
    c.update(grab(r"ops replayed\s+(\d+)", ["ops"]))
    return c


def peer_ns_per_op(c, cost):
    """Modelled device-call ns/op of a replay_torch run (`peer_calls`)."""
    g = lambda name: cost.get(name, 0.0)
    ns = ((c["mallocs"] + c["failed_mallocs"]) * g("aclrtMalloc") + c["frees"] * g("aclrtFree")
          + (c["creates"] + c["failed_creates"]) * g("aclrtMallocPhysical") + c["releases"] * g("aclrtFreePhysical")
          + c["maps"] * g("aclrtMapMem") + c["unmaps"] * g("aclrtUnmapMem")
          + c["reserves"] * g("aclrtReserveMemAddress")
          + (c["syncs"] - c["waits"]) * g("aclrtSynchronizeStream"))
    return ns / c["ops"] if c["ops"] else None
