#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 38's confirming GPU run (not yet run: no GPU machine could be started for it). Run from a
# folder holding the ICD loader and clinfo .debs (../shared/GPU.md), bench/nvidia_subbuffers.sh,
# revision.txt (the revision built) and these Release binaries, stripped: release
# (docs/repro/nvidia_subbuffer_release.cpp), native_views_test, views_test, 05_views_and_handles:
#   cd FOLDER && bash run_after.sh "$OUT"        (about 3 minutes on the H100)
# VARIANTS (default all) limits the release variants.
set -uo pipefail
out=${1:?usage: call2.sh OUT}
rev=$(cat revision.txt)
echo "revision $rev" | tee "$out/revision.txt"
# 1. every release arrangement, whole sub-buffers read; 2. each native_views_test case in its own
# process and views_test whole (the driver's own rule: ordered on NVIDIA)
WHOLE="views_test native_views_test" CASE_TIMEOUT=90 bash nvidia_subbuffers.sh . "$out" "${VARIANTS:-GHRPFSKNWOULIJMmTZYXQqVD}"
[[ -e /tmp/vend/nvidia.icd ]] && export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
verdict() { local rc=$1; if ((rc > 128)); then echo "SIGNAL $((rc - 128))"; elif ((rc == 124)); then echo TIMEOUT; else echo "exit $rc"; fi; }
# 3. the conformance pattern repeated: 10 times each, the driver's own rule
CLBUF_REQUIRE_DEVICE=1 timeout -s KILL 240 ./native_views_test --gtest_brief=1 \
  --gtest_filter='Rules/ConformancePattern.*/DriversOwn' --gtest_repeat=10 > "$out/repeat.log" 2>&1
echo "conformance pattern x10, driver's own rule: $(verdict $?) ($(grep -c 'PASSED' "$out/repeat.log") of 10 iterations passed)" | tee "$out/extra.txt"
# 4. the same binary with the rule of every other driver forced (release with the view): the crash
for c in RunsRepeatedly RunsFromFourThreads OnOneSharedRootRunsFromFourThreads; do
  CLBUF_SUB_BUFFER_RULE=with_view CLBUF_REQUIRE_DEVICE=1 timeout -s KILL 90 ./native_views_test \
    --gtest_brief=1 --gtest_filter="Rules/ConformancePattern.$c/DriversOwn" >> "$out/with_view.log" 2>&1
  echo "conformance pattern $c, CLBUF_SUB_BUFFER_RULE=with_view: $(verdict $?)" | tee -a "$out/extra.txt"
done
# 5. example 05 (a kernel on a view through set_view_args)
timeout -s KILL 60 ./05_views_and_handles > "$out/example05.log" 2>&1
echo "examples/05_views_and_handles: $(verdict $?)" | tee -a "$out/extra.txt"
