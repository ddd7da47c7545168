#!/usr/bin/env python3
"""Handle-aware placement and moves of whole handles, on top of the model of
scripts/handle-footprint.py (the default growth rule, exact against the
replay), against each trace's call budget.

A handle (one aclrtMallocPhysical) is mapped whole, so it can move only when
every one of its pages lies in free blocks of its range ("wholly free"). A
move replaces a fresh handle where a placement lacks pages. Kinds:

  nosync  the wholly free handle is mapped a second time where the request
          needs it (1 call); its old address stays mapped, out of use (a
          block nobody frees), until the allocator synchronizes anyway; the
          request's own stream is the range's stream, so stream order covers
          the work still queued on the old address
  sync    the range's stream is synchronized (2.5 calls, once per request
          that moves), the handle unmapped (1) and mapped at the new
          address (1); its old address becomes free, unmapped, again

Placement variants (--place):

  best    the core's best fit (handle-footprint.py)
  keep    best fit, but a placement that would touch a wholly free handle is
          taken only when no other placement needs no growth: among free
          blocks, best fit over placements touching no wholly free handle
          (fully mapped, at the block's start, else the first mapped run
          that fits), then the default's steps
  choose  best fit; where that would grow, the fitting free block that
          needs the fewest fresh pages once wholly free handles are moved
          in (best fit among equals)
  pack    keep, and among fully mapped placements the one whose handles
          hold the fewest free pages (the fullest handles first: frees
          gather in the emptier handles), best fit breaking ties
  align   handle-aligned placement: best fit's block; where the request's
          pages are all mapped there, it starts at the block's start, at a
          handle's start or at a handle's end less its size, whichever
          leaves the most pages in wholly free handles (the block's start
          among equals), so a freed handle stays whole for a later move
  alignpage  align, trying every page boundary in the block (the same
          figures on the five traces: the handle boundaries are the ones
          that matter)
  aligntop   align only in the range's top free block
  topend  best fit; in the top free block, a request its mapped part holds
          goes to that part's high end

--own-align page|fresh (with --place align): a request that grows with
handles of its own starts at the first page boundary of best fit's block
(page), or past the range's mapped pages in the top block (fresh), so its own
handles hold it whole. --per-request N: at most N moves per request, the rest
fresh.

--scale F multiplies every request's bytes by F: how much a figure rests on
the trace's exact sizes. --force ID=MIB,... places the named large-pool
requests at the given addresses (an offline layout; the rest by the rule),
to show what a placement knowing the future would hold.

--exact MIB ("own handles"): a fresh handle made for a large-pool request of
at least MIB maps only the run that request lacks (no mapping ahead; still at
most a fresh handle's 48 MiB, or with --whole one handle per run), so the
block and its handles are freed together. --pick: the wholly free handle a
move takes, the largest that fits in the free room from the run's start
(largest) or the smallest covering the run (fit). --big MIB: requests of at
least MIB get a range of their own per stream, with own handles.

Calls, as in BENCHMARKS.md, "Models of placement and growth": each fresh
handle 2 (physical allocation and map), each move 1 (nosync) or 2 (sync) and
2.5 per synchronization, one reservation per range; the old addresses the
nosync moves leave mapped cost one unmap each when they are finally
released, listed apart ("deferred").

    scripts/handle-moves.py TRACE.gz... [--place best|keep|choose|pack|align|alignpage|aligntop|topend]
        [--moves nosync|sync] [--exact MIB [--whole]] [--pick largest|fit] [--big MIB]
        [--own-align page|fresh] [--per-request N] [--scale F] [--force ID=MIB,...]
    scripts/handle-moves.py --table [--rows A:B] TRACE.gz...   # every variant, a row each
    scripts/handle-moves.py --self-test                       # one move, checked by hand
"""
import argparse
import bisect
import importlib.util
import os
import sys

_spec = importlib.util.spec_from_file_location(
    "handle_footprint", os.path.join(os.path.dirname(os.path.abspath(__file__)), "handle-footprint.py"))
hf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hf)
pf = hf.pf

MIB, PAGE = hf.MIB, hf.PAGE
FAR = 1 << 40  # the free block at a range's top is unbounded

# Calls each trace can spend under equal costs: events x (half the faster
# PyTorch configuration's ns/op less npualloc's host ns/op) / 20 us, from one
# run of each (BENCHMARKS.md, "Models of placement and growth").
BUDGET = {"bert-encode-varbatch": 166, "gpt2-generate": 2615, "gpt2-train": 166,
          "resnet-like-infer": 26, "serve-bert-gpt2": 3405}


class Moves(hf.Model):
    def __init__(self, place="best", moves=None, exact=None, whole=False, big=None, pick="largest", per_request=None,
                 own_align=None, move_above=None):
        # No handles of their own unless asked: --exact N [--whole] models
        # them (the core's default), so a row can compare with and without.
        super().__init__(own=False)
        self.pick = pick
        self.own_align = own_align  # None, "page" or "fresh": where a request growing with own handles goes
        self.per_request = per_request  # at most this many moves per request, the rest fresh
        # Moves only where a fresh handle for the run would raise physical
        # memory past this many times the allocated bytes (the request's
        # included); None: wherever a handle can move.
        self.move_above = move_above
        self.big = big * MIB if big is not None else None
        self.rule, self.kind = place, moves
        self.exact = exact * MIB if exact is not None else None
        self.whole, self.uncapped = whole, False
        self.syncs = self.deferred = self.stale = 0
        self.aligned = self.align_looked = 0  # placements moved off the block's start; looked at handles

    def range_key(self, small, size, stream):
        if self.big is not None and size >= self.big:
            return ("big", stream)
        return (small, stream)

    def fresh_pages(self, small):
        if self.uncapped and not small:
            return 1 << 30
        return super().fresh_pages(small)

    # -- wholly free handles -------------------------------------------

    def whole_free(self, r):
        """Handles of `r` lying inside one free block: {id: (head, units)}."""
        out = {}
        for hid, (head, units) in r.handles.items():
            i = r.block_at(head * PAGE)
            if i is not None and r.free[i][0] + r.free[i][1] >= (head + units) * PAGE:
                out[hid] = (head, units)
        return out

    def touches(self, spans, addr, size):
        first, end = addr // PAGE, (addr + size - 1) // PAGE + 1
        return any(head < end and first < head + units for head, units in spans)

    def mapped(self, r, addr, size):
        return all(q in r.page for q in range(addr // PAGE, (addr + size - 1) // PAGE + 1))

    # -- placement -----------------------------------------------------

    def place(self, r, size):
        if self.rule in ("align", "aligntop", "alignpage") and not r.small:
            return self.place_aligned(r, size)
        if self.rule == "topend" and not r.small:
            return self.place_topend(r, size)
        if self.rule == "choose" and self.kind and not r.small:
            return self.place_choosing(r, size)
        if self.rule in ("best", "choose"):
            return super().place(r, size)
        spans = list(self.whole_free(r).values())
        fits = [(a, sz) for a, sz in r.free if sz >= size]
        keep = [(a, sz) for a, sz in fits if self.mapped(r, a, size) and not self.touches(spans, a, size)]
        if keep:
            if self.rule == "pack":
                a, _ = min(keep, key=lambda b: (self.free_in_handles(r, b[0], size), b[1], b[0]))
            else:
                a, _ = min(keep, key=lambda b: (b[1], b[0]))
            r.take(a, size)
            return a
        at = self.mapped_run_fit_avoiding(r, size, spans)
        if at is not None:
            r.take(at, size)
            return at
        return super().place(r, size)

    def place_aligned(self, r, size):
        """Best fit's block; where the request's pages are all mapped there,
        the start among the block's start, a handle's start and a handle's
        end less the request that leaves the most pages in wholly free
        handles (the block's start among equals)."""
        i = min(range(len(r.free)), key=lambda j: (r.free[j][1] < size, r.free[j][1], j))
        a, sz = r.free[i]
        if not self.mapped(r, a, size) and self.own_align and self.exact is not None and size >= self.exact \
                and r.mapped_run_fit(size) is None:
            return self.place_own_aligned(r, size, i)
        if not self.mapped(r, a, size) or (self.rule == "aligntop" and i < len(r.free) - 1):
            return super().place(r, size)
        hi = min(a + sz, (r.top() + 1) * PAGE)
        cands = {a}
        if self.rule == "alignpage":
            starts = [q * PAGE for q in range(a // PAGE + 1, hi // PAGE)] + [hi - size]
        else:
            starts = [x for head, units in r.handles.values() for x in (head * PAGE, (head + units) * PAGE - size)]
        for at in starts:
            if a <= at and at + size <= hi and self.mapped(r, at, size):
                cands.add(at)
        spans = self.whole_free(r)
        if spans:
            self.align_looked += 1

        def kept(at):
            return sum(u for h, u in spans.values() if not self.touches([(h, u)], at, size))

        at = max(sorted(cands), key=lambda c: (kept(c), c == a))
        self.aligned += at != a
        r.take(at, size)
        return at

    def place_own_aligned(self, r, size, i):
        """A request that grows with handles of its own: at a page boundary
        ("page": the first in best fit's block), or past the range's mapped
        pages in the top block ("fresh"), so its own handles hold it whole."""
        a, sz = r.free[i]
        at = a
        if self.own_align == "page":
            at = -(-a // PAGE) * PAGE
        elif self.own_align == "fresh" and i == len(r.free) - 1:
            at = max(a, (r.top() + 1) * PAGE)
        if at + size > a + sz:
            at = a
        if not self.mapped(r, at, size):
            self.cover(r, at, size, (a + sz) // PAGE)
        r.take(at, size)
        return at

    def place_topend(self, r, size):
        """Best fit; in the top free block, a request the block's mapped part
        holds goes to that part's high end (the mapped room left stays next to
        the blocks below, whose frees merge with it)."""
        i = min(range(len(r.free)), key=lambda j: (r.free[j][1] < size, r.free[j][1], j))
        a, sz = r.free[i]
        end = (r.top() + 1) * PAGE
        if i == len(r.free) - 1 and a + size <= end:
            at = end - size
            r.take(at, size)
            return at
        return super().place(r, size)

    def place_choosing(self, r, size):
        """Best fit; where it would grow, the fitting free block needing the
        fewest fresh pages once wholly free handles are moved in."""
        i = min(range(len(r.free)), key=lambda j: (r.free[j][1] < size, r.free[j][1], j))
        addr = r.free[i][0]
        if not self.mapped(r, addr, size):
            at = r.mapped_run_fit(size)
            if at is not None:
                addr = at
            else:
                spans = list(self.whole_free(r).values())
                addr = min(((self.fresh_needed(r, a, sz, size, spans), sz, a) for a, sz in r.free if sz >= size))[2]
                i = r.block_at(addr)
                self.cover(r, addr, size, (r.free[i][0] + r.free[i][1]) // PAGE)
        r.take(addr, size)
        return addr

    def fresh_needed(self, r, a, sz, size, spans):
        units = sorted(u for head, u in spans if not self.touches([(head, u)], a, size))
        first, end, stop = a // PAGE, (a + size - 1) // PAGE + 1, min((a + sz) // PAGE, a // PAGE + FAR // PAGE)
        p, fresh = first, 0
        while p < end:
            if p in r.page:
                p += 1
                continue
            avail = 0
            while p + avail < stop and p + avail not in r.page and avail < 1 << 20:
                avail += 1
            j = bisect.bisect(units, avail) - 1
            if j < 0:
                fresh += sum(1 for q in range(p, end) if q not in r.page)
                break
            p += units.pop(j)
        return fresh

    def free_in_handles(self, r, addr, size):
        """Free pages of the handles a placement at `addr` would use."""
        ids = {r.page[q] for q in range(addr // PAGE, (addr + size - 1) // PAGE + 1)}
        free = 0
        for hid in ids:
            head, units = r.handles[hid]
            free += sum(1 for q in range(head, head + units) if self.page_free(r, q))
        return free

    def page_free(self, r, q):
        i = r.block_at(q * PAGE)
        return i is not None and r.free[i][0] + r.free[i][1] >= (q + 1) * PAGE

    def mapped_run_fit_avoiding(self, r, size, spans):
        for a, sz in sorted(r.free, key=lambda b: (b[1], b[0])):
            if sz < size:
                continue
            lo, hi = a, min(a + sz, (r.top() + 1) * PAGE)
            start = lo
            while start + size <= hi:
                if self.mapped(r, start, size) and not self.touches(spans, start, size):
                    return start
                # Past the first page that is unmapped or in a wholly free handle.
                q = start // PAGE + 1
                start = max(q * PAGE, lo)
        return None

    # -- moves ---------------------------------------------------------

    def room(self, r, p, lo, hi):
        """Unmapped free pages from page p on, in the free block holding [lo, hi)."""
        i = r.block_at(lo)
        end = min((r.free[i][0] + r.free[i][1]) // PAGE, p + FAR // PAGE)
        n = 0
        while p + n < end and p + n not in r.page:
            n += 1
        return n

    def cover(self, r, addr, size, room_end):
        first, end = addr // PAGE, (addr + size - 1) // PAGE + 1
        if not self.kind or r.small:
            self.cover_fresh(r, addr, size, first, end)
            return
        p, synced, made = first, False, 0
        while p < end:
            if p in r.page:
                p += 1
                continue
            run = 1
            while p + run < end and p + run not in r.page:
                run += 1
            avail = self.room(r, p, addr, addr + size)
            free = {h: s for h, s in self.whole_free(r).items()
                    if s[1] <= avail and not self.touches([s], addr, size)}
            if self.move_above is not None and self.phys + run * PAGE <= self.move_above * (
                    self.allocated + self.pending):
                free = {}
            if self.pick == "cover":
                # Only a handle covering the whole run: one call where a
                # fresh handle of its own would take two, never more calls.
                free = {h: u for h, u in free.items() if u[1] >= run}
            if not free or (self.per_request is not None and made >= self.per_request):
                # The rest of the request as the default would cover it.
                self.cover_fresh(r, addr, size, p, end)
                return
            # The largest wholly free handle that fits (its pages past the
            # run are physical already: mapping them ahead costs nothing);
            # with pick "fit", the smallest one covering the run, if any.
            covering = [h for h in free if free[h][1] >= run]
            if self.pick in ("fit", "cover", "pair") and covering:
                hid = min(covering, key=lambda h: (free[h][1], free[h][0]))
            else:
                hid = max(free, key=lambda h: (free[h][1], -free[h][0]))
                if self.pick == "pair":
                    # Two moves at most, and only if they cover the run whole:
                    # never more calls than the fresh handle of its own (two).
                    u1 = free[hid][1]
                    if not any(h != hid and run - u1 <= free[h][1] <= avail - u1 for h in free):
                        self.cover_fresh(r, addr, size, p, end)
                        return
            head, units = r.handles.pop(hid)
            for q in range(head, head + units):
                del r.page[q]
            if self.kind == "nosync":
                r.take(head * PAGE, units * PAGE)
                self.deferred += 1
                self.stale += units * PAGE
            elif not synced:
                self.syncs += 1
                synced = True
            self.moved += 1
            made += 1
            self.maps += 1
            self.next_id += 1
            r.handles[self.next_id] = (p, units)
            for q in range(p, p + units):
                r.page[q] = self.next_id
            p += units

    def cover_fresh(self, r, addr, size, p, end):
        i = r.block_at(addr)
        room_end = (r.free[i][0] + r.free[i][1]) // PAGE
        big = self.big is not None and size >= self.big
        if (self.exact is not None and size >= self.exact) or big:
            ahead, self.ahead = self.ahead, False
            self.uncapped = self.whole or big
            super().cover(r, p * PAGE, (end - p) * PAGE, room_end)
            self.ahead, self.uncapped = ahead, False
        else:
            super().cover(r, p * PAGE, (end - p) * PAGE, room_end)

    def run_forced(self, evs, force):
        """run(), with the large-pool requests named in `force` placed at the
        given address (the free block's start when that is within a MiB of
        it); a forced address that is not free is an error."""
        current = [None]
        rule_place = self.place

        def place(r, size):
            want = force.get(current[0])
            if want is None or r.small:
                return rule_place(r, size)
            i = r.block_at(int(want))
            if i is None:
                # A free block starting just past the address given.
                i = r.block_at(int(want) + MIB)
                addr = r.free[i][0] if i is not None and r.free[i][0] <= want + MIB else int(want)
            else:
                addr = r.free[i][0] if r.free[i][0] > want - MIB else int(want) // 512 * 512
            i = r.block_at(addr)
            if i is None or r.free[i][0] + r.free[i][1] < addr + size:
                raise SystemExit(f"request {current[0]}: {want / MIB:.1f} MiB is not free for {size} bytes")
            if not self.mapped(r, addr, size):
                self.cover(r, addr, size, (r.free[i][0] + r.free[i][1]) // PAGE)
            r.take(addr, size)
            return addr

        self.place = place

        def named():
            for e in evs:
                current[0] = e[1]
                yield e

        return self.run(named())

    def calls(self):
        per_move = {"nosync": 1, "sync": 2}.get(self.kind, 0)
        return 2 * (self.fresh) + per_move * self.moved + 2.5 * self.syncs + len(self.ranges)


def measure(ev, force=None, **kw):
    m = Moves(**kw)
    if force:
        return m, m.run_forced(ev, force)
    return m, m.run(ev)


OWN = dict(moves="nosync", exact=32, whole=True, pick="fit")

TABLE = [
    ("best fit, no moves (the default)", {}),
    ("best fit, no-sync moves", dict(moves="nosync")),
    ("keep wholly free handles, no-sync moves", dict(place="keep", moves="nosync")),
    ("fullest handles first, no-sync moves", dict(place="pack", moves="nosync")),
    ("own handles >= 16 MiB, no moves", dict(exact=16)),
    ("own handles >= 32 MiB, no-sync moves", dict(moves="nosync", exact=32)),
    ("own handles >= 16 MiB, no-sync moves", dict(moves="nosync", exact=16)),
    ("own handles >= 12 MiB, no-sync moves, smallest covering", dict(moves="nosync", exact=12, pick="fit")),
    ("own handles >= 16 MiB, no-sync moves, smallest covering", dict(moves="nosync", exact=16, pick="fit")),
    ("own handles >= 24 MiB, no-sync moves, smallest covering", dict(moves="nosync", exact=24, pick="fit")),
    ("own handles >= 32 MiB, no-sync moves, smallest covering", dict(moves="nosync", exact=32, pick="fit")),
    ("own handles >= 16 MiB uncapped, no-sync moves, smallest covering",
     dict(moves="nosync", exact=16, whole=True, pick="fit")),
    ("own handles >= 16 MiB, sync moves, smallest covering", dict(moves="sync", exact=16, pick="fit")),
    ("own handles >= 16 MiB, sync moves, smallest covering, growing where moves fit",
     dict(place="choose", moves="sync", exact=16, pick="fit")),
    ("requests >= 32 MiB in ranges of their own, no-sync moves", dict(moves="nosync", big=32)),
    # Handles of their own as the core makes them (--exact 32 --whole: the
    # core's bound is the fresh handle the rule would make, 32 to 48 MiB on
    # these traces), then handle-aware placement on top of them.
    ("own handles (the core's), no-sync moves, smallest covering", OWN),
    ("own handles (the core's), no-sync moves, smallest covering, handle-aligned", dict(OWN, place="align")),
    ("own handles (the core's), no moves, handle-aligned", dict(exact=32, whole=True, place="align")),
    ("own handles (the core's), sync moves, smallest covering, handle-aligned",
     dict(OWN, moves="sync", place="align")),
    ("own handles (the core's), no-sync moves, smallest covering, handle-aligned in the top block",
     dict(OWN, place="aligntop")),
    ("own handles (the core's), no-sync moves, smallest covering, top block from its mapped end",
     dict(OWN, place="topend")),
    ("own handles (the core's), no-sync moves, smallest covering, handle-aligned, own growth at a page boundary",
     dict(OWN, place="align", own_align="page")),
    ("own handles (the core's), no-sync moves, smallest covering, handle-aligned, one move per request",
     dict(OWN, place="align", per_request=1)),
]


def cell(name, m, ratio):
    """peak x live (fresh handles / maps / moves) calls[+deferred unmaps] / budget"""
    budget = BUDGET.get(name)
    deferred = f"+{m.deferred}" if m.deferred else ""
    return f"{ratio:.3f} ({m.fresh}/{m.maps}/{m.moved}) {m.calls():g}{deferred} / {budget or '?'}"


def self_test():
    """A freed 30 MiB block's own handle moves to where a 58 MiB request grows."""
    evs = [(True, "a", 30 * MIB, "s"), (True, "b", 4 * MIB, "s"), (False, "a", 0, None),
           (True, "c", 58 * MIB, "s")]
    plain, own = Moves(), Moves(exact=16)
    plain.run(evs), own.run(evs)
    assert plain.moved == own.moved == 0
    nosync, sync = Moves(exact=16, moves="nosync"), Moves(exact=16, moves="sync")
    nosync.run(evs), sync.run(evs)
    # The 15-page handle moves (1 call) instead of a fresh one (2 calls).
    assert nosync.moved == 1 and nosync.deferred == 1 and nosync.syncs == 0, vars(nosync)
    assert own.peak_phys - nosync.peak_phys == 15 * PAGE, (own.peak_phys, nosync.peak_phys)
    assert (nosync.fresh, own.fresh) == (2, 3) and nosync.calls() == own.calls() - 1
    # Its old address: out of use (taken) without a sync, free again with one.
    r = nosync.ranges[(False, "s")]
    assert r.block_at(0) is None and 0 not in r.page
    assert sync.moved == 1 and sync.syncs == 1 and sync.deferred == 0, vars(sync)
    r = sync.ranges[(False, "s")]
    assert r.free[0] == (0, 30 * MIB) and 0 not in r.page
    # The default handles (mapped ahead, shared) never move.
    best = Moves(moves="nosync")
    best.run(evs)
    assert best.moved == 0
    self_test_align()
    print("self-test passed")


def self_test_align():
    """Handle-aligned placement keeps the larger freed handle whole, and the
    move that follows takes it: 20 MiB less at the peak, the same calls.

    a (60 MiB) and b (40 MiB) get handles of their own, [0, 60) and
    [60, 100); e (40 MiB) stays live above them at [100, 140). With a and b
    free, c (10 MiB) fits mapped pages at 0 (best fit: a's handle is no longer
    wholly free, b's is) or at 60 (handle-aligned: b's start, a's handle
    stays whole). d (100 MiB) fits only above e and lacks all its pages: the
    move takes the wholly free handle (b's 40 MiB, or a's 60 MiB), the rest
    is a fresh handle of its own (60 or 40 MiB)."""
    evs = [(True, "a", 60 * MIB, "s"), (True, "b", 40 * MIB, "s"), (True, "e", 40 * MIB, "s"),
           (False, "a", 0, None), (False, "b", 0, None), (True, "c", 10 * MIB, "s"), (True, "d", 100 * MIB, "s")]
    best, align, still = Moves(**OWN), Moves(**dict(OWN, place="align")), Moves(exact=32, whole=True, place="align")
    for m in (best, align, still):
        m.run(evs)
    assert (best.peak_phys, align.peak_phys) == (200 * MIB, 180 * MIB), (best.peak_phys, align.peak_phys)
    assert best.fresh == align.fresh == 4 and best.moved == align.moved == 1 and best.calls() == align.calls() == 10
    assert (best.aligned, align.aligned) == (0, 1)
    r = align.ranges[(False, "s")]
    # c at b's old start; a's 30 pages moved to d's start (page 70), d's
    # last 20 pages fresh; b's handle under c, e's above it.
    assert r.handles and sorted(r.handles.values()) == [(30, 20), (50, 20), (70, 30), (100, 20)], r.handles
    # Without moves the kept handle is of no use: d's 100 MiB are all fresh.
    assert still.moved == 0 and still.peak_phys == 240 * MIB


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="+")
    ap.add_argument("--place", default="best",
                    choices=["best", "keep", "pack", "choose", "topend", "align", "aligntop", "alignpage"])
    ap.add_argument("--moves", default=None, choices=["nosync", "sync"])
    ap.add_argument("--exact", type=float, default=None)
    ap.add_argument("--whole", action="store_true", help="with --exact: one handle per run, not capped at 48 MiB")
    ap.add_argument("--big", type=float, default=None,
                    help="MIB: requests this large get a range of their own, one handle per run")
    ap.add_argument("--pick", default="largest", choices=["largest", "fit", "cover", "pair"],
                    help="the wholly free handle a move takes: the largest that fits, the smallest covering the run "
                         "(else the largest), or only the smallest covering the run")
    ap.add_argument("--own-align", default=None, choices=["page", "fresh"],
                    help="with --place align: a request growing with own handles at a page boundary, "
                    "or past the mapped pages")
    ap.add_argument("--per-request", type=int, default=None, help="at most N moves per request, the rest fresh")
    ap.add_argument("--move-above", type=float, default=None, metavar="F",
                    help="move only where mapping the run of pages a request lacks would raise physical memory "
                         "past F x the allocated bytes")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every request's bytes by F (how much a figure depends on the trace's exact sizes)")
    ap.add_argument("--force", default=None, metavar="ID=MIB,...",
                    help="place these requests at these addresses (an offline layout), the rest by the rule")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--rows", default=":", help="with --table: rows A:B only (as a Python slice)")
    args = ap.parse_args()
    evs = [(t.split("/")[-1].split(".")[0], pf.events(t)) for t in args.trace]
    if args.scale != 1.0:
        evs = [(name, [(a, i, int(n * args.scale), s) for a, i, n, s in ev]) for name, ev in evs]
    if args.table:
        if args.rows.startswith((":", "0")):
            print("| rule | " + " | ".join(n for n, _ in evs) + " |")
            print("|---|" + "---:|" * len(evs))
        lo, _, hi = args.rows.partition(":")
        for label, kw in TABLE[int(lo or 0):int(hi) if hi else None]:
            cells = [cell(name, *measure(ev, **kw)) for name, ev in evs]
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
        return
    for name, ev in evs:
        m, ratio = measure(ev, place=args.place, moves=args.moves, exact=args.exact, whole=args.whole, big=args.big,
                           pick=args.pick, per_request=args.per_request, own_align=args.own_align,
                           move_above=args.move_above,
                           force=dict((k, float(v) * MIB) for k, v in (x.split("=") for x in args.force.split(",")))
                           if args.force else None)
        top = max(max(r.page, default=0) for r in m.ranges.values()) * PAGE
        print(f"{name}: {cell(name, m, ratio)}; old addresses left mapped {m.stale / MIB:.0f} MiB, "
              f"highest mapped page at {top / MIB:.0f} MiB; placements off the block's start {m.aligned} "
              f"(of {m.align_looked} with a wholly free handle, {m.requests} requests)")


if __name__ == "__main__":
    main()
