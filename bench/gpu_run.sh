#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs clbuf's tests and benchmark on the NVIDIA H200 machine (see ../shared/GPU.md), from a
# Release build folder made on Debian 12 and the ICD loader packages in .dev/:
#   bench/gpu_run.sh BUILD_DIR OUT_DIR STAGE...
# (stages: suite tests bench async streaming sweep staging seed bounce every_size small small_calls
# mid duplex fault latency ceiling rss xdev)
# Where .dev/*.deb and /usr/lib/libnvidia-opencl.so both exist, the loader and clinfo are unpacked
# into /tmp/cl and OCL_ICD_VENDORS points at NVIDIA's driver alone; elsewhere (PoCL here) the
# system's OpenCL is used as it is.
# suite: the GPU suite as a user runs it: every unit-test binary (BUILD_DIR/tests/*_test and
# BUILD_DIR/tests/*/*_test; an MPI one under `mpirun -np 2`, reported "not run" without mpirun)
# and every example (BUILD_DIR/examples/, its subfolders too), each with CLBUF_REQUIRE_DEVICE=1,
# the environment CTest gives it (the ICD variables left out where the script set up the ICD
# itself) and a time limit of SUITE_TIMEOUT seconds (default 600). Logs in OUT_DIR/suite_<name>.log,
# a line per binary in OUT_DIR/suite.txt (rc, passed/failed/skipped cases, failed cases' names,
# the signal of a crash and the case it crashed in), then one summary line; an example counts as
# one case. Exit status 1 when any binary failed, crashed or timed out.
# SUITE_JOBS (default 1) runs up to that many binaries at once (at most one under mpirun; the
# lines still come in the order found); SUITE_SHARDS (default 1) splits each GoogleTest binary
# named in SUITE_SHARDED (default "fault_test stress_test") into that many shards
# (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX), each a job of its own with its own limit and log,
# OUT_DIR/suite_<name>_shard<i>.log; the binary's line sums its shards' and still counts as one
# binary. On the H200 (16 cores, 10 minutes a call): SUITE_JOBS=8 SUITE_SHARDS=6 SUITE_TIMEOUT=480.
# TESTS (a space-separated list of executables' names) limits the suite and tests stages;
# SWEEP_SIZES (default 256M) the sizes of the staging sweep, SWEEP_CHUNKS (default "1M 2M 4M") its
# chunk sizes and SWEEP_THREADS (default "4 8 16") its copy threads (two chunks a thread).
# every_size (issue 19, ~3 minutes on the H200, at most 6): every operation (uploads into fresh
# and existing buffers, downloads into caller memory and new vectors, the seed round trip, the
# asynchronous ones, device-to-device copies) at 4 B .. 1 GiB, clbuf against CLHPP naive and best
# practice, into OUT_DIR/every_size.csv (EVERY_SIZES, default 4,64,4K,64K,1M,4M,16M,64M,256M) and
# OUT_DIR/every_size_big.csv (EVERY_BIG_SIZES, default 1G, 3 repetitions; empty: none), the
# bench's output in OUT_DIR/every_size.txt; then bench/report.py (where python3 is) makes
# OUT_DIR/every_size/ (every_size.md: clbuf/best and clbuf/naive per operation and size and the
# "never slower" line; ratio_vs_best.png, table.md, bandwidth*.png with gnuplot) and
# OUT_DIR/every_size_report.txt.
# small (issue 19, ~1.5 minutes, at most 4): the sweep for the small-size defaults, clbuf alone,
# clhpp_best beside the bound-0 runs for reference: --buffered-max in {0, 4K, 64K, 256K} for
# upload_existing, upload_fresh and roundtrip_seed at SMALL_SIZES (default 4,64,4K,64K,256K,1M),
# --bounce-max in {0, 64K, 1M, 4M} for download_caller at SMALL_BOUNCE_SIZES (default SMALL_SIZES
# and 2M, 4M); the bench's rows prefixed buffered=X / bounce=X, then a line per operation and size
# with clbuf's median at each bound, into OUT_DIR/small.txt.
# mid (issue 19, ~2 minutes): the mid-size paths, at MID_SIZES (default 4 .. 16M): uploads,
# downloads (into caller memory and new vectors) and the seed round trip under cfg=default (with
# both peers), threads1 (--copy-threads 1: the bounce's memcpy on one thread), nobounce
# (--bounce-max 0), stage2 (--staging-threshold 2M) and stage16 (threshold and bounce 16M), clbuf
# alone but for default; the rows prefixed cfg=X and a line per operation and size, into
# OUT_DIR/mid.txt.
# duplex (~1 minute): bench/duplex at DUPLEX_SIZES (default 64M,256M): an upload and a download
# at once, clbuf (two threads, the async pair, one after the other) against plain OpenCL (two
# queues, pinned and pageable; blocking calls from two threads), into OUT_DIR/duplex.txt.
# staging (~4 minutes): staged transfers (4 MiB-1 GiB) of two builds interleaved, STAGING_ROUNDS (3):
# STAGING_BEFORE/clbuf_bench and duplex against BUILD_DIR's, into OUT_DIR/staging.txt.
# seed (~4 minutes): bench/seed_profile and the small transfers (4 B-1 MiB, blocking and async,
# with both peers) of the two builds, into OUT_DIR/seed.txt.
# fault (at most FAULT_TIMEOUT, 420 s): fault_test on the GPU, its sweeps split by fault site over
# FAULT_SHARDS processes (CLBUF_FAULT_SHARD, one CLBUF_TEST_SEED: FAULT_SEED), into
# OUT_DIR/fault.txt.
# ceiling (~3 minutes, issue 19): CEILING_ROUNDS (2) rounds of wait_latency's sections 5-6 (clbuf's
# staging pattern by hand at 64 MiB and CEILING_BIG_MIB, default 1024: copy only, the ceiling of a
# staged transfer; with the DMA; with the DMA and staggered first chunks; a CL_MEM_USE_HOST_PTR buffer over the caller's pages) and
# clbuf_bench's staged transfers (CEILING_SIZES, default 64M,256M,1G; with naive and best practice)
# in turn, into OUT_DIR/ceiling.txt.
# small_calls (issue 47, ~1 minute): bench/small_calls in its timing mode: the seed round trip and
# the 4 B-4 KiB rows (upload_async, download_async, download_new, download_caller), clbuf against
# the same calls by hand, interleaved, SMALL_CALLS_ROUNDS (15) rounds of 3 x SMALL_CALLS_CALLS
# (1000) calls, the median ns per call and the ratio, into OUT_DIR/small_calls.txt.
# latency (~1 minute): bench/wait_latency (what completing one small command costs each way,
# thread wake-up, memcpy with 1..12 threads into and out of pinned memory) into OUT_DIR/latency.txt.
# BENCH_ARGS (default none) is added to every clbuf_bench call of every_size, small and mid, after the
# stage's own: e.g. "--target-s 0.01 --min-reps 3 --case-budget-s 0.2" for a quick check on PoCL.
# Writes test logs, the benchmark CSV/table, a staging sweep, peak RSS and the copies between
# two devices (xdev: cross_device, 0:0 to 0:1 where there are two) into OUT_DIR.
set -uo pipefail
build=$1
out=$2
shift 2
stages=" $* "
status=0
own_icd=0
mkdir -p "$out"
if compgen -G ".dev/*.deb" > /dev/null && [[ -e /usr/lib/libnvidia-opencl.so ]]; then
  own_icd=1
  for f in .dev/*.deb; do dpkg -x "$f" /tmp/cl; done
  mkdir -p /tmp/vend && echo /usr/lib/libnvidia-opencl.so > /tmp/vend/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/vend LD_LIBRARY_PATH=/tmp/cl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  /tmp/cl/usr/bin/clinfo -l | tee "$out/clinfo.txt"
elif command -v clinfo > /dev/null; then
  clinfo -l | tee "$out/clinfo.txt"
else
  echo "no clinfo: the system's OpenCL as it is" | tee "$out/clinfo.txt"
fi
nproc; grep -m1 "model name" /proc/cpuinfo; cat /sys/kernel/mm/transparent_hugepage/enabled

if [[ $stages == *" suite "* ]]; then
echo "== the GPU suite as a user runs it: every unit-test binary and example"
# The environment CTest gives a binary, one VAR=value a line: tests/CMakeLists.txt writes that of
# its GoogleTest executables into BUILD_DIR/tests/<name>_properties.cmake; add_test's (examples,
# MPI tests) is in the CTestTestfile.cmake of the binary's folder.
ctest_environment() {
  local bin=$1 name
  name=$(basename "$bin")
  if [[ -f $build/tests/${name}_properties.cmake ]]; then
    grep -o '\[==\[ENVIRONMENT\]==\] \[==\[[^]]*\]==\]' "$build/tests/${name}_properties.cmake" |
      sed 's/^\[==\[ENVIRONMENT\]==\] \[==\[//; s/\]==\]$//'
  elif [[ -f $(dirname "$bin")/CTestTestfile.cmake ]]; then
    awk -v bin="/$name\"" '
      index($0, "add_test(") == 1 && index($0, bin) { match($0, /\[=\[[^]]*\]=\]/); t = substr($0, RSTART, RLENGTH); next }
      t != "" && index($0, "set_tests_properties(" t " ") == 1 {
        if (match($0, /ENVIRONMENT "[^"]*"/)) print substr($0, RSTART + 13, RLENGTH - 14); exit }
    ' "$(dirname "$bin")/CTestTestfile.cmake"
  fi | tr ';' '\n'
}
limit=${SUITE_TIMEOUT:-600}
max_jobs=${SUITE_JOBS:-1} n_shards=${SUITE_SHARDS:-1} sharded=" ${SUITE_SHARDED-fault_test stress_test} "
if ! [[ $max_jobs =~ ^[1-9][0-9]*$ && $n_shards =~ ^[1-9][0-9]*$ ]]; then
  echo "SUITE_JOBS and SUITE_SHARDS must be positive integers" >&2; exit 2
fi
list=$out/suite.txt
skips=$out/suite_skips.tmp
jobdir=$out/suite_jobs.tmp  # a job's result (<job>.rec, shell assignments) and skip reasons (<job>.skips)
rm -rf "$jobdir"; mkdir -p "$jobdir"
: > "$skips"
echo "# bench/gpu_run.sh $build $out suite ($(date -u '+%F %H:%M UTC'); commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown); $(grep -m1 -i device "$out/clinfo.txt" | sed 's/^[ `|-]*//'))" > "$list"
n_bin=0 n_tests=0 n_examples=0 passed=0 failed=0 skipped=0 crashed=0 timed_out=0 not_run=0
bad=()
binaries=()
for t in "$build"/tests/*_test "$build"/tests/*/*_test; do
  [[ -f $t && -x $t && $t != "$build"/tests/cmake/* ]] && binaries+=("test:$t")
done
while IFS= read -r e; do binaries+=("example:$e"); done < <(
  find "$build/examples" -maxdepth 2 -type f -perm -u+x -not -path '*/CMakeFiles/*' 2> /dev/null | sort)
# One job: a binary, or one GoogleTest shard of it ($shard "i/n", its env in env_vars), run with
# env_vars and launcher; the result goes to $jobdir/$job.rec, written last (its presence = done).
run_job() {
  local job=$1 kind=$2 name=$3 bin=$4 log=$5 shard=$6 args=() rc sig="" p=0 f=0 s=0 failed_names="" where=""
  local started=$SECONDS rerun crash_case rerun_log=${5%.log}_rerun.log
  [[ $kind == test ]] && args=(--gtest_brief=1 --gtest_color=no)  # mpirun gives ranks a terminal
  # (the braces keep the shell's own "Segmentation fault" notice out of the output)
  { timeout -k 10 "$limit" env "${env_vars[@]}" "${launcher[@]}" "$bin" "${args[@]}" > "$log" 2>&1; } 2> /dev/null
  rc=$?
  if ((rc == 124)); then
    sig=timeout
  elif ((rc > 128)); then
    sig=SIG$(kill -l $((rc - 128)) 2> /dev/null || echo $((rc - 128)))
  elif ((rc != 0)) && grep -qE 'exited on signal [0-9]+' "$log"; then  # a rank under mpirun
    sig=SIG$(kill -l "$(grep -oE 'exited on signal [0-9]+' "$log" | head -1 | grep -oE '[0-9]+$')")
  fi
  if [[ $kind == example ]]; then
    if ((rc == 0)); then p=1; elif [[ -z $sig ]]; then f=1 failed_names=$name; fi
  else
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\.$/\1/p' "$log" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}\.$/\1/p' "$log" | tail -1)
    # --gtest_brief=1 prints a line per failed case, "[  FAILED  ] Suite.Case (N ms)", no total.
    failed_names=$(grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log" |
      sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u | tr '\n' ' ')
    failed_names=${failed_names% }
    [[ -n $failed_names ]] && f=$(wc -w <<< "$failed_names")
    p=${p:-0} s=${s:-0}
    # (at most as many reasons as skipped cases: under mpirun every rank prints its skips)
    awk -v bin="$name" '/: Skipped$/ { if ((getline m) <= 0 || m == "") m = "(no message)"
      print substr(m, 1, 100) "\t" bin }' "$log" | head -n "$s" > "$jobdir/$job.skips"
  fi
  if [[ -n $sig && $sig != timeout && $kind == test && ${#launcher[@]} -eq 0 ]]; then
    # --gtest_brief=1 names no case before a crash: once more without it (the same shard), for
    # the case's name.
    { timeout -k 10 "$limit" env "${env_vars[@]}" "$bin" --gtest_color=no > "$rerun_log" 2>&1; } 2> /dev/null
    rerun=$?
    crash_case=$(grep -E '^\[ RUN      \] ' "$rerun_log" | tail -1 | sed 's/^\[ RUN      \] //')
    if ((rerun > 128 || rerun == 124)); then where=" in ${crash_case:-?}"; else where=" (a rerun exited $rerun)"; fi
  fi
  printf 'j_rc=%q j_sig=%q j_p=%q j_f=%q j_s=%q j_failed=%q j_where=%q j_took=%q j_shard=%q\n' \
    "$rc" "$sig" "$p" "$f" "$s" "$failed_names" "$where" $((SECONDS - started)) "$shard" > "$jobdir/$job.part"
  mv "$jobdir/$job.part" "$jobdir/$job.rec"
}
# The jobs, in the order the binaries were found: a binary's jobs (one, or one per shard) in
# u_jobs, its "not run" line in u_line; a job's binary, kind, path, log, shard, environment (a
# VAR=value a line) and whether it runs under mpirun.
u_name=() u_kind=() u_jobs=() u_line=() j_bin=() j_kind=() j_path=() j_log=() j_shard=() j_env=() j_mpi=()
for entry in "${binaries[@]}"; do
  kind=${entry%%:*} bin=${entry#*:}
  name=$(basename "$bin")
  if [[ -n ${TESTS:-} && " $TESTS " != *" $name "* ]]; then continue; fi
  u=${#u_name[@]}
  u_name+=("$name") u_kind+=("$kind") u_jobs+=("") u_line+=("")
  env_vars=(CLBUF_REQUIRE_DEVICE=1)
  while IFS= read -r kv; do
    [[ -n $kv ]] || continue
    if ((own_icd)) && [[ $kv == OCL_ICD_* ]]; then continue; fi  # the script's ICD setup stays
    env_vars+=("$kv")
  done < <(ctest_environment "$bin")
  mpi=0
  if ldd "$bin" 2> /dev/null | grep -q 'libmpi'; then
    if ! command -v mpirun > /dev/null; then u_line[u]="$name not run: no mpirun"; continue; fi
    mpi=1
  fi
  n=1
  [[ $kind == test && $mpi == 0 && $n_shards -gt 1 && $sharded == *" $name "* ]] && n=$n_shards
  for ((i = 0; i < n; i++)); do
    j=${#j_bin[@]}
    u_jobs[u]+=" $j"
    j_bin+=("$u") j_kind+=("$kind") j_path+=("$bin") j_mpi+=("$mpi")
    if ((n > 1)); then
      j_log+=("$out/suite_${name}_shard$i.log") j_shard+=("$i/$n")
      j_env+=("$(printf '%s\n' "${env_vars[@]}" GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i)")
    else
      j_log+=("$out/suite_$name.log") j_shard+=("")
      j_env+=("$(printf '%s\n' "${env_vars[@]}")")
    fi
  done
done
# A binary's line (the sum of its shards'), once all its jobs are done, in the order found.
printed=0
print_done() {
  local u j name kind rc p f s names took n_tmo tmo crashes line
  while ((printed < ${#u_name[@]})); do
    u=$printed name=${u_name[printed]} kind=${u_kind[printed]}
    for j in ${u_jobs[u]}; do [[ -f $jobdir/$j.rec ]] || return 0; done
    printed=$((printed + 1))
    if [[ -n ${u_line[u]} ]]; then
      echo "${u_line[u]}" | tee -a "$list"
      not_run=$((not_run + 1))
      continue
    fi
    n_bin=$((n_bin + 1))
    if [[ $kind == example ]]; then n_examples=$((n_examples + 1)); else n_tests=$((n_tests + 1)); fi
    rc=0 p=0 f=0 s=0 names="" took=0 n_tmo=0 tmo="" crashes=""
    for j in ${u_jobs[u]}; do
      source "$jobdir/$j.rec"
      [[ -f $jobdir/$j.skips ]] && cat "$jobdir/$j.skips" >> "$skips"
      ((rc == 0)) && rc=$j_rc
      p=$((p + j_p)) f=$((f + j_f)) s=$((s + j_s)) names+=" $j_failed"
      ((j_took > took)) && took=$j_took
      if [[ $j_sig == timeout ]]; then n_tmo=$((n_tmo + 1)) tmo+="${tmo:+, }$j_shard"
      elif [[ -n $j_sig ]]; then crashes+="${crashes:+;} $j_sig$j_where${j_shard:+ (shard $j_shard)}"; fi
    done
    [[ -n $tmo ]] && tmo=" (shard $tmo)"
    names=$(tr ' ' '\n' <<< "$names" | sed '/^$/d' | sort -u | tr '\n' ' ')
    names=${names% }
    if [[ -n $crashes ]]; then
      crashed=$((crashed + 1))
      ((n_tmo > 0)) && crashes+="; timed out after ${limit}s$tmo"
      line="$name rc=$rc crashed:$crashes"
      bad+=("$name$crashes")
    elif ((n_tmo > 0)); then
      timed_out=$((timed_out + 1))
      line="$name rc=$rc timed out after ${limit}s$tmo"
      bad+=("$name timed out$tmo")
    else
      passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
      line="$name rc=$rc passed=$p failed=$f skipped=$s"
      [[ -n $names ]] && line+=" failed: $names"
      [[ -n $j_shard ]] && line+=" (${j_shard#*/} shards)"
      if ((rc != 0)); then
        if [[ -n $names ]]; then bad+=("$name $f failed"); else bad+=("$name rc=$rc"); fi
      fi
    fi
    echo "$line ${took}s" | tee -a "$list"
  done
}
# Launch order: with SUITE_JOBS > 1 the sharded binaries' jobs first (the longest), then the rest;
# at most one job under mpirun at a time (mpirun's ports and its ranks' cores).
order=()
for ((j = 0; j < ${#j_bin[@]}; j++)); do
  ((max_jobs > 1)) && [[ $sharded == *" ${u_name[j_bin[j]]} "* ]] && order+=("$j")
done
for ((j = 0; j < ${#j_bin[@]}; j++)); do
  ((max_jobs > 1)) && [[ $sharded == *" ${u_name[j_bin[j]]} "* ]] || order+=("$j")
done
launch() {
  local j=$1 u=${j_bin[$1]} kv
  mapfile -t env_vars <<< "${j_env[j]}"
  launcher=()
  if ((j_mpi[j])); then
    launcher=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np 2)
    for kv in "${env_vars[@]}"; do launcher+=(-x "${kv%%=*}"); done  # as mpi_gpu_run.sh does
    ((own_icd)) && launcher+=(-x OCL_ICD_VENDORS -x LD_LIBRARY_PATH)
  fi
  if ((max_jobs == 1)); then
    run_job "$j" "${j_kind[j]}" "${u_name[u]}" "${j_path[j]}" "${j_log[j]}" "${j_shard[j]}"
  else
    run_job "$j" "${j_kind[j]}" "${u_name[u]}" "${j_path[j]}" "${j_log[j]}" "${j_shard[j]}" &
    pid[j]=$!
  fi
}
pid=() launched=() mpi_job=""
# Killed (INT, TERM), the script ends its running jobs and their binaries (timeout puts each binary
# in a process group of its own, which it signals when it gets TERM).
stop_jobs() {
  local j running=() children
  for j in "${!pid[@]}"; do [[ -f $jobdir/$j.rec ]] || running+=("${pid[j]}"); done
  if ((${#running[@]} > 0)); then
    children=$(pgrep -d ' ' -P "$(IFS=,; echo "${running[*]}")")
    kill "${running[@]}" $children 2> /dev/null
  fi
  exit 143
}
((max_jobs > 1)) && trap stop_jobs INT TERM
while ((${#order[@]} > 0)); do
  print_done
  running=0
  for j in "${!j_bin[@]}"; do [[ -n ${launched[j]:-} && ! -f $jobdir/$j.rec ]] && running=$((running + 1)); done
  mpi_busy=0
  [[ -n $mpi_job && ! -f $jobdir/$mpi_job.rec ]] && mpi_busy=1
  pick=-1
  if ((running < max_jobs)); then
    for k in "${!order[@]}"; do
      ((j_mpi[order[k]] && mpi_busy)) && continue
      pick=$k
      break
    done
  fi
  if ((pick < 0)); then
    wait -n 2> /dev/null || sleep 1
    continue
  fi
  j=${order[pick]}
  unset 'order[pick]'
  order=("${order[@]}")
  launched[j]=1
  ((j_mpi[j])) && mpi_job=$j
  launch "$j"
done
wait
trap - INT TERM
print_done
rm -rf "$jobdir"
# Skip reasons, most frequent first: "Nx reason [binaries]".
reasons=$(awk -F '\t' '
  { n[$1]++; if (index(" " b[$1] " ", " " $2 " ") == 0) b[$1] = b[$1] (b[$1] == "" ? "" : " ") $2 }
  END { for (r in n) printf "%d\t%dx %s [%s]\n", n[r], n[r], r, b[r] }' "$skips" | sort -t "$(printf '\t')" -k1,1nr -k2 |
  cut -f2- | awk '{ printf "%s%s", (NR > 1 ? "; " : ""), $0 }')
rm -f "$skips"
summary="suite: $n_bin binaries ($n_tests test, $n_examples example), $passed passed, $failed failed, $skipped skipped"
[[ -n $reasons ]] && summary+=" ($reasons)"
summary+=", $crashed crashed, $timed_out timed out"
((not_run > 0)) && summary+=", $not_run not run (no mpirun)"
if ((${#bad[@]} == 0 && n_bin > 0)); then
  summary+=": PASS"
else
  ((n_bin > 0)) || bad+=("no binary found under $build")
  summary+=": FAIL ($(printf '%s; ' "${bad[@]}" | sed 's/; $//'))"
  status=1
fi
echo "$summary" | tee -a "$list"
fi

if [[ $stages == *" tests "* ]]; then
echo "== unit tests on the GPU"
export CLBUF_REQUIRE_DEVICE=1
for t in "$build"/tests/*_test; do
  name=$(basename "$t")
  if [[ -n ${TESTS:-} && " $TESTS " != *" $name "* ]]; then continue; fi
  timeout 300 "$t" --gtest_brief=1 > "$out/test_$name.log" 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/test_$name.log" | tr '\n' ' ')"
done
for e in "$build"/examples/0*; do [[ -f $e ]] || continue; timeout 60 "$e" > "$out/example_$(basename "$e").log" 2>&1; echo "$(basename "$e") rc=$?"; done
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
for chunk in ${SWEEP_CHUNKS:-1M 2M 4M}; do
  for threads in ${SWEEP_THREADS:-4 8 16}; do
    timeout 60 "$bench" --sizes "${SWEEP_SIZES:-256M}" --ops upload_existing,download_caller --methods clbuf \
      --chunk $chunk --chunks $((2 * threads)) --copy-threads $threads --target-s 0.1 \
      --case-budget-s 3 2>&1 |
      grep -E "^(upload|download).*clbuf " | sed "s/^/chunk=$chunk threads=$threads /"
  done
done | tee "$out/sweep.txt"
fi

if [[ $stages == *" staging "* ]]; then
# Two builds of the benchmark interleaved in one run (round after round): STAGING_BEFORE (default
# BUILD_DIR/bench/before) holds the earlier revision's clbuf_bench and duplex, BUILD_DIR/bench the
# new ones; clbuf alone at STAGING_SIZES, the fresh 64 MiB upload also against CLHPP naive.
before=${STAGING_BEFORE:-$build/bench/before}
echo "== staged transfers, before ($before) and after ($build/bench), interleaved"
for round in $(seq "${STAGING_ROUNDS:-3}"); do
  for b in before after; do
    exe=$bench; [[ $b == before ]] && exe=$before/clbuf_bench
    timeout 100 "$exe" --sizes "${STAGING_SIZES:-4M,16M,64M,256M,1G}" \
      --ops upload_existing,download_caller,download_new --methods clbuf --target-s 0.1 \
      --case-budget-s 2 2>&1 | grep -E "^(upload|download).*clbuf " | sed "s/^/$b round=$round /"
    timeout 60 "$exe" --ops upload_fresh_repeat_64MiB --methods clbuf,clhpp_naive --target-s 0.1 \
      --case-budget-s 3 2>&1 | grep -E "^upload" | sed "s/^/$b round=$round /"
  done
done | tee "$out/staging.txt"
for b in before after; do
  exe=$build/bench/duplex; [[ $b == before ]] && exe=$before/duplex
  timeout 100 "$exe" --sizes 64M,256M --reps 5 2>&1 | sed "s/^/$b /"
done | tee -a "$out/staging.txt"
fi

if [[ $stages == *" seed "* ]]; then
# The seed's round trip and the small transfers around it, two builds as in `staging`
# (STAGING_BEFORE): bench/seed_profile of each, then clbuf_bench's roundtrip_seed and small
# transfers against CLHPP naive and best practice, SEED_ROUNDS (2) rounds, builds interleaved.
before=${STAGING_BEFORE:-$build/bench/before}
echo "== the seed's round trip, before ($before) and after ($build/bench)"
for b in before after; do
  exe=$build/bench/seed_profile; [[ $b == before ]] && exe=$before/seed_profile
  timeout 100 "$exe" --reps 20000 2>&1 | sed "s/^/$b /"
done | tee "$out/seed.txt"
for round in $(seq "${SEED_ROUNDS:-2}"); do
  for b in before after; do
    exe=$bench; [[ $b == before ]] && exe=$before/clbuf_bench
    timeout 150 "$exe" --sizes 4,64,4K,64K,1M --ops roundtrip_seed,download_caller,download_new,upload_existing,upload_async,download_async \
      --methods clbuf,clhpp_naive,clhpp_best --target-s 0.1 --case-budget-s 1 2>&1 |
      grep -E "^(upload|download|roundtrip)" | sed "s/^/$b round=$round /"
  done
done | tee -a "$out/seed.txt"
fi

if [[ $stages == *" bounce "* ]]; then
echo "== the bounced path (issue 19): pageable transfers below the staging threshold through one pinned block"
for bounce in 0 64K 1M 4M; do
  timeout 100 "$bench" --sizes 4,64,4K,64K,1M,4M --ops upload_existing,download_caller,roundtrip_seed \
    --methods clbuf,clhpp_naive,clhpp_best --bounce-max $bounce --target-s 0.1 --case-budget-s 1.5 2>&1 |
    grep -E "^(upload|download|roundtrip)" | sed "s/^/bounce=$bounce /"
done | tee "$out/bounce.txt"
fi

if [[ $stages == *" every_size "* ]]; then
echo "== every operation at every size: clbuf against CLHPP naive and best practice (issue 19)"
every_ops=upload_existing,upload_fresh,download_caller,download_new,upload_async,download_async,d2d_copy
rm -f "$out/every_size.csv" "$out/every_size_big.csv"
timeout 240 "$bench" --sizes "${EVERY_SIZES:-4,64,4K,64K,1M,4M,16M,64M,256M}" \
  --ops "$every_ops,roundtrip_seed" --methods clbuf,clhpp_naive,clhpp_best --target-s 0.3 \
  --case-budget-s 4 ${BENCH_ARGS:-} --csv "$out/every_size.csv" > "$out/every_size.txt" 2>&1
echo "every_size rc=$?"
if [[ -n ${EVERY_BIG_SIZES-1G} ]]; then  # 1 GiB: ~0.1 s a transfer, plus the checks; 3 repetitions
  timeout 150 "$bench" --sizes "${EVERY_BIG_SIZES-1G}" --ops "$every_ops" \
    --methods clbuf,clhpp_naive,clhpp_best --target-s 0.1 --min-reps 3 --case-budget-s 4 \
    ${BENCH_ARGS:-} --csv "$out/every_size_big.csv" >> "$out/every_size.txt" 2>&1
  echo "every_size ${EVERY_BIG_SIZES-1G} rc=$?"
fi
cat "$out/every_size.txt"
if command -v python3 > /dev/null; then
  python3 "$(dirname "$0")/report.py" --out "$out/every_size" "$out"/every_size*.csv \
    > "$out/every_size_report.txt" 2>&1
  echo "report rc=$?"; cat "$out/every_size/every_size.md" 2> /dev/null
else
  echo "no python3: bench/report.py --out DIR $out/every_size*.csv makes the table and plot elsewhere"
fi
fi

# Appends to FILE a line per operation and size: clbuf's median (us) at each bound, the lowest,
# clhpp_best's. (A row of FILE: "bound=X op N unit method reps median_us ...".)
bound_summary() {
  awk '($5 == "clbuf" || $5 == "clhpp_best") && $6 ~ /^[0-9]+$/ {
      split($1, kv, "="); key = kv[1] " " $2 " " $3 " " $4
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      if ($5 == "clhpp_best") { ref[key] = $7; next }
      line[key] = line[key] " " kv[2] "=" $7
      if (!(key in low) || $7 + 0 < low[key] + 0) { low[key] = $7; at[key] = kv[2] }
    }
    END { print "# clbuf median us per bound; lowest; clhpp_best (bound 0 run)"
      for (i = 1; i <= n; i++) { k = order[i]
        printf "%s:%s; lowest %s=%s; clhpp_best %s\n", k, line[k], at[k], low[k], (k in ref ? ref[k] : "-") } }' \
    "$1" > "$1.summary"
  cat "$1.summary" >> "$1"
  rm -f "$1.summary"
}

if [[ $stages == *" small "* ]]; then
echo "== small-size defaults (issue 19): the buffered-upload bound and the bounce bound, pageable std::vector"
small_sizes=${SMALL_SIZES:-4,64,4K,64K,256K,1M}
{
  for buffered in 0 4K 64K 256K; do
    methods=clbuf
    [[ $buffered == 0 ]] && methods=clbuf,clhpp_best  # the reference, once
    timeout 45 "$bench" --sizes "$small_sizes" --ops upload_existing,upload_fresh,roundtrip_seed \
      --methods $methods --buffered-max $buffered --target-s 0.25 --case-budget-s 2 ${BENCH_ARGS:-} 2>&1 |
      grep -E "^(upload|roundtrip)" | sed "s/^/buffered=$buffered /"
    rc=${PIPESTATUS[0]}; ((rc == 0)) || echo "buffered=$buffered clbuf_bench rc=$rc"
  done
  for bounce in 0 64K 1M 4M; do
    methods=clbuf
    [[ $bounce == 0 ]] && methods=clbuf,clhpp_best
    timeout 45 "$bench" --sizes "${SMALL_BOUNCE_SIZES:-$small_sizes,2M,4M}" --ops download_caller \
      --methods $methods --bounce-max $bounce --target-s 0.25 --case-budget-s 2 ${BENCH_ARGS:-} 2>&1 |
      grep -E "^download" | sed "s/^/bounce=$bounce /"
    rc=${PIPESTATUS[0]}; ((rc == 0)) || echo "bounce=$bounce clbuf_bench rc=$rc"
  done
} > "$out/small.txt"
bound_summary "$out/small.txt"
cat "$out/small.txt"
fi

if [[ $stages == *" mid "* ]]; then
echo "== mid sizes (issue 19): the bounce's parallel memcpy and the staging threshold, pageable std::vector"
mid_sizes=${MID_SIZES:-4,4K,64K,256K,512K,1M,2M,3M,4M,8M,16M}
{
  # cfg=default: the defaults, with both peers; the others clbuf alone.
  for cfg in default threads1 nobounce stage2 stage16; do
    methods=clbuf args=""
    case $cfg in
      default) methods=clbuf,clhpp_naive,clhpp_best ;;
      threads1) args="--copy-threads 1" ;;
      nobounce) args="--bounce-max 0" ;;
      stage2) args="--staging-threshold 2M" ;;
      stage16) args="--staging-threshold 16M --bounce-max 16M" ;;
    esac
    timeout 120 "$bench" --sizes "$mid_sizes" --ops upload_existing,download_caller,download_new,roundtrip_seed \
      --methods $methods $args --target-s 0.2 --case-budget-s 1.5 ${BENCH_ARGS:-} 2>&1 |
      grep -E "^(upload|download|roundtrip)" | sed "s/^/cfg=$cfg /"
    rc=${PIPESTATUS[0]}; ((rc == 0)) || echo "cfg=$cfg clbuf_bench rc=$rc"
  done
} > "$out/mid.txt"
bound_summary "$out/mid.txt"
cat "$out/mid.txt"
fi

if [[ $stages == *" duplex "* ]]; then
echo "== full duplex: an upload and a download at once (bench/duplex)"
timeout 240 "$build/bench/duplex" --sizes "${DUPLEX_SIZES:-64M,256M}" --reps "${DUPLEX_REPS:-7}" |
  tee "$out/duplex.txt"
fi

if [[ $stages == *" fault "* ]]; then
echo "== fault_test with its sweeps split by fault site ($build/tests/fault_test)"
# One sweep takes longer than a call's ten minutes on NVIDIA's driver: FAULT_SHARDS (default 12)
# processes at once share every sweep (CLBUF_FAULT_SHARD=i/n, one CLBUF_TEST_SEED so that all
# number the same trials), and one more runs the cases that are not sweeps; each is limited to
# FAULT_TIMEOUT (default 420) seconds. FAULT_ONLY (shard numbers, e.g. "0 1 2 3"; default all)
# runs some shards only, and no other cases unless it names "cases": with one FAULT_SEED, calls
# that each run a part complete a sweep that outlasts one call. Logs in OUT_DIR/fault_<i>.log and
# OUT_DIR/fault_cases.log, a line per process in OUT_DIR/fault.txt (its [ fault ] tallies,
# passed and failed cases).
n=${FAULT_SHARDS:-12} seed=${FAULT_SEED:-$RANDOM} limit=${FAULT_TIMEOUT:-420}
only=" ${FAULT_ONLY:-$(seq -s ' ' 0 $((n - 1))) cases} "
sweeps='*EveryCallSite*:*EveryWriteFailing*'
for i in $(seq 0 $((n - 1))); do
  [[ $only == *" $i "* ]] || continue
  CLBUF_REQUIRE_DEVICE=1 CLBUF_TEST_SEED=$seed CLBUF_FAULT_SHARD=$i/$n timeout "$limit" \
    stdbuf -oL "$build/tests/fault_test" --gtest_filter="$sweeps" > "$out/fault_$i.log" 2>&1 &
done
if [[ $only == *" cases "* ]]; then
  CLBUF_REQUIRE_DEVICE=1 CLBUF_TEST_SEED=$seed timeout "$limit" stdbuf -oL "$build/tests/fault_test" \
    --gtest_filter="-$sweeps" > "$out/fault_cases.log" 2>&1 &
fi
fault_status=0
for job in $(jobs -p); do wait "$job" || fault_status=1; done
for log in "$out"/fault_*.log; do
  echo "$(basename "$log"): $(grep -c '^\[       OK' "$log") passed, $(grep -c '^\[  FAILED' "$log") failed"
  grep '^\[ fault' "$log" | sed 's/^/  /'
done | tee "$out/fault.txt"
echo "fault: seed $seed, $n shards, status $fault_status (1: a case failed or a process ran out of time)" |
  tee -a "$out/fault.txt"
[[ $fault_status == 0 ]] || status=1
fi

if [[ $stages == *" small_calls "* ]]; then
echo "== small calls against the same calls by hand (issue 47), discrete paths, ns per call"
timeout 300 "$build/bench/small_calls" --rounds "${SMALL_CALLS_ROUNDS:-15}" \
  --calls "${SMALL_CALLS_CALLS:-1000}" | tee "$out/small_calls.txt"
echo "small_calls rc=${PIPESTATUS[0]}"
fi

if [[ $stages == *" latency "* ]]; then
echo "== what waiting and the host-side pieces cost (wait_latency)"
timeout 240 "$build/bench/wait_latency" --reps "${LATENCY_REPS:-2000}" | tee "$out/latency.txt"
fi

if [[ $stages == *" ceiling "* ]]; then
echo "== staged bandwidth against its own ceiling: clbuf's staging pattern by hand (copy only, with the DMA) and clbuf_bench, interleaved"
for round in $(seq 1 "${CEILING_ROUNDS:-2}"); do
  echo "-- round $round: wait_latency sections 5-6 (${CEILING_BIG_MIB:-1024} MiB)"
  timeout 240 "$build/bench/wait_latency" --reps 30 --sections 56 --big-mib "${CEILING_BIG_MIB:-1024}"
  echo "-- round $round: clbuf_bench"
  timeout 240 "$bench" --sizes "${CEILING_SIZES:-64M,256M,1G}" \
    --ops upload_existing,download_caller,upload_fresh_repeat_64MiB --methods clbuf,clhpp_naive,clhpp_best \
    --target-s 0.4 --max-reps 12 ${BENCH_ARGS:-}
done 2>&1 | tee "$out/ceiling.txt"
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

exit $status
