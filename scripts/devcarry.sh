#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Makes a folder small enough to carry to the H200 machine (64 MiB, ../shared/GPU.md) from a
# Release build: its test, example and benchmark executables, stripped, with the CTest files that
# bench/gpu_run.sh reads each test's environment from, and (optional) a "before" build's
# benchmarks in DEST/bench/before for the before/after stages (staging, seed).
#
#   scripts/devcarry.sh BUILD_DIR DEST_DIR [BEFORE_DIR]
#
# BEFORE_DIR holds executables (clbuf_bench, duplex, seed_profile, ...) copied from an earlier
# revision's build. Prints DEST_DIR's size at the end.
set -euo pipefail
build=${1:?usage: scripts/devcarry.sh BUILD_DIR DEST_DIR [BEFORE_DIR]}
dest=${2:?usage: scripts/devcarry.sh BUILD_DIR DEST_DIR [BEFORE_DIR]}
before=${3:-}

rm -rf "$dest"
mkdir -p "$dest"
copy() {  # copy FILE into DEST at the same path below BUILD_DIR, stripped when executable
  local rel=${1#"$build"/}
  mkdir -p "$dest/$(dirname "$rel")"
  cp "$1" "$dest/$rel"
  if [[ -x $1 ]]; then strip "$dest/$rel" 2> /dev/null || true; fi
}
while IFS= read -r f; do copy "$f"; done < <(
  find "$build/tests" "$build/examples" "$build/bench" -maxdepth 2 -type f \
    \( -perm -u+x -o -name '*_properties.cmake' -o -name 'CTestTestfile.cmake' -o -name '*_tests.cmake' \) \
    -not -path '*/CMakeFiles/*' 2> /dev/null)
if [[ -n $before ]]; then
  mkdir -p "$dest/bench/before"
  for f in "$before"/*; do
    cp "$f" "$dest/bench/before/"
    strip "$dest/bench/before/$(basename "$f")" 2> /dev/null || true
  done
fi
du -sh "$dest"
