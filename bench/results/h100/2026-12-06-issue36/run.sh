#!/bin/bash
# Issue 36 + the NVIDIA failed-event investigation, one batched call. Writes $OUT/r/*.txt.
for f in .dev/*.deb; do dpkg -x $f /tmp/cl; done
mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
export CLBUF_REQUIRE_DEVICE=1
R=$OUT/r; mkdir -p $R; C=gpu-carry
{ /tmp/cl/usr/bin/clinfo -l; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $R/device.txt 2>&1
timeout 60 $C/nvidia_failed_events --rounds 50 > $R/failed_events.txt 2>&1; echo "rc=$?" >> $R/failed_events.txt
for b in main head branch; do
  timeout 120 $C/$b/thread_test --gtest_filter='*EventsThatFail*:*ConcurrentCallsWaiting*' --gtest_repeat=5 > $R/thread_$b.txt 2>&1; echo "rc=$?" >> $R/thread_$b.txt
done
timeout 120 $C/branch/async_ops_test > $R/async_ops_branch.txt 2>&1; echo "rc=$?" >> $R/async_ops_branch.txt
timeout 120 $C/head/async_ops_test > $R/async_ops_head.txt 2>&1; echo "rc=$?" >> $R/async_ops_head.txt
for i in 1 2; do timeout 30 $C/branch/after_cost_main; timeout 30 $C/branch/after_cost_branch; done > $R/after_cost.txt 2>&1
timeout 120 $C/head/device_group_test > $R/device_group_test.txt 2>&1; echo "rc=$?" >> $R/device_group_test.txt
timeout 60 $C/head/09_heat3d_devices --n 64 --iters 50 --verify > $R/example09.txt 2>&1; echo "rc=$?" >> $R/example09.txt
timeout 200 $C/head/group_bench --sizes 64K,1M,16M,64M,256M --reps 9 > $R/group_bench.txt 2>&1; echo "rc=$?" >> $R/group_bench.txt
tail -n 4 $R/*.txt
