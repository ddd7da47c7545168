#!/usr/bin/env python3
"""Runs torch_npu's own memory tests (Ascend/pytorch's ``test/``) on the ACL
emulator, once with torch_npu's own caching allocator and once with
npualloc (``npualloc.torch_npu.enable()``), and writes the side-by-side
table.

    PY=$(bash scripts/setup-torch-npu.sh DIR RELEASE | tail -n 1)
    python3 scripts/upstream-torch-npu-tests.py --python "$PY" \\
        [--source URL_OR_PATH] [--ref REF] [--jobs N] [--write docs/torch-npu-upstream-tests.md]
    python3 scripts/upstream-torch-npu-tests.py --check docs/torch-npu-upstream-tests.md

It installs what the tests import (expecttest, torchvision) into that venv.
The tests are fetched, not kept here: ``--source`` is a git repository of
Ascend/pytorch (default https://github.com/Ascend/pytorch.git, or a local
clone), ``--ref`` its branch or tag (default: the installed torch_npu's
``vX.Y.Z`` branch, ``master`` for a release with none, as 2.13 and 2.14).

A file's tests run in one process, as upstream runs them; when that
process dies (a test that aborts it: an exception out of a destructor, say)
or runs out of time, the tests it did not report run again one per process,
so that the one that killed it fails alone. The
harness's ``import npu_emu`` and, for the npualloc column, ``enable()`` run
from a ``sitecustomize`` on ``PYTHONPATH``, so the processes a test spawns
itself (``subprocess.run([sys.executable, ...])``, as the configuration
tests do) get the same allocator.

Which tests: ``FILES`` below, whole, and of the two large ``test_npu.py``
files the tests whose names speak of memory (``MEMORY_WORDS``); the rest of
those two test operators, which the emulator does not run.

``--write DOC`` replaces the table between ``<!-- table begins -->`` and
``<!-- table ends -->`` of DOC and keeps the rest. With ``--only``, it
replaces only the rows of the tests run (the table must be of the same
torch_npu and commit) and counts the table again. ``--check DOC`` (no torch
needed) exits 1 when a row of DOC's table passes with torch_npu's allocator
and not with npualloc, and DOC's "Differences" section has no entry
(``- `TEST_ID`: why``) for it; and when an entry names a test the table
does not list as such a difference.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FILES = [
    "test/npu/test_npu.py",
    "test/test_npu.py",
    "test/test_npu_allocator.py",
    "test/npu/test_expandable_segments.py",
    "test/npu/test_allocator_envs.py",
    "test/npu/test_custom_segment_size.py",
    "test/npu/test_large_segment_size.py",
    "test/npu/test_per_process_memory_fraction.py",
    "test/npu/test_mempool_destructor.py",
    "test/npu/test_no_npu_memory_caching.py",
    "test/npu/test_allocator_trace_tracker.py",
    "test/npu/test_memory_viz.py",
    "test/npu/test_torch_fill_uninitialized_memory.py",
    "test/npu/test_sanitizer.py",
    "test/npu/test_sanitizer_record_stream.py",
    "test/test_npu_sanitizer.py",
    "test/allocator/test_throw_on_npumalloc_oom.py",
]
# Of these two, only the tests whose names carry one of MEMORY_WORDS.
FILTERED = {"test/npu/test_npu.py", "test/test_npu.py"}
MEMORY_WORDS = ("memory", "caching", "alloc", "snapshot", "stats", "cache", "pool", "graph",
                "record_stream", "oom", "fraction", "expandable", "segment", "mem_get_info", "pin")

SITECUSTOMIZE = '''\
import os
_which = os.environ.get("NPUALLOC_UPSTREAM_ALLOCATOR")
if _which:
    import npu_emu  # noqa: F401  torch, then torch_npu, on the emulator
    if _which == "npualloc":
        import npualloc.torch_npu
        npualloc.torch_npu.enable()
'''

COLUMNS = ("own", "npualloc")
BEGIN, END = "<!-- table begins -->", "<!-- table ends -->"


def fetch(source, ref, into):
    """A shallow clone of `ref` of `source` with only test/ checked out."""
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--no-checkout", "--branch", ref,
                    source, str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "sparse-checkout", "set", "test"], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q"], check=True)
    return subprocess.run(["git", "-C", str(into), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def default_ref(py, source):
    version = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('torch_npu'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    branch = "v" + re.match(r"\d+\.\d+\.\d+", version).group(0)
    heads = subprocess.run(["git", "ls-remote", "--heads", source, branch],
                           capture_output=True, text=True).stdout
    return version, (branch if heads.strip() else "master")


def environment(site_dir, which):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NPUALLOC_", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "ACLEMU_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["NPUALLOC_UPSTREAM_ALLOCATOR"] = which
    return env


def collect(py, tests, site_dir):
    """Test ids of FILES (filtered as the module says), in file order."""
    out = subprocess.run([py, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *FILES],
                         cwd=tests, env=environment(site_dir, "own"), capture_output=True, text=True)
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    if not ids:
        sys.exit(f"collected no tests:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    missing = [f for f in FILES if not any(i.startswith(f + "::") for i in ids)]
    if missing:
        print(f"collected nothing from {', '.join(missing)}:\n{out.stdout[-3000:]}", file=sys.stderr)
    return [i for i in ids
            if i.split("::")[0] not in FILTERED or any(w in i.split("::")[-1].lower() for w in MEMORY_WORDS)]


def outcomes(xml):
    """{test id: (outcome, one line of why)} of a junit XML file pytest wrote."""
    out = {}
    for case in ET.parse(xml).iter("testcase"):
        # pytest's classname is the file's dotted path and the class: back to a node id.
        parts = case.get("classname", "").split(".")
        name = case.get("name", "")
        result = ("pass", "")
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                msg = (el.get("message") or el.text or "").strip().splitlines()
                result = ({"failure": "fail", "error": "error", "skipped": "skip"}[tag], (msg[0] if msg else "")[:200])
                break
        out[(parts[-1], name)] = result
    return out


def run_file(py, tests, site_dir, ids, which, timeout):
    """{test id: (outcome, why)} for `ids` (one file's) under one allocator: the file's tests in
    one process, as upstream runs them; those a crash or a timeout left unreported run again one
    per process, so that one test's abort fails that test alone."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "r.xml"
        cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", f"--junitxml={xml}"]
        try:
            p = subprocess.run(cmd + ids, cwd=tests, env=environment(site_dir, which), capture_output=True,
                               text=True, timeout=timeout * len(ids))
            done = outcomes(xml) if xml.is_file() else {}
            said = [line for line in p.stderr.strip().splitlines() if not line.startswith("[stub]")]
            died = None if xml.is_file() else ("crash", f"exit {p.returncode}: {(said or ['(no output)'])[-1][:200]}")
        except subprocess.TimeoutExpired:
            done, died = {}, ("timeout", f"over {timeout * len(ids)} s")
        for i in ids:
            file, *_, name = i.split("::")
            key = (i.split("::")[-2] if i.count("::") >= 2 else Path(file).stem, name)
            if key in done:
                results[i] = done[key]
            elif len(ids) == 1:
                results[i] = died or ("error", "pytest did not report it")
        for i in [i for i in ids if i not in results]:
            results.update(run_file(py, tests, site_dir, [i], which, timeout))
    return results


def cell(outcome):
    return {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skip": "skip", "crash": "CRASH",
            "timeout": "TIMEOUT"}[outcome]


def table(rows):
    lines = ["| test | torch_npu's allocator | npualloc | npualloc's failure |", "|---|---|---|---|"]
    for test_id, (own, mine) in rows:
        why = mine[1].replace("|", "\\|") if mine[0] != "pass" and own[0] == "pass" else ""
        lines.append(f"| `{test_id}` | {cell(own[0])} | {cell(mine[0])} | {why} |")
    counts = {c: sum(1 for _, r in rows if r[i][0] == "pass") for i, c in enumerate(COLUMNS)}
    only_own = sum(1 for _, (o, m) in rows if o[0] == "pass" and m[0] != "pass")
    only_mine = sum(1 for _, (o, m) in rows if m[0] == "pass" and o[0] != "pass")
    summary = (f"{len(rows)} tests: {counts['own']} pass with torch_npu's allocator, {counts['npualloc']} with "
               f"npualloc; {only_own} pass only with torch_npu's, {only_mine} only with npualloc.")
    return summary, "\n".join(lines)


UNCELL = {"pass": "pass", "FAIL": "fail", "ERROR": "error", "skip": "skip", "CRASH": "crash", "TIMEOUT": "timeout"}


def parse_table(text):
    """(the table's first line, its rows as table() takes them) of a document's table; a row's
    reason is kept where the table has one."""
    part = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text and END in text else ""
    first = part.strip().splitlines()[0] if part.strip() else ""
    rows = []
    for m in re.finditer(r"^\| `([^`]+)` \| (\w+) \| (\w+) \| (.*) \|$", part, re.M):
        why = m.group(4).replace("\\|", "|")
        rows.append((m.group(1), ((UNCELL[m.group(2)], ""), (UNCELL[m.group(3)], why))))
    return first, rows


def merge(old, new):
    """The rows of `old` with those `new` has replaced, in order; tests only `new` has go last."""
    fresh = dict(new)
    merged = [(i, fresh.pop(i, r)) for i, r in old]
    return merged + [(i, r) for i, r in new if i in fresh]


def parse_doc(text):
    """(rows of the table as {test id: (own, npualloc)}, test ids the Differences section explains)."""
    part = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text and END in text else ""
    rows = {}
    for m in re.finditer(r"^\| `([^`]+)` \| (\w+) \| (\w+) \|", part, re.M):
        rows[m.group(1)] = (m.group(2), m.group(3))
    diff = text.split("## Differences", 1)[1] if "## Differences" in text else ""
    diff = diff.split("\n## ", 1)[0]
    explained = set(re.findall(r"^- `([^`]+)`:", diff, re.M))
    return rows, explained


def check(doc):
    rows, explained = parse_doc(Path(doc).read_text())
    if not rows:
        print(f"{doc}: no table between {BEGIN} and {END}", file=sys.stderr)
        return 1
    differ = {t for t, (own, mine) in rows.items() if own == "pass" and mine != "pass"}
    bad = 0
    for t in sorted(differ - explained):
        print(f"{doc}: {t} passes with torch_npu's allocator, not with npualloc, and Differences says not why",
              file=sys.stderr)
        bad += 1
    for t in sorted(explained - differ):
        print(f"{doc}: Differences explains {t}, which the table does not show as a difference", file=sys.stderr)
        bad += 1
    print(f"{doc}: {len(rows)} tests, {len(differ)} differences, each explained" if not bad
          else f"{doc}: {bad} problem(s)")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", help="the harness venv's python (scripts/setup-torch-npu.sh prints it)")
    ap.add_argument("--source", default="https://github.com/Ascend/pytorch.git")
    ap.add_argument("--ref")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=int, default=120, help="seconds a test may take")
    ap.add_argument("--only", action="append", default=[], help="run only test ids containing this")
    ap.add_argument("--write", metavar="DOC")
    ap.add_argument("--check", metavar="DOC")
    a = ap.parse_args()
    if a.check:
        return check(a.check)
    if not a.python:
        ap.error("--python is needed to run the tests")
    py = a.python
    version, ref = default_ref(py, a.source) if not a.ref else (None, a.ref)
    if version is None:
        version = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('torch_npu'))"],
                                 check=True, capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="npualloc-upstream-"))
    try:
        commit = fetch(a.source, ref, work / "pytorch")
        tests = work / "pytorch"
        site_dir = work / "site"
        site_dir.mkdir()
        (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        # What torch's and torch_npu's test helpers import (expecttest) and test/test_npu.py
        # (torchvision, the build of the installed torch's version).
        torch_version = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                                       check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run([py, "-m", "pip", "install", "-q", "expecttest", "torchvision", f"torch=={torch_version}"],
                       check=True)
        # The bridge is built once here, not by every test process at once.
        subprocess.run([py, "-m", "npualloc.torch_npu_bridge"], env=environment(site_dir, "own"), check=True)
        ids = collect(py, tests, site_dir)
        if a.only:
            ids = [i for i in ids if any(o in i for o in a.only)]
        print(f"torch_npu {version}, Ascend/pytorch {ref} at {commit[:12]}: {len(ids)} tests, "
              f"each under both allocators, {a.jobs} at a time", flush=True)
        by_file = {}
        for i in ids:
            by_file.setdefault(i.split("::")[0], []).append(i)
        jobs = [(f, w) for f in by_file for w in COLUMNS]
        results = {}
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            futures = {pool.submit(run_file, py, tests, site_dir, by_file[f], w, a.timeout): (f, w) for f, w in jobs}
            for f in concurrent.futures.as_completed(futures):
                name, w = futures[f]
                for i, r in f.result().items():
                    results[(i, w)] = r
                print(f"  {name} ({w}): {sum(1 for i in by_file[name] if results[(i, w)][0] == 'pass')} of "
                      f"{len(by_file[name])} pass", flush=True)
        rows = [(i, tuple(results[(i, w)] for w in COLUMNS)) for i in ids]
        title = f"torch_npu {version}, Ascend/pytorch `{ref}` at `{commit[:12]}`."
        if a.write and a.only:
            doc = Path(a.write)
            first, old = parse_table(doc.read_text() if doc.is_file() else "")
            if not first.startswith(title):
                print(f"{doc}'s table is not of {title} Run every test to write a new one.", file=sys.stderr)
                return 1
            rows = merge(old, rows)
        summary, body = table(rows)
        print(summary)
        for i, (own, mine) in rows:
            if own[0] == "pass" and mine[0] != "pass":
                print(f"  only with torch_npu's: {i}: {mine[0]}: {mine[1]}")
        if a.write:
            doc = Path(a.write)
            text = doc.read_text() if doc.is_file() else f"{BEGIN}\n{END}\n"
            head, rest = text.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            made = f"{BEGIN}\n{title} {summary}\n\n{body}\n{END}"
            doc.write_text(head + made + tail)
            print(f"wrote {doc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
