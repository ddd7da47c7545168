#!/usr/bin/env python3
"""The shape of the shipped Rust code: non-blank lines per folder of src/
(outside `tests/` folders, `tests.rs` files and `#[cfg(test)]` items, modules
declared under `#[cfg(test)]` included), and
the import cycles between the modules of src/core. A module and the modules
it declares count as one unit: a child naming its parent (`super::X`) is not
an edge, a parent naming its child is.

    python3 scripts/core-shape.py [--lines] [--cycles] [--strict]

With --strict it exits 1 when src/core has an import cycle.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")


def test_only_modules():
    """Files of modules declared under `#[cfg(test)]` (`#[cfg(test)] mod testpoint;`): test items too."""
    out = set()
    for dirpath, _, filenames in os.walk(SRC):
        for name in filenames:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            text = open(path, encoding="utf-8").read()
            here = dirpath if name in ("mod.rs", "lib.rs") else os.path.join(dirpath, name[:-3])
            for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+);", text):
                out.add(os.path.join(here, m.group(1) + ".rs"))
                out.add(os.path.join(here, m.group(1), "mod.rs"))
    return out


def shipped_files():
    skipped = test_only_modules()
    for dirpath, dirnames, filenames in os.walk(SRC):
        dirnames[:] = sorted(d for d in dirnames if d != "tests")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.endswith(".rs") and name != "tests.rs" and path not in skipped:
                yield path


def strip_strings_and_comments(line):
    """The line without string/char literals and // comments (enough to
    count braces in this code base)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//", 1)[0]


def outside_tests(lines):
    """The lines that are not part of a `#[cfg(test)]` item."""
    skipping = False
    depth = 0
    started = False
    for raw in lines:
        line = raw.strip()
        if not skipping and re.match(r"#\[cfg\(test\)\]", line):
            skipping, depth, started = True, 0, False
            continue
        if skipping:
            code = strip_strings_and_comments(line)
            depth += code.count("{") - code.count("}")
            if "{" in code:
                started = True
            # An item without a body (`mod tests;`, `use ...;`) ends at its `;`.
            if (started and depth <= 0) or (not started and code.endswith(";")):
                skipping = False
            continue
        yield raw


def shipped_lines(path):
    """Non-blank lines of `path` outside `#[cfg(test)]` items."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in outside_tests(f) if line.strip())


def module_of(path):
    """`src/core/backing/expandable/mapping.rs` -> `core::backing::expandable::mapping`
    (`mod.rs` and `lib.rs` name their folder)."""
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return "::".join(rel) or "crate"


def core_modules():
    return {module_of(p): p for p in shipped_files() if module_of(p).startswith("core")}


def resolve(current, path, modules):
    """The longest known module a `use` path names, from module `current`."""
    parts = path.split("::")
    if parts[0] == "crate":
        base = []
        parts = parts[1:]
    elif parts[0] in ("super", "self"):
        base = current.split("::")
        # A file module's `self` is itself; `super` its parent.
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
    elif current + "::" + parts[0] in modules:
        # A path from a child module declared here (`use tally::PoolTally`).
        base = current.split("::")
    else:
        return None
    full = base + parts
    for n in range(len(full), 0, -1):
        name = "::".join(full[:n])
        if name in modules:
            return name
    return None


def expand_use(text):
    """Paths of `use` statements and inline `crate::`/`super::` paths."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        tree = re.sub(r"\s+as\s+\w+", "", m.group(1))
        paths.extend(flatten(re.sub(r"\s+", "", tree)))
    for m in re.finditer(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        paths.append(m.group(1))
    return paths


def flatten(tree, prefix=""):
    """`a::{b,c::{d,e}}` -> a::b, a::c::d, a::c::e."""
    out = []
    depth = 0
    start = 0
    brace = tree.find("{")
    if brace == -1:
        return [prefix + tree]
    head = tree[:brace]
    inner = tree[brace + 1 : tree.rfind("}")]
    items = []
    for i, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    for item in items:
        if item:
            out.extend(flatten(item, prefix + head))
    return out


def strip_tests(text):
    """The code of `text` outside `#[cfg(test)]` items, without comments."""
    return "\n".join(
        strip_strings_and_comments(line)
        for line in outside_tests(text.splitlines())
        if not line.strip().startswith("//")
    )


def core_graph():
    modules = core_modules()
    graph = defaultdict(set)
    for name, path in modules.items():
        text = strip_tests(open(path, encoding="utf-8").read())
        # A file module's relative paths start from its parent for `super`:
        # `super::x` in core/a.rs is core::x. `resolve` treats `current` as the
        # module itself, so `super` drops the file's own name.
        for p in expand_use(text):
            target = resolve(name, p, modules)
            if target and target != name and not name.startswith(target + "::") and target != "core":
                graph[name].add(target)
    return modules, graph


def cycles(modules, graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index = {}
    low = {}
    stack = []
    on = set()
    out = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", action="store_true")
    ap.add_argument("--cycles", action="store_true")
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()
    both = not (args.lines or args.cycles)
    if args.lines or both:
        per = defaultdict(int)
        for p in shipped_files():
            per[os.path.relpath(os.path.dirname(p), ROOT)] += shipped_lines(p)
        total = sum(per.values())
        for folder in sorted(per):
            print(f"{per[folder]:7d}  {folder}")
        core = sum(v for k, v in per.items() if k == "src/core" or k.startswith("src/core/"))
        print(f"{core:7d}  src/core (all)")
        print(f"{total:7d}  src (all)")
    if args.cycles or both or args.strict:
        modules, graph = core_graph()
        found = cycles(modules, graph)
        for comp in found:
            print("cycle:", " <-> ".join(m.removeprefix("core::") for m in comp))
        if not found:
            print("no import cycle in src/core")
        if args.strict and found:
            sys.exit(1)


if __name__ == "__main__":
    main()
