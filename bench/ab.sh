#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Before/after comparison on one machine (issue 34: "not slower"): two builds' clbuf_bench (clbuf
# alone) and mpi_bench (ping-pong and stream 4 B .. 64 MiB with the allreduce table, then the halo
# exchange), each with the default memory model and with --memory discrete (the staged, bounced
# and buffered paths on PoCL), interleaved: every job runs for one build and then the other, and
# the build that goes first alternates from round to round.
#
#   bench/ab.sh BEFORE_BENCH_DIR AFTER_BENCH_DIR OUT_DIR [ROUNDS]
#
# ~2.5 minutes a round on the 2-core PoCL machine (~12 minutes for 5 rounds).
# BEFORE_BENCH_DIR and AFTER_BENCH_DIR hold the clbuf_bench and mpi_bench executables (a Release
# build's build-bench/bench). ROUNDS defaults to 5. CSVs and logs go to
# OUT_DIR/{before,after}/round-N/<tool>-<memory>.{csv,txt} (tools: clbuf_bench, mpi_bench,
# mpi_halo; memory: default, discrete), the machine's load before each round to OUT_DIR/load.txt;
# then bench/ab_report.py OUT_DIR prints the table into OUT_DIR/report.md (and to stdout).
# Environment (defaults in brackets):
#   AB_SIZES       clbuf_bench --sizes [4,4K,64K,1M,4M,16M,64M]
#   AB_OPS         clbuf_bench --ops
#                  [upload_existing,download_caller,download_new,roundtrip_seed,d2d_copy]
#   AB_BENCH_ARGS  more clbuf_bench arguments [--target-s 0.3]
#   AB_MPI_SIZES   mpi_bench --sizes [4,64,4K,64K,1M,4M,16M,64M]
#   AB_HALO_SIZES  mpi_bench --halo-sizes [16K,64K,256K]
#   AB_MPI_ARGS    more mpi_bench arguments (both modes) [--target-s 0.1 --samples 5]
#   AB_MEMORIES    the memory models, "default" for none given ["default discrete"]
#   AB_MPIEXEC     the launcher [mpiexec --allow-run-as-root --oversubscribe -np 2]
#   AB_THRESHOLD   ab_report.py's threshold [1.03]
# Quick check (~15 s): AB_SIZES=4,64K AB_MPI_SIZES=4,64K AB_HALO_SIZES=16K \
#   AB_BENCH_ARGS="--target-s 0.02" AB_MPI_ARGS="--target-s 0.02 --samples 3" \
#   bench/ab.sh BEFORE AFTER /tmp/ab-smoke 1
set -euo pipefail

if [[ $# -lt 3 || $# -gt 4 ]]; then
  echo "usage: bench/ab.sh BEFORE_BENCH_DIR AFTER_BENCH_DIR OUT_DIR [ROUNDS]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
before=$(cd "$1" && pwd)
after=$(cd "$2" && pwd)
out=$3
rounds=${4:-5}
for dir in "$before" "$after"; do
  for exe in clbuf_bench mpi_bench; do
    if [[ ! -x $dir/$exe ]]; then
      echo "ab.sh: $dir/$exe is missing" >&2
      exit 2
    fi
  done
done

sizes=${AB_SIZES:-4,4K,64K,1M,4M,16M,64M}
ops=${AB_OPS:-upload_existing,download_caller,download_new,roundtrip_seed,d2d_copy}
bench_args=${AB_BENCH_ARGS:---target-s 0.3}
mpi_sizes=${AB_MPI_SIZES:-4,64,4K,64K,1M,4M,16M,64M}
halo_sizes=${AB_HALO_SIZES:-16K,64K,256K}
mpi_args=${AB_MPI_ARGS:---target-s 0.1 --samples 5}
memories=${AB_MEMORIES:-default discrete}
read -r -a mpiexec <<< "${AB_MPIEXEC:-mpiexec --allow-run-as-root --oversubscribe -np 2}"
read -r -a bench_extra <<< "$bench_args"
read -r -a mpi_extra <<< "$mpi_args"

mkdir -p "$out"
{
  echo "before: $before"
  echo "after:  $after"
  echo "rounds: $rounds; clbuf_bench --sizes $sizes --ops $ops $bench_args"
  echo "mpi_bench --sizes $mpi_sizes / --halo --halo-sizes $halo_sizes, $mpi_args"
  echo "memory models: $memories; launcher: ${mpiexec[*]}"
  for dir in "$before" "$after"; do sha256sum "$dir/clbuf_bench" "$dir/mpi_bench"; done
} > "$out/setup.txt"
: > "$out/load.txt"

# run SIDE DIR ROUND TOOL MEMORY: one job of one build, its CSV and its log.
run() {
  local side=$1 dir=$2 round=$3 tool=$4 memory=$5
  local dest=$out/$side/round-$round
  local base=$dest/$tool-$memory
  local mem=()
  [[ $memory == default ]] || mem=(--memory "$memory")
  mkdir -p "$dest"
  local start=$SECONDS
  case $tool in
    clbuf_bench)
      "$dir/clbuf_bench" --methods clbuf --ops "$ops" --sizes "$sizes" "${mem[@]}" \
        "${bench_extra[@]}" --csv "$base.csv" > "$base.txt" 2>&1 ;;
    mpi_bench)
      "${mpiexec[@]}" "$dir/mpi_bench" --sizes "$mpi_sizes" "${mem[@]}" "${mpi_extra[@]}" \
        --csv "$base.csv" > "$base.txt" 2>&1 ;;
    mpi_halo)
      "${mpiexec[@]}" "$dir/mpi_bench" --halo --halo-sizes "$halo_sizes" "${mem[@]}" \
        "${mpi_extra[@]}" --csv "$base.csv" > "$base.txt" 2>&1 ;;
  esac || { echo "ab.sh: $tool ($memory, $side) failed; see $base.txt" >&2; exit 1; }
  echo "round $round: $side $tool $memory $((SECONDS - start)) s"
}

for ((round = 1; round <= rounds; ++round)); do
  echo "round $round: $(uptime)" >> "$out/load.txt"
  if ((round % 2 == 1)); then order=(before after); else order=(after before); fi
  for tool in clbuf_bench mpi_bench mpi_halo; do
    for memory in $memories; do
      for side in "${order[@]}"; do
        if [[ $side == before ]]; then dir=$before; else dir=$after; fi
        run "$side" "$dir" "$round" "$tool" "$memory"
      done
    done
  done
done
echo "end: $(uptime)" >> "$out/load.txt"

/usr/bin/python3 "$root/bench/ab_report.py" --threshold "${AB_THRESHOLD:-1.03}" "$out" |
  tee "$out/report.md"
