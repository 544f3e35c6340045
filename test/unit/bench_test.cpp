// kiln::bench_row and kiln::bytes_moved_estimate on small graphs (fast), plus
// CompiledFunction::kernels_per_call.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include <kiln/kiln.h>

#include "frontend/bench.h"
#include "ir/graph.h"

using namespace kiln;

namespace {

std::vector<Tensor> add_fn(const std::vector<Tensor> &in) { return {in[0] + in[1]}; }

TEST(Bench, RowOfAnAddHasEveryField) {
  manual_seed(0);
  std::vector<Tensor> in = {randn({4096}), randn({4096})};
  BenchOptions o;
  o.warmup = 1;
  o.iters = 3;
  o.stream_gbps = 10;
  std::vector<std::string> phases;
  o.on_phase = [&](const std::string &phase, double, double dur) {
    EXPECT_GE(dur, 0);
    phases.push_back(phase);
  };
  BenchRow r = bench_row("add", add_fn, in, o);
  EXPECT_EQ(phases, (std::vector<std::string>{"eager", "compile cold", "compile warm", "compiled"}));
  EXPECT_EQ(r.name, "add");
  EXPECT_GT(r.eager_us, 0);
  EXPECT_GT(r.compiled_us, 0);
  EXPECT_DOUBLE_EQ(r.speedup, r.eager_us / r.compiled_us);
  EXPECT_GT(r.compile_ms_cold, 0);
  EXPECT_GT(r.compile_ms_warm, 0);
  // The warm compile's fresh Jit found its one kernel in the cold one's disk cache.
  EXPECT_EQ(r.warm_kernels_compiled, 0);
  EXPECT_EQ(r.kernels, 1);
  // Two inputs read, one output written, nothing in between.
  EXPECT_EQ(r.bytes_moved, 3 * 4096 * 4);
  EXPECT_NEAR(r.achieved_gbps, r.bytes_moved / (r.compiled_us * 1e3), 1e-9);
  EXPECT_NEAR(r.bandwidth_fraction, r.achieved_gbps / 10, 1e-12);
  EXPECT_EQ(r.max_abs_diff, 0);
  EXPECT_EQ(r.max_rel_diff, 0);
}

// on_step sees one extra compiled call: one "kernel" event per kernel launch and
// one "blas" or "gemm-jit" event per contraction, in order, inside the bench_row call.
TEST(Bench, OnStepReportsEachStepOfOneCompiledCall) {
  manual_seed(0);
  Tensor w = randn({32, 16});
  // exp(x) reads no contraction: a kernel; relu(mm * 2) is mm's epilogue, one contraction step.
  auto fn = [w](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(matmul(in[0], w) * 2.0), exp(in[0])};
  };
  BenchOptions o;
  o.warmup = 0;
  o.iters = 1;
  std::vector<std::string> cats, names;
  double last_end = 0;
  o.on_step = [&](const codegen::StepEvent &e) {
    cats.emplace_back(e.category);
    names.emplace_back(e.name);
    EXPECT_GE(e.dur_us, 0);
    EXPECT_GE(e.start_us, last_end);
    last_end = e.start_us + e.dur_us;
  };
  BenchRow r = bench_row("mm-relu", fn, {randn({8, 32})}, o);
  ASSERT_EQ(r.kernels, int64_t(std::count(cats.begin(), cats.end(), "kernel")));
  EXPECT_GE(r.kernels, 1);
  // The contraction step: kiln's GEMM (KILN_GEMM=jit, the default) or BLAS.
  EXPECT_EQ(std::count(cats.begin(), cats.end(), "blas") + std::count(cats.begin(), cats.end(), "gemm-jit"), 1);
  // A step is named by the value it computes, as the dump names it, then what runs.
  for (size_t i = 0; i < cats.size(); ++i) {
    EXPECT_EQ(names[i].rfind("%", 0), 0u) << names[i];
    if (cats[i] == "kernel") {
      EXPECT_NE(names[i].find(" kiln_k_"), std::string::npos) << names[i];
    }
    if (cats[i] == "blas" || cats[i] == "gemm-jit") {
      EXPECT_NE(names[i].find(" contraction+epilogue"), std::string::npos) << names[i];
    }
  }
}

// Without an observer, compiled calls report nothing (the observer is per thread and scoped).
TEST(Bench, StepObserverIsScopedToItsThread) {
  int events = 0;
  CompiledFunction f = compile(add_fn);
  std::vector<Tensor> in = {randn({64}), randn({64})};
  {
    codegen::ScopedStepObserver observe([&](const codegen::StepEvent &) { ++events; });
    f(in);
    EXPECT_EQ(events, 1);
    std::thread([&] { f(in); }).join(); // another thread: not observed
    EXPECT_EQ(events, 1);
  }
  f(in);
  EXPECT_EQ(events, 1);
}

TEST(Bench, IntermediatesBetweenStepsCountTwice) {
  // The relu reads the matmul through a transpose, so it cannot be the matmul's
  // epilogue: the [8, 8] product is written and read back.
  manual_seed(0);
  Tensor w = randn({8, 8});
  ModelFn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(matmul(in[0], w).t()) + 1}; };
  std::vector<Tensor> in = {randn({8, 8})};
  CompiledFunction f = compile(fn);
  auto g = f.graph_for(in);
  ASSERT_NE(g, nullptr);
  // input + param + output, plus 2x each non-view intermediate result that is read.
  EXPECT_GE(bytes_moved_estimate(*g), 3 * 64 * 4 + 2 * 64 * 4);
  EXPECT_GE(f.kernels_per_call(in), 1);
}

TEST(Bench, KernelsPerCallIsMinusOneWhenForcedEager) {
  CompileOptions co;
  co.fallback = Fallback::Force;
  CompiledFunction f = compile(add_fn, co);
  EXPECT_EQ(f.kernels_per_call({randn({4}), randn({4})}), -1);
}

TEST(Bench, StreamTriadMeasuresSomething) {
  double gbps = stream_triad_gbps(1);
  EXPECT_GT(gbps, 0.1);
  EXPECT_LT(gbps, 10000);
}

} // namespace
