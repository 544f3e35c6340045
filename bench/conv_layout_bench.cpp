// conv2d layouts at W7's shapes (x [8, 64, 56, 56], 3x3, 64 -> 64, pad 1):
//   Conv/NCHW          eager conv2d of a contiguous input (per-channel im2col rows + GEMM [O, K] x [K, pixels])
//   Conv/ChannelsLast  eager conv2d of a channels-last input (channel-run im2col + GEMM [pixels, K] x [K, O])
//   ToChannelsLast     x.contiguous(MemoryFormat::ChannelsLast): the graph-input conversion
//   ToContiguous       y.contiguous() of a channels-last y: the graph-output conversion
//   Chain2/NCHW, Chain2/ChannelsLast
//                      W7's two convs, the channels-last one with both conversions included:
//                      what the layout pass's decision (passes/layout.cpp) compares.
// Run: build/bench/kiln_bench_conv_layout
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

namespace {

using kiln::MemoryFormat;
using kiln::Tensor;

struct W7Shapes {
  Tensor x, w1, w2;
  W7Shapes() {
    kiln::manual_seed(0);
    x = kiln::randn({8, 64, 56, 56});
    w1 = 0.05 * kiln::randn({64, 64, 3, 3});
    w2 = 0.05 * kiln::randn({64, 64, 3, 3});
  }
};

void Conv_NCHW(benchmark::State &state) {
  W7Shapes s;
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(s.x, s.w1, {}, 1, 1).unsafeGetTensorImpl());
}
BENCHMARK(Conv_NCHW)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Conv_ChannelsLast(benchmark::State &state) {
  W7Shapes s;
  Tensor x = s.x.contiguous(MemoryFormat::ChannelsLast);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, s.w1, {}, 1, 1).unsafeGetTensorImpl());
}
BENCHMARK(Conv_ChannelsLast)->UseRealTime()->Unit(benchmark::kMicrosecond);

void ToChannelsLast(benchmark::State &state) {
  W7Shapes s;
  for (auto _ : state) benchmark::DoNotOptimize(s.x.contiguous(MemoryFormat::ChannelsLast).unsafeGetTensorImpl());
}
BENCHMARK(ToChannelsLast)->UseRealTime()->Unit(benchmark::kMicrosecond);

void ToContiguous(benchmark::State &state) {
  W7Shapes s;
  Tensor y = s.x.contiguous(MemoryFormat::ChannelsLast);
  for (auto _ : state) benchmark::DoNotOptimize(y.contiguous().unsafeGetTensorImpl());
}
BENCHMARK(ToContiguous)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Chain2_NCHW(benchmark::State &state) {
  W7Shapes s;
  for (auto _ : state) {
    Tensor h = kiln::conv2d(s.x, s.w1, {}, 1, 1);
    benchmark::DoNotOptimize(kiln::conv2d(h, s.w2, {}, 1, 1).unsafeGetTensorImpl());
  }
}
BENCHMARK(Chain2_NCHW)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Chain2_ChannelsLast(benchmark::State &state) {
  W7Shapes s;
  for (auto _ : state) {
    Tensor h = kiln::conv2d(s.x.contiguous(MemoryFormat::ChannelsLast), s.w1, {}, 1, 1);
    benchmark::DoNotOptimize(kiln::conv2d(h, s.w2, {}, 1, 1).contiguous().unsafeGetTensorImpl());
  }
}
BENCHMARK(Chain2_ChannelsLast)->UseRealTime()->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
