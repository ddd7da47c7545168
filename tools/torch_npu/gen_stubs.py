#!/usr/bin/env python3
"""Stub shared libraries for the libraries a set of consumer .so files need
but that the emulator harness does not provide (CUDA's, CANN's other than libascendcl).

Every undefined dynamic symbol of the consumers that no provider defines gets
a stub in one of the generated libraries: a function that writes
"[stub] <lib>: <name>" once on stderr (and "<lib> <name>" to $STUB_LOG when
set) and returns the library's value (--ret), or, for a symbol that looks
like data (OBJECT type, vtable/typeinfo name, no PLT relocation), a zeroed
4 KiB object. A versioned reference (name@NODE) keeps its version node, so
the stub library gets a version script with the nodes the consumer expects.

    gen_stubs.py OUT --consumer F... --provider F... --lib SONAME...
                 [--assign REGEX=SONAME] [--extra SONAME=FILE] [--source SONAME=FILE]
                 [--ret SONAME=VALUE] [--link SONAME=ARGS]

--assign routes unversioned names to a library (first match wins; otherwise
the consumer's first missing DT_NEEDED library); --extra adds the names
listed in FILE (one a line, # comments), e.g. names looked up with dlsym;
--source compiles FILE into the library, and the names it defines get no stub.

Two questions about the consumers come first, each answered on one line:

    gen_stubs.py --missing F...            the DT_NEEDED libraries of the files
                                           that none of them is (by file name or
                                           SONAME): give the system's C and C++
                                           runtime libraries among them
    gen_stubs.py --runpath-under DIR F...  the consumers' RUNPATH/RPATH
                                           directories that lie under DIR
"""
import argparse
import collections
import os
import re
import subprocess
import sys

EXCLUDE = re.compile(r"^(_?Py|__gmon_start__|_ITM_|__cxa_finalize)")


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def sonames(path):
    return re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", run("readelf", "-d", path))


def unprovided(files):
    have = {os.path.basename(f) for f in files}
    for f in files:
        have.update(sonames(f))
    return sorted({n for f in files for n in needed(f)} - have)


def runpath_under(root, consumers):
    root = os.path.realpath(root)
    dirs = set()
    for c in consumers:
        for paths in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", run("readelf", "-d", c)):
            for d in paths.split(":"):
                d = os.path.realpath(d.replace("$ORIGIN", os.path.dirname(os.path.abspath(c))))
                if d == root or d.startswith(root + os.sep):
                    dirs.add(d)
    return sorted(dirs)


def version_owners(path):
    """version node -> the library file the consumer expects it from"""
    owners, current = {}, None
    for line in run("readelf", "-V", "--wide", path).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"Name: (\S+)\s+Flags", line)
        if m and current:
            owners[m.group(1)] = current
    return owners


def undefined(path):
    """[(name, version or None, weak)] of the undefined dynamic symbols"""
    out = []
    for line in run("nm", "-D", "--undefined-only", "--with-symbol-versions", path).splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, sym = parts[-2], parts[-1]
        name, _, version = sym.partition("@")
        out.append((name, version.lstrip("@") or None, kind in ("w", "v")))
    return out


def defined(path, dynamic=True):
    out = set()
    args = ["nm", "-D", "--defined-only", path] if dynamic else ["nm", "-g", "--defined-only", path]
    for line in run(*args).splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.add(parts[2].split("@")[0])
    return out


def looks_like_data(path):
    """names of undefined symbols that are data, not functions"""
    types = {}
    for line in run("readelf", "--dyn-syms", "--wide", path).splitlines():
        p = line.split()
        if len(p) >= 8 and p[6] == "UND":
            types[p[7].split("@")[0]] = p[3]
    plt = set()
    for line in run("readelf", "-r", "--wide", path).splitlines():
        p = line.split()
        if len(p) >= 5 and p[2] == "R_X86_64_JUMP_SLOT":
            plt.add(p[4].split("@")[0])
    return {n for n, t in types.items() if n not in plt and (t == "OBJECT" or re.match(r"^_ZT[VIST]", n))}


def names_in(path):
    with open(path) as f:
        return [w for line in f if not line.startswith("#") for w in line.split()]


STUB_PRELUDE = r"""#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
/* Writes "[stub] <lib>: <name>" once per name on stderr, and "<lib> <name>"
 * to $STUB_LOG when it is set. No stdio: stubs may run very early. */
static void stub_hit(const char *lib, const char *name, int *seen) {
  if (__atomic_exchange_n(seen, 1, __ATOMIC_RELAXED)) return;
  char b[512];
  int k = 0;
  for (const char *p = "[stub] "; *p;) b[k++] = *p++;
  for (const char *p = lib; *p && k < 200;) b[k++] = *p++;
  b[k++] = ':';
  b[k++] = ' ';
  int name_at = k;
  for (const char *p = name; *p && k < 500;) b[k++] = *p++;
  b[k++] = '\n';
  (void)!write(2, b, k);
  const char *log = getenv("STUB_LOG");
  if (!log) return;
  int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  int n = 0;
  char c[512];
  for (const char *p = lib; *p && n < 200;) c[n++] = *p++;
  c[n++] = ' ';
  for (int i = name_at; i < k && n < 510; i++) c[n++] = b[i];
  (void)!write(fd, c, n);
  close(fd);
}
"""


def write_library(out, lib, entries, ret, sources, link):
    src = os.path.join(out, lib + ".stubs.c")
    with open(src, "w") as f:
        f.write(STUB_PRELUDE)
        for i, (name, (_, kind)) in enumerate(sorted(entries.items())):
            if kind == "data":
                f.write(f'__attribute__((visibility("default"), aligned(64))) char d{i}[4096] __asm__("{name}");\n')
            else:
                f.write(f'__attribute__((visibility("default"))) long f{i}(void) __asm__("{name}");\n'
                        f'long f{i}(void) {{ static int s; stub_hit("{lib}", "{name}", &s); return {ret}; }}\n')
    nodes = collections.defaultdict(list)
    for name, (version, _) in entries.items():
        if version:
            nodes[version].append(name)
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-o", os.path.join(out, lib), f"-Wl,-soname,{lib}", src]
    cmd += sources
    if nodes:
        script = os.path.join(out, lib + ".map")
        with open(script, "w") as f:
            for node, names in sorted(nodes.items()):
                f.write(node + " {\n  global:\n" + "".join(f"    {n};\n" for n in sorted(names)) + "};\n")
        cmd.append(f"-Wl,--version-script={script}")
    cmd += link.split()
    subprocess.run(cmd, check=True)
    return {k: len(v) for k, v in nodes.items()}


def main():
    if sys.argv[1:2] == ["--missing"]:
        print(" ".join(unprovided(sys.argv[2:])))
        return
    if sys.argv[1:2] == ["--runpath-under"]:
        print(" ".join(runpath_under(sys.argv[2], sys.argv[3:])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    for opt in ("consumer", "provider", "lib", "assign", "extra", "source", "ret", "link"):
        ap.add_argument("--" + opt, action="append", default=[])
    a = ap.parse_args()
    pairs = lambda items: [x.split("=", 1) for x in items]
    rets, links = dict(pairs(a.ret)), dict(pairs(a.link))
    assigns = [(re.compile(r), lib) for r, lib in pairs(a.assign)]
    libs = set(a.lib)
    os.makedirs(a.out, exist_ok=True)

    # Hand-written sources: compiled once, their names get no stub.
    objects, own = collections.defaultdict(list), collections.defaultdict(set)
    for lib, path in pairs(a.source):
        obj = os.path.join(a.out, os.path.basename(path) + ".o")
        subprocess.run(["gcc", "-c", "-fPIC", "-O1", "-Wall", "-Werror", "-o", obj, path], check=True)
        objects[lib].append(obj)
        own[lib] |= defined(obj, dynamic=False)

    provided = set()
    for p in a.provider:
        provided |= defined(p)

    syms = collections.defaultdict(dict)  # lib -> name -> (version, "func" | "data")
    for consumer in a.consumer:
        owners = version_owners(consumer)
        missing = [n for n in needed(consumer) if n in libs]
        data = looks_like_data(consumer)
        for name, version, weak in undefined(consumer):
            if weak or EXCLUDE.search(name):
                continue
            if version is not None:
                lib = owners.get(version)
                if lib not in libs:
                    continue
            elif name in provided:
                continue
            else:
                lib = next((s for r, s in assigns if r.search(name)), missing[0] if missing else None)
                if lib is None:
                    print(f"warning: {os.path.basename(consumer)}: {name}: no library to stub it in", file=sys.stderr)
                    continue
            old = syms[lib].get(name)
            syms[lib][name] = (version or (old[0] if old else None), "data" if name in data else "func")
    for lib, path in pairs(a.extra):
        for name in names_in(path):
            if name not in provided:
                syms[lib].setdefault(name, (None, "func"))

    for lib in sorted(libs):
        entries = {n: v for n, v in syms.get(lib, {}).items() if n not in own[lib]}
        versions = write_library(a.out, lib, entries, rets.get(lib, "0"), objects[lib], links.get(lib, ""))
        print(f"{lib}: {len(entries)} stubs, {len(own[lib])} hand-written, versions {versions or '-'}")


if __name__ == "__main__":
    main()
