#!/usr/bin/env python3
"""Footprint of a trace under simple placement rules, without page moves.

Replays an acl-trace file (see traces/FORMAT.md) through one address range per
pool (small: <= 1 MiB, large; optionally more ranges by size, and one per
stream) with a placement policy, freed neighbours merging, and counts the
2 MiB pages any block ever touched: what an expandable range maps when it
never moves a page. Prints that footprint over the trace's peak requested
bytes, and the growths: allocations that touch a page no block touched
before (the fewest mapping calls a range can make without mapping ahead,
whatever its handle size).

Policies (--policy): best (the smallest free block that fits, lowest address
among equals: what the core's free index does), first (address-ordered first
fit), worst (the largest free block below the range's top), last (the
highest-addressed fitting block below the top), high (best fit, placed at the
block's end rather than its start). --segregate MIB[,MIB...] gives blocks
above each bound a range of their own (as PyTorch's small pool, for more
sizes); --two-ended MIB puts large-pool blocks of at least MIB at the top end
of the highest free block that fits (the range fills from both ends);
--round page|divN rounds large-pool blocks to whole pages or to N divisions
of a power of two (PyTorch's roundup_power2_divisions); --per-stream gives
every stream its own ranges (as the core does).

scripts/handle-footprint.py models the handles mapped ahead on top of best fit.

    scripts/placement-footprint.py TRACE.gz [--policy P] [--segregate MIB,...]
        [--two-ended MIB] [--round page|divN] [--per-stream]
    scripts/placement-footprint.py --table TRACE.gz...   # every variant above, one row each
"""
import argparse
import bisect
import gzip

PAGE = 2 << 20
MIB = 1 << 20


def rounded(n):
    return max(512, (n + 511) // 512 * 512)


def large_rounding(rule):
    """A function rounding a large-pool block (already a 512 multiple)."""
    if rule in (None, "512"):
        return lambda r: r
    if rule == "page":
        return lambda r: (r + PAGE - 1) // PAGE * PAGE
    if rule.startswith("div"):
        d = int(rule[3:])

        def div(r):
            p = 1 << (r.bit_length() - 1)
            if p == r:
                return r
            step = max(512, p // d)
            return (r + step - 1) // step * step

        return div
    raise SystemExit(f"unknown rounding {rule!r}")


class Range:
    """One address range: free blocks by address, the last one unbounded."""

    def __init__(self, policy="best", top_from=0):
        self.free = [(0, 1 << 50)]  # (address, size), by address
        self.touched = set()
        self.growths = 0
        self.policy = policy
        self.top_from = top_from

    def pick(self, size):
        fr = self.free
        fits = [i for i, (_, sz) in enumerate(fr) if sz >= size]
        below_top = fits[:-1] if fits[-1] == len(fr) - 1 else fits
        p = self.policy
        if p == "first":
            return fits[0]
        if p == "worst" and below_top:
            return max(below_top, key=lambda i: fr[i][1])
        if p == "last" and below_top:
            return below_top[-1]
        if p in ("worst", "last"):
            return fits[-1]
        # best and high: the smallest, lowest address among equals
        return min(fits, key=lambda i: (fr[i][1], i))

    def alloc(self, size):
        fr = self.free
        if self.top_from and size >= self.top_from:
            i = max(i for i, (_, sz) in enumerate(fr) if sz >= size)
            at_end = True
        else:
            i = self.pick(size)
            at_end = self.policy == "high" and i != len(fr) - 1
        addr, sz = fr[i]
        at = addr + sz - size if at_end else addr
        if sz == size:
            fr.pop(i)
        elif at_end:
            fr[i] = (addr, sz - size)
        else:
            fr[i] = (addr + size, sz - size)
        self.touch(at, size)
        return at

    def touch(self, addr, size):
        pages = set(range(addr // PAGE, (addr + size - 1) // PAGE + 1))
        if not pages <= self.touched:
            self.growths += 1
            self.touched |= pages

    def release(self, addr, size):
        i = bisect.bisect(self.free, (addr, 0))
        self.free.insert(i, (addr, size))
        if i + 1 < len(self.free) and addr + size == self.free[i + 1][0]:
            self.free[i] = (addr, size + self.free[i + 1][1])
            self.free.pop(i + 1)
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == addr:
            self.free[i - 1] = (self.free[i - 1][0], self.free[i - 1][1] + self.free[i][1])
            self.free.pop(i)


def events(path):
    """(is_alloc, id, bytes, stream) per a/f line."""
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                continue
            op = line.split()
            if op[0] == "a":
                out.append((True, op[1], int(op[2]), op[3] if len(op) > 3 else "0"))
            elif op[0] == "f":
                out.append((False, op[1], 0, None))
    return out


def footprint(evs, policy="best", segregate=(), two_ended=0, rounding=None, per_stream=False):
    """(footprint / peak requested, growths) of one replay."""
    bounds = (MIB,) + tuple(b * MIB for b in segregate)
    round_large = large_rounding(rounding)
    ranges, live, cur, peak = {}, {}, 0, 0
    for is_alloc, ident, n, stream in evs:
        if is_alloc:
            r = rounded(n)
            kind = sum(1 for b in bounds if r > b)
            if kind > 0:
                r = round_large(r)
            key = (kind, stream if per_stream else "0")
            rng = ranges.get(key)
            if rng is None:
                rng = ranges[key] = Range(policy, two_ended * MIB if kind > 0 else 0)
            live[ident] = (key, rng.alloc(r), r, n)
            cur += n
            peak = max(peak, cur)
        else:
            key, addr, r, n = live.pop(ident)
            ranges[key].release(addr, r)
            cur -= n
    pages = sum(len(r.touched) for r in ranges.values())
    return pages * PAGE / peak, sum(r.growths for r in ranges.values()), peak


# The placement rules --table compares (BENCHMARKS.md, "Models of placement and growth").
TABLE = [
    ("best fit (the core's rule)", {}),
    ("best fit, a range per stream", dict(per_stream=True)),
    ("address-ordered first fit", dict(policy="first")),
    ("worst fit", dict(policy="worst")),
    ("highest-addressed fit", dict(policy="last")),
    ("best fit, at the block's end", dict(policy="high")),
    ("ranges for <= 1, <= 4, > 4 MiB", dict(segregate=(4,))),
    ("ranges for <= 1, <= 10, > 10 MiB", dict(segregate=(10,))),
    ("ranges for <= 1, <= 32, > 32 MiB", dict(segregate=(32,))),
    ("blocks >= 8 MiB from the top end", dict(two_ended=8)),
    ("blocks >= 32 MiB from the top end", dict(two_ended=32)),
    ("large blocks rounded to 2 MiB pages", dict(rounding="page")),
    ("large blocks rounded to 8 divisions", dict(rounding="div8")),
    ("large blocks rounded to 4 divisions", dict(rounding="div4")),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="+")
    ap.add_argument("--policy", default="best", choices=["best", "first", "worst", "last", "high"])
    ap.add_argument("--first-fit", action="store_true", help="same as --policy first")
    ap.add_argument("--segregate", default="", help="MiB bounds, comma-separated: a range above each")
    ap.add_argument("--huge", type=int, default=0, help="MiB; same as --segregate MIB")
    ap.add_argument("--two-ended", type=int, default=0, help="MiB; large blocks this large fill from the top")
    ap.add_argument("--round", default=None, help="page or divN: rounding of large-pool blocks")
    ap.add_argument("--per-stream", action="store_true")
    ap.add_argument("--table", action="store_true", help="a markdown table of every variant over the traces")
    args = ap.parse_args()
    if args.table:
        names = [t.split("/")[-1].split(".")[0] for t in args.trace]
        evs = [events(t) for t in args.trace]
        print("| placement | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for label, kw in TABLE:
            cells = []
            for ev in evs:
                ratio, growths, _ = footprint(ev, **kw)
                cells.append(f"{ratio:.3f} ({growths})")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
        return
    seg = tuple(int(x) for x in args.segregate.split(",") if x) + ((args.huge,) if args.huge else ())
    policy = "first" if args.first_fit else args.policy
    for t in args.trace:
        ratio, growths, peak = footprint(events(t), policy, seg, args.two_ended, args.round, args.per_stream)
        print(f"footprint {ratio * peak / MIB:.1f} MiB / peak requested {peak / MIB:.1f} MiB = {ratio:.3f}, "
              f"{growths} growths")


if __name__ == "__main__":
    main()
