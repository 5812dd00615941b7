#!/usr/bin/env bash
# The sanitizer and fuzzing step of CI: builds build-fuzz/ with clang, AddressSanitizer +
# UndefinedBehaviorSanitizer and libFuzzer coverage (TESSERA_SANITIZE=ON, TESSERA_FUZZ=ON, no CUDA),
# runs every fuzz harness of test/fuzz for FUZZ_SECONDS (default 15) on its committed seed corpus,
# then the unit label (or the CTest regex UNIT_REGEX) under the sanitizers, building only the targets it
# runs (or UNIT_TARGETS).
# Usage: scripts/sanitize.sh [fuzz|unit|all] (default all).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
seconds=${FUZZ_SECONDS:-15}
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# -O1 with line tables only: sanitizer reports keep file:line, and CI's 2 cores build it much faster
# than RelWithDebInfo (-O2 -g).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="-O1 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" -DTESSERA_CUDA=OFF -DTESSERA_SANITIZE=ON \
  -DTESSERA_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
# MPI, OpenBLAS and HDF5 are not instrumented: their one-time allocations are not leaks of ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OPENBLAS_NUM_THREADS=1
status=0
if [ "$what" = fuzz ] || [ "$what" = all ]; then
  harnesses=()  # one per seed corpus folder
  for corpus in test/fuzz/corpus/*/; do harnesses+=("fuzz_$(basename "$corpus")"); done
  cmake --build build-fuzz -j "$(nproc)" --target "${harnesses[@]}"
  for corpus in test/fuzz/corpus/*/; do
    parser=$(basename "$corpus")
    work=$(mktemp -d)  # new inputs go here; the committed corpus stays as it is
    echo "fuzz_$parser: ${seconds} s"
    if ! build-fuzz/bin/fuzz_"$parser" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
         -max_len=65536 -print_final_stats=1 -artifact_prefix="build-fuzz/fuzz_${parser}_" "$work" "$corpus" \
         2> "build-fuzz/fuzz_$parser.log"; then
      tail -60 "build-fuzz/fuzz_$parser.log"
      echo "FAIL: fuzz_$parser found a crash (input saved as build-fuzz/fuzz_${parser}_*)"
      status=1
    fi
    grep -E "stat::number_of_executed_units|stat::new_units_added" "build-fuzz/fuzz_$parser.log" | tr '\n' ' '
    echo
    rm -rf "$work"
  done
fi
if [ "$what" = unit ] || [ "$what" = all ]; then
  # Only what the unit label runs (or UNIT_TARGETS): test/CMakeLists.txt's GoogleTest programs (one
  # unit_<concern> a folder of test/unit) and the apps (src/apps/*) its scripts and CLI tests call.
  # The MPI, checkpoint and benchmark programs of the other labels are not built here (a unit test
  # that needed one would fail as "Not Run", not pass).
  if [ -z "${UNIT_TARGETS:-}" ]; then
    UNIT_TARGETS=$(cd src/apps && echo *)
    for dir in test/unit/*/; do
      if compgen -G "$dir*.cpp" >/dev/null; then UNIT_TARGETS+=" unit_$(basename "$dir")"; fi
    done
  fi
  echo "building for the unit label: $UNIT_TARGETS"
  cmake --build build-fuzz -j "$(nproc)" --target $UNIT_TARGETS
  export TESSERA_SOURCE_DIR="$PWD" TESSERA_BIN_DIR="$PWD/build-fuzz/bin"
  if [ -d ../shared ]; then export TESSERA_SHARED_DIR="$(cd ../shared && pwd)"; fi
  ctest --test-dir build-fuzz --output-on-failure -j "$(nproc)" -L unit ${UNIT_REGEX:+-R "$UNIT_REGEX"} \
    ${UNIT_EXCLUDE:+-E "$UNIT_EXCLUDE"} || status=1
fi
exit $status
