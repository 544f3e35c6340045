// Eager elementwise benchmarks:
//   W8     z = x + y, 1-element float tensors: the fixed cost of one op call,
//          result allocation included.
//   W9     z = x + y, 4,194,304-element float tensors, at 1 and 2 threads; bytes
//          processed = 3 arrays x 4M x 4 bytes, so the GB/s column compares with:
//   Triad  a = b + s * c over 3 x 32M floats, a plain C++ loop split with
//          parallel_for: the machine's memory bandwidth (STREAM's convention,
//          3 arrays x n x 4 bytes, no write-allocate traffic counted).
//   Exp, Tanh, GeluTanh, GeluErf, Sigmoid, Log
//          y = f(x) on 4,194,304-element float tensors, at 1 and 2 threads: the
//          transcendental unary kernels (runtime/kernels/vecmath_kernels.h); bytes
//          processed = 2 arrays x 4M x 4 bytes. ns/element = Time / 4194304.
//   Sgemm  mm of [M, K] x [K, N] float tensors (OpenBLAS sgemm), GFLOP/s in the
//          "flops" counter: 2048^3 at 1 and 2 threads (the machine's GEMM peak),
//          and at 2 threads the four GEMM shapes of W5 (seq 128, d_model 768),
//          whose sum bounds W5's compiled time from below.
// Run: build/bench/kiln_bench_eager
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>

#include <kiln/kiln.h>

namespace {

using kiln::Tensor;

void W8_add_1elem(benchmark::State &state) {
  kiln::manual_seed(0);
  Tensor x = kiln::randn({1}), y = kiln::randn({1});
  for (auto _ : state) {
    Tensor z = x + y;
    benchmark::DoNotOptimize(z.unsafeGetTensorImpl());
  }
}
BENCHMARK(W8_add_1elem);

// The floor under W8: allocating (and freeing) a 1-element result, no op.
void W8_alloc_only(benchmark::State &state) {
  for (auto _ : state) {
    Tensor z = kiln::detail::make_tensor({1}, kiln::kFloat32);
    benchmark::DoNotOptimize(z.unsafeGetTensorImpl());
  }
}
BENCHMARK(W8_alloc_only);

constexpr int64_t kW9 = 4194304;

void W9_add_4M(benchmark::State &state) {
  kiln::set_num_threads(int(state.range(0)));
  kiln::manual_seed(0);
  Tensor x = kiln::randn({kW9}), y = kiln::randn({kW9});
  for (auto _ : state) {
    Tensor z = x + y;
    benchmark::DoNotOptimize(z.unsafeGetTensorImpl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * kW9 * int64_t(sizeof(float)));
}
BENCHMARK(W9_add_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Unary transcendentals on 4M floats. Inputs in [-4, 4) (uniform), where every
// function is in its interesting (non-saturated) range; log gets |x| + 1e-3.
template <class F> void unary_4M(benchmark::State &state, F f, bool positive = false) {
  kiln::set_num_threads(int(state.range(0)));
  kiln::manual_seed(0);
  Tensor x = kiln::rand({kW9}) * 8.0 - 4.0;
  if (positive) x = kiln::abs(x) + 1e-3;
  for (auto _ : state) {
    Tensor y = f(x);
    benchmark::DoNotOptimize(y.unsafeGetTensorImpl());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kW9 * int64_t(sizeof(float)));
  state.SetItemsProcessed(state.iterations() * kW9);
}
void Exp_4M(benchmark::State &s) { unary_4M(s, [](const Tensor &x) { return kiln::exp(x); }); }
void Tanh_4M(benchmark::State &s) { unary_4M(s, [](const Tensor &x) { return kiln::tanh(x); }); }
void GeluTanh_4M(benchmark::State &s) { unary_4M(s, [](const Tensor &x) { return kiln::gelu(x, "tanh"); }); }
void GeluErf_4M(benchmark::State &s) { unary_4M(s, [](const Tensor &x) { return kiln::gelu(x, "none"); }); }
void Sigmoid_4M(benchmark::State &s) { unary_4M(s, [](const Tensor &x) { return kiln::sigmoid(x); }); }
void Log_4M(benchmark::State &s) { unary_4M(s, [](const Tensor &x) { return kiln::log(x); }, true); }
BENCHMARK(Exp_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(Tanh_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(GeluTanh_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(GeluErf_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(Sigmoid_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(Log_4M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

constexpr int64_t kTriad = 32 * 1024 * 1024;

struct FreeDeleter {
  void operator()(float *p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

Buffer make_buffer(int64_t n, float value) {
  Buffer b(static_cast<float *>(std::aligned_alloc(64, size_t(n) * sizeof(float))));
  float *p = b.get();
  // First touch from the pool, as the timed loop will.
  kiln::parallel_for(0, n, 32768, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] = value;
  });
  return b;
}

void Triad_32M(benchmark::State &state) {
  kiln::set_num_threads(int(state.range(0)));
  Buffer a = make_buffer(kTriad, 0.f), b = make_buffer(kTriad, 1.f), c = make_buffer(kTriad, 2.f);
  const float s = 3.f;
  float *pa = a.get();
  const float *pb = b.get(), *pc = c.get();
  for (auto _ : state) {
    kiln::parallel_for(0, kTriad, 32768, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * kTriad * int64_t(sizeof(float)));
}
BENCHMARK(Triad_32M)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

void Sgemm(benchmark::State &state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  kiln::set_num_threads(int(state.range(3)));
  kiln::manual_seed(0);
  Tensor a = kiln::randn({m, k}), b = kiln::randn({k, n});
  for (auto _ : state) {
    Tensor c = kiln::mm(a, b);
    benchmark::DoNotOptimize(c.unsafeGetTensorImpl());
  }
  state.counters["flops"] = benchmark::Counter(double(2 * m * k * n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(Sgemm)
    ->ArgNames({"m", "k", "n", "threads"})
    ->Args({2048, 2048, 2048, 1})
    ->Args({2048, 2048, 2048, 2})
    ->Args({128, 768, 2304, 2})
    ->Args({128, 768, 768, 2})
    ->Args({128, 768, 3072, 2})
    ->Args({128, 3072, 768, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
