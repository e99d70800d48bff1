#!/bin/sh
# Installs the Debian packages that clbuf's demo and tests need; does nothing when all are there.
#   scripts/install-deps.sh            the library, demo and tests (PoCL as the OpenCL device)
#   scripts/install-deps.sh --bench    also the benchmark peers (Google Benchmark, Boost.Compute,
#                                      pyopencl, gnuplot)
set -eu
packages="cmake g++ make pocl-opencl-icd ocl-icd-opencl-dev opencl-clhpp-headers opencl-c-headers clinfo googletest libgtest-dev"
for arg in "$@"; do
  case "$arg" in
    --bench) packages="$packages libbenchmark-dev libboost-dev python3-pyopencl python3-numpy gnuplot-nox time" ;;
    *) echo "usage: $0 [--bench]" >&2; exit 2 ;;
  esac
done

missing=""
for package in $packages; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing="$missing $package"
done
[ -z "$missing" ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "installing:$missing"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $missing
