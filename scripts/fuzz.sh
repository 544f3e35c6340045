#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time: scripts/fuzz.sh [build-dir] [seconds per target].
# The build dir must be configured with -DKILN_FUZZ=ON and clang (scripts/sanitize.sh uses build-asan,
# which is ASan + UBSan + libFuzzer coverage; with no build dir argument this configures build-fuzz).
# A crash leaves its input in <build-dir>/fuzz/artifacts/<target>/ and fails; commit that input under
# test/fuzz-regressions/<target>/ (replayed by fuzz_regression_test) with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-fuzz}
seconds=${2:-60}
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-19 \
    -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_FLAGS_RELEASE="-O1 -g1" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
    -DKILN_SANITIZE="address;undefined" -DKILN_FUZZ=ON -DKILN_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$dir" -j "$(nproc)" --target fuzz_ir_parser fuzz_random_graph fuzz_safetensors_reader fuzz_cache_entry
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

run() { # target seed-dirs...
  local target=$1
  shift
  local corpus=$dir/fuzz/corpus/$target artifacts=$dir/fuzz/artifacts/$target/
  mkdir -p "$corpus" "$artifacts"
  echo "fuzz: $target for $seconds s"
  # -timeout: one input running longer is a hang; -rss_limit_mb: a runaway allocation is a bug.
  "$dir/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
    -artifact_prefix="$artifacts" "$corpus" "$@"
}

run ir_parser test/lit/ir test/fuzz-regressions/ir_parser
run random_graph test/fuzz-regressions/random_graph
run safetensors_reader test/fuzz-regressions/safetensors_reader
run cache_entry test/fuzz-regressions/cache_entry
