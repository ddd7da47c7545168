#!/usr/bin/env bash
# Builds main.cpp against an installed npualloc with pkg-config alone:
#
#   PKG_CONFIG_PATH=<prefix>/lib/pkgconfig examples/cmake-consumer/build-pkg-config.sh OUT
#
# OUT is the program to write (default: ./npualloc_consumer_pc). The program
# records libnpualloc's SONAME (libnpualloc.so.<abi>) and gets an rpath to the
# library directory pkg-config reports; without it, set LD_LIBRARY_PATH when
# running it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-./npualloc_consumer_pc}
cxx=${CXX:-c++}
pkg_config=${PKG_CONFIG:-pkg-config}
libdir=$("$pkg_config" --variable=libdir npualloc)
version=$("$pkg_config" --modversion npualloc)
# shellcheck disable=SC2046  # pkg-config output is meant to split into words
"$cxx" -std=c++17 -Wall -Wextra -o "$out" "$here/main.cpp" $("$pkg_config" --cflags --libs npualloc) \
    "-DNPUALLOC_EXPECTED_VERSION=\"$version\"" "-Wl,-rpath,$libdir"
