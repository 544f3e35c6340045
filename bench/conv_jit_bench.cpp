// kiln's implicit-GEMM conv (codegen/gemm/conv.h) against eager's im2col +
// OpenBLAS conv2d on the same shapes, 1 and 2 threads. Counter `flops`
// (GFLOP/s: per CPU-second of the main thread at 1 thread, per wall second at
// 2) next to `peak`, the register-only FMA peak of the same thread count
// (codegen/gemm/gemm.h: per CPU-second at 1 thread), measured at start-up.
//
// Shapes: W7's 3x3 conv ([8, 64, 56, 56], 64 -> 64, pad 1), a stride-2 3x3, a
// 1x1, small-cnn's second layer, a grouped conv.
// Run: build/bench/kiln_bench_conv_jit --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// KILN_CONV_TILE=panels[,kc[,order]] overrides the blocking (codegen/gemm/conv.cpp).
#include <benchmark/benchmark.h>

#include <memory>

#include "codegen/gemm/conv.h"
#include "codegen/gemm/gemm.h"
#include "runtime/ops.h"

namespace {

namespace gemm = kiln::gemm;
using kiln::Tensor;

struct Case {
  const char *name;
  int64_t N, C, H, W, O, k, stride, pad, groups;
};

const Case kCases[] = {
    {"w7_3x3", 8, 64, 56, 56, 64, 3, 1, 1, 1},     {"s2_3x3", 8, 64, 56, 56, 128, 3, 2, 1, 1},
    {"pw_1x1", 8, 64, 56, 56, 256, 1, 1, 0, 1},    {"cnn_16_32", 8, 16, 32, 32, 32, 3, 1, 1, 1},
    {"grouped_g4", 8, 64, 28, 28, 64, 3, 1, 1, 4},
    // ResNet's later 3x3 stages (Winograd's shapes with more channels, smaller images).
    {"r18_128_28", 8, 128, 28, 28, 128, 3, 1, 1, 1}, {"r18_256_14", 8, 256, 14, 14, 256, 3, 1, 1, 1},
    {"r18_512_7", 8, 512, 7, 7, 512, 3, 1, 1, 1},
};

double g_peak[3];

gemm::ConvShape shape_of(const Case &c) {
  gemm::ConvShape s;
  s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W, s.O = c.O, s.kH = c.k, s.kW = c.k, s.groups = c.groups;
  s.sh = s.sw = c.stride, s.ph = s.pw = c.pad;
  s.Ho = (c.H + 2 * c.pad - c.k) / c.stride + 1, s.Wo = (c.W + 2 * c.pad - c.k) / c.stride + 1;
  return s;
}

void counters(benchmark::State &st, const gemm::ConvShape &s, int threads) {
  st.counters["flops"] = benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["peak"] = g_peak[threads];
}

void BM_Kiln(benchmark::State &st, Case c, int threads) {
  kiln::set_num_threads(threads);
  const gemm::ConvShape s = shape_of(c);
  kiln::manual_seed(0);
  Tensor x = kiln::randn({c.N, c.C, c.H, c.W}), w = kiln::randn({c.O, c.C / c.groups, c.k, c.k});
  Tensor y = kiln::empty({c.N, c.O, s.Ho, s.Wo});
  const int64_t xs[4] = {x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
  const int64_t ws[4] = {w.stride(0), w.stride(1), w.stride(2), w.stride(3)};
  auto pw = gemm::pack_conv_weight<float>(s, w.data_ptr<float>(), ws);
  const float *xp = x.data_ptr<float>();
  float *yp = y.data_ptr<float>();
  for (auto _ : st) {
    gemm::conv2d<float>(s, xp, xs, *pw, nullptr, yp, nullptr, nullptr);
    benchmark::DoNotOptimize(yp);
  }
  counters(st, s, threads);
}

void BM_Blas(benchmark::State &st, Case c, int threads) {
  kiln::set_num_threads(threads);
  const gemm::ConvShape s = shape_of(c);
  kiln::manual_seed(0);
  Tensor x = kiln::randn({c.N, c.C, c.H, c.W}), w = kiln::randn({c.O, c.C / c.groups, c.k, c.k});
  for (auto _ : st) {
    Tensor y = kiln::conv2d(x, w, {}, c.stride, c.pad, 1, c.groups);
    benchmark::DoNotOptimize(y.raw_data());
  }
  counters(st, s, threads);
}

int register_all() {
  g_peak[1] = gemm::fma_peak_cpu_gflops(100);
  g_peak[2] = gemm::fma_peak_gflops(2, 100);
  for (const Case &c : kCases)
    for (int t : {1, 2}) {
      auto *k = benchmark::RegisterBenchmark((std::string("kiln/") + c.name + "/threads:" + std::to_string(t)).c_str(),
                                             BM_Kiln, c, t);
      auto *b = benchmark::RegisterBenchmark((std::string("blas/") + c.name + "/threads:" + std::to_string(t)).c_str(),
                                             BM_Blas, c, t);
      for (auto *r : {k, b}) {
        r->Unit(benchmark::kMillisecond);
        if (t > 1) r->UseRealTime();
      }
    }
  benchmark::AddCustomContext("fma_peak_1thread_cpu_gflops", std::to_string(g_peak[1]));
  benchmark::AddCustomContext("fma_peak_2threads_gflops", std::to_string(g_peak[2]));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
