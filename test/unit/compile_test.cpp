// kiln::compile: results equal eager, guards and recompiles, each fallback path,
// the cache limit, live captured weights, and concurrent callers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include <kiln/kiln.h>

#include "codegen/executable.h"
#include "frontend/compile.h"
#include "ir/graph.h"

#include "concurrency_test_util.h"

using namespace kiln;

using kiln::test::concurrent_failures;

namespace {

// Max |a - b| over all elements, computed in double through eager ops.
double max_abs_diff(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.sizes().vec(), b.sizes().vec());
  return amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

void expect_close(const std::vector<Tensor> &got, const std::vector<Tensor> &want, double atol = 1e-5,
                  double rtol = 1e-4) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double scale = amax(abs(want[i].to(kFloat64))).item<double>();
    EXPECT_LE(max_abs_diff(got[i], want[i]), atol + rtol * scale) << "output " << i;
  }
}

int count_groups(const ir::Graph &g) {
  int n = 0;
  for (const ir::Node *node : g.nodes()) n += node->kind() == ir::Node::Kind::FusionGroup;
  return n;
}

ModelFn gelu_chain(Tensor a, Tensor b) {
  return [a, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * a + b, "tanh")}; };
}

CompileOptions with_fallback(Fallback f) {
  CompileOptions o;
  o.fallback = f;
  return o;
}

} // namespace

TEST(Compile, ElementwiseChainIsOneKernelAndMatchesEager) {
  manual_seed(1);
  Tensor a = randn({64}), b = randn({64}), x = randn({32, 64});
  ModelFn fn = gelu_chain(a, b);
  CompiledFunction f = compile(fn);
  expect_close(f({x}), fn({x}));
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  EXPECT_EQ(count_groups(*g), 1);
  EXPECT_EQ(g->num_nodes(), 1u) << "everything should sit in one fusion group";
  expect_close(f({x}), fn({x}));
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

TEST(Compile, SoftmaxAndLayerNormRowsMatchEager) {
  manual_seed(2);
  Tensor w = randn({100}), b = randn({100}), x = randn({37, 100}) * 3.0;
  ModelFn fn = [w, b](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{softmax(in[0], -1), layer_norm(in[0], {100}, w, b, 1e-5)};
  };
  CompiledFunction f = compile(fn);
  expect_close(f({x}), fn({x}));
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  EXPECT_GE(count_groups(*g), 1);
}

TEST(Compile, GuardMissRecompilesAndSaysWhy) {
  manual_seed(3);
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(in[0]) * 2.0}; };
  CompiledFunction f = compile(fn);
  Tensor x8 = randn({8, 64}), x16 = randn({16, 64});
  expect_close(f({x8}), fn({x8}));
  expect_close(f({x16}), fn({x16}));
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_EQ(f.stats().last_recompile_reason, "input 0 shape [16, 64] != [8, 64]");
  expect_close(f({x8}), fn({x8})); // cached: no third compile
  EXPECT_EQ(f.stats().compiles, 2);
  Tensor xt = randn({64, 8}).t(); // same shape as x8, other strides
  expect_close(f({xt}), fn({xt}));
  EXPECT_EQ(f.stats().last_recompile_reason, "input 0 strides [1, 8] != [64, 1]");
  Tensor xd = randn({8, 64}, kFloat64);
  expect_close(f({xd}), fn({xd}));
  EXPECT_EQ(f.stats().last_recompile_reason, "input 0 dtype float64 != float32");
}

int count_ops(const ir::Graph &g, OpId op) {
  int n = 0;
  for (const ir::Node *node : g.nodes()) n += node->kind() == ir::Node::Kind::Op && node->op() == op;
  return n;
}

// materialize-views: a row reduction over a large transposed operand reads it
// through a contiguous copy (one `contiguous` step before the group); results
// still equal eager, also when the pass is left out (the operand stays a view).
void expect_transposed_rows_match_eager(const ModelFn &fn, const Tensor &x) {
  CompiledFunction f = compile(fn, with_fallback(Fallback::Off));
  expect_close(f({x}), fn({x}));
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  EXPECT_EQ(count_ops(*g, OpId::Contiguous), 1);
  EXPECT_EQ(count_groups(*g), 1);
  CompileOptions as_view = with_fallback(Fallback::Off);
  as_view.pipeline = "decompose,canonicalize,cse,dce,layout,fuse,fuse-horizontal,plan-memory";
  CompiledFunction v = compile(fn, as_view);
  expect_close(v({x}), fn({x}));
  EXPECT_EQ(count_ops(*v.graph_for({x}), OpId::Contiguous), 0);
}

TEST(Compile, SoftmaxOfTransposedInputMaterializesAndMatchesEager) {
  manual_seed(7);
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(in[0].t(), -1)}; };
  expect_transposed_rows_match_eager(fn, randn({1024, 96}) * 4.0);
  expect_transposed_rows_match_eager(fn, randn({256, 300}) * 4.0);
}

TEST(Compile, LayerNormOfTransposedInputMaterializesAndMatchesEager) {
  manual_seed(8);
  Tensor w = randn({512}), b = randn({512});
  ModelFn fn = [w, b](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{layer_norm(in[0].t(), {512}, w, b, 1e-5)};
  };
  expect_transposed_rows_match_eager(fn, randn({512, 130}) * 3.0 + 1.0);
}

// A transposed operand read once by an elementwise group stays a view.
TEST(Compile, ElementwiseOfTransposedInputKeepsTheView) {
  manual_seed(9);
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{exp(in[0].t()) * 2.0}; };
  Tensor x = randn({512, 256});
  CompiledFunction f = compile(fn, with_fallback(Fallback::Off));
  expect_close(f({x}), fn({x}));
  EXPECT_EQ(count_ops(*f.graph_for({x}), OpId::Contiguous), 0);
}

TEST(Compile, DataDependentReadFallsBackToEager) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    double s = sum(in[0]).item<double>(); // data-dependent: cannot be traced
    return std::vector<Tensor>{s > 0 ? in[0] * 2.0 : in[0] * 3.0};
  };
  Tensor x = ones({4});
  CompiledFunction f = compile(fn, with_fallback(Fallback::Allow));
  expect_close(f({x}), fn({x}));
  expect_close(f({-x}), fn({-x}));
  EXPECT_EQ(f.stats().eager_calls, 2);
  EXPECT_NE(f.stats().last_fallback_reason.find("item"), std::string::npos) << f.stats().last_fallback_reason;
  CompiledFunction strict = compile(fn, with_fallback(Fallback::Off));
  EXPECT_THROW(strict({x}), Error);
}

TEST(Compile, ForceRunsEagerly) {
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + 1.0}; };
  CompiledFunction f = compile(fn, with_fallback(Fallback::Force));
  Tensor x = randn({5});
  expect_close(f({x}), fn({x}));
  EXPECT_EQ(f.stats().compiles, 0);
  EXPECT_EQ(f.stats().eager_calls, 1);
}

TEST(Compile, FallbackFromEnvironment) {
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + 1.0}; };
  setenv("KILN_FALLBACK", "force", 1);
  CompiledFunction f = compile(fn);
  unsetenv("KILN_FALLBACK");
  f({randn({3})});
  EXPECT_EQ(f.stats().eager_calls, 1);
}

TEST(Compile, CacheLimitRunsEagerPastIt) {
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * in[0]}; };
  CompileOptions limited;
  limited.cache_limit = 2;
  CompiledFunction f = compile(fn, limited);
  for (int64_t n : {2, 3, 4, 5}) {
    Tensor x = randn({n});
    expect_close(f({x}), fn({x}));
  }
  EXPECT_EQ(f.stats().specializations, 2);
  EXPECT_EQ(f.stats().eager_calls, 2);
  EXPECT_EQ(f.stats().last_fallback_reason, "cache limit reached");
}

TEST(Compile, CapturedWeightsAreReadLive) {
  Tensor w = ones({6});
  ModelFn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * w}; };
  CompiledFunction f = compile(fn);
  Tensor x = randn({6});
  expect_close(f({x}), fn({x}));
  w.mul_(3.0); // updating the weight in place changes the result, as in eager
  expect_close(f({x}), fn({x}));
  expect_close(f({x}), {x * 3.0});
  EXPECT_EQ(f.stats().compiles, 1);
}

TEST(Compile, MutatedInputIsWrittenBack) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.add_(1.0);
    return std::vector<Tensor>{x * 2.0};
  };
  Tensor a = randn({4}), b = a.clone();
  CompiledFunction f = compile(fn);
  auto got = f({a});
  auto want = fn({b});
  expect_close(got, want);
  expect_close({a}, {b}); // the input itself was updated in both
}

TEST(Compile, ConcurrentCallersWithMixedShapes) {
  manual_seed(4);
  Tensor a = randn({32}), b = randn({32});
  ModelFn fn = gelu_chain(a, b);
  CompiledFunction f = compile(fn);
  std::vector<Tensor> xs = {randn({4, 32}), randn({8, 32}), randn({16, 32})};
  std::vector<Tensor> want;
  for (const Tensor &x : xs) want.push_back(fn({x})[0]);
  int bad = concurrent_failures(4, 50, [&](int t, int i) {
    size_t k = size_t(t + i) % xs.size();
    Tensor y = f({xs[k]})[0];
    return amax(abs(y - want[k])).item<float>() <= 1e-5f;
  });
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f.stats().compiles, 3);
}
