// Tensor::unfold and im2col / F::unfold (runtime/kernels/composite_unfold.cpp) against
// naive loops written here: window w of size `size` along dim d holds x[..., w * step + k, ...];
// im2col's row c * kh * kw + i * kw + j, column oh * Wo + ow holds the zero-padded input at
// (oh * stride - padding + i * dilation, ow * stride - padding + j * dilation). Contiguous,
// transposed and sliced inputs, negative dims, empty and 0-dim tensors, torch's errors;
// compiled equals eager.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace ewt;
namespace F = kiln::nn::functional;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

namespace {
double gen(int64_t k) { return 0.5 * double(k % 23) - 3.0; }
} // namespace

TEST(Unfold, TensorUnfoldIsAViewOfTheWindows) {
  for (DType dt : {kFloat32, kFloat64, kInt64})
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Sliced})
      for (int64_t dim : {0, 1, -1})
        for (auto [size, step] : {std::pair<int64_t, int64_t>{2, 1}, {3, 2}, {1, 3}, {4, 4}, {0, 1}}) {
          Tensor x = make_layout({4, 5, 6}, dt, gen, l);
          const int64_t d = dim < 0 ? dim + 3 : dim;
          const int64_t n = x.size(d);
          if (size > n) continue;
          Tensor u = x.unfold(dim, size, step);
          Shape want_shape = x.sizes().vec();
          want_shape[size_t(d)] = (n - size) / step + 1;
          want_shape.push_back(size);
          const std::string what = std::string(name(dt)) + " " + layout_name(l) + " dim " + std::to_string(dim) +
                                   " size " + std::to_string(size) + " step " + std::to_string(step);
          ASSERT_EQ(u.sizes().vec(), want_shape) << what;
          std::vector<double> want;
          for_each_index(want_shape, [&](const Shape &o, int64_t) {
            Shape at(o.begin(), o.end() - 1);
            at[size_t(d)] = o[size_t(d)] * step + o.back();
            want.push_back(read_at(x, at));
          });
          expect_values(u, want, 0, 0, what);
          EXPECT_EQ(u.impl().storage->data(), x.impl().storage->data()) << what << ": not a view";
        }
  // A write through the view reaches the input.
  Tensor x = make({6}, kFloat32, gen);
  Tensor u = x.unfold(0, 2, 2);
  u.select(0, 1).select(0, 1).fill_(42.0);
  EXPECT_EQ(values(x)[3], 42.0);
  // 0-dim and empty tensors, as torch's.
  Tensor s = scalar_tensor(7.0);
  EXPECT_EQ(s.unfold(0, 1, 1).sizes().vec(), (Shape{1}));
  EXPECT_EQ(s.unfold(-1, 0, 1).sizes().vec(), (Shape{0}));
  EXPECT_EQ(zeros({0, 3}).unfold(0, 0, 2).sizes().vec(), (Shape{1, 3, 0}));
  EXPECT_EQ(zeros({2, 0}).unfold(1, 0, 1).sizes().vec(), (Shape{2, 1, 0}));
  Tensor t = zeros({3, 4});
  expect_error([&] { t.unfold(1, 5, 1); }, "unfold: maximum size for tensor at dimension 1 is 4 but size is 5");
  expect_error([&] { t.unfold(0, 2, 0); }, "unfold: step is 0 but must be > 0");
  expect_error([&] { t.unfold(0, -1, 1); }, "unfold: size is -1 but must be >= 0");
  expect_error([&] { t.unfold(2, 1, 1); }, "unfold");
  expect_error([&] { s.unfold(0, 2, 1); }, "unfold: maximum size for tensor at dimension 0 is 1 but size is 2");
  Tensor one = make({3, 4}, kFloat32, gen).unfold(1, 2, INT64_MAX); // a step past every stride: one window
  ASSERT_EQ(one.sizes().vec(), (Shape{3, 1, 2}));
  expect_values(one, {gen(0), gen(1), gen(4), gen(5), gen(8), gen(9)}, 0, 0, "huge step");
}

TEST(Unfold, Im2colMatchesNaiveLoop) {
  struct Cfg {
    Shape k, d, p, s;
  };
  const std::vector<Cfg> cfgs = {
      {{2, 2}, {1, 1}, {0, 0}, {1, 1}}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, {{3, 2}, {2, 1}, {1, 0}, {2, 1}},
      {{1, 1}, {1, 1}, {0, 0}, {2, 3}}, {{2, 3}, {1, 2}, {2, 1}, {3, 2}},
  };
  for (const Cfg &c : cfgs)
    for (DType dt : {kFloat32, kFloat64})
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        Tensor x = make_layout({2, 3, 5, 6}, dt, gen, l);
        const int64_t N = 2, C = 3, H = 5, W = 6;
        const int64_t Ho = (H + 2 * c.p[0] - c.d[0] * (c.k[0] - 1) - 1) / c.s[0] + 1;
        const int64_t Wo = (W + 2 * c.p[1] - c.d[1] * (c.k[1] - 1) - 1) / c.s[1] + 1;
        std::vector<double> want;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t ch = 0; ch < C; ++ch)
            for (int64_t i = 0; i < c.k[0]; ++i)
              for (int64_t j = 0; j < c.k[1]; ++j)
                for (int64_t oh = 0; oh < Ho; ++oh)
                  for (int64_t ow = 0; ow < Wo; ++ow) {
                    const int64_t h = oh * c.s[0] - c.p[0] + i * c.d[0], w = ow * c.s[1] - c.p[1] + j * c.d[1];
                    want.push_back(h < 0 || h >= H || w < 0 || w >= W ? 0.0 : read_at(x, {n, ch, h, w}));
                  }
        std::ostringstream os;
        os << "k" << c.k[0] << "x" << c.k[1] << " s" << c.s[0] << " " << name(dt) << " " << layout_name(l);
        const std::string what = os.str();
        Tensor y = im2col(x, c.k, c.d, c.p, c.s);
        ASSERT_EQ(y.sizes().vec(), (Shape{N, C * c.k[0] * c.k[1], Ho * Wo})) << what;
        expect_values(y, want, 0, 0, what);
        Tensor yf = F::unfold(x, F::UnfoldFuncOptions(c.k).dilation(c.d).padding(c.p).stride(c.s));
        expect_values(yf, want, 0, 0, what + " F::");
        Tensor y1 = im2col(x.select(0, 1), c.k, c.d, c.p, c.s); // batch-less
        ASSERT_EQ(y1.sizes().vec(), (Shape{C * c.k[0] * c.k[1], Ho * Wo})) << what;
        expect_values(y1, std::vector<double>(want.begin() + long(want.size() / 2), want.end()), 0, 0, what);
      }
  EXPECT_EQ(im2col(zeros({0, 2, 4, 4}), {2, 2}).sizes().vec(), (Shape{0, 8, 9}));
  expect_error([&] { im2col(zeros({1, 2, 3, 3}), {4, 4}); },
               "unfold: the padded input (3 along spatial dim 0) is smaller than the dilated kernel (4)");
  expect_error([&] { im2col(zeros({2, 3}), {1, 1}); }, "unfold: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input");
  expect_error([&] { im2col(zeros({1, 1, 3, 3}), {2, 2}, 1, 0, 0); }, "unfold: kernel_size, dilation and stride must be positive");
  expect_error([&] { im2col(zeros({1, 1, 3, 3}), {2, 2}, 1, -1); }, "unfold: padding must be non-negative");
  expect_error([&] { im2col(zeros({1, 1, 3, 3}), {2, 2, 2}); }, "unfold: expected kernel_size to have 1 or 2 values");
  expect_error([&] { im2col(zeros({1, 1, 3, 3}), {2, 2}, int64_t(1) << 62); },
               "unfold: kernel_size [2, 2], dilation [4611686018427387904, 4611686018427387904] and padding [0, 0] "
               "are out of range");
  expect_error([&] { im2col(zeros({1, 1, 3, 3}), {2, 2}, 1, INT64_MAX); }, "unfold: kernel_size [2, 2]");
}

// Patches into a linear layer (a ViT-style patch embedding) and a 1-D sliding mean:
// traced without a graph break, compiled equal to eager.
TEST(Unfold, CompiledEqualsEager) {
  Tensor w = kiln::testing::rnd({5, 12}, 61);
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor patches = F::unfold(in[0], F::UnfoldFuncOptions(2).stride(2)).transpose(1, 2); // [N, L, C * 4]
    Tensor win = in[1].unfold(-1, 3, 1).mean({-1});
    return std::vector<Tensor>{relu(linear(patches, w)), win * 2.0};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({2, 3, 4, 6}, 62), kiln::testing::rnd({3, 9}, 63)};
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  const std::vector<Tensor> want = fn(kiln::testing::copies(in));
  ASSERT_EQ(want[0].sizes().vec(), (Shape{2, 6, 5}));
  // The sliding mean against its loop, so that the compiled check compares right values.
  std::vector<double> mean3;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 7; ++j)
      mean3.push_back(2.0 * (read_at(in[1], {r, j}) + read_at(in[1], {r, j + 1}) + read_at(in[1], {r, j + 2})) / 3.0);
  expect_values(want[1], mean3, 1e-5, 1e-6, "sliding mean");
  for (int call = 0; call < 2; ++call)
    EXPECT_TRUE(kiln::testing::all_close(f(kiln::testing::copies(in)), want, 1e-5)) << "call " << call;
}

// Tensor::unfold inside a compiled function on inputs, transposed views and computed
// intermediates (whose layout the compiler chooses): equal to eager.
TEST(Unfold, CompiledOnViewsAndIntermediates) {
  Fn fn = [](const std::vector<Tensor> &in) {
    Tensor a = in[0].unfold(1, 3, 2);
    Tensor b = in[0].t().unfold(0, 2, 1);
    Tensor c = (in[0] * 2.0 + 1.0).unfold(-1, 4, 3);
    Tensor d = (in[0].exp() + in[1]).t().unfold(1, 2, 2).sum({-1});
    Tensor e = relu(in[0]).unfold(0, 2, 1).unfold(1, 3, 1);
    return std::vector<Tensor>{a * 1.0, b + 0.5, c.exp(), d, e * 3.0};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({5, 8}, 64), kiln::testing::rnd({5, 8}, 65)};
  kiln::testing::expect_compiled_equals_eager(fn, in, 1e-5);
}
