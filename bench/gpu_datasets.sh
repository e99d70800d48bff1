#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The dataset issues' GPU checks (43, 44) from a Release build folder made on Debian 12 and the
# ICD loader packages in .dev/ (../shared/GPU.md):  bench/gpu_datasets.sh BUILD_DIR OUT_DIR
# The new tests (tile streams, pieces on one device, .npy and checkpoints, the tracer), an array
# over CL_DEVICE_MAX_MEM_ALLOC_SIZE as pieces on one device, the tile stream's overlap at 1 GiB,
# load_npy/save_npy against the two-pass way and the storage ceiling, example 10; a line a step
# in OUT_DIR/summary.txt, each step's output in OUT_DIR/<step>.txt.
set -u
build=$1 out=$2
mkdir -p "$out"
if ls .dev/*.deb > /dev/null 2>&1 && [ -e /usr/lib/libnvidia-opencl.so ]; then
  for f in .dev/*.deb; do dpkg -x "$f" /tmp/cl; done
  mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  /tmp/cl/usr/bin/clinfo -l > "$out/clinfo.txt" 2>&1
  /tmp/cl/usr/bin/clinfo > "$out/clinfo_full.txt" 2>&1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
export CLBUF_REQUIRE_DEVICE=1
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s $(grep -E '^\[  (PASSED|FAILED) ' "$out/$name.txt" | tr '\n' ' ')" >> "$out/summary.txt"
}
# The measurements first (a call is cut at 10 minutes), then the tests; SMALL_CALLS=1 adds issue
# 47's small calls after the tile stream.
step max_alloc_pieces 90 "$build/bench/max_alloc_pieces" --extra-mib 256
step tile_stream_bench 100 "$build/bench/tile_stream_bench" --mib 1024 --tile-mib 64 --reps 3 --check
if [ "${SMALL_CALLS:-0}" = 1 ]; then
  step small_calls 100 "$build/bench/small_calls" --rounds 9 --calls 1000
fi
step files_bench 120 "$build/bench/files_bench" --mib 64,1024 --reps 3 --dir /tmp
step example_10 60 "$build/examples/10_out_of_core/10_out_of_core"
for t in tile_stream_test shard_pieces_test files_test group_shard_calls_test trace_test; do
  step "$t" 60 "$build/tests/$t"
done
cat "$out/summary.txt"
