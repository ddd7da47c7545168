#!/usr/bin/env bash
# Installs the system tools the build needs when they are missing:
# cmake, libclang (for bindgen in build.rs), pkg-config, a C/C++ compiler and
# valgrind (the memcheck pass over the C tests), Python's venv module
# (test-python.sh installs the wheel into a fresh virtual environment), and
# the rustfmt and clippy components (test.sh checks formatting and lints).
# Sourced by test.sh and demo.sh; safe to run on its own.
set -euo pipefail

npualloc_as_root() {
    if [[ "$(id -u)" -eq 0 ]]; then
        "$@"
    else
        sudo "$@"
    fi
}

npualloc_have_libclang() {
    # bindgen loads libclang.so at run time; LIBCLANG_PATH points at it explicitly.
    if [[ -n "${LIBCLANG_PATH:-}" ]] && compgen -G "${LIBCLANG_PATH}/libclang*.so*" >/dev/null; then
        return 0
    fi
    grep -q 'libclang[-.0-9]*\.so' <<<"$(ldconfig -p 2>/dev/null || true)" && return 0
    compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null
}

npualloc_ensure_rust_components() {
    local component
    for component in rustfmt clippy; do
        # `cargo fmt` / `cargo clippy` fail when the component is missing.
        if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
            echo "installing the missing Rust component: $component"
            rustup component add "$component"
        fi
    done
}

npualloc_ensure_tools() {
    npualloc_ensure_rust_components
    local missing=()
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    npualloc_have_libclang || missing+=(libclang-dev)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    command -v c++ >/dev/null 2>&1 || missing+=(g++)
    command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
    # Debian ships venv's pip bootstrap (ensurepip) in a separate package.
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
    else
        missing+=(python3 python3-venv)
    fi
    if ((${#missing[@]})); then
        echo "installing missing build tools: ${missing[*]}"
        npualloc_as_root apt-get update
        npualloc_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y cmake libclang-dev pkg-config "${missing[@]}"
    fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    npualloc_ensure_tools
fi
