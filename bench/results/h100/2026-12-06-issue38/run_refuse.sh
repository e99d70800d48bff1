#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 38: the `refuse` rule as NVIDIA's own, on the GPU.
set -uo pipefail
out=${1:?}
for f in *.deb; do dpkg -x "$f" /tmp/cl; done
mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
/tmp/cl/usr/bin/clinfo -l > "$out/clinfo.txt" 2>&1
cat revision.txt > "$out/revision.txt"
verdict() { local rc=$1; if ((rc > 128)); then echo "SIGNAL $((rc - 128))"; elif ((rc == 124)); then echo TIMEOUT; else echo "exit $rc"; fi; }
CLBUF_REQUIRE_DEVICE=1 timeout -s KILL 200 ./native_views_test > "$out/native_views_test.log" 2>&1
echo "native_views_test (all cases, NVIDIA's own rule = refuse): $(verdict $?); $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/native_views_test.log" | tr '\n' ' ')" | tee "$out/refuse.txt"
CLBUF_REQUIRE_DEVICE=1 timeout -s KILL 200 ./native_views_test --gtest_brief=1 \
  --gtest_filter='Rules/ConformancePattern.*/DriversOwn' --gtest_repeat=10 > "$out/repeat.log" 2>&1
echo "conformance pattern x10 (3 cases), NVIDIA's own rule: $(verdict $?)" | tee -a "$out/refuse.txt"
grep -c "FAILED" "$out/repeat.log" | sed 's/^/failed lines: /' | tee -a "$out/refuse.txt"
