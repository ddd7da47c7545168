"""release_headers.py DEST RELEASE...: the C++ headers of torch_npu RELEASE
and of the torch it was built for, from their PyPI wheels, without the wheels.

The bridge is compiled against every torch_npu release it serves
(scripts/check-torch-npu-releases.sh). A wheel is 25-900 MB, its headers a
few MB: a wheel is a zip whose members lie in order, so the central directory
(at its end) tells where ``torch/include/`` or ``torch_npu/include/`` lies,
and one HTTP range request brings that span. Both come from PyPI's JSON API
and its file host, as pip would reach them.

DEST/torch_npu-<release>/ gets ``torch_npu/include`` and a file
``torch-version`` (the torch the release names in its requirements, exact);
DEST/torch-<version>/ gets ``torch/include``, once for every release built
for that torch. What is there already is not fetched again. Exits 75 when PyPI cannot be
reached, after saying so.
"""

import http.client
import json
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

PYPI = "https://pypi.org/pypi/{}/json"
TIMEOUT = 120


# What "PyPI cannot be reached" means here (exit 75); any other failure is a bug or a local
# problem (a full disk) and fails loudly.
NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)


def _get(url, start=None, end=None):
    """The body at `url`, or bytes start..end-1 of it (checked: a server that ignores the range
    is an error). Three tries."""
    headers = {} if start is None else {"Range": f"bytes={start}-{end - 1}"}
    for attempt in range(3):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as r:
                data = r.read()
                if start is not None and (r.status != 206 or len(data) != end - start):
                    raise http.client.HTTPException(
                        f"{url}: asked for bytes {start}-{end - 1}, got status {r.status} and {len(data)} bytes")
                return data
        except NETWORK_ERRORS:
            if attempt == 2:
                raise
            time.sleep(2 * (attempt + 1))


class _Remote:
    """A read-only file over HTTP range requests, with one span held in memory."""

    def __init__(self, url, size):
        self.url, self.size, self.pos = url, size, 0
        self.held_at, self.held = 0, b""

    def hold(self, start, end):
        self.held_at, self.held = start, _get(self.url, start, end)

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def read(self, n=-1):
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        if n <= 0:
            return b""
        start = self.pos - self.held_at
        if 0 <= start and start + n <= len(self.held):
            data = self.held[start : start + n]
        else:
            data = _get(self.url, self.pos, self.pos + n)
        self.pos += len(data)
        return data


def _wheel(project, version, tag):
    """(url, size, requires_dist) of project==version's wheel for CPython `tag` on x86_64 Linux."""
    meta = json.loads(_get(PYPI.format(project)))
    files = meta["releases"].get(version)
    if not files:
        raise LookupError(f"{project} {version} is not on PyPI")
    for f in files:
        name = f["filename"]
        if f"-{tag}-{tag}-" in name and name.endswith("x86_64.whl") and "linux" in name:
            url = urllib.parse.urljoin(PYPI.format(project), f["url"])
            return url, int(f["size"])
    raise LookupError(f"{project} {version} has no {tag} x86_64 Linux wheel")


def _extract(url, size, prefix, dest, also=()):
    """Members under `prefix` (and the names in `also`) of the wheel at `url`, into `dest`."""
    remote = _Remote(url, size)
    z = zipfile.ZipFile(remote)
    members = sorted(z.infolist(), key=lambda i: i.header_offset)
    wanted = [k for k, i in enumerate(members) if i.filename.startswith(prefix)]
    if not wanted:
        raise LookupError(f"{url}: no member under {prefix}")
    start = members[wanted[0]].header_offset
    end = members[wanted[-1] + 1].header_offset if wanted[-1] + 1 < len(members) else size
    remote.hold(start, end)
    for k in wanted:
        z.extract(members[k], dest)
    return {name: z.read(name).decode() for name in also}


def _fetch_into(out, extract):
    """Runs extract(tmp) and renames tmp to out, unless out is there already."""
    if (out / ".complete").is_file():
        return out
    tmp = out.parent / f".{out.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    extract(tmp)
    (tmp / ".complete").write_text("")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def fetch(release, dest, tag):
    """(torch_npu's include root, torch's include root, torch's version) for torch_npu `release`,
    under DEST/torch_npu-<release> and DEST/torch-<version> (one per torch release, shared)."""
    dest = Path(dest)

    def npu(tmp):
        url, size = _wheel("torch-npu", release, tag)
        dist = f"torch_npu-{release}.dist-info/METADATA"
        metadata = _extract(url, size, "torch_npu/include/", tmp, also=(dist,))[dist]
        # torch_npu names the torch it was built for exactly ("Requires-Dist: torch==2.8.0").
        # A local tag ("2.8.0+cpu": a build of download.pytorch.org, same headers) or a wildcard
        # ("2.13.0.*") ends the version.
        pinned = re.search(r"^Requires-Dist: torch\s*==\s*([0-9]+(?:\.[0-9]+)*)", metadata, re.M)
        torch = pinned.group(1) if pinned else re.match(r"\d+\.\d+\.\d+", release).group(0)
        (tmp / "torch-version").write_text(torch + "\n")

    npu_root = _fetch_into(dest / f"torch_npu-{release}", npu)
    torch = (npu_root / "torch-version").read_text().strip()

    def torch_headers(tmp):
        url, size = _wheel("torch", torch, tag)
        _extract(url, size, "torch/include/", tmp)

    torch_root = _fetch_into(dest / f"torch-{torch}", torch_headers)
    return npu_root, torch_root, torch


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    for release in argv[1:]:
        try:
            npu_root, _, torch = fetch(release, argv[0], tag)
        except LookupError as e:
            print(f"release_headers: {e}", file=sys.stderr)
            return 1
        except NETWORK_ERRORS as e:
            print(f"release_headers: cannot download torch_npu {release}'s headers: {e}", file=sys.stderr)
            return 75
        print(f"{release}: {npu_root} (torch {torch})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
