#!/usr/bin/env python3
"""Prints the path of a copy of PyTorch's torch/cuda/_memory_viz.py, which the
Python tests use to open npualloc's snapshots as PyTorch users would.

Where it comes from, first that works:
1. the torch this interpreter can import (found without importing it);
2. a copy cached by an earlier run, under $NPUALLOC_CACHE_DIR (default
   ${XDG_CACHE_HOME:-~/.cache}/npualloc);
3. the torch wheel on PyPI, pinned below: only that file is read out of the
   wheel, with HTTP range requests (a few hundred KiB of a wheel of ~900 MB),
   checked against its pinned SHA-256, and cached.

Exits 3 with the reason on stderr when none works (no torch, no network).
"""

import hashlib
import importlib.util
import io
import json
import os
import sys
import urllib.request
import zipfile
from pathlib import Path

TORCH_VERSION = "2.9.1"
MEMBER = "torch/cuda/_memory_viz.py"
SHA256 = "67eaf02c9d61a38c2676fae6e2e67eb9e919ee085b3fd06e576593c882632579"
TIMEOUT = 30


def installed():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "cuda" / "_memory_viz.py"
    return path if path.is_file() else None


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP range requests."""

    def __init__(self, url, size):
        self.url, self.size, self.pos = url, size, 0

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def readinto(self, buf):
        n = min(len(buf), self.size - self.pos)
        if n <= 0:
            return 0
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{self.pos + n - 1}"})
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            if r.status != 206:
                raise OSError(f"the server ignored a range request (HTTP {r.status})")
            data = r.read()
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


def from_pypi():
    req = urllib.request.Request(
        "https://pypi.org/simple/torch/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        files = json.load(r)["files"]
    wheels = [
        f for f in files
        if f["filename"].startswith(f"torch-{TORCH_VERSION}-") and f["filename"].endswith("manylinux_2_28_x86_64.whl")
    ]
    if not wheels:
        raise OSError(f"PyPI lists no torch {TORCH_VERSION} manylinux x86_64 wheel")
    url = wheels[0]["url"]
    head = urllib.request.Request(url, method="HEAD")
    with urllib.request.urlopen(head, timeout=TIMEOUT) as r:
        size = int(r.headers["Content-Length"])
    with zipfile.ZipFile(io.BufferedReader(RangeFile(url, size), buffer_size=1 << 16)) as z:
        return z.read(MEMBER)


def main():
    found = installed()
    if found is not None:
        print(found)
        return 0
    cache = Path(os.environ.get("NPUALLOC_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npualloc")
    cached = cache / f"torch-{TORCH_VERSION}" / "_memory_viz.py"
    if cached.is_file() and hashlib.sha256(cached.read_bytes()).hexdigest() == SHA256:
        print(cached)
        return 0
    try:
        data = from_pypi()
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        print(f"cannot get {MEMBER} of torch {TORCH_VERSION} from PyPI: {e}", file=sys.stderr)
        return 3
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        print(f"{MEMBER} from the torch {TORCH_VERSION} wheel has SHA-256 {digest}, expected {SHA256}", file=sys.stderr)
        return 3
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(cached)
    print(cached)
    return 0


if __name__ == "__main__":
    sys.exit(main())
