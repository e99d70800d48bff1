#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs clbuf's tests and benchmark on the NVIDIA H200 machine (see ../shared/GPU.md), from a
# Release build folder made on Debian 12 and the ICD loader packages in .dev/:
#   bench/gpu_run.sh BUILD_DIR OUT_DIR STAGE...
# (stages: tests bench async streaming sweep rss xdev)
# TESTS (a space-separated list of test executables' names) limits the tests stage; SWEEP_SIZES
# (default 256M) the sizes of the staging sweep.
# Writes test logs, the benchmark CSV/table, a staging sweep, peak RSS and the copies between
# two devices (xdev: cross_device, 0:0 to 0:1 where there are two) into OUT_DIR.
set -uo pipefail
build=$1
out=$2
shift 2
stages=" $* "
for f in .dev/*.deb; do dpkg -x "$f" /tmp/cl; done
mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p "$out"
/tmp/cl/usr/bin/clinfo -l | tee "$out/clinfo.txt"
nproc; grep -m1 "model name" /proc/cpuinfo; cat /sys/kernel/mm/transparent_hugepage/enabled

if [[ $stages == *" tests "* ]]; then
echo "== unit tests on the GPU"
export CLBUF_REQUIRE_DEVICE=1
for t in "$build"/tests/*_test; do
  name=$(basename "$t")
  if [[ -n ${TESTS:-} && " $TESTS " != *" $name "* ]]; then continue; fi
  timeout 300 "$t" --gtest_brief=1 > "$out/test_$name.log" 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/test_$name.log" | tr '\n' ' ')"
done
for e in "$build"/examples/0*; do timeout 60 "$e" > "$out/example_$(basename "$e").log" 2>&1; echo "$(basename "$e") rc=$?"; done
cat "$out/example_02_device_selection.log"
fi

bench=$build/bench/clbuf_bench
if [[ $stages == *" bench "* ]]; then
echo "== benchmark"
timeout 420 "$bench" --sizes 4,4K,1M,16M,64M,256M --gib --target-s 0.15 --case-budget-s 5 \
  --csv "$out/clbuf_h200.csv" > "$out/clbuf_h200.txt" 2>&1
echo "bench rc=$?"; cat "$out/clbuf_h200.txt"
fi

if [[ $stages == *" async "* ]]; then
echo "== asynchronous against blocking, pageable std::vector (clbuf against CLHPP's non-blocking calls)"
timeout 240 "$bench" --sizes 64M,256M,1G --ops upload_existing,upload_async,download_caller,download_async \
  --methods clbuf,clhpp_naive --target-s 0.15 --case-budget-s 4 --csv "$out/async_h200.csv" \
  > "$out/async_h200.txt" 2>&1
echo "async rc=$?"; cat "$out/async_h200.txt"
echo "== small transfers, fresh uploads, pinned"
timeout 150 "$bench" --sizes 4,4K --ops roundtrip_seed,d2d_copy --methods clbuf,clhpp_naive,clhpp_best \
  --target-s 0.15 --case-budget-s 3 > "$out/small_h200.txt" 2>&1
timeout 150 "$bench" --sizes 64M,256M --ops upload_fresh_repeat_64MiB,upload_pinned,download_pinned \
  --methods clbuf,clhpp_naive,clhpp_best --target-s 0.15 --case-budget-s 3 >> "$out/small_h200.txt" 2>&1
echo "small rc=$?"; cat "$out/small_h200.txt"
echo "== upload_async beside a kernel on another queue"
timeout 60 "$build/bench/async_overlap" --mib 256 --reps 7 --kernel-ms 40 | tee "$out/overlap_h200.txt"
fi

if [[ $stages == *" streaming "* ]]; then
echo "== staging copies: plain memcpy (clbuf_bench) against streaming stores (clbuf_bench_streaming_copy), interleaved"
for round in 1 2; do
  for b in clbuf_bench clbuf_bench_streaming_copy; do
    timeout 120 "$build/bench/$b" --sizes 64M,256M,1G \
      --ops upload_existing,download_caller,upload_async,download_async --methods clbuf \
      --target-s 0.1 --case-budget-s 2 2>&1 | grep -E "^(upload|download).*clbuf " | sed "s/^/$b round=$round /"
  done
done | tee "$out/streaming.txt"
fi
if [[ $stages == *" sweep "* ]]; then
echo "== staging sweep (${SWEEP_SIZES:-256M}, pageable std::vector)"
for chunk in 1M 2M 4M; do
  for threads in 4 8 16; do
    timeout 60 "$bench" --sizes "${SWEEP_SIZES:-256M}" --ops upload_existing,download_caller --methods clbuf \
      --chunk $chunk --chunks $((2 * threads)) --copy-threads $threads --target-s 0.1 \
      --case-budget-s 3 2>&1 |
      grep -E "^(upload|download).*clbuf " | sed "s/^/chunk=$chunk threads=$threads /"
  done
done | tee "$out/sweep.txt"
fi

if [[ $stages == *" rss "* ]]; then
echo "== peak RSS of a 256 MiB round trip"
for m in none clbuf clhpp_naive; do timeout 60 "$bench" --rss-roundtrip $m; done | tee "$out/rss.txt"
fi

if [[ $stages == *" xdev "* ]]; then
echo "== copies between two devices (copy_from against download/upload by hand; both directions at once)"
timeout 240 "$build/bench/cross_device" --sizes 1M,16M,64M,256M,1G --csv "$out/xdev_h200.csv" 2>&1 |
  tee "$out/xdev_h200.txt"
echo "xdev rc=${PIPESTATUS[0]}"
fi
