// kiln::nn::functional (runtime/functional.h): torch C++'s names and option structs.
// Each option must reach its argument: the F:: call is compared with the free function
// called with other-than-default values (the free functions have their own value
// tests), with a few results checked by hand; inplace(true) writes the input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <kiln/kiln.h>

#include "graph_test_util.h"

using namespace kiln;
namespace F = kiln::nn::functional;
using kiln::testing::rnd;
using kiln::testing::vals;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

namespace {
::testing::AssertionResult same(const Tensor &a, const Tensor &b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << shape_str(a.sizes()) << " vs " << shape_str(b.sizes());
  std::vector<double> x = vals(a), y = vals(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}
} // namespace

TEST(Functional, OptionsReachTheirArguments) {
  Tensor x = rnd({4, 6}, 1, kFloat32, -3, 3);
  EXPECT_TRUE(same(F::gelu(x, F::GELUFuncOptions().approximate("tanh")), gelu(x, "tanh")));
  EXPECT_FALSE(same(F::gelu(x, F::GELUFuncOptions().approximate("tanh")), gelu(x)));
  EXPECT_TRUE(same(F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.3)), leaky_relu(x, 0.3)));
  EXPECT_TRUE(same(F::elu(x, F::ELUFuncOptions().alpha(0.4)), elu(x, 0.4)));
  EXPECT_TRUE(same(F::celu(x, F::CELUFuncOptions().alpha(2)), celu(x, 2)));
  EXPECT_TRUE(same(F::hardtanh(x, F::HardtanhFuncOptions().min_val(-0.2).max_val(2.5)), hardtanh(x, -0.2, 2.5)));
  EXPECT_TRUE(same(F::softplus(x, F::SoftplusFuncOptions().beta(3).threshold(1)), softplus(x, 3, 1)));
  EXPECT_TRUE(same(F::threshold(x, F::ThresholdFuncOptions(0.5, -4)), threshold(x, 0.5, -4)));
  EXPECT_TRUE(same(F::softmax(x, F::SoftmaxFuncOptions(0)), softmax(x, 0)));
  EXPECT_TRUE(same(F::log_softmax(x, F::LogSoftmaxFuncOptions(1).dtype(kFloat64)), log_softmax(x, 1, kFloat64)));
  EXPECT_TRUE(same(F::selu(x), selu(x)));
  EXPECT_TRUE(same(F::mish(x), mish(x)));
  EXPECT_TRUE(same(F::silu(x), silu(x)));
  EXPECT_TRUE(same(F::hardswish(x), hardswish(x)));
  EXPECT_TRUE(same(F::logsigmoid(x), log_sigmoid(x)));
  // relu6 by hand: min(max(x, 0), 6).
  Tensor r6 = F::relu6(tensor({-1.0f, 3.0f, 7.5f}));
  EXPECT_EQ(vals(r6), (std::vector<double>{0, 3, 6}));

  Tensor w = rnd({6}, 2), b = rnd({6}, 3);
  EXPECT_TRUE(same(F::layer_norm(x, F::LayerNormFuncOptions({6}).weight(w).bias(b).eps(1e-3)),
                   layer_norm(x, {6}, w, b, 1e-3)));
  Tensor img = rnd({2, 3, 9, 9}, 4), cw = rnd({4, 3, 3, 3}, 5), cb = rnd({4}, 6);
  EXPECT_TRUE(same(F::conv2d(img, cw, F::Conv2dFuncOptions().bias(cb).stride({2}).padding({1}).dilation({1})),
                   conv2d(img, cw, cb, 2, 1, 1)));
  EXPECT_TRUE(same(F::max_pool2d(img, F::MaxPool2dFuncOptions({3}).stride({2}).padding({1})), max_pool2d(img, 3, 2, 1)));
  EXPECT_TRUE(same(F::avg_pool2d(img, F::AvgPool2dFuncOptions({2}).count_include_pad(false)),
                   avg_pool2d(img, 2, {}, 0, false, false)));
  EXPECT_TRUE(same(F::adaptive_avg_pool2d(img, F::AdaptiveAvgPool2dFuncOptions({2, 3})), adaptive_avg_pool2d(img, {2, 3})));
  Tensor mean = rnd({3}, 7), var = rnd({3}, 8, kFloat32, 0.5, 2), g = rnd({3}, 9);
  EXPECT_TRUE(same(F::batch_norm(img, mean, var, F::BatchNormFuncOptions().weight(g).eps(1e-2)),
                   batch_norm(img, g, {}, mean, var, false, 0.1, 1e-2)));
  EXPECT_TRUE(same(F::dropout(x, F::DropoutFuncOptions().p(0.2).training(false)), x));
  Tensor wave = rnd({2, 4, 20}, 10), w1 = rnd({6, 2, 3}, 11);
  EXPECT_TRUE(same(F::conv1d(wave, w1, F::Conv1dFuncOptions().stride({2}).padding({1}).groups(2)),
                   conv1d(wave, w1, {}, 2, 1, 1, 2)));
  EXPECT_TRUE(same(F::max_pool1d(wave, F::MaxPool1dFuncOptions({3}).stride({2})), max_pool1d(wave, 3, 2)));
  // One value where torch's ExpandingArray takes one: kernel 3, stride 2, as above.
  EXPECT_TRUE(same(F::max_pool1d(wave, F::MaxPool1dFuncOptions(3).stride(2)), max_pool1d(wave, 3, 2)));
  EXPECT_TRUE(same(F::conv1d(wave, w1, F::Conv1dFuncOptions().stride(2).padding(1).groups(2)),
                   conv1d(wave, w1, {}, 2, 1, 1, 2)));
  EXPECT_TRUE(same(F::avg_pool1d(wave, F::AvgPool1dFuncOptions({4}).padding({1}).count_include_pad(false)),
                   avg_pool1d(wave, 4, {}, 1, false, false)));
  EXPECT_TRUE(same(F::group_norm(img, F::GroupNormFuncOptions(3).weight(g).eps(1e-3)), group_norm(img, 3, g, {}, 1e-3)));
  EXPECT_TRUE(same(F::normalize(x, F::NormalizeFuncOptions().p(1).dim(0)), normalize(x, 1, 0)));
  EXPECT_TRUE(same(F::cosine_similarity(x, w * x, F::CosineSimilarityFuncOptions().dim(-1)), cosine_similarity(x, w * x, -1)));
  EXPECT_TRUE(same(F::pairwise_distance(x, -x, F::PairwiseDistanceFuncOptions().p(1).keepdim(true)),
                   pairwise_distance(x, -x, 1, 1e-6, true)));
  EXPECT_TRUE(same(F::pad(x, F::PadFuncOptions({1, 2}).mode(kiln::kCircular)), pad(x, {1, 2}, "circular")));
  EXPECT_TRUE(same(F::pad(x, F::PadFuncOptions({1, 0, 0, 2}).value(-5)), pad(x, {1, 0, 0, 2}, "constant", -5)));
  EXPECT_TRUE(same(F::interpolate(img, F::InterpolateFuncOptions().size(std::vector<int64_t>{5, 7}).mode(kiln::kBilinear).align_corners(true)),
                   interpolate(img, std::vector<int64_t>{5, 7}, std::nullopt, "bilinear", true)));
  EXPECT_TRUE(same(F::pixel_shuffle(rnd({1, 8, 2, 2}, 12), F::PixelShuffleFuncOptions(2)), pixel_shuffle(rnd({1, 8, 2, 2}, 12), 2)));
  // torch's default training=true: the same mask as dropout(x, 0.5, true) from the same seed.
  manual_seed(11);
  Tensor fd = F::dropout(x);
  manual_seed(11);
  EXPECT_TRUE(same(fd, dropout(x, 0.5, true)));
}

TEST(Functional, InplaceWritesTheInput) {
  Tensor x = tensor({-2.0f, 0.5f, 8.0f});
  Tensor y = F::relu6(x, F::ReLU6FuncOptions().inplace(true));
  EXPECT_TRUE(y.is_alias_of(x));
  EXPECT_EQ(vals(x), (std::vector<double>{0, 0.5, 6}));
  Tensor z = tensor({-2.0f, 1.0f});
  F::leaky_relu(z, F::LeakyReLUFuncOptions().negative_slope(0.25).inplace(true));
  EXPECT_EQ(vals(z), (std::vector<double>{-0.5, 1}));
  Tensor u = tensor({-2.0f, 1.0f});
  Tensor v = F::relu(u); // not in place by default
  EXPECT_FALSE(v.is_alias_of(u));
  EXPECT_EQ(vals(u), (std::vector<double>{-2, 1}));
}

// A torch C++ block written with F:: compiles and equals eager.
TEST(Functional, CompiledEqualsEager) {
  Tensor w1 = rnd({16, 8}, 20), w2 = rnd({8, 16}, 21), g = rnd({16}, 22, kFloat32, 0.5, 1.5);
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor h = F::linear(in[0], w1);
    h = F::layer_norm(h, F::LayerNormFuncOptions({16}).weight(g));
    h = F::gelu(h, F::GELUFuncOptions().approximate("tanh")) + F::leaky_relu(h, F::LeakyReLUFuncOptions().negative_slope(0.1));
    return std::vector<Tensor>{F::softmax(F::linear(F::mish(h), w2), F::SoftmaxFuncOptions(-1))};
  };
  const std::vector<Tensor> in = {rnd({4, 8}, 23)};
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  EXPECT_TRUE(kiln::testing::all_close(f(kiln::testing::copies(in)), fn(kiln::testing::copies(in)), 1e-5));
}
