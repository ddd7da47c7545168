#!/usr/bin/env python3
"""What empty_cache keeps: each trace replayed through torch_npu's own
allocator (expandable segments) and through npualloc with each
``max_handle_mb`` (scripts/replay-torch-npu.py, ``--empty-cache-every``, in
the real torch_npu on the ACL emulator), and one markdown table row per
trace and allocator: the memory held after the calls over the 2 MiB pages
live blocks touch (all calls, and the worst one), and the physical handles
mapped (one aclrtMapMem each).

    PY=$(bash scripts/setup-torch-npu.sh | tail -n 1)
    python3 scripts/bench-empty-cache.py --python "$PY" [--calls 15] [--jobs 2] TRACE...

Each replay calls empty_cache after every (events / calls) events and at the
end. With NPUALLOC_LIBRARY set, npualloc's replays use that library.
"""

import argparse
import concurrent.futures
import gzip
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = [("torch_npu, expandable", ["--conf", "expandable"]),
           ("npualloc", ["--npualloc", ""]),
           ("npualloc, max_handle_mb:20", ["--npualloc", "max_handle_mb:20"]),
           ("npualloc, max_handle_mb:4", ["--npualloc", "max_handle_mb:4"]),
           ("npualloc, max_handle_mb:2", ["--npualloc", "max_handle_mb:2"])]


def events(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return sum(1 for line in f if line.strip() and not line.startswith("#"))


def replay(python, trace, every, extra):
    cmd = [python, os.path.join(HERE, "replay-torch-npu.py"), "--no-emu-peak", "--empty-cache-every", str(every),
           *extra, trace]
    # The replay sets torch_npu's config itself; torch_npu refuses its two variables together.
    drop = ("NPUALLOC_ACL_LIBRARY", "NPUALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln[len("RESULT "):] for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="the python of the venv scripts/setup-torch-npu.sh makes")
    ap.add_argument("--calls", type=int, default=15, help="empty_cache calls spread over each trace (default 15)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args()
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for trace in args.traces:
            every = max(1, events(trace) // args.calls)
            for name, extra in CONFIGS:
                jobs[(trace, name)] = pool.submit(replay, args.python, trace, every, extra)
    print("| trace | allocator | kept / pages touched | worst call | handles mapped |")
    print("|---|---|---|---|---|")
    for trace in args.traces:
        for name, _ in CONFIGS:
            r = jobs[(trace, name)].result()
            label = os.path.basename(trace).removesuffix(".gz").removesuffix(".trace")
            print(f"| {label} | {name} | {r['kept_x']:.3f} | {r['kept_x_worst']:.2f} | "
                  f"{r['calls']['aclrtMapMem']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
