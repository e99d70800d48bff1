#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clbuf::mpi over two of Open MPI's transports on one host, interleaved (issue 36 item 5: ranks
# as on separate nodes): shared memory (pml ob1, btl vader,self) against TCP only (pml ob1, btl
# tcp,self on the loopback interface: the path between nodes, with no shared memory). One
# mpi_bench build; every job runs once per transport, and the transport that goes first
# alternates from round to round. Jobs: mpi_bench's ping-pong and stream table (with its
# allreduce table) and its halo tables (--halo), each with the default memory model and with
# --memory discrete (the staged path through pinned chunks that a GPU takes).
#
#   bench/transports.sh BENCH_DIR OUT_DIR [ROUNDS]
#
# ~1 minute a round on the 2-core PoCL machine. BENCH_DIR holds mpi_bench (a Release build's
# build-bench/bench). ROUNDS defaults to 5. Every job also runs with --mca btl_base_verbose 30,
# and the script fails unless the log says the ranks reached each other through the transport
# named, and through no other (Open MPI's "mca: bml: Using <btl> btl for send to" lines; self is
# a rank's messages to itself). CSVs and logs go to
# OUT_DIR/{sm,tcp}/round-N/<tool>-<memory>.{csv,txt} (tools: mpi_bench, mpi_halo), the machine's
# load before each round to OUT_DIR/load.txt, the commands and the binary's sha256 to
# OUT_DIR/setup.txt; then bench/transports_report.py OUT_DIR prints the table into
# OUT_DIR/report.md (and to stdout).
# Environment (defaults in brackets):
#   TR_SIZES       mpi_bench --sizes [4,64K,1M,16M]
#   TR_HALO_SIZES  mpi_bench --halo-sizes [16K,64K,256K]
#   TR_MPI_ARGS    more mpi_bench arguments (both tools) [--target-s 0.1 --samples 5]
#   TR_MEMORIES    the memory models, "default" for none given ["default discrete"]
#   TR_MPIEXEC     the launcher [mpiexec --allow-run-as-root --oversubscribe -np 2]
#   TR_SM_FLAGS    [--mca pml ob1 --mca btl vader,self]
#   TR_TCP_FLAGS   [--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo]
# Quick check (~20 s): TR_SIZES=4,64K TR_HALO_SIZES=16K TR_MEMORIES=default \
#   TR_MPI_ARGS="--target-s 0.02 --samples 3" bench/transports.sh build-bench/bench /tmp/tr 1
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: bench/transports.sh BENCH_DIR OUT_DIR [ROUNDS]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=$(cd "$1" && pwd)
out=$2
rounds=${3:-5}
if [[ ! -x $bench/mpi_bench ]]; then
  echo "transports.sh: $bench/mpi_bench is missing" >&2
  exit 2
fi

sizes=${TR_SIZES:-4,64K,1M,16M}
halo_sizes=${TR_HALO_SIZES:-16K,64K,256K}
mpi_args=${TR_MPI_ARGS:---target-s 0.1 --samples 5}
memories=${TR_MEMORIES:-default discrete}
read -r -a mpiexec <<< "${TR_MPIEXEC:-mpiexec --allow-run-as-root --oversubscribe -np 2}"
read -r -a sm_flags <<< "${TR_SM_FLAGS:---mca pml ob1 --mca btl vader,self}"
read -r -a tcp_flags <<< "${TR_TCP_FLAGS:---mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo}"
read -r -a mpi_extra <<< "$mpi_args"

mkdir -p "$out"
{
  echo "revision: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(
    git -C "$root" diff --quiet HEAD -- include bench/mpi_bench.cpp 2>/dev/null || echo ' (include/ or bench/mpi_bench.cpp modified)')"
  echo "bench: $bench/mpi_bench"
  sha256sum "$bench/mpi_bench"
  echo "rounds: $rounds; mpi_bench --sizes $sizes / --halo --halo-sizes $halo_sizes, $mpi_args"
  echo "memory models: $memories; launcher: ${mpiexec[*]}"
  echo "sm:  ${sm_flags[*]}"
  echo "tcp: ${tcp_flags[*]}"
  mpiexec --version 2>&1 | head -n 1
  uname -srm
  nproc
} > "$out/setup.txt"
: > "$out/load.txt"

# run TRANSPORT ROUND TOOL MEMORY: one job over one transport, its CSV and its log; fails unless
# the log shows the ranks used that transport between them and no other.
run() {
  local transport=$1 round=$2 tool=$3 memory=$4
  local dest=$out/$transport/round-$round
  local base=$dest/$tool-$memory
  local mem=() flags=() what=()
  [[ $memory == default ]] || mem=(--memory "$memory")
  if [[ $transport == sm ]]; then flags=("${sm_flags[@]}"); else flags=("${tcp_flags[@]}"); fi
  [[ $tool == mpi_halo ]] && what=(--halo --halo-sizes "$halo_sizes") || what=(--sizes "$sizes")
  mkdir -p "$dest"
  local start=$SECONDS
  "${mpiexec[@]}" "${flags[@]}" --mca btl_base_verbose 30 "$bench/mpi_bench" "${what[@]}" \
    "${mem[@]}" "${mpi_extra[@]}" --csv "$base.csv" > "$base.txt" 2>&1 ||
    { echo "transports.sh: $tool ($memory, $transport) failed; see $base.txt" >&2; exit 1; }
  local want=vader
  [[ $transport == tcp ]] && want=tcp
  local used
  used=$(grep -o 'mca: bml: Using [a-z0-9]* btl' "$base.txt" | awk '{print $4}' | sort -u |
         grep -v '^self$' | tr '\n' ' ' || true)
  if [[ $used != "$want " ]]; then
    echo "transports.sh: $tool ($memory, $transport): the ranks used '${used% }', not $want" \
         "(see $base.txt)" >&2
    exit 1
  fi
  echo "round $round: $transport $tool $memory $((SECONDS - start)) s (btl $want)"
}

for ((round = 1; round <= rounds; ++round)); do
  echo "round $round: $(uptime)" >> "$out/load.txt"
  if ((round % 2 == 1)); then order=(sm tcp); else order=(tcp sm); fi
  for tool in mpi_bench mpi_halo; do
    for memory in $memories; do
      for transport in "${order[@]}"; do
        run "$transport" "$round" "$tool" "$memory"
      done
    done
  done
done
echo "end: $(uptime)" >> "$out/load.txt"

/usr/bin/python3 "$root/bench/transports_report.py" "$out" | tee "$out/report.md"
