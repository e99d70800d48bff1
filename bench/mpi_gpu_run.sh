#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clbuf::mpi on the NVIDIA H200 machine (../shared/GPU.md): the benchmark, the MPI tests and
# example 06, from a Release build folder made on Debian 12 (targets mpi_bench, mpi_test,
# 06_mpi_halo) and the ICD loader packages in .dev/. With one GPU both ranks share it (reported
# as such: each small transfer then waits for the GPU to switch processes).
#   bench/mpi_gpu_run.sh BUILD_DIR OUT_DIR [mpi_bench arguments...]
# STAGES picks what runs (default "bench halo test example"): bench = mpi_bench's point-to-point
# and allreduce tables, halo = mpi_bench --halo (2-D and 3-D halo exchange, $HALO_ARGS, default
# below; ranks = $HALO_RANKS, 2; devices from local_device_selector: one GPU per rank where there
# are enough), test = mpi_test, example = example 06. All four may take longer than one 10-minute
# device call; the halo table alone: STAGES=halo bench/mpi_gpu_run.sh build-rel OUT_DIR
set -uo pipefail
build=$1
out=$2
shift 2
for f in .dev/*.deb; do dpkg -x "$f" /tmp/cl; done
mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p "$out"
/tmp/cl/usr/bin/clinfo -l | tee "$out/clinfo.txt"
mpirun --version | head -1 | tee "$out/mpi_version.txt"
run=(mpirun --allow-run-as-root --oversubscribe -x OCL_ICD_VENDORS -x LD_LIBRARY_PATH)

stages=" ${STAGES:-bench halo test example} "

if [[ $stages == *" bench "* ]]; then
echo "== mpi_bench (2 ranks, GPU)"
timeout 400 "${run[@]}" -np 2 "$build/bench/mpi_bench" --device gpu --csv "$out/h200_mpi.csv" "$@" \
  > "$out/h200_mpi.txt" 2>&1
echo "mpi_bench rc=$?"; cat "$out/h200_mpi.txt"
fi

if [[ $stages == *" halo "* ]]; then
# 3-D faces up to 4 MiB (a 1024^3 block: 4.1 GiB a rank on the GPU, about 4x that in host memory
# during the check), 2-D up to 64 KiB (16384^2: 1 GiB); larger 2-D blocks are skipped
halo_args=${HALO_ARGS:---halo-sizes 16K,64K,256K,1M,4M --halo-max-field 4200M}
echo "== mpi_bench --halo (${HALO_RANKS:-2} ranks, $halo_args)"
# shellcheck disable=SC2086  # halo_args is a list of arguments
timeout 450 "${run[@]}" -np "${HALO_RANKS:-2}" "$build/bench/mpi_bench" --halo $halo_args \
  --csv "$out/h200_mpi_halo.csv" > "$out/h200_mpi_halo.txt" 2>&1
echo "mpi_bench --halo rc=$?"; cat "$out/h200_mpi_halo.txt"
fi

if [[ $stages == *" test "* ]]; then
echo "== mpi_test (2 ranks, GPU; the MemoryModel::host cases skip)"
CLBUF_DEVICE=gpu CLBUF_REQUIRE_DEVICE=1 timeout 300 "${run[@]}" -x CLBUF_DEVICE -x CLBUF_REQUIRE_DEVICE \
  -np 2 "$build/tests/mpi/mpi_test" --gtest_brief=1 > "$out/mpi_test.log" 2>&1
echo "mpi_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/mpi_test.log" | sort -u | tr '\n' ' ')"
fi

if [[ $stages == *" example "* ]]; then
echo "== example 06 (2 ranks)"
timeout 120 "${run[@]}" -np 2 "$build/examples/06_mpi_halo/06_mpi_halo" > "$out/example_06.log" 2>&1
echo "example_06 rc=$?"; cat "$out/example_06.log"
fi
