#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs the Debian packages that clbuf's demo and tests need; does nothing when all are there.
#   scripts/install-deps.sh            the library, the demo and the C++ tests (PoCL as the device)
#   scripts/install-deps.sh --all      also what every test needs: the Python module (pybind11,
#                                      numpy, pytest) and its pip install in a venv (setuptools,
#                                      wheel, pybind11 for Python, venv, pip); the benchmark peers
#                                      (Boost.Compute, pyopencl, gnuplot) for the benchmark's smoke
#                                      test; the packaging tests (clang++ 14 for the coexistence
#                                      matrix, pkg-config, doxygen); and clang-format-14 for CI's
#                                      format check (scripts/check-format.sh); Open MPI (openmpi-bin
#                                      libopenmpi-dev) for clbuf::mpi's tests, example and benchmark,
#                                      and mpi4py for the Python module's MPI tests and example;
#                                      matplotlib for `clbuf bench --plot` (python.cli_plot)
#   scripts/install-deps.sh --sanitize the sanitizer stage (scripts/sanitize.sh): clang-14 with its
#                                      sanitizer and libFuzzer runtimes, valgrind, oclgrind,
#                                      python3 for scripts/run_label.py, and lcov for the
#                                      coverage stage (which also installs what --all does)
set -eu
packages="cmake g++ make pocl-opencl-icd ocl-icd-opencl-dev opencl-clhpp-headers opencl-c-headers clinfo googletest libgtest-dev"
for arg in "$@"; do
  case "$arg" in
    --all) packages="$packages pybind11-dev python3-dev python3-numpy python3-pytest python3-pybind11 python3-setuptools python3-wheel python3-venv python3-pip libbenchmark-dev libboost-dev python3-pyopencl gnuplot-nox time clang-format-14 clang-14 pkg-config doxygen openmpi-bin libopenmpi-dev python3-mpi4py python3-matplotlib" ;;
    --sanitize) packages="$packages clang-14 libclang-rt-14-dev valgrind oclgrind python3 lcov" ;;
    *) echo "usage: $0 [--all] [--sanitize]" >&2; exit 2 ;;
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
