#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 34 on the GPU: the staged and small transfers (gpu_run.sh stages staging and seed) and
# clbuf::mpi's ping-pong (mpi_bench, 2 ranks on the one GPU), the build before the change
# (BUILD/bench/before, 8a8344b) and after it interleaved round by round.
#   bench/results/h100/2026-12-06-issue34/run_ab.sh BUILD OUT
set -uo pipefail
build=${1:?}
out=${2:?}
mkdir -p "$out"
STAGING_ROUNDS=${STAGING_ROUNDS:-3} SEED_ROUNDS=${SEED_ROUNDS:-2} \
  bench/gpu_run.sh "$build" "$out" staging seed > "$out/gpu_run.txt" 2>&1
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
if command -v mpirun > /dev/null; then
  run=(mpirun --allow-run-as-root --oversubscribe -x OCL_ICD_VENDORS -x LD_LIBRARY_PATH -np 2)
  for round in 1 2; do
    for b in before after; do
      exe=$build/bench/mpi_bench; [[ $b == before ]] && exe=$build/bench/before/mpi_bench
      timeout 150 "${run[@]}" "$exe" --device gpu --sizes 4,4K,64K,1M,4M,16M,64M \
        --csv "$out/mpi_${b}_$round.csv" > "$out/mpi_${b}_$round.txt" 2>&1
      echo "$b round $round: rc $?" >> "$out/mpi.txt"
    done
  done
else
  echo "no mpirun on this machine" > "$out/mpi.txt"
fi
