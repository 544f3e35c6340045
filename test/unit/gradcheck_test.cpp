// gradcheck (torch.autograd.gradcheck's method): for each differentiable op,
// the analytic gradient autograd computes against central finite differences of
// the eager forward, in float64, on random inputs, some broadcast and some
// non-contiguous. Each sample names the op whose formula it checks; the last op
// of its function must be that op (its grad_fn's name says so), and a test fails
// when an op with a formula has no sample.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "runtime/autograd.h"
#include "runtime/derivatives.h"
#include "runtime/ops.h"

using namespace kiln;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor> &)>;

struct Sample {
  OpId op;
  std::string label;
  std::vector<Dims> shapes; // the differentiable inputs
  Fn f;
  double lo = -2, hi = 2;   // where the inputs are drawn
  double eps = 1e-6;
  double tol = 1e-4;
};

// gtest prints a failing parameter by its label.
void PrintTo(const Sample &s, std::ostream *os) { *os << s.label; }

Tensor uniform(const Dims &shape, double lo, double hi) { return rand(shape, kFloat64) * (hi - lo) + lo; }

// torch's node name of an op ("log_softmax" -> "LogSoftmaxBackward0"), written
// out here, not taken from the library.
std::string node_name(OpId id) {
  std::string out;
  bool up = true;
  for (char ch : op_info(id).mnemonic) {
    if (ch == '_') {
      up = true;
      continue;
    }
    out += up ? char(std::toupper(static_cast<unsigned char>(ch))) : ch;
    up = false;
  }
  return out + "Backward0";
}

// sum(f(x) * w) for fixed random weights w: one scalar whose gradient is the
// vector-Jacobian product autograd computes for grad_output w.
double weighted(const Fn &f, const std::vector<Tensor> &xs, const Tensor &w) {
  NoGradGuard off;
  return sum(f(xs) * w).item<double>();
}

void gradcheck(const Sample &s) {
  SCOPED_TRACE(s.label);
  manual_seed(1234);
  std::vector<Tensor> xs;
  for (const Dims &shape : s.shapes) xs.push_back(uniform(shape, s.lo, s.hi).requires_grad_());
  Tensor y = s.f(xs);
  ASSERT_TRUE(y.requires_grad());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), node_name(s.op));
  Tensor w = uniform(Dims(y.sizes()), -1, 1);
  std::vector<Tensor> analytic = autograd::grad({y}, xs, {w}, std::nullopt, false, /*allow_unused=*/true);
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor a = analytic[i].defined() ? analytic[i].contiguous() : zeros(xs[i].sizes(), kFloat64);
    ASSERT_EQ(a.sizes(), xs[i].sizes()) << "input " << i;
    ASSERT_EQ(a.dtype(), kFloat64) << "input " << i;
    double *p = xs[i].data_ptr<double>();
    for (int64_t j = 0; j < xs[i].numel(); ++j) {
      const double keep = p[j];
      p[j] = keep + s.eps;
      const double up = weighted(s.f, xs, w);
      p[j] = keep - s.eps;
      const double down = weighted(s.f, xs, w);
      p[j] = keep;
      const double numeric = (up - down) / (2 * s.eps);
      const double got = a.data_ptr<double>()[j];
      EXPECT_NEAR(got, numeric, s.tol * (1 + std::abs(numeric))) << "input " << i << " element " << j;
    }
  }
}

Tensor idx(std::initializer_list<int64_t> v) { return tensor(v); }

std::vector<Sample> unary_samples() {
  struct U {
    OpId op;
    Tensor (*fn)(const Tensor &);
    double lo, hi;
  };
  const U list[] = {
      {OpId::Neg, neg, -2, 2},          {OpId::Abs, abs, -2, 2},         {OpId::Exp, exp, -2, 2},
      {OpId::Exp2, exp2, -2, 2},        {OpId::Log, log, 0.5, 2},        {OpId::Log1p, log1p, -0.5, 2},
      {OpId::Expm1, expm1, -2, 2},      {OpId::Sqrt, sqrt, 0.5, 2},      {OpId::Rsqrt, rsqrt, 0.5, 2},
      {OpId::Sin, sin, -2, 2},          {OpId::Cos, cos, -2, 2},         {OpId::Tan, tan, -1, 1},
      {OpId::Asin, asin, -0.9, 0.9},    {OpId::Acos, acos, -0.9, 0.9},   {OpId::Atan, atan, -2, 2},
      {OpId::Sinh, sinh, -2, 2},        {OpId::Cosh, cosh, -2, 2},       {OpId::Asinh, asinh, -2, 2},
      {OpId::Acosh, acosh, 1.5, 3},     {OpId::Atanh, atanh, -0.9, 0.9}, {OpId::Log2, log2, 0.5, 2},
      {OpId::Log10, log10, 0.5, 2},     {OpId::Tanh, tanh, -2, 2},       {OpId::Sigmoid, sigmoid, -3, 3},
      {OpId::Relu, relu, -2, 2},        {OpId::Silu, silu, -3, 3},       {OpId::Hardsigmoid, hardsigmoid, -5, 5},
      {OpId::Softsign, softsign, -2, 2}, {OpId::Hardswish, hardswish, -5, 5}, {OpId::Mish, mish, -3, 3},
      {OpId::LogSigmoid, log_sigmoid, -3, 3}, {OpId::Selu, selu, -2, 2}, {OpId::Erf, erf, -2, 2},
      {OpId::Reciprocal, reciprocal, 0.5, 2}, {OpId::Square, square, -2, 2}, {OpId::Floor, floor, -3, 3},
      {OpId::Ceil, ceil, -3, 3},        {OpId::Round, round, -3, 3},     {OpId::Sign, sign, -2, 2},
  };
  std::vector<Sample> out;
  for (const U &u : list) {
    auto fn = u.fn;
    // Half the samples read a transposed (non-contiguous) input.
    const bool strided = out.size() % 2 == 1;
    out.push_back({u.op, std::string(op_info(u.op).mnemonic) + (strided ? " (transposed)" : ""), {{3, 4}},
                   [fn, strided](const std::vector<Tensor> &x) { return fn(strided ? x[0].t() : x[0]); }, u.lo, u.hi});
  }
  out.push_back({OpId::Gelu, "gelu", {{5}}, [](const auto &x) { return gelu(x[0]); }});
  out.push_back({OpId::Gelu, "gelu tanh", {{5}}, [](const auto &x) { return gelu(x[0], "tanh"); }});
  // float32 and back: a coarse step so float32's rounding stays below the tolerance.
  out.push_back({OpId::Cast, "to float32 and back", {{4}},
                 [](const auto &x) { return to(to(x[0], kFloat32), kFloat64); }, -2, 2, 1e-2, 1e-3});
  return out;
}

std::vector<Sample> binary_samples() {
  std::vector<Sample> s;
  // broadcasting: [3, 1] with [4] (the engine sums each gradient back).
  s.push_back({OpId::Add, "add alpha broadcast", {{3, 1}, {4}}, [](const auto &x) { return add(x[0], x[1], 2.5); }});
  s.push_back({OpId::Sub, "sub alpha", {{3, 4}, {3, 4}}, [](const auto &x) { return sub(x[0], x[1], 0.5); }});
  s.push_back({OpId::Mul, "mul broadcast", {{2, 3}, {3}}, [](const auto &x) { return x[0] * x[1]; }});
  s.push_back({OpId::Mul, "mul scalar", {{2, 3}}, [](const auto &x) { return x[0] * 3.0; }});
  s.push_back({OpId::Div, "div", {{2, 3}, {2, 3}}, [](const auto &x) { return div(x[0], x[1]); }, 0.5, 2});
  s.push_back({OpId::Div, "div floor", {{2, 3}, {2, 3}}, [](const auto &x) { return div(x[0], x[1], "floor"); },
               0.5, 3});
  s.push_back({OpId::Pow, "pow", {{2, 3}, {2, 3}}, [](const auto &x) { return pow(x[0], x[1]); }, 0.5, 2});
  s.push_back({OpId::Pow, "pow scalar", {{4}}, [](const auto &x) { return pow(x[0], 3.0); }});
  s.push_back({OpId::Maximum, "maximum", {{3, 4}, {4}}, [](const auto &x) { return maximum(x[0], x[1]); }});
  s.push_back({OpId::Minimum, "minimum", {{3, 4}, {3, 4}}, [](const auto &x) { return minimum(x[0], x[1]); }});
  s.push_back({OpId::Remainder, "remainder", {{6}, {6}}, [](const auto &x) { return remainder(x[0], x[1]); }, 0.7,
               1.3});
  s.push_back({OpId::Atan2, "atan2", {{6}, {6}}, [](const auto &x) { return atan2(x[0], x[1]); }});
  s.push_back({OpId::Hypot, "hypot", {{6}, {6}}, [](const auto &x) { return hypot(x[0], x[1]); }});
  s.push_back({OpId::Fmod, "fmod", {{6}, {6}}, [](const auto &x) { return fmod(x[0], x[1]); }, 0.7, 1.3});
  s.push_back({OpId::Copysign, "copysign", {{6}, {6}}, [](const auto &x) { return copysign(x[0], x[1]); }});
  s.push_back({OpId::Where, "where", {{3, 4}, {4}}, [](const auto &x) {
                 Tensor cond = tensor(std::vector<bool>{true, false, false, true});
                 return where(cond, x[0], x[1]);
               }});
  s.push_back({OpId::Clamp, "clamp", {{3, 4}}, [](const auto &x) { return clamp(x[0], -0.5, 0.5); }, -1, 1});
  s.push_back({OpId::MaskedFill, "masked_fill", {{2, 3}}, [](const auto &x) {
                 return masked_fill(x[0], tensor(std::vector<bool>{false, true, false}), 7.0);
               }});
  s.push_back({OpId::Lerp, "lerp", {{2, 3}, {2, 3}, {3}}, [](const auto &x) { return lerp(x[0], x[1], x[2]); }});
  // An in-place copy_ into a non-leaf: its history becomes the copy's.
  s.push_back({OpId::Copy, "copy_", {{2, 3}, {3}}, [](const auto &x) {
                 Tensor z = x[0] * 2.0;
                 z.copy_(x[1]);
                 return z;
               }});
  return s;
}

std::vector<Sample> reduction_samples() {
  std::vector<Sample> s;
  s.push_back({OpId::Sum, "sum all", {{3, 4}}, [](const auto &x) { return sum(x[0]); }});
  s.push_back({OpId::Sum, "sum dim keepdim", {{3, 4, 2}}, [](const auto &x) { return sum(x[0], {0, 2}, true); }});
  s.push_back({OpId::Mean, "mean dim", {{3, 4}}, [](const auto &x) { return mean(x[0], {-1}); }});
  s.push_back({OpId::Prod, "prod all", {{2, 3}}, [](const auto &x) { return prod(x[0]); }});
  s.push_back({OpId::Prod, "prod dim", {{3, 4}}, [](const auto &x) { return prod(x[0], 1); }});
  s.push_back({OpId::Amax, "amax", {{3, 4}}, [](const auto &x) { return amax(x[0], {1}); }});
  s.push_back({OpId::Amin, "amin keepdim", {{3, 4}}, [](const auto &x) { return amin(x[0], {0}, true); }});
  s.push_back({OpId::MaxDim, "max dim", {{3, 4}}, [](const auto &x) { return std::get<0>(max(x[0], 1)); }});
  s.push_back({OpId::MinDim, "min dim keepdim", {{3, 4}}, [](const auto &x) { return std::get<0>(min(x[0], 0, true)); }});
  s.push_back({OpId::Var, "var", {{3, 5}}, [](const auto &x) { return var(x[0], {1}); }});
  s.push_back({OpId::Std, "std correction 0", {{3, 5}}, [](const auto &x) { return kiln::std(x[0], {0}, 0.0); }});
  s.push_back({OpId::Norm, "norm 2", {{3, 4}}, [](const auto &x) { return norm(x[0]); }});
  s.push_back({OpId::Norm, "norm 1 dim", {{3, 4}}, [](const auto &x) { return norm(x[0], 1, {1}); }});
  s.push_back({OpId::Norm, "norm 3 dim", {{3, 4}}, [](const auto &x) { return norm(x[0], 3, {0}); }});
  return s;
}

std::vector<Sample> view_samples() {
  std::vector<Sample> s;
  s.push_back({OpId::View, "view", {{3, 4}}, [](const auto &x) { return x[0].view({2, 6}); }});
  s.push_back({OpId::Reshape, "reshape transposed", {{3, 4}}, [](const auto &x) { return x[0].t().reshape({12}); }});
  s.push_back({OpId::Transpose, "transpose", {{2, 3, 4}}, [](const auto &x) { return x[0].transpose(0, 2); }});
  s.push_back({OpId::Permute, "permute", {{2, 3, 4}}, [](const auto &x) { return x[0].permute({1, 2, 0}); }});
  s.push_back({OpId::Slice, "slice step 2", {{5, 3}}, [](const auto &x) { return x[0].slice(0, 1, 5, 2); }});
  s.push_back({OpId::Select, "select", {{4, 3}}, [](const auto &x) { return x[0].select(1, 2); }});
  s.push_back({OpId::Unsqueeze, "unsqueeze", {{4, 3}}, [](const auto &x) { return x[0].unsqueeze(1); }});
  s.push_back({OpId::Squeeze, "squeeze", {{4, 1, 3}}, [](const auto &x) { return x[0].squeeze(1); }});
  s.push_back({OpId::Expand, "expand", {{3, 1}}, [](const auto &x) { return x[0].expand({2, 3, 4}); }});
  s.push_back({OpId::Contiguous, "contiguous", {{3, 4}}, [](const auto &x) { return x[0].t().contiguous(); }});
  s.push_back({OpId::Clone, "clone", {{3, 4}}, [](const auto &x) { return x[0].clone(); }});
  return s;
}

std::vector<Sample> contraction_samples() {
  std::vector<Sample> s;
  s.push_back({OpId::Mm, "mm transposed", {{3, 4}, {5, 4}}, [](const auto &x) { return mm(x[0], x[1].t()); }});
  s.push_back({OpId::Bmm, "bmm", {{2, 3, 4}, {2, 4, 5}}, [](const auto &x) { return bmm(x[0], x[1]); }});
  s.push_back({OpId::Matmul, "matmul batch broadcast", {{2, 3, 4}, {4, 5}},
               [](const auto &x) { return matmul(x[0], x[1]); }});
  s.push_back({OpId::Matmul, "matmul 2-D x 1-D", {{3, 4}, {4}}, [](const auto &x) { return matmul(x[0], x[1]); }});
  s.push_back({OpId::Matmul, "matmul 1-D x 3-D", {{4}, {2, 4, 3}}, [](const auto &x) { return matmul(x[0], x[1]); }});
  s.push_back({OpId::Matmul, "matmul 1-D x 1-D", {{4}, {4}}, [](const auto &x) { return matmul(x[0], x[1]); }});
  s.push_back({OpId::Conv2d, "conv2d stride 2 padding 1 bias", {{2, 3, 5, 6}, {4, 3, 3, 2}, {4}}, [](const auto &x) {
                 return conv2d(x[0], x[1], x[2], {2, 2}, {1, 1});
               }});
  s.push_back({OpId::Conv2d, "conv2d groups 2 dilation 2", {{1, 4, 6, 6}, {6, 2, 2, 3}}, [](const auto &x) {
                 return conv2d(x[0], x[1], {}, 1, 0, {2, 2}, 2);
               }});
  s.push_back({OpId::Conv2d, "conv2d unbatched stride 3", {{2, 7, 7}, {3, 2, 3, 3}}, [](const auto &x) {
                 return conv2d(x[0], x[1], {}, 3, 1);
               }});
  s.push_back({OpId::Addmm, "addmm", {{4}, {3, 2}, {2, 4}},
               [](const auto &x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); }});
  s.push_back({OpId::Linear, "linear 3-D bias", {{2, 3, 4}, {5, 4}, {5}},
               [](const auto &x) { return linear(x[0], x[1], x[2]); }});
  return s;
}

std::vector<Sample> nn_samples() {
  std::vector<Sample> s;
  s.push_back({OpId::Softmax, "softmax", {{3, 4}}, [](const auto &x) { return softmax(x[0], 1); }});
  s.push_back({OpId::LogSoftmax, "log_softmax", {{3, 4}}, [](const auto &x) { return log_softmax(x[0], 0); }});
  s.push_back({OpId::LayerNorm, "layer_norm", {{2, 3, 4}, {3, 4}, {3, 4}},
               [](const auto &x) { return layer_norm(x[0], {3, 4}, x[1], x[2], 1e-5); }});
  s.push_back({OpId::BatchNorm, "batch_norm training", {{4, 3, 2, 2}, {3}, {3}},
               [](const auto &x) { return batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true, 0.1, 1e-5); }});
  s.push_back({OpId::BatchNorm, "batch_norm eval", {{4, 3, 2}, {3}, {3}}, [](const auto &x) {
                 Tensor rm = tensor({0.1, -0.2, 0.3}), rv = tensor({1.5, 0.5, 2.0});
                 return batch_norm(x[0], x[1], x[2], rm, rv, false, 0.1, 1e-5);
               }});
  s.push_back({OpId::Dropout, "dropout eval", {{3, 4}}, [](const auto &x) { return dropout(x[0], 0.5, false); }});
  s.push_back({OpId::AvgPool2d, "avg_pool2d padding ceil_mode", {{1, 2, 5, 6}}, [](const auto &x) {
                 return avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1}, true, true);
               }});
  s.push_back({OpId::AvgPool2d, "avg_pool2d exclude pad", {{2, 1, 5, 5}}, [](const auto &x) {
                 return avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}, false, false);
               }});
  s.push_back({OpId::AdaptiveAvgPool2d, "adaptive_avg_pool2d uneven", {{1, 2, 7, 5}},
               [](const auto &x) { return adaptive_avg_pool2d(x[0], {3, 2}); }});
  s.push_back({OpId::Sdpa, "sdpa float mask", {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}, {3, 5}}, [](const auto &x) {
                 return scaled_dot_product_attention(x[0], x[1], x[2], x[3]);
               }});
  s.push_back({OpId::Sdpa, "sdpa causal scale", {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 2}}, [](const auto &x) {
                 return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true, 0.7);
               }});
  s.push_back({OpId::Sdpa, "sdpa bool mask", {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, [](const auto &x) {
                 Tensor keep = tensor(std::vector<bool>{true, false, true, true, true, false, false, true, true})
                                   .reshape({3, 3});
                 return scaled_dot_product_attention(x[0], x[1], x[2], keep);
               }});
  s.push_back({OpId::MaxPool2d, "max_pool2d", {{1, 2, 4, 4}}, [](const auto &x) { return max_pool2d(x[0], {2, 2}); }});
  s.push_back({OpId::MaxPool2dWithIndices, "max_pool2d_with_indices", {{1, 2, 5, 5}},
               [](const auto &x) { return std::get<0>(max_pool2d_with_indices(x[0], {3, 3}, {2, 2}, {1, 1})); }});
  return s;
}

std::vector<Sample> structured_samples() {
  std::vector<Sample> s;
  s.push_back({OpId::Embedding, "embedding repeated rows", {{5, 3}},
               [](const auto &x) { return embedding(x[0], idx({1, 4, 1, 0}).reshape({2, 2})); }});
  s.push_back({OpId::Tril, "tril", {{4, 4}}, [](const auto &x) { return tril(x[0], -1); }});
  s.push_back({OpId::Triu, "triu", {{3, 4}}, [](const auto &x) { return triu(x[0], 1); }});
  s.push_back({OpId::Cat, "cat", {{2, 3}, {4, 3}}, [](const auto &x) { return cat({x[0], x[1]}, 0); }});
  s.push_back({OpId::Stack, "stack", {{2, 3}, {2, 3}}, [](const auto &x) { return stack({x[0], x[1]}, 1); }});
  s.push_back({OpId::Split, "split", {{5, 2}}, [](const auto &x) { return x[0].split(2, 0)[1]; }});
  s.push_back({OpId::IndexSelect, "index_select repeated", {{4, 3}},
               [](const auto &x) { return index_select(x[0], 0, idx({3, 0, 3})); }});
  s.push_back({OpId::Gather, "gather", {{3, 4}}, [](const auto &x) {
                 return gather(x[0], 1, idx({0, 3, 3, 1, 2, 0}).reshape({3, 2}));
               }});
  s.push_back({OpId::Cumsum, "cumsum", {{3, 4}}, [](const auto &x) { return cumsum(x[0], 1); }});
  s.push_back({OpId::Cumprod, "cumprod", {{3, 4}}, [](const auto &x) { return cumprod(x[0], 1); }});
  s.push_back({OpId::Cumprod, "cumprod with a zero", {{4, 3}}, [](const auto &x) {
                 return cumprod(x[0] * tensor({1.0, 0.0, 1.0, 1.0}).reshape({4, 1}), 0);
               }});
  s.push_back({OpId::Logcumsumexp, "logcumsumexp", {{3, 5}}, [](const auto &x) { return logcumsumexp(x[0], -1); },
               -3, 3});
  s.push_back({OpId::AsStrided, "as_strided overlapping windows", {{10}}, [](const auto &x) {
                 return x[0].as_strided({4, 3}, {2, 1}, 1);
               }});
  s.push_back({OpId::AsStrided, "as_strided of a transposed view", {{3, 4}}, [](const auto &x) {
                 return x[0].t().as_strided({2, 2}, {1, 4});
               }});
  s.push_back({OpId::Sort, "sort", {{3, 5}}, [](const auto &x) { return std::get<0>(sort(x[0], 1, true)); }});
  s.push_back({OpId::Topk, "topk", {{3, 5}}, [](const auto &x) { return std::get<0>(topk(x[0], 2, 1)); }});
  s.push_back({OpId::Scatter, "scatter", {{3, 4}, {2, 4}}, [](const auto &x) {
                 return scatter(x[0], 0, idx({0, 2, 1, 0, 2, 1, 0, 2}).reshape({2, 4}), x[1]);
               }});
  s.push_back({OpId::ScatterReduce, "scatter_reduce sum", {{3, 4}, {2, 4}}, [](const auto &x) {
                 return scatter_reduce(x[0], 0, idx({0, 0, 1, 2, 0, 0, 1, 2}).reshape({2, 4}), x[1], "sum", false);
               }});
  for (const char *reduce : {"sum", "mean", "amax", "amin", "prod"})
    for (bool include_self : {true, false})
      s.push_back({OpId::ScatterReduce,
                   std::string("scatter_reduce ") + reduce + (include_self ? " include_self" : ""),
                   {{3, 4}, {3, 4}}, [reduce, include_self](const auto &x) {
                     // Column 0: two src rows onto self row 0, rows 1 and 2 untouched.
                     return scatter_reduce(x[0], 0, idx({0, 0, 1, 2, 0, 2, 1, 2, 1, 0, 1, 0}).reshape({3, 4}), x[1],
                                           reduce, include_self);
                   }});
  s.push_back({OpId::IndexAdd, "index_add", {{4, 3}, {2, 3}},
               [](const auto &x) { return index_add(x[0], 0, idx({3, 3}), x[1], 2.0); }});
  s.push_back({OpId::Index, "index", {{4, 3}}, [](const auto &x) {
                 return index(x[0], {std::optional<Tensor>(idx({2, 0, 2}))});
               }});
  s.push_back({OpId::IndexPut, "index_put", {{4, 3}, {2, 3}}, [](const auto &x) {
                 return index_put(x[0], {std::optional<Tensor>(idx({3, 1}))}, x[1]);
               }});
  s.push_back({OpId::IndexPut, "index_put accumulate", {{4, 3}, {3}}, [](const auto &x) {
                 return index_put(x[0], {std::optional<Tensor>(idx({1, 1}))}, x[1], true);
               }});
  return s;
}

std::vector<Sample> all_samples() {
  std::vector<Sample> all;
  for (auto part : {unary_samples(), binary_samples(), reduction_samples(), view_samples(), contraction_samples(),
                    nn_samples(), structured_samples()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

class GradCheck : public ::testing::TestWithParam<Sample> {};

TEST_P(GradCheck, AnalyticMatchesFiniteDifferences) { gradcheck(GetParam()); }

std::string sample_name(const ::testing::TestParamInfo<Sample> &info) {
  std::string n = info.param.label;
  for (char &ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(all_samples()), sample_name);

// Every op with a derivative formula has a sample above.
TEST(GradCheckCoverage, EveryFormulaHasASample) {
  std::set<OpId> covered;
  for (const Sample &s : all_samples()) covered.insert(s.op);
  for (int i = 0; i < kNumOps; ++i) {
    const OpId id = OpId(i);
    if (autograd::detail::derivative(id).kind != autograd::detail::GradKind::Formula) continue;
    EXPECT_TRUE(covered.count(id)) << op_info(id).mnemonic << " has a derivative formula but no gradcheck sample";
  }
}

// Every op has a derivative formula or is marked not differentiable (NoGrad): an op
// added to the table with neither fails here (the build already stops at the switch
// until it gets a decision; this keeps "not implemented yet" from being one).
TEST(GradCheckCoverage, EveryOpHasAFormulaOrNoGrad) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId id = OpId(i);
    EXPECT_NE(autograd::detail::derivative(id).kind, autograd::detail::GradKind::NotImplemented)
        << op_info(id).mnemonic << " has neither a derivative formula nor NoGrad";
  }
}

// NoGrad in ops.def and "not differentiable" in the derivative table agree both ways.
TEST(GradCheckCoverage, NoGradTraitMatchesTheTable) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId id = OpId(i);
    const bool table = autograd::detail::derivative(id).kind == autograd::detail::GradKind::NotDifferentiable;
    EXPECT_EQ(table, has_trait(id, OpTrait::NoGrad)) << op_info(id).mnemonic;
  }
}

} // namespace
