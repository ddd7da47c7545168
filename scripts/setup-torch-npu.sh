#!/usr/bin/env bash
# setup-torch-npu.sh [DIR] [RELEASE]: a virtual environment in which the real
# torch_npu RELEASE (default 2.14.0) and the real torch it was built for run
# on the ACL emulator (emu/), on a machine with no NPU and no GPU, with
# npualloc's Python package installed.
#
# DIR defaults to $NPUALLOC_TORCH_NPU_DIR, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/npualloc/torch-npu (an empty DIR argument
# too). RELEASE is a torch_npu release on PyPI; it defaults to
# $NPUALLOC_TORCH_NPU_RELEASE, else 2.14.0. Its torch is the one its metadata
# pins, from PyPI, which has CUDA builds only (CUDA 12 up to torch 2.10, CUDA
# 13 from 2.11): a release built for a CPU torch ("torch==2.8.0+cpu") gets the
# CUDA build of the same version, whose libtorch_cpu and libc10 it links.
# DIR gets:
#   DIR/dl/      the downloaded wheels (torch about 550 MB, torch_npu 44 MB,
#                about 30 MB of pure-Python dependencies), shared by every
#                release and reused by later runs;
#   DIR/venv/    the environment of 2.14.0, DIR/venv-RELEASE/ that of another
#                release (its python is the last line printed);
#   DIR/build/   the generated stub libraries and their sources.
# What is installed into the venv's site-packages and why (tools/torch_npu/):
#   nvidia/*/lib/     stubs of the CUDA libraries torch's CUDA build needs, in
#                     each directory of its RPATH there (gen_stubs.py;
#                     cuda_absent.c answers "no CUDA device");
#   npu_emu.py, libnpu_emu_cuda_keys.so  `import npu_emu` imports torch, removes
#                     libc10_cuda's allocator-config keys torch_npu registers
#                     again (cuda_keys_reset.cpp), then imports torch_npu;
#   torch_npu.libs/   (or torch_npu/lib/ where torch_npu's RPATH does not name
#                     torch_npu.libs, as in 2.6.0)
#                     libaclemu.so (the emulator), the wrapper libascendcl.so
#                     that re-exports it (torch_npu looks functions up with
#                     dlsym on libascendcl's handle, which LD_PRELOAD would not
#                     reach) and stubs of CANN's other libraries. The wrapper
#                     adds only stubs (207000, named once on stderr and in
#                     $STUB_LOG) for what the emulator leaves out (op
#                     compilation, HCCL, profiling, dump, graph capture, CANN
#                     attributes; the torch_npu names in dlsym/ and those its
#                     libraries link) and op_engine.c, an op engine for
#                     torch.zeros, torch.ones and fill_ of small tensors
#                     (memsets); compile_options.c answers the
#                     op compiler's option calls torch_npu's init needs;
#                     hccl_emu.c, in the stub libhccl.so, is an emulated HCCL
#                     (communicators between processes through shared
#                     memory, collectives on the emulator's device memory)
#                     for torch.distributed's "hccl" backend.
# Run Python there as `DIR/venv/bin/python -c "import npu_emu, torch; ..."`.
#
# When the wheels cannot be downloaded it says so and exits with status 75
# (scripts/test-torch-npu.sh turns that into a loud skip). From the cache it
# takes about a minute; the first run about 5 minutes on 2 cores.
# Environment: PYTHON (default python3, must be one the release has wheels
# for), CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
harness=$root/tools/torch_npu
dir=${1:-${NPUALLOC_TORCH_NPU_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/npualloc/torch-npu}}
mkdir -p "$dir/dl" "$dir/build"
dir=$(cd "$dir" && pwd)
python=${PYTHON:-python3}
target=${CARGO_TARGET_DIR:-$root/target}
[[ $target = /* ]] || target=$root/$target
start=$(date +%s)
step() { echo "== torch_npu harness (+$(($(date +%s) - start))s): $*"; }

RELEASE=${2:-${NPUALLOC_TORCH_NPU_RELEASE:-2.14.0}}
[[ $RELEASE =~ ^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$ ]] || {
    echo "setup-torch-npu: $RELEASE is not a torch_npu release (such as 2.14.0 or 2.12.0.post3)" >&2
    exit 2
}
DEPS=(numpy pyyaml sympy mpmath filelock typing_extensions networkx jinja2 markupsafe fsspec pytest)
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')

step "downloads (cached in $dir/dl)"
cannot_download() {
    echo "setup-torch-npu: could not download $1 (no network or no wheel for $tag); nothing was set up" >&2
    exit 75
}
download() {  # download WHEEL VERSION
    if ! compgen -G "$dir/dl/$1-$2-$tag-*.whl" >/dev/null; then
        "$python" -m pip download -q --no-deps --only-binary=:all: -d "$dir/dl" "${1/_/-}==$2" ||
            cannot_download "$1 $2"
    fi
}
download torch_npu "$RELEASE"
npu_wheels=("$dir"/dl/torch_npu-"$RELEASE"-"$tag"-*.whl)
npu_wheel=${npu_wheels[0]}
# The torch it was built for, as its metadata pins it ("torch==2.12.0", "torch==2.13.0.*").
TORCH=$("$python" - "$npu_wheel" "$RELEASE" <<'PY'
import re, sys, zipfile
meta = zipfile.ZipFile(sys.argv[1]).read(f"torch_npu-{sys.argv[2]}.dist-info/METADATA").decode()
pinned = re.search(r"^Requires-Dist: torch\s*==\s*([0-9]+(?:\.[0-9]+)*)", meta, re.M)
print(pinned.group(1) if pinned else re.match(r"\d+\.\d+\.\d+", sys.argv[2]).group(0))
PY
)
download torch "$TORCH"
if [[ ! -f $dir/dl/deps/.complete-$tag ]]; then
    "$python" -m pip download -q --only-binary=:all: -d "$dir/dl/deps" "${DEPS[@]}" ||
        cannot_download "torch's pure-Python dependencies"
    touch "$dir/dl/deps/.complete-$tag"
fi

step "cargo build --release -p acl-emu"
cargo build -q --locked --release -p acl-emu
emulator=$target/release/libascendcl.so

venv=$dir/venv
[[ $RELEASE = 2.14.0 ]] || venv=$dir/venv-$RELEASE
step "venv $venv: torch $TORCH, torch_npu $RELEASE, their dependencies, npualloc"
[[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
venv_python=$venv/bin/python
pip=("$venv_python" -m pip -q --disable-pip-version-check)
installed() { "$venv_python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
installed torch "$TORCH" || "${pip[@]}" install --no-deps "$dir"/dl/torch-$TORCH-$tag-*.whl
installed torch_npu "$RELEASE" || "${pip[@]}" install --no-deps "$npu_wheel"
# pip then warns that torch's CUDA dependencies are missing: they are stubbed.
"${pip[@]}" install --no-index --find-links "$dir/dl/deps" "${DEPS[@]}" 2>&1 | { grep -v '^torch .* requires ' || true; }
"${pip[@]}" install --no-deps --force-reinstall "$root/python"
site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_dir=$site/torch
npu_dir=$site/torch_npu

# The C and C++ runtime libraries: symbols they define are not stubbed.
# The cache is read whole first: awk stopping at its first match would leave
# ldconfig writing to a closed pipe, and under pipefail a long cache (more than
# a pipe's 64 KiB) would then fail the script with SIGPIPE's status 141.
system_libs=()
ld_cache=$("$(command -v ldconfig || echo /sbin/ldconfig)" -p)
for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1 libdl.so.2 librt.so.1 libpthread.so.0; do
    path=$(awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}' <<<"$ld_cache")
    [[ -n $path ]] && system_libs+=("$path")
done
system_libs+=(/lib64/ld-linux-x86-64.so.2)

step "CUDA stubs -> the site-packages/nvidia directories of torch's RPATH"
# The CUDA libraries torch's libraries need and nothing here provides: CUDA 13
# builds (torch 2.11 and later) name libcudart.so.13 and look in nvidia/cu13/lib,
# CUDA 12 builds name libcudart.so.12 and look in one nvidia/<library>/lib each.
out=$dir/build/cuda
rm -rf "$out"
consumers=("$torch_dir"/lib/*.so* "$torch_dir"/_C*.so)
read -r -a cuda_libs < <("$python" "$harness/gen_stubs.py" --missing "${consumers[@]}" "${system_libs[@]}")
read -r -a stub_dirs < <("$python" "$harness/gen_stubs.py" --runpath-under "$site/nvidia" "${consumers[@]}")
cudart=
for lib in "${cuda_libs[@]}"; do [[ $lib = libcudart.so.* ]] && cudart=$lib; done
if [[ -z $cudart || ${#stub_dirs[@]} -eq 0 ]]; then
    echo "setup-torch-npu: torch $TORCH's libraries name no libcudart or no site-packages/nvidia RPATH;" \
        "the harness knows CUDA builds only" >&2
    exit 2
fi
args=()
for f in "${consumers[@]}"; do args+=(--consumer "$f" --provider "$f"); done
for f in "${system_libs[@]}"; do args+=(--provider "$f"); done
for lib in "${cuda_libs[@]}"; do
    args+=(--lib "$lib" --ret "$lib=100")   # 100: cudaErrorNoDevice
    case $lib in
    libcudnn.so.*) args+=(--assign "^cudnn=$lib") ;;
    libnccl.so.*) args+=(--assign "^nccl=$lib") ;;
    libcusparseLt.so.*) args+=(--assign "^cusparseLt=$lib") ;;
    libcufile.so.*) args+=(--assign "^cuFile=$lib") ;;
    libnvshmem_host.so.*) args+=(--assign "^nvshmem=$lib") ;;
    libcupti.so.*) args+=(--assign "^cupti=$lib") ;;
    esac
done
"$python" "$harness/gen_stubs.py" "$out" "${args[@]}" --source "$cudart=$harness/cuda_absent.c"
for d in "${stub_dirs[@]}"; do
    mkdir -p "$d"
    cp "$out"/lib*.so.[0-9]* "$d/"
done

step "npu_emu: the import that removes libc10_cuda's allocator-config keys"
g++ -std=c++20 -O1 -shared -fPIC -Wall -Werror -o "$site/libnpu_emu_cuda_keys.so" "$harness/cuda_keys_reset.cpp" \
    -I"$torch_dir/include" -D_GLIBCXX_USE_CXX11_ABI=1 -L"$torch_dir/lib" -lc10 -Wl,-rpath,"$torch_dir/lib"
cp "$harness/npu_emu.py" "$site/"

# One directory of torch_npu's RPATH gets them: torch_npu.libs where its
# libraries name it (the wheels repaired by auditwheel), else torch_npu/lib.
# One copy only: npualloc loads the wrapper by path, and a second copy of the
# emulator would be a second device.
read -r -a npu_rpath < <("$python" "$harness/gen_stubs.py" --runpath-under "$site" "$npu_dir"/_C*.so "$npu_dir"/lib/*.so)
cann_dir=$npu_dir/lib
libs_dir=$(realpath -m "$site/torch_npu.libs")  # as --runpath-under resolves them
for d in "${npu_rpath[@]}"; do [[ $d = "$libs_dir" ]] && cann_dir=$d; done
rm -f "$site/torch_npu.libs/libaclemu.so" "$npu_dir/lib/libaclemu.so"
step "the emulator, the wrapper libascendcl.so and CANN stubs -> $cann_dir"
out=$dir/build/cann
rm -rf "$out"
mkdir -p "$out" "$cann_dir"
cp "$emulator" "$out/libaclemu.so"
cann_libs=(libascendcl.so libhccl.so libacl_op_compiler.so libge_runner.so libgraph.so libacl_tdt_channel.so
    libatb.so libopapi.so)
args=()
for f in "$npu_dir"/_C*.so "$npu_dir"/lib/*.so; do
    # torch_npu's own libraries only: a setup run before may have put the stubs in torch_npu/lib.
    [[ " ${cann_libs[*]} libaclemu.so " = *" ${f##*/} "* ]] || args+=(--consumer "$f" --provider "$f")
done
for lib in "${cann_libs[@]}"; do args+=(--lib "$lib"); done
for f in "$torch_dir"/lib/*.so* "$torch_dir"/_C*.so "${system_libs[@]}" "$out/libaclemu.so"; do
    args+=(--provider "$f")
done
python3 "$harness/gen_stubs.py" "$out" "${args[@]}" \
    --ret libascendcl.so=207000 --ret libacl_op_compiler.so=207000 --ret libhccl.so=207000 \
    --assign '^acltdt=libacl_tdt_channel.so' --assign '^(Hccl|hccl)=libhccl.so' \
    --assign '^(atb|_ZN3atb|_ZNK3atb)=libatb.so' --assign '^acl=libascendcl.so' \
    --extra "libascendcl.so=$harness/dlsym/libascendcl.txt" \
    --extra "libacl_op_compiler.so=$harness/dlsym/libacl_op_compiler.txt" \
    --extra "libhccl.so=$harness/dlsym/libhccl.txt" \
    --source "libascendcl.so=$harness/op_engine.c" \
    --source "libacl_op_compiler.so=$harness/compile_options.c" \
    --source "libhccl.so=$harness/hccl_emu.c" \
    --link "libascendcl.so=-L$out -Wl,--no-as-needed -laclemu -Wl,--as-needed -Wl,-rpath,\$ORIGIN -lpthread" \
    --link "libhccl.so=-lpthread -ldl -lrt"
cp "$out"/*.so "$cann_dir/"

step "check: import npu_emu; torch.npu.device_count()"
env -u NPUALLOC_ACL_LIBRARY TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$venv_python" -c \
    "import npu_emu, torch; n = torch.npu.device_count(); assert n > 0, n; print('torch', torch.__version__, 'torch_npu', npu_emu.torch_npu.__version__, 'devices', n)"
step "done"
echo "$venv_python"
