#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 47's GPU check, two builds on one machine (../shared/GPU.md: .dev/ and both folders
# carried): bench/gpu_issue47.sh BEFORE_DIR AFTER_DIR OUT_DIR
# small_calls (--rounds 9 --calls 1000) and every_size at 4 B, 64 B and 4 KiB (gpu_run.sh), the
# builds alternated ROUNDS times (default 2) so that both meet the same machine state; then, on
# AFTER_DIR, the GPU checks of the files layer that had not run on a GPU (files_bench, files_test,
# file_faults_test). Each output in OUT_DIR/<build>-<round>/ and OUT_DIR/<step>.txt; the tables
# on standard output.
set -u
before=$1 after=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export EVERY_SIZES=4,64,4K EVERY_BIG_SIZES=
for round in $(seq "${ROUNDS:-2}"); do
  for build in "$before" "$after"; do
    tag=$(basename "$build")-$round
    "$here/gpu_run.sh" "$build" "$out/$tag" small_calls every_size > "$out/$tag.log" 2>&1
    echo "== $tag small_calls"
    cat "$out/$tag/small_calls.txt" 2> /dev/null
    echo "== $tag every_size (clbuf / peer at 4 B-4 KiB)"
    grep -E "^\| (roundtrip_seed|upload_async|download_async|download_new|download_caller|upload_existing|upload_fresh|d2d)" \
      "$out/$tag/every_size/every_size.md" 2> /dev/null | head -40
  done
done
# The files layer on the GPU (gpu_run.sh sets the ICD up for the stages above; again here).
if ls .dev/*.deb > /dev/null 2>&1 && [ -e /usr/lib/libnvidia-opencl.so ]; then
  for f in .dev/*.deb; do dpkg -x "$f" /tmp/cl; done
  mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export CLBUF_REQUIRE_DEVICE=1
for step in "files_bench --mib 64,1024 --reps 3 --dir /tmp" files_test file_faults_test; do
  name=${step%% *}
  bin=$after/tests/$name
  [ -x "$bin" ] || bin=$after/bench/$name
  # shellcheck disable=SC2086
  timeout 150 "$bin" ${step#"$name"} > "$out/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.txt" | tr '\n' ' ')"
  [ "$name" = files_bench ] && cat "$out/$name.txt"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null
