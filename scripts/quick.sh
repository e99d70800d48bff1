#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The loop between commits: the fast suite (CTest label unit) of a plain build, in a few minutes
# on two cores. CI (.ci/run) runs the whole suite and every sanitizer stage.
#   scripts/quick.sh [CTEST_ARG...]   e.g. scripts/quick.sh -R '^Views'
# Environment: CLBUF_QUICK_BUILD (default build-quick), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${CLBUF_QUICK_BUILD:-build-quick}
jobs=${JOBS:-$(nproc)}
start=$SECONDS

scripts/install-deps.sh
[ -f "$dir/CMakeCache.txt" ] || cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCLBUF_BUILD_EXAMPLES=OFF > /dev/null
cmake --build "$dir" -j"$jobs" --target clbuf_tests_unit
CLBUF_REQUIRE_DEVICE=${CLBUF_REQUIRE_DEVICE:-1} \
  ctest --test-dir "$dir" -L '^unit$' --output-on-failure -j"$jobs" "$@"
echo "quick: passed in $((SECONDS - start)) s"
