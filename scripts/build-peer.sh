#!/usr/bin/env bash
# build-peer.sh -- builds the PyTorch comparison harness (tools/peer/; BENCHMARKS.md,
# "Method"): the unmodified, compiled CUDA caching allocator of the official torch wheel, replaying
# traces on a fake CUDA runtime that serves "device memory" from host memory (no GPU, no
# CUDA toolkit needed).
#
#   scripts/build-peer.sh              # builds in target/peer (PEER_OUT=<dir> to choose)
#   PEER=target/peer scripts/bench.sh traces/*.trace.gz
#
# Steps (in PEER_OUT):
#   1. venv/ with torch==2.15.0 --no-deps (a ~540 MB wheel, ~1.2 GB installed; only
#      torch/lib/libc10*.so and the headers are used) and the CUDA 13 runtime headers
#      (nvidia-cuda-runtime, nvidia-cuda-crt). pip's usual settings apply, e.g.
#      PIP_FIND_LINKS=<dir of downloaded wheels> to install from a local copy.
#   2. fake/libcudart.so.13 (tools/peer/fakecudart*.c) and fake/libnvidia-ml.so.1
#      (tools/peer/fakenvml.c); every cudart symbol libc10_cuda.so needs is checked to
#      be defined, with its version node.
#   3. replay_torch (tools/peer/replay_torch.cpp), linked against the wheel's libc10,
#      and shared_check, shared_exit_check (tools/peer/shared_*check.c, for test.sh).
#   4. two synthetic traces in traces/ and a smoke replay; then `PEER_OUT/test.sh`
#      runs the harness's own checks.
#
# Env: PYTHON (default python3), SKIP_PIP=1 to reuse an existing venv,
#      SYNTAX_ONLY=1 to only compile the C sources and run tools/peer/test-shared.sh
#      (the shared device, no torch needed; what scripts/test.sh runs). It needs the
#      CUDA runtime headers: CUDA_INCLUDE, else a peer build's venv, else the two
#      header wheels (2.4 MB, nvidia-cuda-runtime and nvidia-cuda-crt) fetched once
#      with pip into CUDA_HEADERS (default target/cuda-headers); when they cannot be
#      fetched it prints a SKIPPED banner and skips the checks (a failure
#      in CI: scripts/skip.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/tools/peer
# fakecudart's translation units (one library), then every file copied into PEER_OUT.
CUDART_SOURCES="fakecudart.c fakecudart_mem.c fakecudart_stream.c fakecudart_driver.c
                fakecudart_shared.c"
SOURCES="$CUDART_SOURCES fakecudart_internal.h fakecudart.map fakecudart_stats.h
         fakecudart_shared.h fakenvml.c replay_torch.cpp trace_common.h tenants.h shared_check.c
         shared_exit_check.c make_synthetic_trace.py test.sh test-shared.sh"
PY=${PYTHON:-python3}
CUDA_HDR_VER=13.2.86        # nvidia-cuda-runtime / nvidia-cuda-crt: headers only

# cuda_headers DIR: the include directory of the two header wheels, fetched into DIR
# unless already there; fails when pip cannot fetch them.
cuda_headers() {
  local dir=$1/$CUDA_HDR_VER
  if [ ! -e "$dir/include/cuda_runtime_api.h" ] || [ ! -e "$dir/include/crt/host_defines.h" ]; then
    local tmp
    tmp=$(mktemp -d "$1.XXXXXX") || return 1
    if ! "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/dl" \
        "nvidia-cuda-runtime==$CUDA_HDR_VER" "nvidia-cuda-crt==$CUDA_HDR_VER" >&2; then
      rm -rf "$tmp"
      return 1
    fi
    # Only the headers: nvidia/cu13/include/ of each wheel (a zip).
    "$PY" - "$tmp/dl" "$tmp/include" <<'PYEOF' || { rm -rf "$tmp"; return 1; }
import pathlib, sys, zipfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
prefix = "nvidia/cu13/include/"
for wheel in sorted(src.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                out = dst / name[len(prefix):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
PYEOF
    mkdir -p "$dir" && rm -rf "$dir/include" && mv "$tmp/include" "$dir/include"
    rm -rf "$tmp"
  fi
  echo "$dir/include"
}

if [ "${SYNTAX_ONLY:-0}" = 1 ]; then
  gcc -fsyntax-only -std=gnu11 -Wall -Wextra -Werror "$SRC/fakenvml.c"
  inc=${CUDA_INCLUDE:-}
  if [ -z "$inc" ] && [ -d "${PEER_OUT:-$ROOT/target/peer}/venv" ]; then
    inc=$(find -H "${PEER_OUT:-$ROOT/target/peer}/venv" -path '*nvidia/cu13/include' -type d -print -quit)
  fi
  if [ -z "$inc" ]; then
    cache=${CUDA_HEADERS:-$ROOT/target/cuda-headers}
    mkdir -p "$(dirname "$cache")"
    if ! inc=$(cuda_headers "$cache"); then
      # shellcheck source=scripts/skip.sh
      source "$ROOT/scripts/skip.sh"
      npualloc_skip "the fake CUDA runtime's compile and shared-device checks" \
        "could not download nvidia-cuda-runtime / nvidia-cuda-crt $CUDA_HDR_VER, the CUDA runtime headers; set CUDA_INCLUDE to a directory holding them"
    fi
  fi
  for f in $CUDART_SOURCES shared_check.c shared_exit_check.c; do
    gcc -fsyntax-only -std=gnu11 -Wall -Wextra -Werror -I"$SRC" -I"$inc" "$SRC/$f"
  done
  echo "peer C sources compile (fakenvml.c, shared_check.c, shared_exit_check.c," $CUDART_SOURCES")"
  # The shared device needs no torch: build the fake runtime and the checks'
  # programs in a scratch directory and run its checks.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/fake"
  (cd "$SRC" && gcc -O2 -fPIC -shared -std=gnu11 -Wall -Wextra -I. -I"$inc" \
      -fvisibility=hidden -Wl,-soname,libcudart.so.13 -Wl,--version-script=fakecudart.map \
      -o "$tmp/fake/libcudart.so.13" $CUDART_SOURCES -lpthread -lrt)
  gcc -O2 -std=gnu11 -Wall -Wextra -I"$inc" -o "$tmp/shared_check" "$SRC/shared_check.c" \
      "$tmp/fake/libcudart.so.13" -Wl,-rpath,"$tmp/fake"
  (cd "$SRC" && gcc -O2 -std=gnu11 -Wall -Wextra -I. -I"$inc" -o "$tmp/shared_exit_check" \
      shared_exit_check.c $CUDART_SOURCES -lpthread -lrt)
  bash "$SRC/test-shared.sh" "$tmp"
  exit 0
fi

OUT=${PEER_OUT:-$ROOT/target/peer}
mkdir -p "$OUT"
for f in $SOURCES; do cp "$SRC/$f" "$OUT/"; done
cd "$OUT"
OUT=$PWD

TORCH_VER=2.15.0            # torch 2.15.0 (the PyPI build links libcudart.so.13)

if [ "${SKIP_PIP:-0}" != 1 ]; then
  [ -x venv/bin/python ] || "$PY" -m venv venv
  ./venv/bin/pip install -q --no-deps "torch==$TORCH_VER" \
      "nvidia-cuda-runtime==$CUDA_HDR_VER" "nvidia-cuda-crt==$CUDA_HDR_VER"
fi

SP=$(./venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TORCH=$SP/torch
CUDAINC=$SP/nvidia/cu13/include
for f in "$TORCH/lib/libc10_cuda.so" "$CUDAINC/cuda_runtime_api.h" "$CUDAINC/crt/host_defines.h"; do
  [ -e "$f" ] || { echo "missing $f" >&2; exit 1; }
done

# The version node the fake must export: the one libc10_cuda.so was linked against.
NODE=$(readelf -V "$TORCH/lib/libc10_cuda.so" | awk '/File: libcudart.so/{getline; if (!n++) print $3}')
[ "$NODE" = libcudart.so.13 ] || { echo "unexpected cudart version node '$NODE'" >&2; exit 1; }

mkdir -p fake traces
echo "== fake/libcudart.so.13"
gcc -O2 -g -fPIC -shared -std=gnu11 -Wall -Wextra -I. -I"$CUDAINC" -fvisibility=hidden \
    -Wl,-soname,libcudart.so.13 -Wl,--version-script=fakecudart.map \
    -o fake/libcudart.so.13 $CUDART_SOURCES -lpthread -lrt
echo "== fake/libnvidia-ml.so.1"
gcc -O2 -g -fPIC -shared -Wall -Wextra -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
    -o fake/libnvidia-ml.so.1 fakenvml.c

# Every cudart symbol libc10_cuda.so needs must be defined, with the right version.
missing=$(comm -23 \
  <(nm -D --undefined-only --with-symbol-versions "$TORCH/lib/libc10_cuda.so" | awk '/@libcudart/{print $2}' | sort -u) \
  <(nm -D --defined-only --with-symbol-versions fake/libcudart.so.13 | awk '{print $3}' | sed 's/@@/@/' | sort -u))
[ -z "$missing" ] || { echo "fake cudart lacks: $missing" >&2; exit 1; }

echo "== replay_torch"
g++ -std=c++20 -O2 -g -D_GLIBCXX_USE_CXX11_ABI=1 -I. -I"$TORCH/include" -I"$CUDAINC" \
    -o replay_torch replay_torch.cpp \
    -L"$TORCH/lib" -lc10_cuda -lc10 fake/libcudart.so.13 \
    -Wl,--no-as-needed fake/libnvidia-ml.so.1 -Wl,--as-needed -ldl \
    -Wl,-rpath,"$OUT/fake" -Wl,-rpath,"$TORCH/lib"

echo "== shared_check, shared_exit_check (test.sh's checks of FAKECUDA_SHARED)"
gcc -O2 -std=gnu11 -Wall -Wextra -I"$CUDAINC" -o shared_check shared_check.c \
    fake/libcudart.so.13 -Wl,-rpath,"$OUT/fake"
gcc -O2 -std=gnu11 -Wall -Wextra -I. -I"$CUDAINC" -o shared_exit_check shared_exit_check.c \
    $CUDART_SOURCES -lpthread -lrt

echo "== synthetic traces"
[ -e traces/synthetic-100k.trace.gz ] || "$PY" make_synthetic_trace.py traces/synthetic-100k.trace.gz
[ -e traces/synthetic-4streams-100k.trace.gz ] || \
  "$PY" make_synthetic_trace.py --streams 4 --seed 7 traces/synthetic-4streams-100k.trace.gz

echo "== smoke replay"
./replay_torch traces/synthetic-100k.trace.gz | grep -E '^(cudart|ns per op|peak reserved|OOMed)'
echo "built in $OUT; run $OUT/test.sh for the harness's checks"
