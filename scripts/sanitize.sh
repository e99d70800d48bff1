#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The sanitizer stage of CI (.ci/run calls it after the main test command); see README
# "Reliability". Fails on any report. Which tests a stage runs is chosen by their CTest labels
# (tests/CMakeLists.txt), never by names here. Stages, each timed:
#   asan      ASan+UBSan (clang-14, leak detection on), building only what the labels need:
#             labels unit, fault and stress
#   tsan      TSan (clang-14), building only what the label needs: label tsan
#             (both run the gtest cases up to 40 a process, scripts/run_label.py: one platform
#             start a batch, not a case)
#   valgrind  memcheck over label valgrind in the plain build, one process per test executable
#             (scripts/run_label.py); then the Python module's pytest suite under memcheck
#             where the plain build has the module
#   oclgrind  label oclgrind under `oclgrind --check-api` in the plain build, one process per test
#             executable (oclgrind is not thread-safe): no "Oclgrind - " report in the output and
#             every log empty; then label two_platforms (GPU-preferred selection and copies
#             between platforms, with oclgrind's GPU next to PoCL's CPU)
#   fuzz      the libFuzzer targets (CLBUF_BUILD_FUZZERS=ON), each from its kept corpus
#             tests/fuzz/corpus/<target>/ (which every build's ctest also replays, label fuzz)
#   coverage  line coverage of include/ (gcc, CLBUF_COVERAGE=ON, with the Python module, the
#             benchmarks and MPI): every ctest label but those that build other projects
#             (consumer, coexist, packaging, docs), then lcov; fails below coverage_min percent.
#             With CLBUF_COVERAGE_BUILD=DIR, a CLBUF_COVERAGE=ON build whose whole suite has just
#             run (.ci/run's), it only counts that run. Summary: DIR/coverage.txt (and .info)
# Usage: scripts/sanitize.sh [stage...]   (default: all). Environment:
#   CLBUF_PLAIN_BUILD  the plain build folder (default: build; configured again here, so that it
#                      sees oclgrind, and its labels' executables built)
#   CLBUF_SANITIZE_DIR prefix of the sanitizer build folders (default: build-rel-)
#   CLBUF_FUZZ_SECONDS seconds per fuzz target (default 10); JOBS (default: nproc)
#   CLBUF_COVERAGE_BUILD  see the coverage stage
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh --sanitize

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(asan tsan valgrind oclgrind fuzz coverage)
jobs=${JOBS:-$(nproc)}
prefix=${CLBUF_SANITIZE_DIR:-build-rel-}
plain=${CLBUF_PLAIN_BUILD:-build}
fuzz_seconds=${CLBUF_FUZZ_SECONDS:-10}
coverage_min=97.4  # percent of include/'s lines; docs/testing.md has the figure this guards
export CLBUF_REQUIRE_DEVICE=1
POCL_CACHE_DIR=$(mktemp -d)
export POCL_CACHE_DIR
# Seeded with a copy of PoCL's own cache, which the suite's run before this filled: a cold cache
# made every PoCL kernel build run under the sanitizers' allocator (ASan unwinds each malloc):
# native_views_test's cases took 40-63 s each instead of under 1 s, its batch 10 minutes against
# 10 s warm, and the ASan stage 1,050 s in a CI-like run. A copy, so nothing here writes the user's.
pocl_cache=${XDG_CACHE_HOME:-${HOME:-}/.cache}/pocl/kcache
if [ -d "$pocl_cache" ]; then cp -a "$pocl_cache/." "$POCL_CACHE_DIR/" 2> /dev/null || true; fi
reports=$(mktemp -d)  # every sanitizer report and tool log lands here; any non-empty file fails
trap 'rm -rf "$POCL_CACHE_DIR" "$reports"' EXIT
summary=()

note() { echo "== sanitize: $*"; }
timed() {  # timed NAME COMMAND...: runs, records the time, fails the script on failure
  local name=$1 start=$SECONDS
  shift
  note "$name"
  if "$@"; then
    summary+=("$name: passed in $((SECONDS - start)) s")
  else
    summary+=("$name: FAILED after $((SECONDS - start)) s")
    printf '%s\n' "${summary[@]}"
    exit 1
  fi
}
no_reports() {  # fails when a sanitizer or tool wrote a report (an empty log is no report)
  local status=0 file
  for file in "$reports"/*; do
    if [ -s "$file" ]; then
      status=1
      note "report $(basename "$file"):"; cat "$file"
    fi
  done
  return $status
}
configure() {  # configure DIR FLAGS [CMAKE_ARG...]: a clang-14 build of the tests only
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} $2" -DCMAKE_EXE_LINKER_FLAGS="$2" \
    -DCLBUF_BUILD_EXAMPLES=OFF -DCLBUF_INSTALL=OFF -DCLBUF_BUILD_PYTHON=OFF \
    -DCLBUF_BUILD_BENCHMARKS=OFF "${@:3}" > /dev/null
}
labelled() {  # labelled DIR LABEL [CTEST_ARG...]: the tests of one label; none at all fails
  ctest --test-dir "$1" -L "^$2\$" --no-tests=error --output-on-failure -j"$jobs" "${@:3}"
}
batched() {  # batched DIR LABEL: LABEL's gtest cases, up to 40 a process (scripts/run_label.py),
  # balanced by the plain build's record of each case's time where it has one
  python3 "$root/scripts/run_label.py" "$1" "$2" --jobs "$jobs" --timeout 1800 --batch 40 \
    --costs "$plain/Testing/Temporary/CTestCostData.txt" --
}

asan() {
  local dir=${prefix}asan
  # -O0: clang-14 compiles a test 3x faster than at -O1 (views_test 9.6 against 30.6 s), and the
  # tests, whose time is PoCL's (not instrumented), run 0-30 % slower (fault_test 35.7 s both,
  # stress_test 14.0 against 11.6 s): the stage's build was most of its time. ASan and UBSan
  # check every access at any level; -O0 optimises none away.
  local flags="-O0 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
  flags+=" -fno-sanitize-recover=undefined"
  configure "$dir" "$flags" || return 1
  # Only what the three labels run (not the MPI suite, the two-platform tests, the docs)
  cmake --build "$dir" -j"$jobs" --target clbuf_tests_unit clbuf_tests_fault clbuf_tests_stress \
    || return 1
  # Fast unwinding at each malloc first (fault_test 35 against 52 s, views_test's batch about
  # half): with PoCL's kernel cache warm (seeded above) nothing of LLVM's runs, so no report is
  # expected. But a fast stack stops in libpocl (built without frame pointers), short of the
  # libLLVM frame the suppressions name: where that pass finds leaks only, they are checked again
  # with full stacks (fast_unwind_on_malloc=0), which fails on any leak the suppressions do not
  # cover. Any other report fails at once.
  if asan_pass 1; then return 0; fi
  if ! only_leak_reports; then no_reports; return 1; fi
  note "asan: leak reports with fast stacks; again with full ones (the suppressions need them)"
  rm -f "$reports"/*
  asan_pass 0 || { no_reports; return 1; }
  no_reports
}

asan_pass() {  # asan_pass FAST_UNWIND: the three labels' cases under ASan; fails on any report
  local dir=${prefix}asan
  # intercept_tls_get_addr=0: clang-14's leak checker misreads the dynamic TLS of a library that
  # PoCL loads while it compiles a kernel on a cold cache ("DTLS 5 at 0x1b50-0x800002c52", then
  # "Tracer caught signal 11" at exit). Without that tracking fewer roots are scanned, so the
  # option can add leak reports, never hide one.
  # use_sigaltstack=0: LLVM inside PoCL gives a thread a malloc'ed alternate signal stack (80064
  # bytes, unaligned), which ASan's thread exit then tries to munmap as its own ("unable to
  # unmap", EINVAL; seen in first_use_test's forked children). ASan without its own alternate
  # stack still reports every memory error; only a stack overflow's report could be lost.
  ASAN_OPTIONS="fast_unwind_on_malloc=$1:detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0:use_sigaltstack=0:log_path=$reports/asan" \
  LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan" \
    batched "$dir" '(unit|fault|stress)' || return 1
  no_reports
}

only_leak_reports() {  # true when there are reports and every one is LeakSanitizer's alone
  local file found=1
  for file in "$reports"/*; do
    [ -s "$file" ] || continue
    found=0
    grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$file" || return 1
    if grep -v 'LeakSanitizer' "$file" | grep -q 'ERROR: \|runtime error:'; then return 1; fi
  done
  return $found
}

tsan() {
  local dir=${prefix}tsan
  configure "$dir" "-O1 -gline-tables-only -fsanitize=thread" || return 1
  cmake --build "$dir" -j"$jobs" --target clbuf_tests_tsan || return 1
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan" \
    batched "$dir" tsan || { no_reports; return 1; }
  no_reports
}

plain_build() {  # plain_build LABEL...: the plain build, configured again, with what LABELs need
  local label targets=()
  for label in "$@"; do targets+=(--target "clbuf_tests_$label"); done
  if [ -f "$plain/CMakeCache.txt" ]; then
    cmake "$plain" > /dev/null || return 1  # again: finds oclgrind, installed since .ci/run's build
  else
    cmake -S . -B "$plain" -DCMAKE_BUILD_TYPE=Debug -DCLBUF_BUILD_EXAMPLES=OFF > /dev/null || return 1
  fi
  cmake --build "$plain" -j"$jobs" "${targets[@]}"
}

valgrind_stage() {
  plain_build valgrind || return 1
  # POCL_MEMORY_LIMIT=1 keeps PoCL's max allocation at 256 MiB: the max-alloc tests allocate
  # that much, and under memcheck a 2 GiB allocation exhausts a 24 GiB machine.
  POCL_MEMORY_LIMIT=1 python3 "$root/scripts/run_label.py" "$plain" valgrind --jobs "$jobs" \
    --timeout 600 -- \
    valgrind --error-exitcode=1 --suppressions="$root/scripts/valgrind.supp" --leak-check=full \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=yes --quiet ||
    return 1
  # The Python module's whole pytest suite under memcheck, where the plain build has the module
  # (README's test command builds it), its files dealt by size into $jobs interpreters at once
  # (memcheck runs a process's threads on one core: one interpreter left the other core idle for
  # its 181 s): PYTHONMALLOC=malloc so that memcheck sees Python's own allocations; leaks are not
  # counted (the interpreter keeps objects at exit).
  if grep -q '^CLBUF_BUILD_PYTHON:BOOL=ON' "$plain/CMakeCache.txt"; then
    cmake --build "$plain" -j"$jobs" --target clbuf_python || return 1
    local part files pids=() status=0
    rm -f "$plain"/valgrind_pytest*.log
    for ((part = 0; part < jobs; part++)); do
      # As CTest's python.pytest: test_cli.py runs the command in processes of its own (CTest's
      # python.cli_*), which memcheck would not follow.
      mapfile -t files < <(wc -c "$root"/python/tests/test_*.py | grep -v ' total$' |
        grep -v '/test_cli\.py$' | sort -rn | awk -v n="$jobs" -v p="$part" '
          { best = 0; for (g = 1; g < n; g++) if (load[g] < load[best]) best = g
            load[best] += $1; if (best == p) print $2 }')
      [ ${#files[@]} -gt 0 ] || continue
      PYTHONMALLOC=malloc PYTHONPATH="$(cd "$plain" && pwd)/python" POCL_MEMORY_LIMIT=1 \
        valgrind --error-exitcode=1 --suppressions="$root/scripts/valgrind.supp" \
        --errors-for-leak-kinds=none --quiet /usr/bin/python3 -m pytest -q -p no:cacheprovider \
        "${files[@]}" > "$plain/valgrind_pytest$part.log" 2>&1 &
      pids+=($!)
    done
    for part in "${pids[@]}"; do wait "$part" || status=1; done
    cat "$plain"/valgrind_pytest*.log
    return $status
  fi
}

oclgrind_stage() {
  plain_build oclgrind two_platforms || return 1
  # --check-api prints what it finds on stderr ("Oclgrind - OpenCL runtime error detected"),
  # which does not change the exit status: such a line fails the stage. Its other messages go
  # to one log per test executable ({name}); every log must stay empty.
  python3 "$root/scripts/run_label.py" "$plain" oclgrind --jobs "$jobs" --timeout 600 \
    --fail-on '^Oclgrind - ' -- \
    oclgrind --check-api --log "$reports/oclgrind-{name}.log" || { no_reports; return 1; }
  no_reports || return 1
  # PoCL's CPU listed first, oclgrind's GPU second, through the ICD loader (tests/CMakeLists.txt
  # registers these only where oclgrind is installed; none is a failure here).
  labelled "$plain" two_platforms
}

fuzz() {
  local dir=${prefix}fuzz source t work runs kept
  configure "$dir" "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
    -DCLBUF_BUILD_FUZZERS=ON || return 1
  cmake --build "$dir" -j"$jobs" --target clbuf_fuzzers || return 1
  for source in tests/fuzz/*_fuzz.cpp; do
    t=$(basename "$source" _fuzz.cpp)
    # New inputs go to a scratch folder; the kept corpus is only read.
    work=$dir/corpus/$t
    rm -rf "$work" && mkdir -p "$work"
    "$dir/tests/fuzz/${t}_fuzz" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
      -artifact_prefix="$dir/$t-" "$work" "tests/fuzz/corpus/$t" > "$dir/$t.log" 2>&1 ||
      { cat "$dir/$t.log"; note "fuzz $t: the failing input is in $dir/$t-*"; return 1; }
    runs=$(grep -o 'number_of_executed_units: [0-9]*' "$dir/$t.log" | cut -d' ' -f2)
    kept=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
    note "fuzz $t: $runs executions in ${fuzz_seconds} s from $kept kept inputs"
  done
}

coverage() {
  local dir=${CLBUF_COVERAGE_BUILD:-${prefix}coverage} hit total
  if [ -z "${CLBUF_COVERAGE_BUILD:-}" ]; then
    # The whole suite's packages (the Python module, MPI, the benchmarks' peers) as .ci/run's.
    scripts/install-deps.sh --all || return 1
    cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER=g++ -DCMAKE_CXX_FLAGS="${CXXFLAGS:-}" \
      -DCLBUF_COVERAGE=ON -DCLBUF_BUILD_PYTHON=ON -DCLBUF_BUILD_BENCHMARKS=ON \
      -DCLBUF_BUILD_MPI=ON > /dev/null || return 1
    cmake --build "$dir" -j"$jobs" || return 1
    find "$dir" -name '*.gcda' -delete || return 1  # no earlier counts
    # Every test that runs instrumented code; the labels left out build projects of their own,
    # which carry no counters.
    ctest --test-dir "$dir" -LE '^(consumer|coexist|packaging|docs)$' --no-tests=error \
      --output-on-failure -j"$jobs" || return 1
  elif ! grep -q '^CLBUF_COVERAGE:BOOL=ON' "$dir/CMakeCache.txt"; then
    note "coverage: CLBUF_COVERAGE_BUILD=$dir is not a CLBUF_COVERAGE=ON build"; return 1
  fi
  # gcov's JSON of every counter file, include/'s lines kept and added up (coverage_lines.py):
  # the same counts as lcov's capture (8642 of 8833 lines at 6b2a563, both ways) in 18 s
  # against its 246 s; coverage.info is an lcov tracefile still (genhtml, `lcov --list`).
  python3 "$root/scripts/coverage_lines.py" "$dir" "$root/include/clbuf" "$dir/coverage.info" \
    --jobs "$jobs" > "$dir/coverage.txt" || return 1
  cat "$dir/coverage.txt"
  # "lines......: 97.4% (3101 of 3184 lines)": the threshold is checked on the counts, not on
  # the rounded percentage.
  read -r hit total < <(sed -n 's/^ *lines\.*: .*(\([0-9]*\) of \([0-9]*\) lines)$/\1 \2/p' \
    "$dir/coverage.txt") || true
  [ -n "${total:-}" ] || { note "coverage: no line summary"; return 1; }
  awk -v hit="$hit" -v total="$total" -v min="$coverage_min" 'BEGIN {
    printf "include/ line coverage: %.2f%% (%d of %d lines); at least %s%% required\n",
      100 * hit / total, hit, total, min
    exit !(100 * hit >= min * total) }' | tee -a "$dir/coverage.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { note "coverage: below $coverage_min% of include/'s lines"; return 1; }
}

for stage in "${stages[@]}"; do
  case "$stage" in
    asan) timed asan asan ;;
    tsan) timed tsan tsan ;;
    valgrind) timed valgrind valgrind_stage ;;
    oclgrind) timed oclgrind oclgrind_stage ;;
    fuzz) timed fuzz fuzz ;;
    coverage) timed coverage coverage ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
note "summary"
printf '%s\n' "${summary[@]}"
