// What a compile costs, in process CPU time (both threads summed) and wall time,
// apart from the call it runs: each round makes a fresh Jit over one disk cache
// that a first, cold round filled (a "warm" compile, as a second process finds
// it), compiles the example (kiln compiles on the first call), and times the
// first call, then a second call. first - second is what the compile added to
// the first call; second is one execution. On a shared machine the CPU times
// are the steadier numbers.
//
//   build/bench/kiln_bench_compile_cpu w5-gpt2-block 10
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "example.h"
#include "frontend/compile.h"

namespace {
double cpu_ms() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return 1e3 * double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-3 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

double wall_ms() {
  return 1e-6 * double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Sample {
  double cpu, wall;
};

// Runs f once and returns its CPU and wall milliseconds.
template <class F> Sample timed(F &&f) {
  const double c0 = cpu_ms(), w0 = wall_ms();
  f();
  return {cpu_ms() - c0, wall_ms() - w0};
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !kiln::examples::find_example(argv[1])) {
    std::fprintf(stderr, "usage: %s <example> [rounds]\n", argv[0]);
    return 2;
  }
  kiln::examples::Workload w = kiln::examples::find_example(argv[1])->make();
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 10;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln-compile-bench-" + std::to_string(::getpid()));
  kiln::codegen::JitOptions jo;
  jo.cache_dir = dir.string();
  Sample cold{};
  {
    kiln::codegen::Jit jit(jo);
    kiln::codegen::ScopedJit scope(jit);
    kiln::CompiledFunction f = kiln::compile(w.fn);
    cold = timed([&] { f(w.inputs); });
  }
  std::vector<double> first_cpu, first_wall, second_cpu, second_wall;
  for (int r = 0; r < rounds; ++r) {
    kiln::codegen::Jit jit(jo);
    kiln::codegen::ScopedJit scope(jit);
    kiln::CompiledFunction f = kiln::compile(w.fn);
    const Sample first = timed([&] { f(w.inputs); });
    const Sample second = timed([&] { f(w.inputs); });
    first_cpu.push_back(first.cpu), first_wall.push_back(first.wall);
    second_cpu.push_back(second.cpu), second_wall.push_back(second.wall);
  }
  std::filesystem::remove_all(dir);
  std::printf("%s cold first call: %.1f ms CPU, %.1f ms wall\n", argv[1], cold.cpu, cold.wall);
  std::printf("%s warm first call: %.1f ms CPU, %.1f ms wall; second call %.1f ms CPU, %.1f ms wall "
              "(medians of %d rounds)\n",
              argv[1], median(first_cpu), median(first_wall), median(second_cpu), median(second_wall), rounds);
  std::printf("%s warm compile (first - second call): %.1f ms CPU, %.1f ms wall\n", argv[1],
              median(first_cpu) - median(second_cpu), median(first_wall) - median(second_wall));
  return 0;
}
