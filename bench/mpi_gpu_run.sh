#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clbuf::mpi on the NVIDIA H200 machine (../shared/GPU.md): the benchmark, the MPI tests and
# example 06, from a Release build folder made on Debian 12 (targets mpi_bench, mpi_test,
# 06_mpi_halo) and the ICD loader packages in .dev/. With one GPU both ranks share it (reported
# as such: each small transfer then waits for the GPU to switch processes).
#   bench/mpi_gpu_run.sh BUILD_DIR OUT_DIR [mpi_bench arguments...]
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

echo "== mpi_bench (2 ranks, GPU)"
timeout 400 "${run[@]}" -np 2 "$build/bench/mpi_bench" --device gpu --csv "$out/h200_mpi.csv" "$@" \
  > "$out/h200_mpi.txt" 2>&1
echo "mpi_bench rc=$?"; cat "$out/h200_mpi.txt"

echo "== mpi_test (2 ranks, GPU; the MemoryModel::host cases skip)"
CLBUF_DEVICE=gpu CLBUF_REQUIRE_DEVICE=1 timeout 300 "${run[@]}" -x CLBUF_DEVICE -x CLBUF_REQUIRE_DEVICE \
  -np 2 "$build/tests/mpi/mpi_test" --gtest_brief=1 > "$out/mpi_test.log" 2>&1
echo "mpi_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/mpi_test.log" | sort -u | tr '\n' ' ')"

echo "== example 06 (2 ranks)"
timeout 120 "${run[@]}" -np 2 "$build/examples/06_mpi_halo/06_mpi_halo" > "$out/example_06.log" 2>&1
echo "example_06 rc=$?"; cat "$out/example_06.log"
