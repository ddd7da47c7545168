#!/usr/bin/env python3
"""Records acl-trace v1 files from transformers model code on fake tensors.

    python tools/record/record.py serve-qwen2-7b traces/scale/serve-qwen2-7b.trace.gz
    python tools/record/record.py train-llama2-7b traces/scale/train-llama2-7b.trace.gz
    python tools/record/record.py validate           # fake tensors against the profiler

Needs torch and transformers (README.md in this directory).
"""

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import transformers  # noqa: E402

from acl_record import scenarios  # noqa: E402
from acl_record.tracker import fake_recording  # noqa: E402

# Requests of a serving run: (batch, prompt tokens, generated tokens).
SERVE_REQUESTS = [(1, 1536, 48), (4, 384, 32), (1, 3072, 24), (8, 128, 40), (2, 768, 32), (1, 200, 48)]

PRESETS = {
    "serve-qwen2-7b": dict(kind="serve", model="qwen2-7b", requests=SERVE_REQUESTS),
    "serve-llama2-7b": dict(kind="serve", model="llama-2-7b", requests=SERVE_REQUESTS),
    "train-llama2-7b": dict(kind="train", model="llama-2-7b", steps=3, batch=1, seq=4096),
    "train-qwen2-7b-8l": dict(kind="train", model="qwen2-7b", steps=3, batch=2, seq=2048, layers=8),
}


def describe(name, p):
    versions = f"torch {torch.__version__.split('+')[0]}, transformers {transformers.__version__}"
    common = f"fake tensors (FakeTensorMode, storage lifetimes), random weights, {versions}"
    if p["kind"] == "serve":
        reqs = ", ".join(f"{b}x{n}+{g}" for b, n, g in p["requests"])
        return (
            f"tools/record/record.py {name}: transformers {p['model']} config ({p.get('layers') or 'all'} layers), "
            f"greedy generation with DynamicCache, requests batch x prompt + new tokens: {reqs}; "
            f"prompts copied on stream 1 and recorded on stream 0, host wait on stream 0 per token; {common}"
        )
    return (
        f"tools/record/record.py {name}: transformers {p['model']} config ({p.get('layers') or 'all'} layers), bf16, "
        f"{p['steps']} training steps batch {p['batch']} sequence {p['seq']}, gradient checkpointing (non-reentrant), "
        f"AdamW (for-loop), next batch prefetched on stream 1 and recorded on stream 0, 25 MiB gradient buckets "
        f"flattened, recorded on stream 2 for the all-reduce, host wait on stream 2 per step; {common}"
    )


def record(name, out):
    p = PRESETS[name]
    start = time.time()
    with fake_recording() as tracker:
        if p["kind"] == "serve":
            kept = scenarios.serve(tracker, p["model"], p["requests"], p.get("layers"))
        else:
            kept = scenarios.train(tracker, p["model"], p["steps"], p["batch"], p["seq"], p.get("layers"))
    ev = tracker.events
    ev.write(out, describe(name, p))
    del kept
    print(
        f"{out}: {len(ev.lines)} events, {len(ev.alloc_sizes())} allocations, "
        f"peak live {ev.peak / 2**30:.2f} GiB, {time.time() - start:.0f} s"
    )


def validate():
    from acl_record.validate import compare

    cases = {
        "tiny-llama serve": lambda tr: scenarios.serve(tr, "tiny-llama", [(1, 40, 4), (2, 17, 3)]),
        "gpt2 serve": lambda tr: scenarios.serve(tr, "gpt2", [(1, 64, 8), (4, 32, 8)]),
        "tiny-llama train": lambda tr: scenarios.train(tr, "tiny-llama", 2, 2, 32, dtype=None, bucket_mib=1),
        "gpt2 train": lambda tr: scenarios.train(tr, "gpt2", 2, 2, 128, dtype=None),
    }
    for label, fn in cases.items():
        print(label, compare(fn))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", choices=sorted(PRESETS) + ["validate"])
    ap.add_argument("out", nargs="?")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.preset == "validate":
        validate()
    else:
        if not args.out:
            ap.error("an output path is needed")
        record(args.preset, args.out)


if __name__ == "__main__":
    main()
