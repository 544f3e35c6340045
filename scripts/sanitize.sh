#!/usr/bin/env bash
# The sanitizer and fuzzing stages of CI (scripts/test.sh runs this after the normal suite):
#   build-asan: clang-19, ASan + UBSan (+ libFuzzer coverage), the whole test suite through ctest,
#               then each libFuzzer target for a bounded time (scripts/fuzz.sh).
#   build-tsan: clang-19, TSan, only the tests labeled `concurrency`.
# Any sanitizer report fails the run (-fno-sanitize-recover=all, halt_on_error). Suppressions
# (test/sanitizers/*.supp) cover only uninstrumented third-party code, each with a comment why.
# Usage: scripts/sanitize.sh [asan|tsan|fuzz|all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stage=${1:-all}
jobs=$(nproc)

configure() { # build-dir sanitizers extra-cmake-args...
  local dir=$1 san=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -g1" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
    -DKILN_SANITIZE="$san" -DKILN_BUILD_BENCH=OFF "$@" >/dev/null
}

timed() { # label command...: runs it and prints its wall-clock time
  local label=$1 start
  shift
  start=$(date +%s)
  "$@"
  echo "sanitize: $label took $(($(date +%s) - start)) s"
}

# OpenBLAS's own threads are uninstrumented; kiln's thread pool is what these stages test.
export OPENBLAS_NUM_THREADS=1
# The exhaustive float32 accuracy sweeps test every 16th float here (the normal suite tests all).
export KILN_FLOAT_SWEEP_STEP=16
# KILN_CACHE_DIR= (set and empty): no disk cache shared between the builds (unset, the
# library would use ~/.cache/kiln).
export KILN_CACHE_DIR=

asan() {
  configure build-asan "address;undefined" -DKILN_FUZZ=ON
  timed "asan build" cmake --build build-asan -j "$jobs"
  # allocator_may_return_null: ASan's allocator caps one allocation at 1 TiB and aborts above it by default;
  # with this it fails like the system allocator (null / ENOMEM), which kiln turns into kiln::Error. The
  # huge-tensor tests (BadInput*.Huge*, FaultsMemory.*) check exactly that path.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1"
  export LSAN_OPTIONS="suppressions=$root/test/sanitizers/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$root/test/sanitizers/ubsan.supp"
  # Bench.StreamTriadMeasuresSomething checks a bandwidth floor: meaningless under instrumentation.
  timed "asan+ubsan tests" ctest --test-dir build-asan --output-on-failure -j "$jobs" \
    -E '^Bench\.StreamTriadMeasuresSomething$'
}

tsan() {
  configure build-tsan "thread"
  # Only the executables of the concurrency tests (test/CMakeLists.txt lists them).
  local targets
  targets=$(cat build-tsan/test/concurrency_targets.txt)
  timed "tsan build" cmake --build build-tsan -j "$jobs" --target $targets
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/test/sanitizers/tsan.supp"
  timed "tsan tests" ctest --test-dir build-tsan --output-on-failure -L concurrency -j "$jobs"
}

fuzz() {
  timed "fuzzing" bash scripts/fuzz.sh build-asan "${KILN_FUZZ_SECONDS:-60}"
}

case $stage in
asan) asan ;;
tsan) tsan ;;
fuzz) fuzz ;;
all)
  asan
  fuzz
  tsan
  ;;
*)
  echo "usage: $0 [asan|tsan|fuzz|all]" >&2
  exit 2
  ;;
esac
