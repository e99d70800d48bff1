#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Instructions per small call, clbuf against the same call by hand (issue 47), counted by
# callgrind: deterministic where the clock of a shared machine is not. Runs BUILD_DIR's
# bench/small_calls under callgrind (collection off at the start); the program collects each
# row's calls in two segments (N and 3N calls after a warm-up) and dumps each; this script takes
# (segment 3N - segment N) / 2N per method, so one-time costs cancel, and prints a line per row:
# clbuf, by hand, the difference and the ratio (the goal: <= 1.03), and each one's instructions
# outside the OpenCL library ("own": the library's bookkeeping, the heap, the copies; the part
# that does not vary with PoCL's waits). A row with a third method "hand_event" (the seed's: the
# careful version with the write's event asked for and waited for by the read, clbuf's promise
# for a write it does not wait for) gets a second line against it.
#
#   bench/small_call_instructions.sh BUILD_DIR [small_calls arguments, e.g. --rows upload_async]
#
# Counted: the calling thread's instructions inside the calls, the OpenCL library's included
# (PoCL's worker threads are not). Default memory model: discrete (the GPU's paths).
# Each row: the median over RUNS runs (default 3) of clbuf and of the hand-written call (PoCL's
# waits vary by ~100 instructions from run to run), and each run's ratio.
# Environment: CALLS (N, default 200), RUNS, KEEP_DUMPS (a folder that keeps the last run's
# dumps, for callgrind_annotate), ALL_THREADS=1 (count every thread's instructions in the
# segments, PoCL's worker threads included: a command's work moves between the caller and the
# worker, e.g. the last release of an event the caller asked for is the caller's; "own" then
# also holds the workers').
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [small_calls arguments]}
shift
bin=$build/bench/small_calls
[ -x "$bin" ] || { echo "no $bin: cmake --build $build --target small_calls" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "valgrind not found" >&2; exit 2; }
dumps=${KEEP_DUMPS:-$(mktemp -d)}
mkdir -p "$dumps"
[ -n "${KEEP_DUMPS:-}" ] || trap 'rm -rf "$dumps"' EXIT
calls=${CALLS:-200}
runs=${RUNS:-3}
collect_atstart=no
[ -z "${ALL_THREADS:-}" ] || collect_atstart=yes
export CLBUF_REQUIRE_DEVICE=${CLBUF_REQUIRE_DEVICE:-1}
rev=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2> /dev/null || echo unknown)
dirty=$(git -C "$(dirname "$0")" status --porcelain -- ../include 2> /dev/null | head -1)
threads="calling thread"
[ "$collect_atstart" = no ] || threads="all threads"
echo "# instructions per call (callgrind, $threads, OpenCL included): small_calls $*"
echo "# revision $rev${dirty:+ (include/ modified)}, $(valgrind --version), N=$calls, median of $runs runs"
for run in $(seq "$runs"); do
  rm -f "$dumps"/cg.out*
  valgrind --tool=callgrind --collect-atstart=$collect_atstart --callgrind-out-file="$dumps/cg.out" \
    "$bin" --calls "$calls" ${ALL_THREADS:+--all-threads} "$@" > "$dumps/valgrind.log" 2>&1 ||
    { cat "$dumps/valgrind.log" >&2; exit 1; }
  for f in $(ls "$dumps"/cg.out.* | sort -V); do
    desc=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
    total=$(sed -n 's/^totals: //p' "$f")
    # Inside the OpenCL library: the inclusive cost of the calls into it (the ICD loader's cl*).
    opencl=$(callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$f" 2> /dev/null |
      awk '/\?\?\?:cl[A-Z][A-Za-z]* \[.*libOpenCL/ { x = $1; gsub(",", "", x); s += x } END { print s + 0 }')
    [ -n "$desc" ] && printf '%s|%s|%s|%s\n' "$run" "$desc" "$total" "$opencl"
  done
done | awk -F'|' -v calls="$calls" -v runs="$runs" '
  function median(list,   v, k, m, i, j, t) {  # of a space-separated list
    m = split(list, v, " ")
    for (i = 2; i <= m; ++i) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; --j) v[j + 1] = v[j]; v[j + 1] = t }
    return v[int((m + 1) / 2)]
  }
  { ir[$1 "|" $2 "|" $3 "|" $4] = $5; cl[$1 "|" $2 "|" $3 "|" $4] = $6
    if (!($2 in seen)) { seen[$2] = 1; order[n++] = $2 } }
  END {
    printf "%-26s %10s %10s %8s %7s %8s %8s  %s\n", "row", "clbuf", "hand", "diff", "ratio", \
      "clbuf_own", "hand_own", "per run (clbuf/hand)"
    worst = 0
    for (i = 0; i < n; ++i) {
      r = order[i]; la = ""; lb = ""; oa = ""; ob = ""; each = ""
      for (k = 1; k <= runs; ++k) {
        a = (ir[k "|" r "|clbuf|" 3 * calls] - ir[k "|" r "|clbuf|" calls]) / (2 * calls)
        b = (ir[k "|" r "|hand|" 3 * calls] - ir[k "|" r "|hand|" calls]) / (2 * calls)
        ca = (cl[k "|" r "|clbuf|" 3 * calls] - cl[k "|" r "|clbuf|" calls]) / (2 * calls)
        cb = (cl[k "|" r "|hand|" 3 * calls] - cl[k "|" r "|hand|" calls]) / (2 * calls)
        la = la " " a; lb = lb " " b; oa = oa " " (a - ca); ob = ob " " (b - cb)
        each = each sprintf(" %.3f", b > 0 ? a / b : 0)
      }
      a = median(la); b = median(lb)
      ratio = b > 0 ? a / b : 0
      if (ratio > worst) worst = ratio
      printf "%-26s %10.0f %10.0f %+8.0f %7.3f %8.0f %8.0f %s\n", r, a, b, a - b, ratio, \
        median(oa), median(ob), each
      key = 1 "|" r "|hand_event|" calls  # the same-promise version, the seed row
      if (key in ir) {
        le = ""
        for (k = 1; k <= runs; ++k)
          le = le " " (ir[k "|" r "|hand_event|" 3 * calls] - ir[k "|" r "|hand_event|" calls]) / (2 * calls)
        e = median(le)
        printf "%-26s %10.0f %10.0f %+8.0f %7.3f   (against hand_event: the write event asked for)\n", \
          "  same promise", a, e, a - e, (e > 0 ? a / e : 0)
      }
    }
    printf "worst ratio %.3f (goal <= 1.03)\n", worst
  }'
