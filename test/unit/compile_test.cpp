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
#include "runtime/version.h"

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

// Past the cache limit the least recently used specialization makes room
// (torch.compile recompiles up to its limit; kiln evicts): no call runs eagerly.
TEST(Compile, CacheLimitEvictsTheLeastRecentlyUsed) {
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * in[0]}; };
  CompileOptions limited;
  limited.cache_limit = 2;
  limited.dynamic = Dynamic::Off; // one specialization per shape
  CompiledFunction f = compile(fn, limited);
  auto call = [&](int64_t n) {
    Tensor x = randn({n});
    expect_close(f({x}), fn({x}));
  };
  call(2);
  call(3);
  call(2); // 3 is now the least recently used
  EXPECT_EQ(f.stats().compiles, 2);
  call(4); // evicts 3
  EXPECT_EQ(f.stats().specializations, 2); // 3 compiled, one evicted
  call(2);
  call(4);
  EXPECT_EQ(f.stats().compiles, 3); // 2 and 4 still cached
  call(3);                          // evicted: compiled again, evicting 2
  EXPECT_EQ(f.stats().compiles, 4);
  call(4);
  EXPECT_EQ(f.stats().compiles, 4);
  for (int i = 0; i < 20; ++i) call(5 + i % 3); // keeps compiling and evicting, never eager
  EXPECT_EQ(f.stats().eager_calls, 0);
  EXPECT_EQ(f.stats().specializations, 2);
  EXPECT_EQ(f.stats().last_fallback_reason, "");
  EXPECT_EQ(f.stats().calls, 28);
}

// A call that throws (a wrong feature size: tracing and eager both fail)
// caches nothing, so any number of them leaves a valid signature compiling.
TEST(Compile, FailedCallsTakeNoSlot) {
  Tensor w = randn({4, 3});
  ModelFn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], w)}; };
  CompiledFunction f = compile(fn);
  for (int i = 0; i < 12; ++i) EXPECT_THROW(f({randn({2, 5 + i})}), Error);
  EXPECT_EQ(f.stats().specializations, 0);
  Tensor x = randn({2, 4});
  expect_close(f({x}), fn({x}));
  EXPECT_NE(f.stats().last_fallback_reason, "cache limit reached");
  EXPECT_EQ(f.stats().specializations, 1);
  EXPECT_EQ(f.stats().eager_calls, 12); // only the failed calls ran eagerly
  EXPECT_TRUE(f.graph_for({x}));
  // A signature that runs eagerly (a data-dependent read) and succeeds is cached once.
  ModelFn reads = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * in[0].sum().item<float>()}; };
  CompiledFunction g = compile(reads);
  Tensor y = randn({3});
  for (int i = 0; i < 3; ++i) expect_close(g({y}), reads({y}));
  EXPECT_EQ(g.stats().compiles, 1);
  EXPECT_EQ(g.stats().specializations, 1);
}

// A plan runs at any thread count: switching counts costs no compile and no slot.
TEST(Compile, ThreadCountIsNoPartOfTheSignature) {
  manual_seed(12);
  Tensor a = randn({64}), b = randn({64});
  ModelFn fn = gelu_chain(a, b);
  CompiledFunction f = compile(fn);
  Tensor x = randn({256, 64});
  const int saved = get_num_threads();
  for (int threads : {1, 2, 1, 2, 3, 1}) {
    set_num_threads(threads);
    expect_close(f({x}), fn({x}));
  }
  set_num_threads(saved);
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().specializations, 1);
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

// More signatures than the cache holds, from several threads at once: calls
// keep finding, compiling and evicting specializations while others run the
// ones being evicted (TSan checks that none is freed under a running call).
TEST(Compile, ConcurrentCallersPastTheCacheLimit) {
  manual_seed(13);
  Tensor a = randn({16}), b = randn({16});
  ModelFn fn = gelu_chain(a, b);
  CompileOptions limited;
  limited.cache_limit = 2;
  limited.dynamic = Dynamic::Off; // one specialization per shape
  CompiledFunction f = compile(fn, limited);
  std::vector<Tensor> xs, want;
  for (int64_t n = 1; n <= 5; ++n) {
    xs.push_back(randn({n, 16}));
    want.push_back(fn({xs.back()})[0]);
  }
  int bad = concurrent_failures(4, 40, [&](int t, int i) {
    size_t k = size_t(t * 7 + i * (i % 3 == 0 ? 1 : 0)) % xs.size(); // each thread mostly repeats its own shape
    Tensor y = f({xs[k]})[0];
    return amax(abs(y - want[k])).item<float>() <= 1e-5f;
  });
  EXPECT_EQ(bad, 0);
  CompileStats st = f.stats();
  EXPECT_EQ(st.specializations, 2);
  EXPECT_GT(st.compiles, 2); // some evicted
  EXPECT_EQ(st.eager_calls, 0);
  EXPECT_EQ(st.calls, 160);
}

TEST(Compile, ConcurrentCallersWithMixedShapes) {
  manual_seed(4);
  Tensor a = randn({32}), b = randn({32});
  ModelFn fn = gelu_chain(a, b);
  CompileOptions opts;
  opts.dynamic = Dynamic::Off; // one specialization per shape
  CompiledFunction f = compile(fn, opts);
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

// Count of NaN elements (x != x), through eager ops.
int64_t count_nan(const Tensor &x) { return sum(ne(x, x).to(kInt64)).item<int64_t>(); }

// A query row whose boolean mask is all false (a padding position under a
// causal mask with left padding): eager SDPA gives zeros (torch's
// _safe_softmax), and so must the compiled function, not 0/0 = NaN, through a
// second layer too.
TEST(Compile, SdpaFullyMaskedRowsAreZeroAsInEager) {
  manual_seed(11);
  const int64_t B = 2, L = 6, E = 8;
  // mask[b, i, j] = j <= i and j >= pad[b]: rows i < pad[b] keep no key.
  std::vector<bool> keep;
  const int64_t pad[B] = {0, 3};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) keep.push_back(j <= i && j >= pad[b]);
  Tensor mask = tensor(keep).view({B, L, L});
  Tensor wq = randn({E, E}), wk = randn({E, E}), wv = randn({E, E});
  auto layer = [&](const Tensor &x) {
    return scaled_dot_product_attention(matmul(x, wq), matmul(x, wk), matmul(x, wv), mask);
  };
  ModelFn fn = [&](const std::vector<Tensor> &in) {
    Tensor h1 = layer(in[0]);
    return std::vector<Tensor>{h1, layer(h1)};
  };
  CompiledFunction f = compile(fn, with_fallback(Fallback::Off));
  Tensor x = randn({B, L, E});
  std::vector<Tensor> want = fn({x}), got = f({x});
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(count_nan(want[i]), 0) << "eager output " << i;
    EXPECT_EQ(count_nan(got[i]), 0) << "compiled output " << i;
    // The masked rows are exactly zero in both.
    EXPECT_EQ(amax(abs(got[i].select(0, 1).narrow(0, 0, pad[1]))).item<float>(), 0.0f) << "output " << i;
  }
  expect_close(got, want);
  // A float mask of -inf gives the same zeros.
  Tensor fmask = zeros({B, L, L}).masked_fill(logical_not(mask), -INFINITY);
  ModelFn ffn = [&](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[0], in[0], fmask)};
  };
  CompiledFunction ff = compile(ffn, with_fallback(Fallback::Off));
  std::vector<Tensor> fwant = ffn({x}), fgot = ff({x});
  EXPECT_EQ(count_nan(fgot[0]), 0);
  expect_close(fgot, fwant);
}

namespace {
// Inference batch norm over captured statistics and affine parameters, then relu.
struct BatchNormModel {
  static constexpr int64_t C = 8;
  Tensor w = randn({C}), b = randn({C}), rm = randn({C}), rv = abs(randn({C})) + 0.5;
  ModelFn fn() const {
    return [*this](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{relu(batch_norm(in[0], w, b, rm, rv, false, 0.1, 1e-5))};
    };
  }
  // The same model with the parameters as inputs: nothing to compute once.
  static ModelFn fn_of_inputs() {
    return [](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{relu(batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.1, 1e-5))};
    };
  }
};
} // namespace

// The version counter (torch's _version): in-place ops bump it, through views
// too; out-of-place ops do not.
TEST(Compile, InPlaceOpsBumpTheVersionCounter) {
  Tensor t = zeros({4});
  EXPECT_EQ(tensor_version(t), 0);
  Tensor u = t + 1.0;
  EXPECT_EQ(tensor_version(t), 0);
  t.add_(1.0);
  EXPECT_EQ(tensor_version(t), 1);
  t.narrow(0, 1, 2).mul_(2.0); // a view shares its base's counter
  EXPECT_EQ(tensor_version(t), 2);
  t.copy_(u);
  t.fill_(3.0);
  t.zero_();
  t.relu_();
  t.clamp_(0.0, 1.0);
  t.sub_(1.0);
  t.div_(2.0);
  EXPECT_EQ(tensor_version(t), 9);
  EXPECT_EQ(tensor_version(u), 0);
  EXPECT_EQ(tensor_version(Tensor()), 0);
}

// What reads only captured tensors and constants (batch norm's
// rsqrt(running_var + eps) * weight, ...) is computed once, not in every call,
// and again after an in-place update of one of them, as eager would see it.
TEST(Compile, ParameterOnlyValuesAreComputedOncePerUpdate) {
  manual_seed(14);
  BatchNormModel m;
  ModelFn fn = m.fn();
  CompiledFunction f = compile(fn, with_fallback(Fallback::Off));
  Tensor x = randn({2, BatchNormModel::C, 5, 5});
  expect_close(f({x}), fn({x}));
  // A steady-state call allocates its output only: nothing is recomputed.
  auto allocations = [&] {
    uint64_t before = thread_storage_allocations();
    std::vector<Tensor> out = f({x});
    return thread_storage_allocations() - before;
  };
  EXPECT_EQ(allocations(), 1u);
  // Fewer steps per call than the same graph over inputs, where nothing is fixed.
  CompiledFunction g = compile(BatchNormModel::fn_of_inputs(), with_fallback(Fallback::Off));
  std::vector<Tensor> as_inputs = {x, m.w, m.b, m.rm, m.rv};
  expect_close(g(as_inputs), fn({x}));
  auto steps = [](const CompiledFunction &cf, const std::vector<Tensor> &in) {
    int64_t n = 0;
    for (const ir::Node *node : cf.graph_for(in)->nodes())
      n += node->kind() == ir::Node::Kind::FusionGroup || node->info().kind != OpKind::View;
    return n;
  };
  EXPECT_LT(steps(f, {x}), steps(g, as_inputs));
  EXPECT_LE(f.kernels_per_call({x}), g.kernels_per_call(as_inputs));
  // In-place updates of the captured tensors, directly and through a view:
  // the next call recomputes (and allocates for it), the one after does not.
  m.rv.mul_(2.0);
  EXPECT_GT(allocations(), 1u);
  expect_close(f({x}), fn({x}));
  m.w.add_(1.0);
  expect_close(f({x}), fn({x}));
  m.rm.narrow(0, 2, 3).sub_(0.5);
  expect_close(f({x}), fn({x}));
  m.rv.data_ptr<float>()[1] = 7.0f; // a write through data_ptr is seen too (kiln's promise)
  expect_close(f({x}), fn({x}));
  EXPECT_EQ(allocations(), 1u);
  EXPECT_EQ(f.stats().compiles, 1);
}

// Captured tensors over from_blob memory change without any op: what they
// feed is computed in every call.
TEST(Compile, ValuesOfBorrowedMemoryAreComputedInEveryCall) {
  float raw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Tensor rv = from_blob(raw, {8});
  Tensor w = randn({8});
  ModelFn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * rsqrt(rv + 1.0) * w}; };
  CompiledFunction f = compile(fn, with_fallback(Fallback::Off));
  Tensor x = randn({4, 8});
  expect_close(f({x}), fn({x}));
  raw[3] = 100.0f;
  expect_close(f({x}), fn({x}));
}

// Many callers right after an update: the values are recomputed once, and
// every call sees them.
TEST(Compile, ConcurrentCallersAfterAParameterUpdate) {
  manual_seed(15);
  BatchNormModel m;
  ModelFn fn = m.fn();
  CompiledFunction f = compile(fn, with_fallback(Fallback::Off));
  Tensor x = randn({2, BatchNormModel::C, 4, 4});
  expect_close(f({x}), fn({x}));
  m.rv.mul_(3.0);
  m.b.add_(0.25);
  Tensor want = fn({x})[0];
  int bad = concurrent_failures(4, 20, [&](int, int) {
    Tensor y = f({x})[0];
    return amax(abs(y - want)).item<float>() <= 1e-5f;
  });
  EXPECT_EQ(bad, 0);
}
