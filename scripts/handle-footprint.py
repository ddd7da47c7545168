#!/usr/bin/env python3
"""Peak reserved of a trace with handles mapped ahead, and what cheap page
moves could save: a model of the expandable backing's growth.

Every (pool, stream) has a range of 2 MiB pages. A request goes to the best
fit (scripts/placement-footprint.py); if its pages are not all mapped, to
the first free block (smallest first) holding a mapped run that fits; else
at the best fit, where each run of unmapped pages gets a handle: a cached
one, else a fresh one of half the peak of allocated bytes, 32 to 48 MiB (at
most 8 MiB in the small pool), mapped ahead over the free block's unmapped
pages (the default rule of src/core/backing/expandable/growth.rs, below
3.5 GiB allocated), while the stream has served fewer than 1000 requests per
fresh handle, or its fresh handles make a burst: this one is the 5th within
5000 requests (both pools; Note [mapping ahead while growth is frequent]).
Prints peak physical bytes over peak requested, fresh
handles (= physical allocations) and maps.

Variants:
  --ahead-while N   map ahead while the stream served fewer than N requests
                    per fresh handle (0: always)
  --burst N K       ...or while a fresh handle is the K-th of the stream's
                    within its last N requests (default 5000 5; 0 0: never)
  --no-ahead        a fresh handle covers only the run it was made for
  --bound-ahead A   a fresh handle maps ahead only while physical bytes stay
                    within (1 + A) x allocated bytes (request included)
  --pace K          a fresh handle maps nothing ahead when the previous fresh
                    handle was made K or more requests before
  --moves           a handle lying wholly inside free blocks of the range may
                    be mapped a second time where a placement lacks pages
                    (no synchronization: its old address stays mapped, out
                    of use, until the allocator synchronizes anyway; the
                    driver counts mappings per handle), instead of a fresh
                    handle; counted as a map, no physical allocation

scripts/handle-moves.py builds on this model: handle-aware placement, handles
of their own for large blocks, and moves of wholly free handles, against each
trace's call budget.

    scripts/handle-footprint.py TRACE.gz... [--no-ahead] [--bound-ahead A] [--pace K] [--moves]
    scripts/handle-footprint.py --table TRACE.gz...
    scripts/handle-footprint.py --check REPLAY [--ahead-while N] [--burst N K] TRACE.gz...   # the rule against npualloc-replay
"""
import argparse
import bisect
import importlib.util
import json
import os
import subprocess
import sys

_spec = importlib.util.spec_from_file_location(
    "placement_footprint", os.path.join(os.path.dirname(os.path.abspath(__file__)), "placement-footprint.py"))
pf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pf)

MIB = 1 << 20
PAGE = 2 * MIB
SMALL_CAP_PAGES = 4


class Range:
    def __init__(self, small):
        self.small = small
        self.free = [(0, 1 << 50)]
        self.page = {}  # mapped page -> handle id
        self.handles = {}  # handle id -> (first page, pages)
        self.stream = None
        self.requests = self.fresh = 0

    def block_at(self, addr):
        i = bisect.bisect(self.free, (addr, 1 << 60)) - 1
        if i >= 0 and self.free[i][0] <= addr < self.free[i][0] + self.free[i][1]:
            return i
        return None

    def take(self, addr, size):
        i = self.block_at(addr)
        a, sz = self.free[i]
        assert addr + size <= a + sz
        rest = []
        if addr > a:
            rest.append((a, addr - a))
        if addr + size < a + sz:
            rest.append((addr + size, a + sz - addr - size))
        self.free[i:i + 1] = rest

    def release(self, addr, size):
        pf.Range.release(self, addr, size)

    def top(self):
        return max(self.page, default=-1)

    def mapped_run_fit(self, size):
        """A free block (smallest first) holding `size` mapped bytes: their address."""
        for a, sz in sorted(self.free, key=lambda b: (b[1], b[0])):
            if sz < size:
                continue
            # Nothing is mapped past the highest handle.
            lo, hi = a, min(a + sz, (self.top() + 1) * PAGE)
            p = lo // PAGE
            while p * PAGE < hi:
                if p not in self.page:
                    p += 1
                    continue
                start = max(p * PAGE, lo)
                while p in self.page and p * PAGE < hi:
                    p += 1
                if min(p * PAGE, hi) - start >= size:
                    return start
        return None


class Model:
    def __init__(self, ahead=True, bound=None, pace=None, moves=False, ahead_while=1000, burst=(5000, 5), own=True):
        self.ahead, self.bound, self.pace, self.moves = ahead, bound, pace, moves
        # A large request as large as a fresh handle maps exactly the runs it
        # lacks, one handle each, nothing ahead (Note [handles of their own]).
        self.own = own
        self.ahead_while = ahead_while
        self.burst = burst  # (N, K) or None
        self.stamps = {}  # stream -> stream request counts at its fresh handles
        self.ranges = {}
        self.phys = self.peak_phys = 0
        self.fresh = self.maps = self.moved = 0
        self.allocated = self.allocated_peak = self.pending = 0
        self.requests = self.last_fresh = 0
        self.cache = []  # pages of cached handles
        self.next_id = 0

    def fresh_pages(self, small):
        if small:
            return SMALL_CAP_PAGES
        b = min(max(32 * MIB, max(self.allocated_peak, self.allocated + self.pending) // 2), 48 * MIB)
        return b // PAGE

    def movable(self, r, lo, hi, avail):
        """The largest handle of `r` wholly inside one free block, outside [lo, hi), of at most `avail` pages."""
        best = None
        for hid, (head, units) in r.handles.items():
            if units > avail:
                continue
            a, b = head * PAGE, (head + units) * PAGE
            if not (b <= lo or a >= hi):
                continue
            i = r.block_at(a)
            if i is None or r.free[i][0] + r.free[i][1] < b:
                continue
            if best is None or units > best[1]:
                best = (hid, units)
        return best

    def cover(self, r, addr, size, room_end):
        first, end = addr // PAGE, (addr + size - 1) // PAGE + 1
        p = first
        while p < end:
            if p in r.page:
                p += 1
                continue
            run = 1
            while p + run < end and p + run not in r.page:
                run += 1
            # A cached handle may reach past the run by up to the 4 MiB floor.
            avail = run
            while p + avail < min(room_end, p + max(run, 2)) and p + avail not in r.page:
                avail += 1
            units = None
            fits = [u for u in self.cache if u <= run] or [u for u in self.cache if u <= avail]
            if fits:
                units = max(u for u in fits if u <= run) if any(u <= run for u in fits) else min(fits)
            if units is None and self.moves and not r.small:
                found = self.movable(r, addr, addr + size, avail)
                if found:
                    hid, u = found
                    head, _ = r.handles.pop(hid)
                    for q in range(head, head + u):
                        del r.page[q]
                    # Its old address stays mapped, out of use: a block
                    # nobody frees.
                    r.take(head * PAGE, u * PAGE)
                    self.moved += 1
                    units = u
                    self.cache.append(u)
            if units is not None:
                self.cache.remove(units)
            else:
                fp = self.fresh_pages(r.small)
                quiet = self.pace is not None and self.requests - self.last_fresh >= self.pace
                if self.ahead_while:
                    mine = [x for x in self.ranges.values() if x.stream == r.stream]
                    requests, fresh = sum(x.requests for x in mine), sum(x.fresh for x in mine)
                    quiet = quiet or (fresh + 1) * self.ahead_while <= requests
                    stamps = self.stamps.setdefault(r.stream, [])
                    if quiet and self.burst and self.burst[1]:
                        n, k = self.burst
                        recent = sum(1 for t in stamps[-(k - 1):] if requests - t < n) if k > 1 else 0
                        quiet = recent + 1 < k
                    stamps.append(requests)
                self.last_fresh = self.requests
                # As the core: at most a fresh handle's pages, over the run
                # and, mapped ahead, the free block's unmapped pages after it;
                # a request of its own takes the run, whole.
                units = run
                own = self.own and not r.small and size >= fp * PAGE
                # With both --bound-ahead and --pace, the bound holds only
                # after a quiet spell.
                paced_bound = self.bound is not None and self.pace is not None
                if own:
                    pass
                elif self.ahead and (not quiet or paced_bound):
                    while units < fp and p + units < room_end and p + units not in r.page:
                        units += 1
                    if self.bound is not None and (quiet or not paced_bound):
                        cap = int((1 + self.bound) * (self.allocated + self.pending)) - self.phys
                        units = max(run, min(units, cap // PAGE))
                if not own:
                    units = min(units, fp)
                self.fresh += 1
                r.fresh += 1
                self.phys += units * PAGE
                self.peak_phys = max(self.peak_phys, self.phys)
            self.next_id += 1
            r.handles[self.next_id] = (p, units)
            for q in range(p, p + units):
                r.page[q] = self.next_id
            self.maps += 1
            p += units

    def place(self, r, size):
        i = min(range(len(r.free)), key=lambda j: (r.free[j][1] < size, r.free[j][1], j))
        addr, sz = r.free[i]
        if all(q in r.page for q in range(addr // PAGE, (addr + size - 1) // PAGE + 1)):
            r.take(addr, size)
            return addr
        at = r.mapped_run_fit(size)
        if at is not None:
            r.take(at, size)
            return at
        self.cover(r, addr, size, (addr + sz) // PAGE)
        r.take(addr, size)
        return addr

    def range_key(self, small, size, stream):
        """The range a request goes to: one per pool and stream."""
        return (small, stream)

    def run(self, evs):
        live, cur, peak = {}, 0, 0
        for is_alloc, ident, n, stream in evs:
            if is_alloc:
                size = pf.rounded(n)
                small = size <= MIB
                key = self.range_key(small, size, stream)
                r = self.ranges.get(key)
                if r is None:
                    r = self.ranges[key] = Range(small)
                    r.stream = stream
                self.requests += 1
                r.requests += 1
                self.pending = size
                live[ident] = (key, self.place(r, size), size, n)
                self.pending = 0
                self.allocated += size
                self.allocated_peak = max(self.allocated_peak, self.allocated)
                cur += n
                peak = max(peak, cur)
            else:
                key, addr, size, n = live.pop(ident)
                self.ranges[key].release(addr, size)
                self.allocated -= size
                cur -= n
        return self.peak_phys / peak


TABLE = [
    ("mapped ahead (the rule before)", dict(ahead_while=0)),
    ("ahead while < 1000 requests per fresh handle, or 5 within 5000 (the default)", {}),
    ("ahead while < 1000 requests per fresh handle (no bursts)", dict(burst=None)),
    ("ahead while < 250 requests per fresh handle", dict(ahead_while=250, burst=None)),
    ("ahead while < 4000 requests per fresh handle", dict(ahead_while=4000, burst=None)),
    ("... or 3 within 3000 requests", dict(burst=(3000, 3))),
    ("... or 4 within 4000 requests", dict(burst=(4000, 4))),
    ("... or 5 within 1000 requests", dict(burst=(1000, 5))),
    ("... or 5 within 20000 requests", dict(burst=(20000, 5))),
    ("... or 8 within 8000 requests", dict(burst=(8000, 8))),
    ("nothing ahead", dict(ahead=False, ahead_while=0)),
    ("ahead within 1.05x allocated", dict(bound=0.05, ahead_while=0)),
    ("ahead within 1.10x allocated", dict(bound=0.10, ahead_while=0)),
    ("ahead within 1.20x allocated", dict(bound=0.20, ahead_while=0)),
    ("nothing ahead after 1000 requests without growth", dict(pace=1000, ahead_while=0)),
    ("ahead within 1.10x after 200 requests without growth", dict(bound=0.10, pace=200, ahead_while=0)),
    ("ahead within 1.10x after 1000 requests without growth", dict(bound=0.10, pace=1000, ahead_while=0)),
    ("ahead, free handles mapped again (no sync)", dict(moves=True, ahead_while=0)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="+")
    ap.add_argument("--no-ahead", action="store_true")
    ap.add_argument("--bound-ahead", type=float, default=None)
    ap.add_argument("--pace", type=int, default=None)
    ap.add_argument("--moves", action="store_true")
    ap.add_argument("--no-own", action="store_true", help="no handles of their own (the rule before)")
    ap.add_argument("--ahead-while", type=int, default=1000)
    ap.add_argument("--burst", nargs=2, type=int, metavar=("N", "K"), default=[5000, 5])
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--check", metavar="REPLAY", help="compare the default rule with npualloc-replay's first pass")
    args = ap.parse_args()
    evs = [(t.split("/")[-1].split(".")[0], pf.events(t)) for t in args.trace]
    if args.check:
        bad = 0
        for (name, ev), path in zip(evs, args.trace):
            out = subprocess.run([args.check, "--json", "--repeat", "1", "--no-min-capacity", path],
                                 check=True, capture_output=True, text=True).stdout
            real = json.loads(out)["reports"][0]
            m = Model(ahead_while=args.ahead_while, burst=tuple(args.burst), own=not args.no_own)
            ratio = m.run(ev)
            ok = m.fresh == real["physical_mallocs"] and abs(ratio - real["ratio"]) <= 0.002
            bad += not ok
            print(f"{name}: model {ratio:.3f} with {m.fresh} handles, replay {real['ratio']:.3f} with "
                  f"{real['physical_mallocs']}: {'same' if ok else 'DIFFERENT'}")
        sys.exit(1 if bad else 0)
    if args.table:
        print("| handles | " + " | ".join(n for n, _ in evs) + " |")
        print("|---|" + "---:|" * len(evs))
        for label, kw in TABLE:
            cells = []
            for _, ev in evs:
                m = Model(**{"own": False, **kw})
                ratio = m.run(ev)
                cells.append(f"{ratio:.3f} ({m.fresh}/{m.maps}{f', {m.moved} moved' if m.moved else ''})")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
        return
    for name, ev in evs:
        m = Model(not args.no_ahead, args.bound_ahead, args.pace, args.moves, args.ahead_while,
                  tuple(args.burst), own=not args.no_own)
        ratio = m.run(ev)
        print(f"{name}: peak physical / peak requested {ratio:.3f}, {m.fresh} fresh handles, {m.maps} maps, "
              f"{m.moved} moved")


if __name__ == "__main__":
    main()
