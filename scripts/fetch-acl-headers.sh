#!/usr/bin/env bash
# Fetches the real AscendCL headers (ACL 1.17) from the torch-npu wheel on PyPI
# into third_party/acl-headers/include/acl/, where build.rs looks for them.
#
# Only the headers are unpacked; nothing is installed. They carry their own
# license notice (CANN Open Software License 2.0), which is kept as shipped.
# They are fetched at build/CI time and never committed (see .gitignore).
#
# Idempotent: does nothing when the headers are already there.
# Environment:
#   NPUALLOC_WHEEL_CACHE  directory to keep the downloaded wheel in, so later runs
#                         (and other clones) reuse it (default: the user's cache dir)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/third_party/acl-headers/include"
PACKAGE="torch-npu==2.14.0"
PYTHON="${PYTHON:-python3}"

if [[ -f "$DEST/acl/acl.h" ]]; then
    echo "fetch-acl-headers: headers already present in third_party/acl-headers/include/acl"
    exit 0
fi

CACHE="${NPUALLOC_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/npualloc/wheels}"
mkdir -p "$CACHE"

find_wheel() {
    find "$CACHE" -maxdepth 1 -name 'torch_npu-2.14.0-*.whl' -print | sort | sed -n 1p
}

WHEEL="$(find_wheel)"
if [[ -z "$WHEEL" ]]; then
    echo "fetch-acl-headers: downloading $PACKAGE (about 44 MB) into $CACHE"
    # The wheel is only unpacked, never installed, so any platform's build will do;
    # ask for the one pip would pick, then fall back to the published cp311 x86_64 build.
    if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --dest "$CACHE" "$PACKAGE"; then
        "$PYTHON" -m pip download --no-deps --only-binary=:all: --dest "$CACHE" \
            --python-version 3.11 --implementation cp --abi cp311 \
            --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
            --platform manylinux_2_17_x86_64 "$PACKAGE"
    fi
    WHEEL="$(find_wheel)"
fi
if [[ -z "$WHEEL" ]]; then
    echo "fetch-acl-headers: no torch_npu-2.14.0 wheel found in $CACHE after download" >&2
    exit 1
fi

# Unpack into a scratch directory first so an interrupted run leaves nothing half-done.
mkdir -p "$ROOT/third_party"
STAGE="$(mktemp -d "$ROOT/third_party/.stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

if command -v unzip >/dev/null 2>&1; then
    unzip -q "$WHEEL" 'torch_npu/include/acl/*' -d "$STAGE"
else
    "$PYTHON" - "$WHEEL" "$STAGE" <<'PY'
import sys, zipfile
wheel, stage = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("torch_npu/include/acl/")]
    if not members:
        sys.exit("no torch_npu/include/acl/ in " + wheel)
    z.extractall(stage, members)
PY
fi

if [[ ! -f "$STAGE/torch_npu/include/acl/acl.h" ]]; then
    echo "fetch-acl-headers: $WHEEL has no torch_npu/include/acl/acl.h" >&2
    exit 1
fi

# unzip restores the wheel's file times, which may predate an earlier build
# made without these headers; give them the current time so cargo reruns
# build.rs (it watches acl/acl.h) and switches to them.
find "$STAGE/torch_npu/include/acl" -exec touch {} +

mkdir -p "$DEST"
rm -rf "$DEST/acl"
mv "$STAGE/torch_npu/include/acl" "$DEST/acl"
cat > "$ROOT/third_party/acl-headers/README" <<TXT
AscendCL headers unpacked from the $PACKAGE wheel ($(basename "$WHEEL")),
path torch_npu/include/acl/. Each header carries its own license notice
(CANN Open Software License Agreement Version 2.0); they are kept unmodified.
Fetched by scripts/fetch-acl-headers.sh; not part of the npualloc sources.
TXT
echo "fetch-acl-headers: installed $(find "$DEST/acl" -type f | wc -l) header files into third_party/acl-headers/include/acl"
