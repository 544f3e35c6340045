// Eager autograd's API and semantics, against libtorch's: leaves and grad
// accumulation, grad modes, detach, retain_grad, grad_fn names, views, in-place
// ops and their version checks, and torch's errors. Gradient values are checked
// against hand-derived formulas evaluated with naive loops; gradcheck_test.cpp
// checks every op's formula against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "expect_error.h"
#include "frontend/compile.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"

using namespace kiln;

// The statement must throw a kiln::Error whose message contains `part`.
#define EXPECT_KILN_ERROR(stmt, part) ::kiln::testing::expect_error([&] { (void)(stmt); }, {part})

namespace {

std::vector<float> values(const Tensor &t) {
  Tensor c = t.contiguous();
  std::vector<float> v(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) v[size_t(i)] = c.data_ptr<float>()[i];
  return v;
}

void expect_values(const Tensor &t, const std::vector<float> &want, float tol = 1e-5f) {
  ASSERT_TRUE(t.defined());
  std::vector<float> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(Autograd, LeafFlagsAndDefaults) {
  Tensor x = tensor({1.f, 2.f, 3.f});
  EXPECT_FALSE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  x.requires_grad_();
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  Tensor y = x * 2.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward0");
  // A tensor computed only from tensors that do not require grad does not.
  Tensor z = tensor({1.f}) + 1.0;
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(z.grad_fn(), nullptr);
}

// d/dx sum(x^2 * w + x) = 2 x w + 1, and d/dw = x^2.
TEST(Autograd, BackwardFillsLeafGrads) {
  Tensor x = tensor({1.f, -2.f, 0.5f}).requires_grad_();
  Tensor w = tensor({3.f, 4.f, -1.f}).requires_grad_();
  Tensor loss = sum(x * x * w + x);
  loss.backward();
  std::vector<float> xs = {1.f, -2.f, 0.5f}, ws = {3.f, 4.f, -1.f}, gx, gw;
  for (size_t i = 0; i < 3; ++i) {
    gx.push_back(2 * xs[i] * ws[i] + 1);
    gw.push_back(xs[i] * xs[i]);
  }
  expect_values(x.grad(), gx);
  expect_values(w.grad(), gw);
  EXPECT_FALSE(x.grad().requires_grad());
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  sum(x * 3.0).backward();
  sum(x * x).backward();
  expect_values(x.grad(), {3.f + 2.f, 3.f + 4.f});
  // torch's zero_grad(set_to_none=false) idiom: zero in place, then accumulate again.
  x.mutable_grad().zero_();
  sum(x).backward();
  expect_values(x.grad(), {1.f, 1.f});
}

// A value used twice sums both paths' gradients.
TEST(Autograd, FanOutSumsGradients) {
  Tensor x = tensor({2.f}).requires_grad_();
  Tensor a = exp(x);
  Tensor y = a * a + a;
  y.backward();
  const float e = std::exp(2.f);
  expect_values(x.grad(), {2 * e * e + e}, 1e-3f);
}

TEST(Autograd, BroadcastGradientsAreSummedBackToTheInputShape) {
  Tensor a = ones({3, 1}).requires_grad_();
  Tensor b = tensor({1.f, 2.f, 3.f, 4.f}).requires_grad_();
  sum(a * b).backward();
  ASSERT_EQ(a.grad().sizes(), IntArrayRef({3, 1}));
  expect_values(a.grad(), {10.f, 10.f, 10.f});
  expect_values(b.grad(), {3.f, 3.f, 3.f, 3.f});
}

TEST(Autograd, GradientArgumentForNonScalars) {
  Tensor x = tensor({1.f, 2.f, 3.f}).requires_grad_();
  Tensor y = x * x;
  y.backward(tensor({1.f, 0.f, -1.f}));
  expect_values(x.grad(), {2.f, 0.f, -6.f});
}

TEST(Autograd, ViewsOfTensorsThatRequireGrad) {
  Tensor x = arange(0, 6, 1, kFloat32).reshape({2, 3}).requires_grad_();
  Tensor v = x.t().slice(0, 1, 3); // x[:, 1:3] transposed: [2, 2]
  EXPECT_TRUE(v.requires_grad());
  EXPECT_EQ(v.grad_fn()->name(), "SliceBackward0");
  sum(v * tensor({1.f, 2.f}).reshape({2, 1})).backward();
  // v[i][j] = x[j][i + 1] weighted by (i + 1).
  expect_values(x.grad(), {0.f, 1.f, 2.f, 0.f, 1.f, 2.f});
}

TEST(Autograd, NoGradGuardAndInferenceModeRecordNothing) {
  Tensor x = tensor({1.f}).requires_grad_();
  {
    NoGradGuard g;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  {
    InferenceMode im;
    EXPECT_TRUE(InferenceMode::is_enabled());
    EXPECT_FALSE((x + 1.0).requires_grad());
    {
      AutoGradMode on(true); // nested: grad mode back on
      EXPECT_TRUE((x + 1.0).requires_grad());
    }
  }
  EXPECT_FALSE(InferenceMode::is_enabled());
  EXPECT_TRUE((x + 1.0).requires_grad());
}

TEST(Autograd, DetachSharesValuesWithoutHistory) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.is_alias_of(y));
  Tensor z = d * x; // only x's path carries gradient
  sum(z).backward();
  expect_values(x.grad(), {2.f, 4.f});
}

TEST(Autograd, RetainGradKeepsANonLeafsGradient) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor h = x * 3.0;
  Tensor k = x * 5.0;
  h.retain_grad();
  EXPECT_TRUE(h.retains_grad());
  sum(h * h + k).backward();
  expect_values(h.grad(), {6.f, 12.f});
  EXPECT_FALSE(k.grad().defined()); // not retained
  expect_values(x.grad(), {18.f + 5.f, 36.f + 5.f});
}

TEST(Autograd, GradFunctionReturnsWithoutAccumulating) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor w = tensor({3.f, 4.f}).requires_grad_();
  Tensor y = sum(x * w);
  std::vector<Tensor> g = autograd::grad({y}, {x});
  expect_values(g.at(0), {3.f, 4.f});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  Tensor unused = tensor({1.f}).requires_grad_();
  Tensor y2 = sum(x * 2.0);
  EXPECT_KILN_ERROR(autograd::grad({y2}, {unused}), "appears to not have been used in the graph");
  Tensor y3 = sum(x * 2.0);
  EXPECT_FALSE(autograd::grad({y3}, {unused}, {}, std::nullopt, false, true).at(0).defined());
}

// create_graph: the gradient has history, and differentiating it again gives the
// second derivative (x^3 -> 3x^2 -> 6x).
TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  Tensor x = tensor({2.f, -1.f}).requires_grad_();
  Tensor y = sum(x * x * x);
  Tensor g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true).at(0);
  expect_values(g, {12.f, 3.f});
  ASSERT_TRUE(g.requires_grad());
  sum(g).backward();
  expect_values(x.grad(), {12.f, -6.f});
}

TEST(Autograd, InPlaceOnANonLeafRebasesHistory) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor y = x * 2.0;
  y.mul_(x); // y = 2x * x
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward0");
  y.add_(1.0);
  EXPECT_EQ(y.grad_fn()->name(), "AddBackward0");
  sum(y).backward();
  expect_values(x.grad(), {4.f, 8.f}); // d(2x^2)/dx = 4x
  Tensor r = x * 1.0;
  relu_(r); // through copy_: its history is relu's
  EXPECT_TRUE(r.requires_grad());
}

// An in-place op on a view gives the tensor it views torch's CopySlices
// history: its old values outside the view, the op's result inside. Values
// worked out by hand.
TEST(Autograd, InPlaceOnAViewRewritesTheViewedTensorsHistory) {
  Tensor a = full({4, 3}, 0.5f).requires_grad_();
  Tensor b = a * 2.0;
  b.select(0, 1).mul_(3.0); // row 1 is 6a
  EXPECT_EQ(b.grad_fn()->name(), "CopySlices");
  sum(b).backward();
  expect_values(a.grad(), {2, 2, 2, 6, 6, 6, 2, 2, 2, 2, 2, 2});

  // A slice updated from other columns of the same leaf.
  Tensor c = full({2, 3}, 1.f).requires_grad_();
  Tensor d = c.clone();
  d.slice(1, 0, 2).add_(c.slice(1, 1, 3) * 2.0); // d[:, j] = c[:, j] + 2 c[:, j + 1] for j < 2
  sum(d).backward();
  expect_values(c.grad(), {1, 3, 3, 1, 3, 3});

  // A tensor that needs no grad, filled from one that does (torch: B now requires grad).
  Tensor x = tensor({1.f, 2.f, 3.f}).requires_grad_();
  Tensor big = zeros({4, 3});
  big.select(0, 2).copy_(x * 2.0);
  ASSERT_TRUE(big.requires_grad());
  sum(big * big).backward(); // sum over row 2 of (2x)^2: d/dx = 8x
  expect_values(x.grad(), {8, 16, 24});

  // A view of a view (a column, through a transpose), updated twice.
  Tensor e = full({3, 2}, 1.f).requires_grad_();
  Tensor y = tensor({1.f, 2.f, 3.f}).requires_grad_();
  Tensor f = e * 1.0;
  Tensor col = f.t().select(0, 1); // f[:, 1]
  col.mul_(y);
  col.add_(y);                      // f[:, 1] = e[:, 1] * y + y
  Tensor w = tensor({1.f, 10.f, 2.f, 20.f, 3.f, 30.f}).reshape({3, 2});
  sum(f * w).backward();
  expect_values(e.grad(), {1, 10 * 1, 2, 20 * 2, 3, 30 * 3});
  expect_values(y.grad(), {10 * 2, 20 * 2, 30 * 2}); // w[:, 1] * (e[:, 1] + 1)
}

// The same updates against central differences in float64, on a viewed tensor
// whose memory is not row-major (a transposed result) and on views with
// steps: d/d(inputs) of sum(B * W) for B built by in-place updates of views.
TEST(Autograd, InPlaceOnViewsMatchesFiniteDifferences) {
  manual_seed(5);
  const Tensor a0 = randn({5, 4}, TensorOptions(kFloat64)), x0 = randn({3}, TensorOptions(kFloat64)),
               wt = randn({4, 5}, TensorOptions(kFloat64));
  auto f = [&](const Tensor &a, const Tensor &x) {
    // [4, 5], strided as a.t() or not; add saves nothing the updates overwrite
    // (exp would save b, and its backward would then fail as in torch).
    Tensor b = sin(a.t()) + 1.0;
    b.select(1, 2).slice(0, 0, 3).mul_(x);              // column 2, rows 0..2
    b.slice(1, 0, 5, 2).select(0, 3).add_(sum(sin(x))); // row 3, even columns
    b.select(0, 0).copy_(b.select(0, 1).clone() * sum(x)); // row 0 from row 1 (a copy: mul saves it)
    return sum(b * wt);
  };
  Tensor a = a0.clone().requires_grad_(), x = x0.clone().requires_grad_();
  f(a, x).backward();
  auto numeric = [&](const Tensor &of, bool wrt_a) {
    NoGradGuard g;
    Tensor out = zeros(of.sizes(), TensorOptions(kFloat64));
    for (int64_t i = 0; i < of.numel(); ++i) {
      Tensor pa = a0.clone(), px = x0.clone();
      Tensor &p = wrt_a ? pa : px;
      const double h = 1e-6, v = p.reshape({-1})[i].item<double>();
      p.reshape({-1})[i].fill_(v + h);
      const double up = f(pa, px).item<double>();
      p.reshape({-1})[i].fill_(v - h);
      const double down = f(pa, px).item<double>();
      out.reshape({-1})[i].fill_((up - down) / (2 * h));
    }
    return out;
  };
  Tensor na = numeric(a0, true), nx = numeric(x0, false);
  for (int64_t i = 0; i < a0.numel(); ++i)
    EXPECT_NEAR(a.grad().reshape({-1})[i].item<double>(), na.reshape({-1})[i].item<double>(), 1e-6) << "a " << i;
  for (int64_t i = 0; i < x0.numel(); ++i)
    EXPECT_NEAR(x.grad().reshape({-1})[i].item<double>(), nx.reshape({-1})[i].item<double>(), 1e-6) << "x " << i;
}

// Compiled code records no backward: with grad mode on, a call that reads a
// tensor requiring grad (an input, or a captured weight) runs eagerly, so its
// results carry history and backward gives eager's gradients. Under NoGradGuard
// the compiled plan runs.
TEST(AutogradCompiled, CallsThatNeedHistoryRunEagerly) {
  manual_seed(3);
  Tensor w = randn({4, 3});
  auto model = [&w](const std::vector<Tensor> &in) { return std::vector<Tensor>{tanh(matmul(in[0], w)) * 2.0}; };
  CompiledFunction f = compile(model);
  Tensor x = randn({5, 4});
  {
    NoGradGuard off;
    f({x});
  }
  EXPECT_EQ(f.stats().eager_calls, 0);
  w.requires_grad_();
  Tensor y = f({x})[0];
  EXPECT_EQ(f.stats().eager_calls, 1);
  ASSERT_TRUE(y.requires_grad());
  sum(y).backward();
  Tensor compiled_grad = w.grad().clone();
  w.mutable_grad() = Tensor();
  sum(model({x})[0]).backward();
  expect_values(compiled_grad, values(w.grad()));
  // An input that requires grad.
  Tensor xi = x.clone().requires_grad_();
  {
    NoGradGuard off;
    w.requires_grad_(false);
  }
  Tensor y2 = f({xi})[0];
  EXPECT_TRUE(y2.requires_grad());
  EXPECT_EQ(f.stats().eager_calls, 2);
  {
    NoGradGuard off;
    Tensor y3 = f({xi})[0];
    EXPECT_FALSE(y3.requires_grad());
  }
  EXPECT_EQ(f.stats().eager_calls, 2);
}

// Training-mode dropout compiles (its mask a random node): each call gives
// eager's mask for the same seed, and a new one as the stream moves on.
TEST(AutogradCompiled, TrainingDropoutCompiles) {
  auto model = [](const std::vector<Tensor> &in) {
    Tensor h = dropout(in[0] * 2.0, 0.4, true);
    return std::vector<Tensor>{dropout(h + 1.0, 0.7, true), h};
  };
  // With dynamic = On the function stays static (each mask's offset follows the
  // sizes), one specialization per size, and the stream still moves as eager's.
  for (Dynamic dynamic : {Dynamic::Auto, Dynamic::On}) {
    CompileOptions o;
    o.dynamic = dynamic;
    CompiledFunction f = compile(model, o);
    for (int64_t n : {1000, 1000, 600}) {
      Tensor x = rand({n}) + 1.0;
      for (uint64_t seed : {9, 10}) {
        manual_seed(seed);
        std::vector<Tensor> yc = f({x}), yc2 = f({x});
        manual_seed(seed);
        std::vector<Tensor> ye = model({x}), ye2 = model({x});
        for (size_t i = 0; i < 2; ++i) {
          expect_values(yc[i], values(ye[i]), 0.0f);
          expect_values(yc2[i], values(ye2[i]), 0.0f);
        }
        EXPECT_GT(max(abs(yc[0] - yc2[0])).item<float>(), 0.f) << "two calls drew the same mask";
      }
    }
    EXPECT_EQ(f.stats().eager_calls, 0) << f.stats().last_fallback_reason;
    EXPECT_EQ(f.stats().compiles, 2);
  }
}

// A dropout of a captured tensor alone (no input) is not folded into a constant.
TEST(AutogradCompiled, DropoutOfACapturedTensorDrawsEveryCall) {
  Tensor w = rand({64}) + 1.0;
  auto model = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{dropout(w, 0.5, true) + in[0]}; };
  CompiledFunction f = compile(model);
  Tensor x = zeros({64});
  manual_seed(3);
  Tensor a = f({x})[0], b = f({x})[0];
  manual_seed(3);
  Tensor ea = model({x})[0], eb = model({x})[0];
  expect_values(a, values(ea), 0.0f);
  expect_values(b, values(eb), 0.0f);
  EXPECT_EQ(f.stats().eager_calls, 0) << f.stats().last_fallback_reason;
}

// ---- torch's errors

TEST(AutogradErrors, BackwardOnANonScalarNeedsAGradient) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  EXPECT_KILN_ERROR((x * 2.0).backward(), "grad can be implicitly created only for scalar outputs");
  EXPECT_KILN_ERROR(sum(x * 2.0).backward(tensor({1.f, 1.f})), "Mismatch in shape");
}

TEST(AutogradErrors, BackwardOnATensorWithoutHistory) {
  Tensor x = tensor({1.f});
  EXPECT_KILN_ERROR(sum(x).backward(), "does not require grad and does not have a grad_fn");
}

TEST(AutogradErrors, SecondBackwardThroughAFreedGraph) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward();
  EXPECT_KILN_ERROR(y.backward(), "Trying to backward through the graph a second time");
  // retain_graph keeps the saved values.
  Tensor z = sum(exp(x));
  z.backward({}, true);
  z.backward();
  const float e1 = std::exp(1.f), e2 = std::exp(2.f);
  expect_values(x.grad(), {3 * e1, 3 * e2}, 1e-4f);
}

TEST(AutogradErrors, ModifiedSavedTensor) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = exp(h); // saves its result
  Tensor s = sum(y);
  {
    NoGradGuard g;
    y.add_(1.0);
  }
  EXPECT_KILN_ERROR(s.backward(), "one of the variables needed for gradient computation has been modified by an "
                                  "inplace operation");
  // An op that saves its input: mul saves both operands.
  Tensor a = x * 1.0;
  Tensor m = sum(a * x);
  a.add_(1.0);
  EXPECT_KILN_ERROR(m.backward(), "is at version");
}

TEST(AutogradErrors, IntegerTensorsCannotRequireGrad) {
  Tensor i = tensor({1, 2, 3});
  EXPECT_KILN_ERROR(i.requires_grad_(), "only Tensors of floating point dtype can require gradients");
  EXPECT_FALSE(i.requires_grad());
  // Integer results never require grad.
  Tensor x = tensor({1.f, 5.f, 3.f}).requires_grad_();
  EXPECT_FALSE(argmax(x).requires_grad());
  EXPECT_FALSE(gt(x, 2.0).requires_grad());
  auto [v, idx] = max(x, 0);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(idx.requires_grad());
}

TEST(AutogradErrors, InPlaceOnALeafThatRequiresGrad) {
  Tensor x = tensor({1.f, 2.f}).requires_grad_();
  EXPECT_KILN_ERROR(x.add_(1.0), "a leaf Variable that requires grad is being used in an in-place operation");
  {
    NoGradGuard g; // an optimizer's update
    x.add_(1.0);
  }
  expect_values(x, {2.f, 3.f});
  Tensor y = x * 2.0;
  EXPECT_KILN_ERROR(y.requires_grad_(false), "you can only change requires_grad flags of leaf variables");
  // A view of such a leaf, as torch.
  EXPECT_KILN_ERROR(x.select(0, 1).mul_(2.0),
                    "a view of a leaf Variable that requires grad is being used in an in-place operation");
  EXPECT_KILN_ERROR(x.slice(0, 0, 1).zero_(), "a view of a leaf Variable that requires grad");
  expect_values(x, {2.f, 3.f}); // untouched by the refused updates
  {
    NoGradGuard g;
    x.select(0, 1).mul_(2.0);
  }
  expect_values(x, {2.f, 6.f});
}

// scatter_reduce's derivatives where finite differences do not reach: zeros in
// "prod" and ties in "amax" (values worked out by hand).
TEST(Autograd, ScatterReduceProdWithZerosAndAmaxTies) {
  {
    // Position 0: 2 * 0 * 5 (one zero); position 1: 0 * 4 * 0 (two zeros); position 2: untouched.
    Tensor self = tensor({2.f, 0.f, 3.f}).requires_grad_(), src = tensor({0.f, 5.f, 4.f, 0.f}).requires_grad_();
    sum(scatter_reduce(self, 0, tensor({int64_t(0), int64_t(0), int64_t(1), int64_t(1)}), src, "prod", true)).backward();
    expect_values(self.grad(), {0.f, 0.f, 1.f}, 0.f);
    expect_values(src.grad(), {10.f, 0.f, 0.f, 0.f}, 0.f);
  }
  for (bool include_self : {true, false}) {
    // Position 1: 7 from self and two src elements (a three-way tie, or two-way without self).
    Tensor self = tensor({1.f, 7.f}).requires_grad_(), src = tensor({7.f, 7.f, 2.f}).requires_grad_();
    sum(scatter_reduce(self, 0, tensor({int64_t(1), int64_t(1), int64_t(0)}), src, "amax", include_self)).backward();
    const float share = include_self ? 1.f / 3 : 0.5f;
    expect_values(self.grad(), {0.f, include_self ? share : 0.f}, 1e-7f);
    expect_values(src.grad(), {share, share, 1.f}, 1e-7f);
  }
}

// Backward on independent graphs from several threads (the TSan stage runs it).
TEST(AutogradConcurrency, IndependentGraphsOnSeveralThreads) {
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &got] {
      for (int rep = 0; rep < 20; ++rep) {
        Tensor x = full({8}, float(t + 1)).requires_grad_();
        Tensor w = arange(0, 8, 1, kFloat32).requires_grad_();
        Tensor loss = sum(tanh(x * w) + x * x);
        loss.backward();
        got[size_t(t)] = values(x.grad());
      }
    });
  for (auto &th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    const float xv = float(t + 1);
    std::vector<float> want;
    for (int i = 0; i < 8; ++i) {
      const float th = std::tanh(xv * float(i));
      want.push_back((1 - th * th) * float(i) + 2 * xv);
    }
    SCOPED_TRACE(t);
    ASSERT_EQ(got[size_t(t)].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[size_t(t)][i], want[i], 1e-4f);
  }
}

// One leaf (a shared weight) in graphs on four threads: every backward's
// contribution lands in its grad.
TEST(AutogradConcurrency, SharedLeafAccumulatesFromEveryThread) {
  constexpr int kThreads = 4, kReps = 25;
  Tensor w = zeros({16}).requires_grad_();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &w] {
      for (int rep = 0; rep < kReps; ++rep) sum(w * float(t + 1)).backward();
    });
  for (auto &th : threads) th.join();
  const float want = float(kReps) * (1 + 2 + 3 + 4);
  expect_values(w.grad(), std::vector<float>(16, want));
}

} // namespace
