#!/usr/bin/env python3
"""Footprint of a trace under simple placement rules, without page moves.

Replays an acl-trace file (see traces/FORMAT.md) through one address range per
pool (small: <= 1 MiB, large; optionally a third for blocks >= HUGE MiB) with
best fit or address-ordered first fit, freed neighbours merging, and counts the
2 MiB pages any block ever touched: what an expandable range maps when it
never moves a page. Prints that footprint over the trace's peak requested
bytes, and the growths: allocations that touch a page no block touched
before (the fewest mapping calls a range can make without mapping ahead,
whatever its handle size). With --two-ended MIB, large-pool blocks of at least MIB go to the top
end of the highest free hole that fits (the range fills from both ends).

    scripts/placement-footprint.py TRACE.gz [--first-fit] [--huge MIB] [--two-ended MIB]
"""
import argparse
import bisect
import gzip

PAGE = 2 << 20


def rounded(n):
    return max(512, (n + 511) // 512 * 512)


class Range:
    def __init__(self, first_fit, top_from=0):
        self.free = [(0, 1 << 50)]  # (address, size), by address
        self.touched = set()
        self.growths = 0
        self.first_fit = first_fit
        self.top_from = top_from

    def alloc(self, size):
        if self.top_from and size >= self.top_from:
            return self.alloc_top(size)
        pick = None
        for i, (_, sz) in enumerate(self.free):
            if sz >= size:
                if self.first_fit:
                    pick = i
                    break
                if pick is None or sz < self.free[pick][1]:
                    pick = i
        addr, sz = self.free[pick]
        if sz == size:
            self.free.pop(pick)
        else:
            self.free[pick] = (addr + size, sz - size)
        self.touch(addr, size)
        return addr

    def touch(self, addr, size):
        pages = set(range(addr // PAGE, (addr + size - 1) // PAGE + 1))
        if not pages <= self.touched:
            self.growths += 1
            self.touched |= pages

    def alloc_top(self, size):
        i = max(i for i, (_, sz) in enumerate(self.free) if sz >= size)
        addr, sz = self.free[i]
        at = addr + sz - size
        if sz == size:
            self.free.pop(i)
        else:
            self.free[i] = (addr, sz - size)
        self.touch(at, size)
        return at

    def release(self, addr, size):
        i = bisect.bisect(self.free, (addr, 0))
        self.free.insert(i, (addr, size))
        if i + 1 < len(self.free) and addr + size == self.free[i + 1][0]:
            self.free[i] = (addr, size + self.free[i + 1][1])
            self.free.pop(i + 1)
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == addr:
            self.free[i - 1] = (self.free[i - 1][0], self.free[i - 1][1] + self.free[i][1])
            self.free.pop(i)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--first-fit", action="store_true")
    ap.add_argument("--huge", type=int, default=0, help="MiB; blocks this large get their own range")
    ap.add_argument("--two-ended", type=int, default=0, help="MiB; large blocks this large fill from the top")
    args = ap.parse_args()
    ranges, live, cur, peak = {}, {}, 0, 0
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        for line in f:
            if line.startswith("#"):
                continue
            op = line.split()
            if op[0] == "a":
                n = int(op[2])
                r = rounded(n)
                kind = "small" if r <= 1 << 20 else "huge" if args.huge and r >= args.huge << 20 else "large"
                top_from = args.two_ended << 20 if kind == "large" else 0
                rng = ranges.setdefault(kind, Range(args.first_fit, top_from))
                live[op[1]] = (kind, rng.alloc(r), r, n)
                cur += n
                peak = max(peak, cur)
            elif op[0] == "f":
                kind, addr, r, n = live.pop(op[1])
                ranges[kind].release(addr, r)
                cur -= n
    pages = sum(len(r.touched) for r in ranges.values())
    growths = sum(r.growths for r in ranges.values())
    print(f"footprint {pages * PAGE / (1 << 20):.1f} MiB / peak requested {peak / (1 << 20):.1f} MiB = {pages * PAGE / peak:.3f}, "
          f"{growths} growths")


if __name__ == "__main__":
    main()
