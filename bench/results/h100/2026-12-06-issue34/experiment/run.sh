#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 34 on the H100: clbuf_bench (seed round trip, 4 B-4 MiB) and mpi_bench ping-pong (64 KiB-4
# MiB, 2 ranks on the one GPU) of three builds, three rounds interleaved: before (8a8344b), nofix
# (c4f97c8: every pinned block mapped on the side queue) and fix (bee3bda: mapped on the queue of
# the commands that use it). Run from the project root with build-devcarry2/{before,nofix,fix}.
set -uo pipefail
for f in .dev/*.deb; do dpkg -x $f /tmp/cl; done; mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu
mkdir -p $OUT/x
run=(mpirun --allow-run-as-root --oversubscribe -x OCL_ICD_VENDORS -x LD_LIBRARY_PATH -np 2)
for round in 1 2 3; do
  for b in before nofix fix; do
    timeout 60 build-devcarry2/$b/clbuf_bench --device gpu --sizes 4,64K,1M,4M --ops roundtrip_seed,download_caller,upload_existing --methods clbuf --target-s 0.1 --case-budget-s 1 2>&1 | grep -E "^(upload|download|roundtrip)" | sed "s/^/$b round=$round /" >> $OUT/x/bench.txt
    timeout 60 "${run[@]}" build-devcarry2/$b/mpi_bench --device gpu --sizes 64K,1M,4M --csv $OUT/x/mpi_${b}_$round.csv > /dev/null 2>&1
  done
done
cd $OUT && tar czf x.tgz x && rm -rf x
