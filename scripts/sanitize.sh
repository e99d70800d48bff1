#!/usr/bin/env bash
# The sanitizer stage of CI (.ci/run calls it after the main test command); see README
# "Reliability". Fails on any report. Stages, each timed:
#   asan      ASan+UBSan (clang-14, leak detection on) over the unit, fault and stress suites
#   tsan      TSan over the concurrency tests (thread_test, async_test, paths_test, race_test)
#   valgrind  memcheck over a few test binaries of the plain build
#   oclgrind  the single-threaded suites under `oclgrind --check-api` (log must stay empty), and
#             GPU-preferred selection with oclgrind's GPU next to PoCL's CPU
#   fuzz      libFuzzer smoke runs of the pure-host checks
# Usage: scripts/sanitize.sh [stage...]   (default: all). Environment:
#   CLBUF_PLAIN_BUILD  a configured, built plain build folder (default: build; built if missing)
#   CLBUF_SANITIZE_DIR prefix of the sanitizer build folders (default: build-rel-)
#   CLBUF_FUZZ_SECONDS seconds per fuzz target (default 10); JOBS (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh --sanitize

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(asan tsan valgrind oclgrind fuzz)
jobs=${JOBS:-$(nproc)}
prefix=${CLBUF_SANITIZE_DIR:-build-rel-}
plain=${CLBUF_PLAIN_BUILD:-build}
fuzz_seconds=${CLBUF_FUZZ_SECONDS:-10}
export CLBUF_REQUIRE_DEVICE=1
POCL_CACHE_DIR=$(mktemp -d)
export POCL_CACHE_DIR
reports=$(mktemp -d)  # every sanitizer report lands here too; any file here fails the stage
trap 'rm -rf "$POCL_CACHE_DIR"' EXIT
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
no_reports() {  # fails when a sanitizer wrote a report file
  if compgen -G "$reports/*" > /dev/null; then
    note "sanitizer reports:"; cat "$reports"/*; return 1
  fi
}
configure() {  # configure DIR FLAGS: a clang-14 build of the tests only
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} $2" -DCMAKE_EXE_LINKER_FLAGS="$2" \
    -DCLBUF_BUILD_EXAMPLES=OFF -DCLBUF_INSTALL=OFF -DCLBUF_BUILD_PYTHON=OFF \
    -DCLBUF_BUILD_BENCHMARKS=OFF > /dev/null
}

asan() {
  local dir=${prefix}asan
  local flags="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  configure "$dir" "$flags" || return 1
  cmake --build "$dir" -j"$jobs" || return 1
  ASAN_OPTIONS="fast_unwind_on_malloc=0:detect_leaks=1:abort_on_error=0:log_path=$reports/asan" \
  LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan" \
    ctest --test-dir "$dir" -L 'unit|fault|stress' --output-on-failure -j"$jobs" --timeout 600 ||
    { no_reports; return 1; }
  no_reports
}

tsan() {
  local dir=${prefix}tsan
  configure "$dir" "-O1 -g -fsanitize=thread" || return 1
  cmake --build "$dir" -j"$jobs" --target thread_test async_test paths_test race_test hostile_test || return 1
  local t
  for t in thread_test async_test paths_test race_test hostile_test; do
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan" \
      timeout 300 "$dir/tests/$t" --gtest_brief=1 || { no_reports; return 1; }
  done
  no_reports
}

plain_build() {  # .ci/run has just built it; build it only when it is not there
  if [ ! -x "$plain/tests/gpu_preferred_test" ]; then
    cmake -S . -B "$plain" -DCLBUF_BUILD_EXAMPLES=OFF > /dev/null || return 1
    cmake --build "$plain" -j"$jobs" || return 1
  fi
}

valgrind_stage() {
  plain_build || return 1
  # POCL_MEMORY_LIMIT=1 keeps PoCL's max allocation at 256 MiB: the max-alloc tests allocate
  # that much, and under memcheck a 2 GiB allocation exhausts a 24 GiB machine.
  local vg=(env POCL_MEMORY_LIMIT=1
            valgrind --error-exitcode=1 --suppressions=scripts/valgrind.supp
            --leak-check=full --errors-for-leak-kinds=definite
            --show-leak-kinds=definite --track-origins=yes --quiet)
  timeout 600 "${vg[@]}" "$plain/tests/errors_test" --gtest_brief=1 &&
  timeout 600 "${vg[@]}" "$plain/tests/buffer_test" --gtest_brief=1 \
    --gtest_filter='-Buffer.ManyManagersComeAndGo' &&
  timeout 600 "${vg[@]}" "$plain/tests/transfer_test" --gtest_brief=1 \
    --gtest_filter='-*Large*:*TwentyThousand*:*RandomOperations*:*RandomWindows*' &&
  timeout 600 "${vg[@]}" "$plain/tests/async_test" --gtest_brief=1
}

oclgrind_stage() {
  plain_build || return 1
  # oclgrind is not thread-safe: single-threaded suites only, and no transfers large enough to
  # be staged (oclgrind's GPU is a discrete device to clbuf, and staged chunks are enqueued from
  # several threads): the RoundTrip suites reach the staging threshold and crash oclgrind.
  local log t failed=0
  for t in transfer_test errors_test buffer_test async_test adopt_test pool_test telemetry_test; do
    log=$(mktemp)
    timeout 600 oclgrind --check-api --log "$log" "$plain/tests/$t" --gtest_brief=1 \
      --gtest_filter='-*Large*:*TwentyThousand*:*ManyManagers*:*MaxAlloc*:*Threads*:RoundTrip*' || failed=1
    if [ -s "$log" ]; then
      note "oclgrind --check-api reported for $t:"; cat "$log"; failed=1
    fi
    rm -f "$log"
  done
  # GPU preferred: PoCL's CPU listed first, oclgrind's GPU second, through the ICD loader.
  local vendors
  vendors=$(mktemp -d)
  cp /etc/OpenCL/vendors/pocl.icd "$vendors/10-pocl.icd"
  echo "$(dpkg -L oclgrind | grep 'liboclgrind-rt-icd.so$' | head -1)" > "$vendors/20-oclgrind.icd"
  OCL_ICD_VENDORS=$vendors OCL_ICD_PLATFORM_SORT=none timeout 120 \
    "$plain/tests/gpu_preferred_test" 2>&1 | tee "$vendors/out" || failed=1
  grep -q '^\[       OK \] GpuPreferred' "$vendors/out" || { note "GPU-preferred test did not pass"; failed=1; }
  rm -rf "$vendors"
  return $failed
}

fuzz() {
  local dir=${prefix}fuzz t pids=()
  mkdir -p "$dir"
  local targets=(range_fits checked_multiply ranges_overlap shape_elements parse_selector)
  for t in "${targets[@]}"; do
    clang++-14 -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
      -fno-sanitize-recover=undefined -I include "tests/fuzz/${t}_fuzz.cpp" -o "$dir/${t}_fuzz" \
      -lOpenCL &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}" || return 1; pids=("${pids[@]:1}"); fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || return 1; done
  for t in "${targets[@]}"; do
    mkdir -p "$dir/corpus/$t"
    "$dir/${t}_fuzz" -max_total_time="$fuzz_seconds" -print_final_stats=1 "$dir/corpus/$t" \
      > "$dir/$t.log" 2>&1 || { cat "$dir/$t.log"; return 1; }
    note "fuzz $t: $(grep -o 'number_of_executed_units: [0-9]*' "$dir/$t.log" | cut -d' ' -f2) executions in ${fuzz_seconds} s"
  done
}

for stage in "${stages[@]}"; do
  case "$stage" in
    asan) timed asan asan ;;
    tsan) timed tsan tsan ;;
    valgrind) timed valgrind valgrind_stage ;;
    oclgrind) timed oclgrind oclgrind_stage ;;
    fuzz) timed fuzz fuzz ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
note "summary"
printf '%s\n' "${summary[@]}"
