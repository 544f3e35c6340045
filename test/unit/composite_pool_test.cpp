// adaptive_max_pool2d / adaptive_max_pool1d (runtime/kernels/composite_pool.cpp) against a
// naive loop written here: output (i, j) is the max over rows [floor(i H / oh), ceil((i+1) H / oh))
// and the matching columns, its index the first position (row-major) of that max in H * W,
// or of a window with NaNs the last NaN's, as torch's CPU kernel (a NaN or a larger value
// takes the place). Contiguous and transposed inputs, batch-less
// input, the F:: forms, bad input; compiled equals eager.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
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
// Values with ties and a few NaN.
double gen(int64_t k) {
  if (k % 29 == 13) return std::numeric_limits<double>::quiet_NaN();
  return double((k * 7) % 10) - 4.0;
}

// x [N, C, H, W]: values and indices [N, C, oh, ow].
void naive(const Tensor &x, int64_t oh, int64_t ow, std::vector<double> *vals, std::vector<double> *idx) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t hs = int64_t(std::floor(double(i * H) / double(oh)));
          const int64_t he = int64_t(std::ceil(double((i + 1) * H) / double(oh)));
          const int64_t ws = int64_t(std::floor(double(j * W) / double(ow)));
          const int64_t we = int64_t(std::ceil(double((j + 1) * W) / double(ow)));
          double best = 0;
          int64_t at = -1;
          for (int64_t h = hs; h < he; ++h)
            for (int64_t w = ws; w < we; ++w) {
              const double v = read_at(x, {n, c, h, w});
              if (at < 0 || std::isnan(v) || v > best) {
                best = v;
                at = h * W + w;
              }
            }
          vals->push_back(best);
          idx->push_back(double(at));
        }
}
} // namespace

TEST(AdaptiveMaxPool, Pool2dMatchesNaiveLoop) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 7, 9}, {3, 4}}, {{2, 3, 7, 9}, {7, 9}}, {{1, 2, 5, 5}, {1, 1}}, {{2, 2, 4, 6}, {8, 5}}, // out > in
      {{1, 3, 10, 3}, {4}},                                                                          // one value
  };
  for (const auto &[shape, out] : cases)
    for (DType dt : {kFloat32, kFloat64})
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        Tensor x = make_layout(shape, dt, gen, l);
        const int64_t oh = out[0], ow = out.back();
        std::vector<double> want_v, want_i;
        naive(x, oh, ow, &want_v, &want_i);
        const std::string what = shape_str(shape) + " -> " + shape_str(out) + " " + std::string(name(dt)) + " " +
                                 layout_name(l);
        auto [v, i] = adaptive_max_pool2d(x, out);
        ASSERT_EQ(v.sizes().vec(), (Shape{shape[0], shape[1], oh, ow})) << what;
        EXPECT_EQ(v.dtype(), dt) << what;
        EXPECT_EQ(i.dtype(), kInt64) << what;
        expect_values(v, want_v, 0, 0, what);
        expect_values(i, want_i, 0, 0, what + " indices");
        expect_values(F::adaptive_max_pool2d(x, F::AdaptiveMaxPool2dFuncOptions(out)), want_v, 0, 0, what + " F::");
        auto [v1, i1] = adaptive_max_pool2d(x.select(0, 0), out); // batch-less
        ASSERT_EQ(v1.sizes().vec(), (Shape{shape[1], oh, ow})) << what;
        const long half = long(want_v.size() / size_t(shape[0]));
        expect_values(v1, std::vector<double>(want_v.begin(), want_v.begin() + half), 0, 0, what + " unbatched");
        expect_values(i1, std::vector<double>(want_i.begin(), want_i.begin() + half), 0, 0, what + " unbatched");
      }
}

TEST(AdaptiveMaxPool, Pool1dMatchesNaiveLoop) {
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t ol : {1, 3, 5, 11}) {
      Tensor x = make_layout({2, 3, 7}, dt, gen, Layout::Transposed);
      std::vector<double> want_v, want_i;
      naive(x.unsqueeze(2), 1, ol, &want_v, &want_i);
      const std::string what = "1d " + std::to_string(ol) + " " + std::string(name(dt));
      auto [v, i] = adaptive_max_pool1d(x, {ol});
      ASSERT_EQ(v.sizes().vec(), (Shape{2, 3, ol})) << what;
      expect_values(v, want_v, 0, 0, what);
      expect_values(i, want_i, 0, 0, what + " indices");
      expect_values(F::adaptive_max_pool1d(x, F::AdaptiveMaxPool1dFuncOptions(ol)), want_v, 0, 0, what + " F::");
      auto [v1, i1] = adaptive_max_pool1d(x.select(0, 1), {ol});
      ASSERT_EQ(v1.sizes().vec(), (Shape{3, ol})) << what;
      expect_values(i1, std::vector<double>(want_i.begin() + long(want_i.size() / 2), want_i.end()), 0, 0, what);
    }
}

// Windows holding several NaNs or ties, where the first-NaN rule of max(dim) and torch's
// last-NaN rule differ: [1, 3, 4] planes pooled to 1x1 (the whole plane) and to 2x2.
TEST(AdaptiveMaxPool, SeveralNansAndTies) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> vals = {1, nan, 5, 2, nan, 0, 7, 7, 2, nan, 3, 1, // NaNs at 1, 4, 9
                                    1, 5, 2, 5, 0, 5, 3, 1, 5, 2, 2, 4};      // 5 at 1, 3, 5, 8
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = make({1, 2, 3, 4}, dt, [&](int64_t k) { return vals[size_t(k)]; });
    for (const Shape &out : {Shape{1, 1}, Shape{2, 2}, Shape{3, 3}}) {
      std::vector<double> want_v, want_i;
      naive(x, out[0], out[1], &want_v, &want_i);
      auto [v, i] = adaptive_max_pool2d(x, out);
      expect_values(v, want_v, 0, 0, shape_str(out));
      expect_values(i, want_i, 0, 0, shape_str(out) + " indices");
    }
    auto [v, i] = adaptive_max_pool2d(x, {1, 1});
    expect_values(i, {9, 1}, 0, 0, "by hand"); // the last NaN; the first 5
    auto [v1, i1] = adaptive_max_pool1d(x.reshape({2, 12}), {1});
    expect_values(i1, {9, 1}, 0, 0, "1d by hand");
  }
}

TEST(AdaptiveMaxPool, BadInput) {
  expect_error([&] { adaptive_max_pool2d(zeros({2, 3, 4, 4}, kInt64), {2, 2}); },
               "adaptive_max_pool2d: expected a floating-point input, got int64");
  expect_error([&] { adaptive_max_pool2d(zeros({4, 4}), {2, 2}); }, "adaptive_max_pool2d: expected a 3-D [C, H, W] or 4-D");
  expect_error([&] { adaptive_max_pool2d(zeros({1, 2, 4, 4}), {2, 2, 2}); },
               "adaptive_max_pool2d: output_size must have 1 or 2 values, got [2, 2, 2]");
  expect_error([&] { adaptive_max_pool2d(zeros({1, 2, 4, 4}), {0, 2}); }, "adaptive_max_pool2d: output_size must be positive, got 0");
  expect_error([&] { adaptive_max_pool2d(zeros({1, 2, 0, 4}), {2, 2}); },
               "adaptive_max_pool2d: expected input to have non-zero size for non-batch dimensions, got shape [1, 2, 0, 4]");
  expect_error([&] { adaptive_max_pool2d(zeros({1, 1, 4, 4}), {int64_t(1) << 40, 1}); },
               "adaptive_max_pool2d: output_size [1099511627776, 1] is too large for input of shape [1, 1, 4, 4]");
  expect_error([&] { adaptive_max_pool1d(zeros({1, 2, 4}), {2, 2}); }, "adaptive_max_pool1d: output_size must be one value");
  expect_error([&] { adaptive_max_pool1d(zeros({4}), {2}); }, "adaptive_max_pool1d: expected a 2-D [C, L] or 3-D");
  auto [v, i] = adaptive_max_pool2d(zeros({0, 2, 4, 4}), {2, 2}); // an empty batch is fine
  EXPECT_EQ(v.sizes().vec(), (Shape{0, 2, 2, 2}));
  EXPECT_EQ(i.sizes().vec(), (Shape{0, 2, 2, 2}));
}

// A classifier head (conv, adaptive max pool to a fixed size, linear) and the max pools
// with indices: traced without a graph break, compiled equal to eager, indices included.
TEST(AdaptiveMaxPool, CompiledEqualsEager) {
  Tensor cw = kiln::testing::rnd({4, 3, 3, 3}, 71, kFloat32, -0.4, 0.4), lw = kiln::testing::rnd({5, 4 * 2 * 3}, 72);
  Fn fn = [=](const std::vector<Tensor> &in) {
    auto [v, i] = adaptive_max_pool2d(relu(conv2d(in[0], cw, {}, 1, 1)), {2, 3});
    auto [v1, i1] = adaptive_max_pool1d(in[1], {4});
    auto [pv, pi] = max_pool2d_with_indices(in[0] * 1.5, {3, 2}, {2, 2}, {1, 0}, 1, true);
    auto [qv, qi] = max_pool1d_with_indices(in[1], {3}, {2});
    return std::vector<Tensor>{linear(flatten(v, 1), lw), i, v1 * 2.0, i1, pv + 1.0, pi, qv, qi};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({2, 3, 7, 8}, 73), kiln::testing::rnd({2, 5, 9}, 74)};
  kiln::testing::expect_compiled_equals_eager(fn, in, 1e-5);
}
