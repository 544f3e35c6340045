// conv2d layouts at W7's shapes (x [8, 64, 56, 56], 3x3, 64 -> 64, pad 1):
//   Conv/NCHW          eager conv2d of a contiguous input (per-channel im2col rows + GEMM [O, K] x [K, pixels])
//   Conv/ChannelsLast  eager conv2d of a channels-last input (channel-run im2col + GEMM [pixels, K] x [K, O])
//   ToChannelsLast     x.contiguous(MemoryFormat::ChannelsLast): the graph-input conversion
//   ToContiguous       y.contiguous() of a channels-last y: the graph-output conversion
//   Chain2/NCHW, Chain2/ChannelsLast
//                      W7's two convs, the channels-last one with both conversions included:
//                      what the layout pass's decision (passes/layout.cpp) compares.
//   W7Compiled/NCHW, W7Compiled/ChannelsLast
//                      the whole W7 block compiled without the conv-chain decision and with it
//                      forced channels-last (the layout-channels-last pass), in one process.
//   Depthwise/NCHW, Depthwise/ChannelsLast, Depthwise/Compiled
//                      a depthwise 3x3 [8, 128, 28, 28] (the depthwise-conv example), with GB/s and GFLOP/s.
// At 1 and 2 threads: with one thread the CPU time column is all the work, which
// a loaded machine's real time is not.
// Run: build/bench/kiln_bench_conv_layout
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include "example.h"
#include "runtime/kernels/linalg_internal.h"

namespace {

using kiln::MemoryFormat;
using kiln::Tensor;

struct W7Shapes {
  Tensor x, w1, w2;
  explicit W7Shapes(const benchmark::State &state) {
    kiln::set_num_threads(int(state.range(0)));
    kiln::manual_seed(0);
    x = kiln::randn({8, 64, 56, 56});
    w1 = 0.05 * kiln::randn({64, 64, 3, 3});
    w2 = 0.05 * kiln::randn({64, 64, 3, 3});
  }
};

void Conv_NCHW(benchmark::State &state) {
  W7Shapes s(state);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(s.x, s.w1, {}, 1, 1).unsafeGetTensorImpl());
}
BENCHMARK(Conv_NCHW)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Conv_ChannelsLast(benchmark::State &state) {
  W7Shapes s(state);
  Tensor x = s.x.contiguous(MemoryFormat::ChannelsLast);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, s.w1, {}, 1, 1).unsafeGetTensorImpl());
}
BENCHMARK(Conv_ChannelsLast)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// conv2d_into with a channels-last input and an NCHW buffer (a chain's last conv):
// NHWC im2col, GEMM reading it transposed. Blocks as the conv epilogue runs them.
void Conv_ChannelsLastIntoNCHW(benchmark::State &state) {
  W7Shapes s(state);
  Tensor x = s.x.contiguous(MemoryFormat::ChannelsLast), out = kiln::empty({8, 64, 56, 56});
  const int64_t rows = kiln::detail::nn::conv2d_block_rows(s.w1.sizes(), 56, 56);
  for (auto _ : state) kiln::detail::nn::conv2d_into(x, s.w1, {}, {1}, {1}, {1}, 1, out, rows, nullptr, nullptr);
}
BENCHMARK(Conv_ChannelsLastIntoNCHW)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same blocks for an NCHW input, as W7's compiled convs run today.
void Conv_NCHWBlocked(benchmark::State &state) {
  W7Shapes s(state);
  Tensor out = kiln::empty({8, 64, 56, 56});
  const int64_t rows = kiln::detail::nn::conv2d_block_rows(s.w1.sizes(), 56, 56);
  for (auto _ : state) kiln::detail::nn::conv2d_into(s.x, s.w1, {}, {1}, {1}, {1}, 1, out, rows, nullptr, nullptr);
}
BENCHMARK(Conv_NCHWBlocked)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void ToChannelsLast(benchmark::State &state) {
  W7Shapes s(state);
  for (auto _ : state) benchmark::DoNotOptimize(s.x.contiguous(MemoryFormat::ChannelsLast).unsafeGetTensorImpl());
}
BENCHMARK(ToChannelsLast)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void ToContiguous(benchmark::State &state) {
  W7Shapes s(state);
  Tensor y = s.x.contiguous(MemoryFormat::ChannelsLast);
  for (auto _ : state) benchmark::DoNotOptimize(y.contiguous().unsafeGetTensorImpl());
}
BENCHMARK(ToContiguous)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Chain2_NCHW(benchmark::State &state) {
  W7Shapes s(state);
  for (auto _ : state) {
    Tensor h = kiln::conv2d(s.x, s.w1, {}, 1, 1);
    benchmark::DoNotOptimize(kiln::conv2d(h, s.w2, {}, 1, 1).unsafeGetTensorImpl());
  }
}
BENCHMARK(Chain2_NCHW)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Chain2_ChannelsLast(benchmark::State &state) {
  W7Shapes s(state);
  for (auto _ : state) {
    Tensor h = kiln::conv2d(s.x.contiguous(MemoryFormat::ChannelsLast), s.w1, {}, 1, 1);
    benchmark::DoNotOptimize(kiln::conv2d(h, s.w2, {}, 1, 1).contiguous().unsafeGetTensorImpl());
  }
}
BENCHMARK(Chain2_ChannelsLast)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void W7Compiled(benchmark::State &state, const char *pipeline) {
  kiln::set_num_threads(int(state.range(0)));
  kiln::examples::Workload w = kiln::examples::find_example("w7-resnet-block")->make();
  kiln::CompileOptions o;
  o.fallback = kiln::Fallback::Off;
  o.pipeline = pipeline;
  kiln::CompiledFunction f = kiln::compile(w.fn, o);
  benchmark::DoNotOptimize(f(w.inputs)); // compiles
  for (auto _ : state) benchmark::DoNotOptimize(f(w.inputs).front().unsafeGetTensorImpl());
}
BENCHMARK_CAPTURE(W7Compiled, NCHW, "decompose,canonicalize,cse,dce,fuse,fuse-horizontal,plan-memory")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(W7Compiled, ChannelsLast,
                  "decompose,canonicalize,cse,dce,layout-channels-last,fuse,fuse-horizontal,plan-memory")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Depthwise 3x3 (groups = channels = 128, pad 1) on [8, 128, 28, 28], the direct
// kernel of runtime/kernels/conv.cpp, NCHW and channels-last. Counters: GB/s of
// the compulsory traffic (input + output + weights, 6.4 MB) and GFLOP/s (2 x 9
// per output, 14.5 MFLOP), to hold against shared/notes/machine.md's limits
// (triad 29-38 GB/s, FMA peak 211 GFLOP/s per core): the conv does 2.25
// FLOP/byte, so it is memory/cache-bound, not compute-bound.
struct DwShapes {
  Tensor x, w, b;
  explicit DwShapes(const benchmark::State &state) {
    kiln::set_num_threads(int(state.range(0)));
    kiln::manual_seed(0);
    x = kiln::randn({8, 128, 28, 28});
    w = 0.3 * kiln::randn({128, 1, 3, 3});
    b = 0.1 * kiln::randn({128});
  }
};

void dw_counters(benchmark::State &state) {
  const double outputs = 8.0 * 128 * 28 * 28, bytes = 4.0 * (2 * outputs + 128 * 10);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(18 * outputs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void Depthwise_NCHW(benchmark::State &state) {
  DwShapes s(state);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(s.x, s.w, s.b, 1, 1, 1, 128).unsafeGetTensorImpl());
  dw_counters(state);
}
BENCHMARK(Depthwise_NCHW)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Depthwise_ChannelsLast(benchmark::State &state) {
  DwShapes s(state);
  Tensor x = s.x.contiguous(MemoryFormat::ChannelsLast);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, s.w, s.b, 1, 1, 1, 128).unsafeGetTensorImpl());
  dw_counters(state);
}
BENCHMARK(Depthwise_ChannelsLast)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The compiled example (conv + bias + relu, the relu in the conv's epilogue).
void Depthwise_Compiled(benchmark::State &state) {
  kiln::set_num_threads(int(state.range(0)));
  kiln::examples::Workload w = kiln::examples::find_example("depthwise-conv")->make();
  kiln::CompileOptions o;
  o.fallback = kiln::Fallback::Off;
  kiln::CompiledFunction f = kiln::compile(w.fn, o);
  benchmark::DoNotOptimize(f(w.inputs)); // compiles
  for (auto _ : state) benchmark::DoNotOptimize(f(w.inputs).front().unsafeGetTensorImpl());
  dw_counters(state);
}
BENCHMARK(Depthwise_Compiled)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
