// Epilogues in the GEMM micro-kernels' registers against the second pass over
// each C tile (codegen::set_register_epilogues), in one process: each round
// compiles the example both ways with a fresh Jit and no disk cache (cold
// compile: the first call, process CPU ms) and times `calls` calls of each in process CPU time (both
// threads summed), alternating (also which goes first), so that a shared
// machine's load hits both alike.
//
//   build/bench/kiln_bench_gemm_epilogue_cpu w5-gpt2-block 30 5
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "codegen/epilogue.h"
#include "codegen/gemm/path.h"
#include "codegen/jit.h"
#include "example.h"
#include "frontend/compile.h"

namespace {
double cpu_seconds() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !kiln::examples::find_example(argv[1])) {
    std::fprintf(stderr, "usage: %s <example> [calls] [rounds]\n", argv[0]);
    return 2;
  }
  kiln::examples::Workload w = kiln::examples::find_example(argv[1])->make();
  const int calls = argc > 2 ? std::max(1, std::atoi(argv[2])) : 30;
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  kiln::gemm::set_path(kiln::gemm::Path::Jit);
  std::vector<double> cpu[2], cold[2];
  for (int r = 0; r < rounds; ++r)
    for (int reg : {r % 2, 1 - r % 2}) { // which goes first alternates: a process's first compile pays more
      kiln::codegen::set_register_epilogues(reg != 0);
      kiln::codegen::Jit jit; // no disk cache: a cold compile
      kiln::codegen::ScopedJit scope(jit);
      const double t0 = cpu_seconds();
      kiln::CompiledFunction f = kiln::compile(w.fn);
      f(w.inputs); // traces and builds the plan (kiln compiles on the first call)
      cold[reg].push_back(1e3 * (cpu_seconds() - t0));
      for (int i = 0; i < 3; ++i) f(w.inputs);
      const double c0 = cpu_seconds();
      for (int i = 0; i < calls; ++i) f(w.inputs);
      cpu[reg].push_back(1e3 * (cpu_seconds() - c0) / calls);
    }
  for (int reg : {1, 0})
    std::printf("%s epilogue=%-9s compiled %.3f ms CPU/call (median of %d rounds, min %.3f), cold compile (first call) "
                "%.1f ms CPU (median)\n",
                argv[1], reg ? "registers" : "tile", median(cpu[reg]), rounds,
                *std::min_element(cpu[reg].begin(), cpu[reg].end()), median(cold[reg]));
  std::printf("%s tile/registers CPU per call: %.3fx\n", argv[1], median(cpu[0]) / median(cpu[1]));
  return 0;
}
