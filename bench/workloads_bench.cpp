// The reference workloads W1-W9 (examples/) as Google Benchmark cases, eager and
// compiled, so that one run gives both and their ratio.
#include <benchmark/benchmark.h>

#include "example.h"

using namespace kiln;

namespace {

void run_eager(benchmark::State &state, const examples::Example *ex) {
  examples::Workload w = ex->make();
  for (auto _ : state) benchmark::DoNotOptimize(w.fn(w.inputs));
}

void run_compiled(benchmark::State &state, const examples::Example *ex) {
  examples::Workload w = ex->make();
  CompiledFunction f = compile(w.fn);
  f(w.inputs); // compile outside the timed loop
  for (auto _ : state) benchmark::DoNotOptimize(f(w.inputs));
}

const bool registered = [] {
  for (const examples::Example &ex : examples::all_examples()) {
    benchmark::RegisterBenchmark((ex.name + "/eager").c_str(), run_eager, &ex)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((ex.name + "/compiled").c_str(), run_compiled, &ex)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  return true;
}();

} // namespace

BENCHMARK_MAIN();
