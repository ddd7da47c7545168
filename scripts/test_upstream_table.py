#!/usr/bin/env python3
"""Checks `upstream-torch-npu-tests.py --check`: it fails for a difference with no reason
written, for a reason of a test the table does not show as a difference, and for a document
with no table; it passes when each difference has its reason."""
import importlib.util
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("upstream", HERE / "upstream-torch-npu-tests.py")
upstream = importlib.util.module_from_spec(spec)
spec.loader.exec_module(upstream)

ROWS = [("t.py::A::test_same", (("pass", ""), ("pass", ""))),
        ("t.py::A::test_differs", (("pass", ""), ("fail", "AssertionError: 1 != 2"))),
        ("t.py::A::test_both_fail", (("fail", "x"), ("error", "y")))]


def doc(reasons, table=True):
    summary, body = upstream.table(ROWS)
    made = f"{upstream.BEGIN}\n{summary}\n\n{body}\n{upstream.END}\n" if table else ""
    return "# T\n\n## Differences\n\n" + "".join(f"- `{t}`: why.\n" for t in reasons) + "\n## The table\n\n" + made


def check(text):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "doc.md"
        p.write_text(text)
        return upstream.check(p)


summary, _ = upstream.table(ROWS)
assert summary.startswith("3 tests: 2 pass with torch_npu's allocator, 1 with npualloc; 1 pass only"), summary
assert check(doc(["t.py::A::test_differs"])) == 0
assert check(doc([])) == 1, "a difference with no reason passed"
assert check(doc(["t.py::A::test_differs", "t.py::A::test_same"])) == 1, "a reason for no difference passed"
assert check(doc(["t.py::A::test_differs"], table=False)) == 1, "a document with no table passed"
# A table read back is the table written, reasons included; merging replaces only the rows run.
first, read = upstream.parse_table(doc(["t.py::A::test_differs"]))
assert first == summary, first
assert [(i, (o[0], m[0])) for i, (o, m) in read] == [(i, (o[0], m[0])) for i, (o, m) in ROWS], read
assert read[1][1][1] == ("fail", "AssertionError: 1 != 2"), read[1]
again = [("t.py::A::test_differs", (("pass", ""), ("pass", ""))), ("t.py::B::test_new", (("pass", ""), ("pass", "")))]
merged = upstream.merge(read, again)
assert [i for i, _ in merged] == [i for i, _ in ROWS] + ["t.py::B::test_new"], merged
assert merged[1][1][1][0] == "pass" and merged[0] == read[0] and merged[2] == read[2], merged
assert upstream.table(merged)[0].startswith("4 tests: 3 pass with torch_npu's allocator, 3 with npualloc; 0 pass"), \
    upstream.table(merged)[0]
print("upstream table checks: ok")
