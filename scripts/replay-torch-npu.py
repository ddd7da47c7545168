#!/usr/bin/env python3
"""Replays an acl-trace v1 file (traces/FORMAT.md) through torch_npu's own
caching allocator (NPUCachingAllocator) on the ACL emulator, with its raw
allocation API, and prints one line: ``RESULT {json}``.

Run it with the python of the venv scripts/setup-torch-npu.sh makes:

    PY=<that venv>/bin/python
    $PY scripts/replay-torch-npu.py TRACE                     # default config
    $PY scripts/replay-torch-npu.py --conf expandable TRACE   # expandable_segments:True
    $PY scripts/replay-torch-npu.py --min-capacity TRACE      # + bisection of the capacity
    $PY scripts/replay-torch-npu.py --npualloc "" TRACE       # npualloc as torch_npu's allocator
    $PY scripts/replay-torch-npu.py --empty-cache-every 5000 --conf expandable TRACE

Events: ``a id bytes stream`` is torch.npu.caching_allocator_alloc(bytes,
0, stream), ``f id`` caching_allocator_delete, ``w stream`` synchronizes
that stream; trace stream 0 is the device's default stream, every other
one a torch.npu.Stream of its own. ``u id stream`` (record_stream) has no
raw-pointer form in torch_npu: its recordStream takes a DataPtr whose
deleter is the allocator's own, which only tensors carry, so a trace with
``u`` lines is refused, unless ``--tensors``: then ``a`` is a uint8
torch.empty of that many bytes on the event's stream (the same
NPUCachingAllocator::malloc the raw call makes), ``f`` drops the tensor,
``u`` is Tensor.record_stream.

The device has ``--device-memory`` (ACLEMU_DEVICE_MEMORY, default 64G, the
benchmarks' device). An out-of-memory error (torch.OutOfMemoryError, after
torch_npu has freed its cached blocks and retried) is counted and the
allocation skipped; with ``--stop-on-oom`` the replay ends at the first.
``--min-capacity`` bisects the capacity in child processes between the
peak of live requested bytes (never enough) and a capacity shown to fit,
to max(1 MiB, 0.5%), the rule of scripts/peer-min-capacity.sh.

Fields: peak_requested (from the trace), peak_reserved
(torch.npu.max_memory_reserved()), peak_reserved_emu (the emulator's
live aclrtMalloc / aclrtMallocAlign32 bytes plus mapped bytes, read after
every allocation; 0 with --no-emu-peak), num_device_alloc /
num_device_free / num_alloc_retries / num_ooms (torch_npu's
memory_stats), calls (the emulator's call counts; torch_npu's segments
are aclrtMallocAlign32 calls), syncs (the emulator's count of
synchronizations, the final torch.npu.synchronize() included), ooms (OOM
errors the replay caught), ops_replayed (events done before a stop),
ns_per_op_python (wall time of the replay loop per event: Python-
dominated, not the allocator's cost; it includes the emulator reads
unless --no-emu-peak, and torch.empty with --tensors).

``--npualloc CONF`` replays through npualloc instead
(``npualloc.torch_npu.enable(CONF)`` before torch_npu starts; "allocator" is
"npualloc"). ``--empty-cache-every N`` calls ``torch.npu.empty_cache()``
after every N events and at the end, and adds ``empty_cache``: per call, the
device memory held after it (the emulator's aclrtMalloc and mapped bytes) and
what live blocks need of it: the 2 MiB pages their bytes touch in the large
pool, plus the small pool's segments (``torch.npu.memory_snapshot()``); and
``kept_x``, the sum of the first over the sum of the second, and
``kept_x_worst``, the largest ratio of one call with a live block.
"""

import argparse
import ctypes
import gzip
import json
import os
import subprocess
import sys
import time

MIB = 1 << 20
CONFS = {"default": "", "expandable": "expandable_segments:True"}
CALLS = ("aclrtMalloc", "aclrtMallocAlign32", "aclrtFree", "aclrtMallocPhysical", "aclrtFreePhysical", "aclrtMapMem",
         "aclrtUnmapMem", "aclrtReserveMemAddress", "aclrtReleaseMemAddress", "aclrtSynchronizeStream",
         "aclrtSynchronizeStreamWithTimeout", "aclrtRecordEvent", "aclrtQueryEventStatus")


class TraceError(Exception):
    """A trace or a setup this script cannot replay (exit status 2)."""


def parse_trace(path, tensors=False):
    """The trace's events as tuples, and its peak of live requested bytes;
    ``u`` events only with ``tensors``."""
    opener = gzip.open if path.endswith(".gz") else open
    events, live, cur, peak = [], {}, 0, 0
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            p = line.split()
            try:
                if p[0] == "a" and len(p) == 4:
                    i, size, stream = int(p[1]), int(p[2]), int(p[3])
                    if size <= 0 or i in live or stream < 0:
                        raise ValueError
                    live[i] = size
                    cur += size
                    peak = max(peak, cur)
                    events.append(("a", i, size, stream))
                elif p[0] == "f" and len(p) == 2:
                    cur -= live.pop(int(p[1]))
                    events.append(("f", int(p[1])))
                elif p[0] == "w" and len(p) == 2 and int(p[1]) >= 0:
                    events.append(("w", int(p[1])))
                elif p[0] == "u" and len(p) == 3:
                    if not tensors:
                        raise TraceError(f"{path}:{n}: 'u' (record_stream) is not supported: torch_npu has no "
                                         "record_stream for a raw pointer (only for a tensor's DataPtr); "
                                         "replay with --tensors")
                    i, stream = int(p[1]), int(p[2])
                    if i not in live or stream < 0:
                        raise ValueError
                    events.append(("u", i, stream))
                else:
                    raise ValueError
            except (ValueError, KeyError):
                raise TraceError(f"{path}:{n}: bad event: {line.strip()!r}") from None
    return events, peak


class Usage(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "malloc_bytes", "malloc_count", "physical_bytes", "physical_count", "mapped_bytes",
        "reserved_ranges", "streams", "events", "descs", "syncs")]


def emulator():
    """The emulator library torch_npu loaded (its wrapper libascendcl.so)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if path.endswith("/libascendcl.so"):
                emu = ctypes.CDLL(path)
                emu.aclemu_call_count.restype = ctypes.c_int64
                emu.aclemu_call_count.argtypes = [ctypes.c_char_p]
                emu.aclemu_get_usage.argtypes = [ctypes.c_int, ctypes.POINTER(Usage)]
                emu.aclemu_violations.restype = ctypes.c_int64
                return emu
    raise RuntimeError("no libascendcl.so loaded: not torch_npu on the emulator")


PAGE = 2 * MIB


def needed_after_empty_cache(torch):
    """The bytes live blocks need after an empty_cache: the 2 MiB pages their
    bytes touch in the large pool, and the whole small pool."""
    pages, small = set(), 0
    for seg in torch.npu.memory_snapshot():
        if seg.get("segment_type") == "small":
            small += seg["total_size"]
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" or b["state"] == "active_pending_free":
                pages.update(range(addr // PAGE, (addr + b["size"] - 1) // PAGE + 1))
            addr += b["size"]
    return len(pages) * PAGE + small


def conf_of(args):
    """PYTORCH_NPU_ALLOC_CONF of this replay."""
    return CONFS[args.conf] if args.alloc_conf is None else args.alloc_conf


def replay(args):
    """One replay in this process; returns the result object."""
    events, peak_requested = parse_trace(args.trace, args.tensors)
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    os.environ["ACLEMU_DEVICE_MEMORY"] = str(args.device_memory)
    os.environ["PYTORCH_NPU_ALLOC_CONF"] = conf_of(args)
    if not conf_of(args):
        del os.environ["PYTORCH_NPU_ALLOC_CONF"]
    try:
        import npu_emu  # noqa: F401  (torch, then torch_npu, on the emulator)
    except ImportError as e:
        raise TraceError(f"{e}: run this with the python of the venv scripts/setup-torch-npu.sh makes") from None
    import torch

    if args.npualloc is not None:
        import npualloc.torch_npu

        npualloc.torch_npu.enable(args.npualloc)

    torch.npu.init()
    torch.npu.set_device(0)
    emu = emulator()
    usage = Usage()
    streams = {0: torch.npu.current_stream(0)}
    stream_ptrs = {0: streams[0].npu_stream}
    for ev in events:
        s = ev[3] if ev[0] == "a" else ev[1] if ev[0] == "w" else ev[2] if ev[0] == "u" else None
        if s is not None and s not in streams:
            streams[s] = torch.npu.Stream(0)
            stream_ptrs[s] = streams[s].npu_stream
    alloc, delete = torch.npu.caching_allocator_alloc, torch.npu.caching_allocator_delete
    raw, empty, u8, set_stream, current = not args.tensors, torch.empty, torch.uint8, torch.npu.set_stream, 0
    oom_error = torch.OutOfMemoryError
    ptrs, ooms, first_oom, peak_emu, done = {}, 0, None, 0, 0
    sample = not args.no_emu_peak
    get_usage, uref = emu.aclemu_get_usage, ctypes.byref(usage)
    every, kept = args.empty_cache_every, []

    def empty_cache():
        torch.npu.empty_cache()
        get_usage(0, uref)
        kept.append((usage.malloc_bytes + usage.mapped_bytes, needed_after_empty_cache(torch)))

    t0 = time.perf_counter_ns()
    for ev in events:
        if every and done and done % every == 0:
            empty_cache()
        kind = ev[0]
        if kind == "a":
            try:
                if raw:
                    ptrs[ev[1]] = alloc(ev[2], 0, stream_ptrs[ev[3]])
                else:
                    if ev[3] != current:
                        current = ev[3]
                        set_stream(streams[current])
                    ptrs[ev[1]] = empty(ev[2], dtype=u8, device="npu")
            except oom_error:
                ooms += 1
                if first_oom is None:
                    first_oom = done
                if args.stop_on_oom:
                    break
            if sample:
                get_usage(0, uref)
                peak_emu = max(peak_emu, usage.malloc_bytes + usage.mapped_bytes)
        elif kind == "f":
            if raw:
                p = ptrs.pop(ev[1], None)
                if p is not None:
                    delete(p)
            else:
                ptrs.pop(ev[1], None)  # the tensor's last reference
        elif kind == "u":
            if ev[1] in ptrs:
                ptrs[ev[1]].record_stream(streams[ev[2]])
        else:
            streams[ev[1]].synchronize()
        done += 1
    t1 = time.perf_counter_ns()
    set_stream(streams[0])
    torch.npu.synchronize()
    if every:
        empty_cache()
    st = torch.npu.memory_stats(0)
    get_usage(0, uref)
    extra = {}
    if every:
        extra["empty_cache"] = [{"held": h, "needed": n} for h, n in kept]
        extra["kept_x"] = round(sum(h for h, _ in kept) / max(1, sum(n for _, n in kept)), 4)
        # A call with nothing live (n == 0) counts in the sum alone.
        extra["kept_x_worst"] = round(max((h / n for h, n in kept if n), default=1.0), 4)
    return extra | {
        "allocator": "torch_npu" if args.npualloc is None else "npualloc",
        "conf": conf_of(args) if args.npualloc is None else args.npualloc, "trace": os.path.basename(args.trace),
        "api": "raw" if raw else "tensor",
        "capacity": args.device_memory, "ops": len(events), "ops_replayed": done,
        "streams": len(streams), "peak_requested": peak_requested,
        "peak_reserved": torch.npu.max_memory_reserved(0), "peak_reserved_emu": peak_emu,
        "peak_allocated": torch.npu.max_memory_allocated(0),
        "num_device_alloc": st.get("num_device_alloc", 0), "num_device_free": st.get("num_device_free", 0),
        "num_alloc_retries": st.get("num_alloc_retries", 0), "num_ooms": st.get("num_ooms", 0),
        "ooms": ooms, "first_oom_op": first_oom,
        "calls": {c: emu.aclemu_call_count(c.encode()) for c in CALLS},
        "syncs": usage.syncs, "violations": emu.aclemu_violations(),
        "ns_per_op_python": round((t1 - t0) / max(done, 1), 1), "seconds": round((t1 - t0) / 1e9, 3),
    }


def child(args, capacity, stop_on_oom, no_emu_peak):
    """A replay in a fresh process (the emulator reads its capacity once)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--conf", args.conf, "--device-memory", str(capacity)]
    cmd += ["--tensors"] * args.tensors
    cmd += [] if args.alloc_conf is None else ["--alloc-conf", args.alloc_conf]
    cmd += [] if args.npualloc is None else ["--npualloc", args.npualloc]
    cmd += ["--stop-on-oom"] * stop_on_oom + ["--no-emu-peak"] * no_emu_peak + [args.trace]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln[7:] for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"replay at capacity {capacity} exited with {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(lines[-1])


def min_capacity(args, base):
    """Bisection as in scripts/peer-min-capacity.sh; returns (bytes, probes)."""
    probes = 0

    def fits(capacity):
        nonlocal probes
        probes += 1
        r = child(args, capacity, True, True)
        if args.verbose:
            print(f"probe {capacity}: ooms={r['ooms']} ({r['seconds']} s)", file=sys.stderr, flush=True)
        return r["ooms"] == 0

    lo, peak = base["peak_requested"], base["peak_reserved"]
    hi = peak + peak // 64 + MIB
    while not fits(hi):
        lo, hi = hi, hi * 2
        if hi > 1 << 40:
            raise RuntimeError("does not fit in 1 TiB")
    while hi - lo > max(MIB, lo // 200):
        mid = lo + (hi - lo) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi, probes


def size_arg(text):
    s = text.strip().lower().removesuffix("ib").removesuffix("b")
    shift = {"k": 10, "m": 20, "g": 30, "t": 40}.get(s[-1:], 0)
    try:
        n = int(s[:-1] if shift else s) << shift
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 900M, 64G, 123456)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"not a positive size: {text!r}")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--conf", choices=sorted(CONFS), default="default",
                    help="PYTORCH_NPU_ALLOC_CONF: none, or expandable_segments:True")
    ap.add_argument("--alloc-conf", metavar="CONF",
                    help="PYTORCH_NPU_ALLOC_CONF as given (instead of --conf), e.g. "
                         "expandable_segments:True,base_addr_aligned_kb:0")
    ap.add_argument("--device-memory", type=size_arg, default=64 << 30, metavar="SIZE",
                    help="the emulated device's capacity (ACLEMU_DEVICE_MEMORY), default 64G")
    ap.add_argument("--tensors", action="store_true",
                    help="allocate uint8 tensors (torch.empty on the event's stream) instead of raw pointers; "
                         "needed for 'u' (Tensor.record_stream)")
    ap.add_argument("--stop-on-oom", action="store_true", help="end the replay at the first OOM")
    ap.add_argument("--no-emu-peak", action="store_true", help="do not read the emulator's usage per allocation")
    ap.add_argument("--min-capacity", action="store_true", help="also bisect the capacity (child processes)")
    ap.add_argument("--npualloc", metavar="CONF",
                    help="replay through npualloc with this config (\"\" for its defaults) instead of torch_npu's own")
    ap.add_argument("--empty-cache-every", type=int, default=0, metavar="N",
                    help="call torch.npu.empty_cache() after every N events and at the end, and report what it keeps")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each bisection probe on stderr")
    args = ap.parse_args()
    if not os.path.isfile(args.trace):
        ap.error(f"no such trace: {args.trace}")
    try:
        if args.min_capacity:
            parse_trace(args.trace, args.tensors)  # a bad trace fails here, not in a child
            t0 = time.monotonic()
            result = child(args, args.device_memory, args.stop_on_oom, args.no_emu_peak)
            if result["ooms"]:
                raise RuntimeError(f"the trace does not fit in {args.device_memory} bytes; no bisection")
            result["min_capacity"], result["min_capacity_probes"] = min_capacity(args, result)
            result["min_capacity_x_live"] = round(result["min_capacity"] / result["peak_requested"], 4)
            result["min_capacity_seconds"] = round(time.monotonic() - t0, 1)
        else:
            result = replay(args)
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
