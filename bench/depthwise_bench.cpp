// kiln_bench_depthwise: the depthwise-conv example's conv ([8, 128, 28, 28],
// 3x3, pad 1, groups 128, bias) through kiln's compiled depthwise kernel
// (codegen/gemm/depthwise.h) and through eager's direct kernel, alone and with
// the example's relu (eager: a second pass; compiled: the step's epilogue per
// block), in process CPU time per call (the machine is shared: CPU time is what
// a call costs). GB/s counts the compulsory traffic (input + output, 6.4 MB).
//   build/bench/kiln_bench_depthwise --benchmark_min_time=0.5
// KILN_DW_BLOCK=channels[,rows] overrides the kernel's blocking.
#include <benchmark/benchmark.h>

#include "codegen/gemm/depthwise.h"
#include <kiln/kiln.h>

namespace {

using kiln::Tensor;
namespace gemm = kiln::codegen::gemm;

struct Shapes {
  Tensor x, w, b, y;
  gemm::ConvShape s;
  explicit Shapes(const benchmark::State &state) {
    kiln::set_num_threads(int(state.range(0)));
    kiln::manual_seed(0);
    x = kiln::randn({8, 128, 28, 28});
    w = 0.3 * kiln::randn({128, 1, 3, 3});
    b = 0.1 * kiln::randn({128});
    y = kiln::empty({8, 128, 28, 28});
    s.N = 8, s.C = 128, s.H = 28, s.W = 28, s.O = 128, s.kH = 3, s.kW = 3, s.Ho = 28, s.Wo = 28, s.groups = 128;
    s.ph = 1, s.pw = 1;
  }
};

void counters(benchmark::State &state) {
  const double outputs = 8.0 * 128 * 28 * 28, bytes = 4.0 * (2 * outputs + 128 * 10);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(18 * outputs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The kernel alone into a preallocated output.
void Kernel(benchmark::State &state) {
  Shapes sh(state);
  const int64_t xs[4] = {128 * 784, 784, 28, 1}, ws[4] = {9, 9, 3, 1};
  auto w = gemm::pack_depthwise_weight<float>(sh.s, static_cast<const float *>(sh.w.raw_data()), ws);
  const gemm::DwBlocking blk = gemm::depthwise_blocking<float>(sh.s);
  for (auto _ : state)
    gemm::depthwise_conv2d<float>(sh.s, static_cast<const float *>(sh.x.raw_data()), xs, *w,
                                  static_cast<const float *>(sh.b.raw_data()), static_cast<float *>(sh.y.raw_data()),
                                  nullptr, nullptr, blk);
  counters(state);
}
BENCHMARK(Kernel)->ArgName("threads")->Arg(1)->Arg(2)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);

void EagerConv(benchmark::State &state) {
  Shapes sh(state);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(sh.x, sh.w, sh.b, 1, 1, 1, 128).unsafeGetTensorImpl());
  counters(state);
}
BENCHMARK(EagerConv)->ArgName("threads")->Arg(1)->Arg(2)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);

void EagerConvRelu(benchmark::State &state) {
  Shapes sh(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(kiln::relu(kiln::conv2d(sh.x, sh.w, sh.b, 1, 1, 1, 128)).unsafeGetTensorImpl());
  counters(state);
}
BENCHMARK(EagerConvRelu)->ArgName("threads")->Arg(1)->Arg(2)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);

// The compiled example (KILN_GEMM as set: jit runs kiln's kernel, blas eager's).
void CompiledConvRelu(benchmark::State &state) {
  Shapes sh(state);
  Tensor w = sh.w, b = sh.b;
  kiln::CompileOptions o;
  o.fallback = kiln::Fallback::Off;
  kiln::CompiledFunction f = kiln::compile(
      [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{kiln::relu(kiln::conv2d(in[0], w, b, 1, 1, 1, 128))}; },
      o);
  benchmark::DoNotOptimize(f({sh.x})); // compiles
  for (auto _ : state) benchmark::DoNotOptimize(f({sh.x}).front().unsafeGetTensorImpl());
  counters(state);
}
BENCHMARK(CompiledConvRelu)->ArgName("threads")->Arg(1)->Arg(2)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);

void CompiledConv(benchmark::State &state) {
  Shapes sh(state);
  Tensor w = sh.w, b = sh.b;
  kiln::CompileOptions o;
  o.fallback = kiln::Fallback::Off;
  kiln::CompiledFunction f = kiln::compile(
      [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{kiln::conv2d(in[0], w, b, 1, 1, 1, 128)}; }, o);
  benchmark::DoNotOptimize(f({sh.x}));
  for (auto _ : state) benchmark::DoNotOptimize(f({sh.x}).front().unsafeGetTensorImpl());
  counters(state);
}
BENCHMARK(CompiledConv)->ArgName("threads")->Arg(1)->Arg(2)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
