// Compiled vs eager in process CPU time per call, with the compiled function
// built on each GEMM path in turn (KILN_GEMM=jit, blas, jit, blas): on a shared
// machine wall time swings by 2x between runs while the CPU a call takes
// (both threads summed) moves by a few %. Thread balance is not measured here.
//
//   build/bench/kiln_bench_gemm_path_cpu w5-gpt2-block 30
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "codegen/gemm/path.h"
#include "example.h"
#include "frontend/compile.h"

namespace {
double cpu_seconds() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || !kiln::examples::find_example(argv[1])) {
    std::fprintf(stderr, "usage: %s <example> [calls]\n", argv[0]);
    return 2;
  }
  kiln::examples::Workload w = kiln::examples::find_example(argv[1])->make();
  const int calls = argc > 2 ? std::max(1, std::atoi(argv[2])) : 30;
  for (const char *p : {"jit", "blas", "jit", "blas"}) {
    kiln::gemm::set_path(*kiln::gemm::parse_path(p));
    kiln::CompiledFunction f = kiln::compile(w.fn);
    for (int i = 0; i < 3; ++i) f(w.inputs);
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f(w.inputs);
    const double c1 = cpu_seconds();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int i = 0; i < calls; ++i) w.fn(w.inputs);
    const double c2 = cpu_seconds();
    std::printf("%s gemm=%-4s compiled %.3f ms CPU/call (wall %.3f ms), eager %.3f ms CPU/call: eager/compiled %.2fx\n",
                argv[1], p, 1e3 * (c1 - c0) / calls, 1e3 * wall / calls, 1e3 * (c2 - c1) / calls, (c2 - c1) / (c1 - c0));
  }
  return 0;
}
