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

// Registered from main, not from a static initializer: the examples register
// themselves in static initializers of another library, which may run later.
void register_workloads() {
  for (const examples::Example &ex : examples::all_examples()) {
    benchmark::RegisterBenchmark((ex.name + "/eager").c_str(), run_eager, &ex)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((ex.name + "/compiled").c_str(), run_compiled, &ex)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

} // namespace

int main(int argc, char **argv) {
  register_workloads();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
