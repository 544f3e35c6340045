// GEMM sweep: kiln's JIT GEMM (codegen/gemm, unpacked and with B packed once),
// OpenBLAS sgemm (as configured here: OPENBLAS_CORETYPE pins its AVX2 kernels)
// and oneDNN's sgemm (when built with it) on the same shapes, 1 and 2 threads.
// Counters: `flops` (GFLOP/s) and `fma_frac`, the fraction of the register-only
// FMA peak of the same thread count, measured at start-up and printed in the
// context. Also `Ukernel`: the micro-kernel alone on L1-resident panels.
//
// Shapes: 2048^3 (issue 15's gemm-2048), W5's four linear layers (GPT-2 block,
// M = 128 tokens, y = x W^T: B transposed), 512^3, and W6's 1 x 64 x 64.
// Run: build/bench/kiln_bench_gemm --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifdef KILN_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#endif

#include "codegen/gemm/gemm.h"
#include "runtime/ops.h"

extern "C" void openblas_set_num_threads(int);

namespace {

namespace gemm = kiln::gemm;

struct Shape {
  const char *name;
  int64_t M, N, K;
  bool tb; // B given as W[N, K] (linear)
};

const Shape kShapes[] = {
    {"gemm2048", 2048, 2048, 2048, false}, {"w5_qkv", 128, 2304, 768, true}, {"w5_proj", 128, 768, 768, true},
    {"w5_fc", 128, 3072, 768, true},       {"w5_fc2", 128, 768, 3072, true}, {"gemm512", 512, 512, 512, false},
    {"w6_linear", 1, 64, 64, true},
};

double g_peak[3]; // FMA peak GFLOP/s by thread count; [0]: 1 thread per CPU-second

struct Operands {
  std::vector<float> A, B, C;
  int64_t lda, ldb, ldc;
  explicit Operands(const Shape &s) : lda(s.K), ldb(s.tb ? s.K : s.N), ldc(s.N) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    A.resize(size_t(s.M * s.K));
    B.resize(size_t(s.K * s.N));
    C.assign(size_t(s.M * s.N), 0.f);
    for (float &x : A) x = u(rng);
    for (float &x : B) x = u(rng);
  }
};

// fma_frac: against the wall-time peak of `threads` threads, or with
// KILN_BENCH_CPU (rates per process CPU-second) against one thread's CPU-time peak.
void set_counters(benchmark::State &state, const Shape &s, int threads) {
  const double flops = 2.0 * s.M * s.N * s.K;
  const double peak = std::getenv("KILN_BENCH_CPU") ? g_peak[0] : g_peak[threads];
  state.counters["flops"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["fma_frac"] = benchmark::Counter(flops * 1e-9 / peak, benchmark::Counter::kIsIterationInvariantRate);
}

void kiln_jit(benchmark::State &state, Shape s, int threads) {
  kiln::set_num_threads(threads);
  Operands o(s);
  gemm::Config cfg = gemm::default_config<float>();
  cfg.threads = threads;
  gemm::warm_up<float>(cfg);
  for (auto _ : state)
    gemm::gemm<float>(false, s.tb, s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, o.C.data(), o.ldc,
                      cfg);
  set_counters(state, s, threads);
}

void kiln_jit_packed(benchmark::State &state, Shape s, int threads) {
  kiln::set_num_threads(threads);
  Operands o(s);
  gemm::warm_up<float>();
  auto packed = gemm::pack_b<float>(s.tb, s.K, s.N, o.B.data(), o.ldb);
  for (auto _ : state)
    gemm::gemm_packed<float>(false, s.M, 1.f, o.A.data(), o.lda, packed, 0.f, o.C.data(), o.ldc, threads);
  set_counters(state, s, threads);
}

void openblas(benchmark::State &state, Shape s, int threads) {
  openblas_set_num_threads(threads);
  Operands o(s);
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, int(s.M), int(s.N), int(s.K), 1.f,
                o.A.data(), int(o.lda), o.B.data(), int(o.ldb), 0.f, o.C.data(), int(o.ldc));
  set_counters(state, s, threads);
}

#ifdef KILN_HAVE_DNNL
void onednn(benchmark::State &state, Shape s, int threads) {
  omp_set_num_threads(threads);
  Operands o(s);
  for (auto _ : state)
    dnnl_sgemm('N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, o.C.data(),
               o.ldc);
  set_counters(state, s, threads);
}
#endif

// The micro-kernel alone (1 thread, L1-resident panels) at the default kc.
void ukernel(benchmark::State &state) {
  const gemm::Config cfg = gemm::default_config<float>();
  double g = 0;
  for (auto _ : state) g = gemm::ukernel_gflops<float>(cfg, cfg.kc, 50);
  state.counters["flops"] = g;
  state.counters["fma_frac"] = g / g_peak[0];
}

void register_all() {
  benchmark::RegisterBenchmark("Ukernel", ukernel)->Iterations(1)->Unit(benchmark::kMillisecond);
  for (const Shape &s : kShapes)
    for (int t : {1, 2}) {
      auto reg = [&](const char *impl, void (*fn)(benchmark::State &, Shape, int)) {
        std::string name = std::string(s.name) + "/" + impl + "/threads:" + std::to_string(t);
        auto *b = benchmark::RegisterBenchmark(name.c_str(), fn, s, t)->Unit(benchmark::kMicrosecond);
        // KILN_BENCH_CPU=1: rates per CPU-second of the whole process (all
        // threads), which other tenants' load disturbs far less than wall time:
        // for comparing kiln's own configurations on a busy machine.
        if (std::getenv("KILN_BENCH_CPU")) b->MeasureProcessCPUTime();
        else b->UseRealTime();
      };
      reg("kiln_jit", kiln_jit);
      reg("kiln_jit_packed", kiln_jit_packed);
      reg("openblas", openblas);
#ifdef KILN_HAVE_DNNL
      reg("onednn", onednn);
#endif
    }
}

} // namespace

int main(int argc, char **argv) {
  kiln::set_num_threads(2);
  g_peak[1] = gemm::fma_peak_gflops(1);
  g_peak[2] = gemm::fma_peak_gflops(2);
  g_peak[0] = gemm::fma_peak_cpu_gflops();
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f / %.1f GFLOP/s (per CPU-second of one thread: %.1f)", g_peak[1], g_peak[2],
                g_peak[0]);
  benchmark::AddCustomContext("fma_peak_1t_2t", buf);
  benchmark::AddCustomContext("kiln_gemm_isa", gemm::host_isa());
  benchmark::AddCustomContext("kiln_gemm_config", gemm::default_config<float>().to_string());
#ifdef KILN_HAVE_DNNL
  benchmark::AddCustomContext("onednn", "dnnl_sgemm (libdnnl)");
#else
  benchmark::AddCustomContext("onednn", "not found at configure time: oneDNN rows skipped");
#endif
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
