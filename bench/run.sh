#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One command for the whole benchmark: build clbuf_bench (Release, build-bench/), run it and the
# pyopencl peer on the same device, measure peak RSS of a 256 MiB round trip per method, merge
# the CSVs, print the table of medians and clbuf/peer ratios, and draw PNG plots into
# bench/results/.
#
#   bench/run.sh [--device SEL] [--sizes 4,4K,64K,1M,16M,256M] [--ops LIST] [--gib]
#                [--no-build] [--no-python] [--no-rss] [--out DIR] [--smoke]
#
# Environment: BUILD_DIR (default <root>/build-bench), JOBS (default 2), PYTHON
# (default /usr/bin/python3). Takes ~10 minutes on the 2-core PoCL machine with all sizes.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
out=$root/bench/results
python=${PYTHON:-/usr/bin/python3}
jobs=${JOBS:-2}
device=""
sizes="4,4K,64K,1M,16M,256M"
ops=""
gib=0
do_build=1
do_python=1
do_rss=1
smoke=0

while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --gib) gib=1; shift ;;
    --no-build) do_build=0; shift ;;
    --no-python) do_python=0; shift ;;
    --no-rss) do_rss=0; shift ;;
    --out) out=$2; shift 2 ;;
    --smoke) smoke=1; sizes="4,4K"; do_rss=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

mkdir -p "$out"
if [[ $do_build == 1 ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCLBUF_BUILD_BENCHMARKS=ON \
    -DCLBUF_BUILD_TESTS=OFF -DCLBUF_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target clbuf_bench -j "$jobs"
fi
bench=$build/bench/clbuf_bench
[[ -x $bench ]] || { echo "run.sh: $bench not built" >&2; exit 1; }

common=(--sizes "$sizes")
[[ -n $device ]] && common+=(--device "$device")
[[ -n $ops ]] && common+=(--ops "$ops")
[[ $gib == 1 ]] && common+=(--gib)
[[ $smoke == 1 ]] && common+=(--smoke)

csvs=("$out/clbuf.csv")
echo "== clbuf_bench (clbuf, CLHPP naive/best, Boost.Compute, memcpy; interleaved, one process)"
"$bench" "${common[@]}" --csv "$out/clbuf.csv" | tee "$out/clbuf.txt"

if [[ $do_python == 1 ]] && "$python" -c 'import pyopencl, numpy' 2>/dev/null; then
  echo "== pyopencl_bench"
  "$python" "$root/bench/pyopencl_bench.py" "${common[@]}" --csv "$out/pyopencl.csv" \
    | tee "$out/pyopencl.txt"
  csvs+=("$out/pyopencl.csv")
elif [[ $do_python == 1 ]]; then
  echo "run.sh: pyopencl not importable with $python; skipping the pyopencl peer" >&2
fi

rss_args=()
if [[ $do_rss == 1 ]]; then
  if [[ -x /usr/bin/time ]]; then
    echo "== peak RSS of one 256 MiB round trip per method"
    rss=$out/rss.csv
    echo "runtime,method,bytes,max_rss_kib" > "$rss"
    dev_args=()
    [[ -n $device ]] && dev_args=(--device "$device")
    for m in none clbuf clhpp_naive clhpp_best boost_compute; do
      /usr/bin/time -v "$bench" "${dev_args[@]}" --rss-roundtrip "$m" 2> "$out/.rss.txt" >/dev/null \
        || { cat "$out/.rss.txt" >&2; exit 1; }
      kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out/.rss.txt")
      echo "cpp,$m,$((256 << 20)),$kib" >> "$rss"
    done
    if [[ $do_python == 1 ]] && "$python" -c 'import pyopencl' 2>/dev/null; then
      for m in none pyopencl_buffer pyopencl_array; do
        /usr/bin/time -v "$python" "$root/bench/pyopencl_bench.py" "${dev_args[@]}" \
          --rss-roundtrip "$m" 2> "$out/.rss.txt" >/dev/null || { cat "$out/.rss.txt" >&2; exit 1; }
        kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out/.rss.txt")
        echo "python,$m,$((256 << 20)),$kib" >> "$rss"
      done
    fi
    rm -f "$out/.rss.txt"
    rss_args=(--rss "$rss")
  else
    echo "run.sh: /usr/bin/time missing; no RSS measurement" >&2
  fi
fi

echo "== combined report"
"$python" "$root/bench/report.py" --out "$out" "${rss_args[@]}" "${csvs[@]}" | tee "$out/report.txt"
