"""check_releases.py DIR [RELEASE...]: compiles the torch_npu bridge against the
headers of every torch_npu release it serves, without installing any of them.

With no RELEASE, the releases are every final one (no rc) on PyPI within the
bridge's SERVED range that has a wheel for this Python on x86_64 Linux.
Headers come from release_headers.py (cached in DIR). The bridge's sources
are compiled as one translation unit with -fsyntax-only (the compiler checks
every declaration, override and template the bridge instantiates; nothing is
linked, which needs the release's libraries and is what the torch_npu suite
does for the releases it runs on). One line per release; the exit status is
1 when any release fails, 75 when PyPI cannot be reached.

Many releases differ in no header the bridge includes. Each release's
translation unit is first preprocessed (a small part of a compile), with its
header folders' paths mapped to fixed names in __FILE__; releases whose
preprocessed text is the same are one compiler input, so the first of them is
compiled for all and the others' lines name it.
"""

import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "python"))
sys.path.insert(0, str(HERE))

import release_headers  # noqa: E402
from npualloc import torch_npu_bridge  # noqa: E402


def served_releases(tag):
    """The final releases in the served range with a wheel for `tag`, and those without one."""
    meta = json.loads(release_headers._get(release_headers.PYPI.format("torch-npu")))
    out, without = [], []
    for version, files in meta["releases"].items():
        m = re.fullmatch(r"(\d+)\.(\d+)\.\d+(?:\.post\d+)?", version)
        if not m or not torch_npu_bridge.SERVED[0] <= (int(m[1]), int(m[2])) <= torch_npu_bridge.SERVED[1]:
            continue
        wheel = any(f"-{tag}-{tag}-" in f["filename"] and f["filename"].endswith("x86_64.whl") for f in files)
        (out if wheel else without).append(version)
    key = lambda v: [int(x) for x in re.findall(r"\d+", v)]  # noqa: E731
    return sorted(out, key=key), sorted(without, key=key)


def _command(unity, npu_root, torch_root, *mode):
    # __FILE__ names the release's folders; mapped to fixed names, it is the same in every release.
    prefix_maps = [f"-fmacro-prefix-map={npu_root}=/torch-npu", f"-fmacro-prefix-map={torch_root}=/torch"]
    return (
        [os.environ.get("CXX", "c++"), *mode, *prefix_maps]
        + torch_npu_bridge.compile_flags(torch_root / "torch", npu_root / "torch_npu")
        + [str(unity)]
    )


def source_key(unity, npu_root, torch_root):
    """A digest of the preprocessed translation unit (no line markers), or None when it does not
    preprocess (the compile then reports why)."""
    done = subprocess.run(_command(unity, npu_root, torch_root, "-E", "-P"), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    return hashlib.sha256(done.stdout).hexdigest() if done.returncode == 0 else None


def check(unity, npu_root, torch_root):
    command = _command(unity, npu_root, torch_root, "-fsyntax-only")
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    errors = [line for line in done.stdout.splitlines() if "error" in line]
    return done.returncode, errors[:10] or done.stdout.splitlines()[-10:]


def main(argv):
    if not argv:
        sys.exit(__doc__)
    dest = Path(argv[0])
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    try:
        releases, without = (argv[1:], []) if argv[1:] else served_releases(tag)
        if without:
            print(f"check_releases: no {tag} x86_64 wheel, not checked: {' '.join(without)}")
        roots = {r: release_headers.fetch(r, dest, tag) for r in releases}
    except release_headers.NETWORK_ERRORS as e:
        print(f"check_releases: cannot download the releases' headers: {e}", file=sys.stderr)
        return 75
    unity = torch_npu_bridge.HERE / torch_npu_bridge.UNIT
    # A compiler takes about 1 GB with torch's headers.
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(os.cpu_count() or 2, 4)) as pool:
        keys = dict(zip(releases, pool.map(lambda r: source_key(unity, roots[r][0], roots[r][1]), releases)))
        # The release compiled for each preprocessed text (a release that does not preprocess
        # is compiled on its own).
        first = {}
        compiled = {r: first.setdefault(keys[r], r) if keys[r] else r for r in releases}
        results = {r: pool.submit(check, unity, roots[r][0], roots[r][1]) for r in releases if compiled[r] == r}
        failed = 0
        for release in releases:
            status, lines = results[compiled[release]].result()
            same = f", the same source as {compiled[release]}" if compiled[release] != release else ""
            verdict = "ok" if status == 0 else "FAILED"
            print(f"torch_npu {release} (torch {roots[release][2]}): {verdict}{same}")
            if status != 0:
                failed += 1
                if not same:
                    print("\n".join("    " + line for line in lines))
    print(
        f"check_releases: {len(releases) - failed} of {len(releases)} releases compile "
        f"({len(results)} distinct preprocessed sources compiled)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
