#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 38 on the NVIDIA GPU machine (../shared/GPU.md): which release arrangements of overlapping
# sub-buffers the driver survives, and the conformance suite's overlapping sub-buffer pattern
# through clbuf (16 overlapping views to kernels by native(), then destroyed).
#   bench/nvidia_subbuffers.sh DIR OUT [REPRO_VARIANTS]
# DIR holds the ICD loader and clinfo packages (.deb, as GPU.md fetches them) and the stripped
# Release binaries to run: `release` (docs/repro/nvidia_subbuffer_release.cpp), `overlap`
# (../shared/repro/nvidia_overlapping_subbuffers.cpp) and any GoogleTest executables named
# *_test*, each case in a process of its own (a driver crash ends only that case). Each program
# has a time limit (CASE_TIMEOUT, default 120 s); a case that dies by a signal is recorded as
# "SIGNAL n", not fatal to the script. The executables named in WHOLE (default "views_test") run
# all their cases in one process (three time limits). GTEST_ENV (default none), a space-separated list of
# VAR=value, is set for a second run of every test executable (e.g. a forced policy).
# Writes OUT/clinfo.txt, OUT/repro.txt and OUT/tests.txt (a line per case: rc, signal, time).
set -uo pipefail
dir=${1:?usage: bench/nvidia_subbuffers.sh DIR OUT [REPRO_VARIANTS]}
out=${2:?usage: bench/nvidia_subbuffers.sh DIR OUT [REPRO_VARIANTS]}
variants=${3:-GHRPFSKNWOULIJMmTZYXQq}
limit=${CASE_TIMEOUT:-120}
mkdir -p "$out"
driver=$(ls /usr/lib/libnvidia-opencl.so* /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so* \
  /usr/local/nvidia/lib64/libnvidia-opencl.so* 2> /dev/null | head -1)
if compgen -G "$dir/*.deb" > /dev/null && [[ -n $driver ]]; then
  for f in "$dir"/*.deb; do dpkg -x "$f" /tmp/cl; done
  mkdir -p /tmp/vend && echo "$driver" > /tmp/vend/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  clinfo=/tmp/cl/usr/bin/clinfo
else
  clinfo=clinfo
fi
{
  echo "driver library: ${driver:-none}"
  nvidia-smi --query-gpu=name,driver_version --format=csv 2> /dev/null
  $clinfo -l
  $clinfo 2> /dev/null | grep -E "Platform Name|Platform Version|Device Name|Driver Version|Device Version|Alignment of base address|Max memory allocation"
} > "$out/clinfo.txt" 2>&1
cat "$out/clinfo.txt"

# status TEXT of an exit code: "exit N", "SIGNAL N (NAME)" or "TIMEOUT"
verdict() {
  local rc=$1
  if ((rc == 124 || rc == 137)); then echo "TIMEOUT"
  elif ((rc > 128)); then echo "SIGNAL $((rc - 128)) ($(kill -l $((rc - 128))))"
  else echo "exit $rc"; fi
}

if [[ -x $dir/release ]]; then
  echo "== release arrangements ($variants)" | tee "$out/repro.txt"
  timeout -s KILL $((limit * 4)) "$dir/release" "$variants" >> "$out/repro.txt" 2>&1
  echo "release: $(verdict $?)" >> "$out/repro.txt"
fi
if [[ -x $dir/overlap ]]; then
  echo "== nvidia_overlapping_subbuffers.cpp (AGEH)" >> "$out/repro.txt"
  timeout -s KILL $((limit * 2)) "$dir/overlap" AGEH >> "$out/repro.txt" 2>&1
  echo "overlap: $(verdict $?)" >> "$out/repro.txt"
fi
grep -E "^variant|: (exit|SIGNAL|TIMEOUT)" "$out/repro.txt"

run_cases() {  # run_cases BINARY LABEL [ENV...]: every case of BINARY in its own process
  local bin=$1 label=$2
  shift 2
  local case_name rc start
  "$bin" --gtest_list_tests | awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}' |
    while read -r case_name; do
      start=$(date +%s.%N)
      env CLBUF_REQUIRE_DEVICE=1 "$@" timeout -s KILL "$limit" "$bin" --gtest_filter="$case_name" \
        --gtest_brief=1 >> "$out/tests.log" 2>&1
      rc=$?
      printf '%s %s %s: %s (%s s)\n' "$(basename "$bin")" "$label" "$case_name" "$(verdict $rc)" \
        "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')" |
        tee -a "$out/tests.txt"
    done
}
run_whole() {  # run_whole BINARY LABEL [ENV...]: all of BINARY in one process
  local bin=$1 label=$2
  shift 2
  env CLBUF_REQUIRE_DEVICE=1 "$@" timeout -s KILL $((limit * 3)) "$bin" --gtest_brief=1 \
    >> "$out/tests.log" 2>&1
  local rc=$?
  echo "$(basename "$bin") $label (all cases): $(verdict $rc)" | tee -a "$out/tests.txt"
}
: > "$out/tests.txt"
for bin in "$dir"/*_test*; do
  [[ -x $bin ]] || continue
  how=run_cases
  [[ " ${WHOLE-views_test} " == *" $(basename "$bin") "* ]] && how=run_whole
  $how "$bin" default
  if [[ -n ${GTEST_ENV:-} ]]; then
    # shellcheck disable=SC2086  # a list of VAR=value words
    $how "$bin" "[$GTEST_ENV]" $GTEST_ENV
  fi
done
echo "summary: $(grep -c ': exit 0' "$out/tests.txt") cases passed, $(grep -vc ': exit 0' "$out/tests.txt") did not"
