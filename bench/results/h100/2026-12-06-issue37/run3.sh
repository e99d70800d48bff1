#!/bin/bash
# SPDX-License-Identifier: MIT
# Issue 37 on the GPU: what tracing costs (bench/trace_cost.cpp), and the traces of example 07 and
# of example 08 on 2 ranks of the one GPU (drawn here by bench/trace_plot.py).
for f in .dev/*.deb; do dpkg -x $f /tmp/cl; done
mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
R=$OUT/t; mkdir -p $R; C=gpu-carry
for i in 1 2; do timeout 200 $C/trace_cost --trace /tmp/cost.json > $R/trace_cost_$i.txt 2>&1; echo "rc=$?" >> $R/trace_cost_$i.txt; done
#CLBUF_TRACE=$R/ex07.json timeout 60 $C/07_async_pipeline > $R/ex07.txt 2>&1; echo "rc=$?" >> $R/ex07.txt
#cd $R && CLBUF_TRACE=$R/ex08.json timeout 120 mpirun --allow-run-as-root --oversubscribe -x OCL_ICD_VENDORS -x LD_LIBRARY_PATH -x CLBUF_TRACE -np 2 $OLDPWD/$C/08_heat3d_mpi --n 64 --iters 20 > $R/ex08.txt 2>&1; echo "rc=$?" >> $R/ex08.txt
cd $OUT && tar czf t.tgz t && ls -la t && tail -n 25 t/trace_cost_*.txt t/ex07.txt t/ex08.txt
