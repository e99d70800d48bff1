#!/bin/bash
# SPDX-License-Identifier: MIT
for f in .dev/*.deb; do dpkg -x $f /tmp/cl; done
mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
export PATH=/tmp/cl/usr/bin:$PATH
mkdir -p $OUT/s
TESTS="thread_test async_ops_test async_test device_group_test pinned_pool_test paths_test buffered_upload_test hostile_test transfer_test trace_test race_test" SUITE_JOBS=6 SUITE_TIMEOUT=300 timeout 420 bench/gpu_run.sh build-devcarry2 $OUT/s suite > $OUT/s/run.txt 2>&1
echo "gpu_run rc=$?" >> $OUT/s/run.txt
timeout 60 build-devcarry2/examples/09_heat3d_devices/09_heat3d_devices --n 128 --iters 100 --verify > $OUT/s/example09.txt 2>&1
cd $OUT && tar czf suite.tgz s && ls -la suite.tgz && tail -20 s/run.txt && cat s/suite.txt
