#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The mutation check (issue 34): hand-made mutants of clbuf, one plausible one-line bug each, in
# the route rule, staging, buffered writes, views, copies between contexts, the pool, clbuf::mpi's
# wire and the Python conversion; each must be killed by the tests listed with it. Run it before
# and after a refactor of the internals (docs/testing.md "Mutants"): a mutant that survives is a
# behaviour no test sees. Not part of CI's default run: on 2 cores shared with other builds it
# took 16 minutes from a cold build folder (4 of them building) and 10 with a warm one.
#
# How: the working tree (tracked files and untracked ones git does not ignore, so an uncommitted
# refactor is checked too) is copied into a scratch folder; for each mutant one line of one file
# there is changed (an exact text, found exactly once, replaced), only the test targets that cover
# it are built (in one build folder kept from run to run: only what the mutant touches
# recompiles), only the tests that kill it run, each under a time-out (a hang counts as killed),
# and the file is put back. The checkout itself is never changed, even when interrupted. Before
# the mutants, every listed test must pass on the tree as it is.
#
# Usage: scripts/mutants.sh [--list] [NAME...]   (default: every mutant). Exit status: 0 when
# every mutant was killed; 1 when one survived or could not be applied or built; 2 when the tree
# as it is fails a listed test. Environment:
#   CLBUF_MUTANTS_DIR      scratch folder (default: build-mutants; holds src/ and build/)
#   CLBUF_MUTANTS_TIMEOUT  seconds per test command (default: 300)
#   JOBS                   build jobs (default: 2)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${CLBUF_MUTANTS_DIR:-$repo/build-mutants}
src=$work/src
build=$work/build
timeout_s=${CLBUF_MUTANTS_TIMEOUT:-300}
jobs=${JOBS:-2}
mpiexec=(mpiexec --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1)
export CLBUF_REQUIRE_DEVICE=1

# ---- The mutants: name, file, exact text (once in the file), its replacement, the targets to
# build, and the checks that kill it (';'-separated): gtest|EXE|FILTER, mpi|RANKS|EXE|FILTER or
# pytest|FILE|EXPRESSION (EXE relative to the build folder, FILE to the source folder).
names=() files=() olds=() news=() targets=() checks=()
mutant() {
  names+=("$1") files+=("$2") olds+=("$3") news+=("$4") targets+=("$5") checks+=("$6")
}
engine=include/clbuf/detail/transfer_engine.hpp
boundaries='gtest|tests/paths_test|Models/PathBoundaries.*'

# The route rule: each threshold moved by one byte, a condition dropped.
mutant route-staging-threshold "$engine" \
  'bytes >= device_.options().staging_threshold_bytes' \
  'bytes > device_.options().staging_threshold_bytes' paths_test "$boundaries"
mutant route-buffered-bound "$engine" \
  'bytes <= buffered_->max_bytes()' 'bytes < buffered_->max_bytes()' paths_test "$boundaries"
mutant route-bounce-bound "$engine" \
  'bytes <= device_.options().bounce_max_bytes' 'bytes < device_.options().bounce_max_bytes' \
  paths_test "$boundaries"
mutant route-pinned-staged "$engine" \
  '!redirected() && host == HostMemory::pageable &&' '!redirected() &&' paths_test "$boundaries"
mutant route-fresh-host-block-bound "$engine" \
  'memory.fresh && bytes < huge_page_bytes' 'memory.fresh && bytes <= huge_page_bytes' \
  paths_test "$boundaries"

# Staging: the last short chunk dropped; every downloaded chunk copied to the start.
staging=include/clbuf/detail/staging.hpp
chunks='gtest|tests/paths_test|Models/WideChunks.EveryChunkBoundaryIsExact/*'
mutant staging-chunk-count "$staging" \
  'job.chunks = (bytes + job.chunk - 1) / job.chunk;' 'job.chunks = bytes / job.chunk;' \
  paths_test "$chunks"
mutant staging-download-offset "$staging" \
  'copy_streaming(job.host + offset, slot.host, length);' \
  'copy_streaming(job.host, slot.host, length);' paths_test "$chunks"

# Buffered writes: a failure found while the ring is full dropped; a ring of 32 writes, not 16;
# writes a blocking read confirmed asked their status after all.
buffered=include/clbuf/detail/buffered_writes.hpp
mutant buffered-full-ring-failure-dropped "$buffered" \
  'if (err != CL_SUCCESS) record(pending_.front(), err);' 'static_cast<void>(err);' \
  fault_test 'gtest|tests/fault_test|FaultCodes.FailedBufferedUploadWhileTheRingIsFull*'
mutant buffered-ring-slots "$engine" \
  'buffered_ring_slots = 16;' 'buffered_ring_slots = 32;' \
  fault_test 'gtest|tests/fault_test|FaultCodes.FailedBufferedUploadWhileTheRingIsFull*'
mutant buffered-confirmed-writes "$buffered" \
  'pending_.front().number <= confirmed' 'pending_.front().number < confirmed' \
  fault_test 'gtest|tests/fault_test|FaultCodes.DownloadAfterBufferedUploadsAsksNoStatus'

# Views: a view of a view forgets its parent's offset.
mutant view-of-a-view-offset include/clbuf/manager.hpp \
  'memory.offset += offset * sizeof(T);' 'memory.offset = offset * sizeof(T);' \
  views_test 'gtest|tests/views_test|Models/Views.AViewOfAViewIsAViewOfTheRoot/*'

# Copies between contexts of views at offsets: each side's offset dropped on each path.
cross=include/clbuf/detail/cross_context.hpp
across='gtest|tests/views_test|Pairs/ViewsAcrossModels.*'
mutant cross-context-into-host-block-offset "$cross" \
  'bytes, dst.host_at(0), true);' 'bytes, static_cast<char*>(dst.host), true);' \
  views_test "$across"
mutant cross-context-out-of-host-block-offset "$cross" \
  'bytes, src.host_at(0), true);' 'bytes, static_cast<char*>(src.host), true);' \
  views_test "$across"
mutant cross-context-relayed-source-offset "$cross" \
  'src.buffer(), src.at(offset), n,' 'src.buffer(), offset, n,' views_test "$across"

# The pool: bins above 4 KiB lost, a block one byte short of its bin, reuse keyed by the request.
pool=include/clbuf/detail/pool.hpp
blocks='gtest|tests/pool_test|Models/PoolBlocks.*'
mutant pool-bin-steps "$pool" \
  'bin = (bytes + step - 1) / step * step;' 'bin = bytes / step * step;' pool_test "$blocks"
mutant pool-block-too-small "$pool" \
  'capacity = bin_size(bytes, max_alloc_bytes_);' 'capacity = bin_size(bytes - 1, max_alloc_bytes_);' \
  pool_test "$blocks"
mutant pool-reuse-by-request "$pool" \
  'auto bin = free_.find(capacity);' 'auto bin = free_.find(bytes);' pool_test "$blocks"

# The pinned pool: its size classes, and trimming that stops one block short of the budget (the
# pool then holds more than its budget under load).
pinned=include/clbuf/detail/pinned_pool.hpp
mutant pinned-size-class "$pinned" \
  'while (size < bytes) size *= 2;' 'while (size <= bytes) size *= 2;' pinned_pool_test \
  'gtest|tests/pinned_pool_test|PinnedPool*'
mutant pinned-budget-trim "$pinned" \
  'while (stats_.allocated_bytes + size > stats_.budget_bytes && !free_.empty()) {' \
  'while (stats_.allocated_bytes > stats_.budget_bytes && !free_.empty()) {' pinned_pool_test \
  'gtest|tests/pinned_pool_test|PinnedPool.*'

# clbuf::mpi: the envelope's bound (the path taken; a message of exactly the bound that takes a
# transfer object, which allocates), the route on a discrete device, the wire's reduction.
paths_mpi='mpi|2|tests/mpi/mpi_test|Paths/Mpi.EachMessageTakesItsPathAroundTheEnvelopeBound/*'
mutant mpi-envelope-bound include/clbuf/detail/mpi/core.hpp \
  'std::min<std::size_t>(options.chunk_bytes, 3968);' \
  'std::min<std::size_t>(options.chunk_bytes, 3969);' mpi_test "$paths_mpi"
mutant mpi-small-message-bound include/clbuf/detail/mpi/eager.hpp \
  'span.bytes <= core.inline_max();' 'span.bytes < core.inline_max();' mpi_test \
  'mpi|2|tests/mpi/mpi_test|Paths/Mpi.SmallMessagesAllocateNothingOnceWarm/*'
mutant mpi-route-discrete "$engine" \
  'MemoryModel::discrete ? Message::staged : Message::map;' \
  'MemoryModel::discrete ? Message::map : Message::map;' mpi_test "$paths_mpi"
mutant mpi-wire-reduction include/clbuf/detail/mpi/wire.hpp \
  'op == Op::min ? MPI_MIN : MPI_MAX;' 'op == Op::min ? MPI_MAX : MPI_MIN;' mpi_test \
  'mpi|2|tests/mpi/mpi_test|Paths/Mpi.AllreduceSumMinMax/*'

# Tracing: each staged upload chunk's DMA waited for at once (no copy under a DMA: the pipeline
# lost, bytes still exact); a started transfer's span ended at its call.
mutant trace-staging-dma-waited-at-once "$staging" \
  'return ok(CLBUF_CL(clFlush)(job.lane->queue), "clFlush", job);' \
  'settle(slot, job); return ok(CLBUF_CL(clFlush)(job.lane->queue), "clFlush", job);' \
  trace_test 'gtest|tests/trace_test|TraceTest.AStagedUploadShowsItsChunksCopiesAndDmasInterleaved'
mutant trace-started-span-ends-at-call include/clbuf/detail/telemetry.hpp \
  'started.tracer->until_complete(event,' 'started.tracer->until_complete(nullptr,' trace_test \
  'gtest|tests/trace_test|TraceTest.AStartedUploadsSpanCoversTheTimeItsQueueWasHeld'

# The Python conversion: a strided array taken as contiguous; int8's lowest value refused.
mutant python-non-contiguous-input python/src/common.cpp \
  'if ((flags & npy_c_contiguous) != 0 && (flags & npy_aligned) != 0) return array;' \
  'if ((flags & npy_aligned) != 0) return array;' clbuf_python \
  'pytest|python/tests/test_module.py|non_contiguous_input'
mutant python-integer-range python/src/values.cpp \
  'v >= -high - 1 && v <= high;' 'v >= -high && v <= high;' clbuf_python \
  'pytest|python/tests/test_values.py|values_the_dtype_holds_are_stored'

# ---- Running them
if [ "${1:-}" = "--list" ]; then
  for i in "${!names[@]}"; do printf '%-40s %s\n' "${names[$i]}" "${files[$i]}"; done
  exit 0
fi
chosen=()
if [ $# -eq 0 ]; then
  chosen=("${!names[@]}")
else
  for name in "$@"; do
    found=""
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$name" ] && found=$i; done
    [ -n "$found" ] || { echo "mutants: no mutant named $name (--list names them)" >&2; exit 1; }
    chosen+=("$found")
  done
fi

# The working tree into the scratch folder, copying only files that differ, so that the build
# folder recompiles only what changed since the last run.
sync_tree() {
  mkdir -p "$src"
  (cd "$repo" && git ls-files --cached --others --exclude-standard -z) |
    while IFS= read -r -d '' file; do
      [ -f "$repo/$file" ] || continue
      if ! cmp -s "$repo/$file" "$src/$file"; then
        mkdir -p "$(dirname "$src/$file")"
        cp "$repo/$file" "$src/$file"
      fi
    done
}

# Puts the mutated file back (a fresh copy, newer than whatever the mutant built).
mutated=""
restore() {
  if [ -n "$mutated" ]; then
    cp "$repo/$mutated" "$src/$mutated"
    mutated=""
  fi
}
trap restore EXIT
trap 'restore; exit 130' INT TERM

# Replaces the one occurrence of $2 in file $1 (relative to src) by $3; fails unless it occurs
# exactly once.
apply() {
  /usr/bin/python3 - "$src/$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"found {text.count(old)} times, not once: {old}")
open(path, "w").write(text.replace(old, new))
EOF
}

# Runs one check; its exit status (124: timed out).
run_check() {
  local kind a b c
  IFS='|' read -r kind a b c <<< "$1"
  case $kind in
    gtest) (cd "$build" && timeout "$timeout_s" "./$a" --gtest_filter="$b" --gtest_brief=1) ;;
    mpi) (cd "$build" && timeout "$timeout_s" "${mpiexec[@]}" -n "$a" "./$b" --gtest_filter="$c") ;;
    pytest) (cd "$src" && PYTHONPATH="$build/python" timeout "$timeout_s" /usr/bin/python3 -m pytest \
               -q -x -p no:cacheprovider "$a" -k "$b") ;;
    *) echo "mutants: unknown check kind $kind" >&2; return 2 ;;
  esac
}

# Builds the targets of `indexes` (a word list); 1 when the build fails.
build_targets() {
  local list
  list=$(for i in "$@"; do echo "${targets[$i]}"; done | tr ' ' '\n' | sort -u | tr '\n' ' ')
  # shellcheck disable=SC2086  # target names hold no spaces
  cmake --build "$build" -j"$jobs" --target $list > "$work/build.log" 2>&1
}

start=$(date +%s)
sync_tree
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCLBUF_BUILD_PYTHON=ON \
  -DCLBUF_BUILD_EXAMPLES=OFF -DCLBUF_INSTALL=OFF > "$work/configure.log" 2>&1 ||
  { echo "mutants: configuring failed ($work/configure.log)" >&2; exit 2; }

# Mutants whose targets this build has not (no MPI found, or no pybind11 for the Python module)
# are skipped, and said so.
available=$(cmake --build "$build" --target help 2> /dev/null)
kept=()
for i in "${chosen[@]}"; do
  if grep -q -w -- "${targets[$i]}" <<< "$available"; then
    kept+=("$i")
  else
    printf '%-40s %-8s         no target %s in this build\n' "${names[$i]}" SKIPPED "${targets[$i]}"
  fi
done
chosen=("${kept[@]}")

echo "mutants: the tree as it is (every listed test must pass)"
build_targets "${chosen[@]}" || { echo "mutants: the tree does not build ($work/build.log)" >&2; exit 2; }
declare -A seen=()
for i in "${chosen[@]}"; do
  IFS=';' read -r -a list <<< "${checks[$i]}"
  for check in "${list[@]}"; do
    [ -n "${seen[$check]:-}" ] && continue
    seen[$check]=1
    if ! run_check "$check" > "$work/baseline.log" 2>&1; then
      echo "mutants: fails unmutated: $check ($work/baseline.log)" >&2
      exit 2
    fi
  done
done
echo "mutants: baseline passed in $(( $(date +%s) - start )) s"

killed=0 survived=0 broken=0
for i in "${chosen[@]}"; do
  t0=$(date +%s)
  name=${names[$i]}
  if ! apply "${files[$i]}" "${olds[$i]}" "${news[$i]}" 2> "$work/apply.log"; then
    verdict=BROKEN detail="not applied: $(cat "$work/apply.log")"
  else
    mutated=${files[$i]}
    if ! build_targets "$i"; then
      verdict=BROKEN detail="does not build (a mutant must compile): $work/build.log"
    else
      verdict=SURVIVED detail=${files[$i]}
      IFS=';' read -r -a list <<< "${checks[$i]}"
      for check in "${list[@]}"; do
        status=0
        run_check "$check" > "$work/$name.log" 2>&1 || status=$?
        [ "$status" -eq 0 ] && continue
        verdict=KILLED detail="by ${check//|/ }"
        [ "$status" -eq 124 ] && detail="$detail (timed out)"
        break
      done
    fi
    restore
  fi
  case $verdict in
    KILLED) killed=$((killed + 1)) ;;
    SURVIVED) survived=$((survived + 1)) ;;
    *) broken=$((broken + 1)) ;;
  esac
  printf '%-40s %-8s %4d s  %s\n' "$name" "$verdict" "$(( $(date +%s) - t0 ))" "$detail"
done
echo "mutants: ${#chosen[@]} mutants: $killed killed, $survived survived, $broken broken" \
     "(not applied or not built); $(( $(date +%s) - start )) s in all"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ]
