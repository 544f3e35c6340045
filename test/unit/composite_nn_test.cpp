// The nn composites (runtime/kernels/composite_nn.cpp): normalizations, 1-D conv and
// pooling, padding, resampling, channel shuffles, flip and one_hot, each against a
// naive double loop written from torch's definition (bilinear and nearest also
// against values torch prints for a 2x2 input), with bad input; compiled equals eager.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace ewt;
using kiln::testing::rnd;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

namespace {
double tol(DType dt) { return dt == kFloat32 ? 1e-5 : 1e-12; }

// Mean and biased variance of the values at `idx` positions of v.
std::pair<double, double> moments(const std::vector<double> &v) {
  double m = 0, s = 0;
  for (double e : v) m += e;
  m /= double(v.size());
  for (double e : v) s += (e - m) * (e - m);
  return {m, s / double(v.size())};
}
} // namespace

TEST(CompositeNn, GroupAndInstanceNorm) {
  for (DType dt : {kFloat32, kFloat64}) {
    const Shape shape{2, 6, 3, 4};
    Tensor x = make_layout(shape, dt, [](int64_t k) { return std::sin(0.7 * double(k)) * 3 + 0.1 * double(k % 5); },
                           Layout::Transposed);
    Tensor w = rnd({6}, 1, dt), b = rnd({6}, 2, dt);
    const double eps = 1e-3;
    for (int64_t G : {1, 3, 6}) {
      Tensor y = group_norm(x, G, w, b, eps);
      std::vector<double> want(size_t(numel_of(shape)));
      const int64_t per = 6 / G;
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t g = 0; g < G; ++g) {
          std::vector<double> v;
          for (int64_t c = g * per; c < (g + 1) * per; ++c)
            for (int64_t h = 0; h < 3; ++h)
              for (int64_t q = 0; q < 4; ++q) v.push_back(read_at(x, {n, c, h, q}));
          auto [m, var] = moments(v);
          for (int64_t c = g * per; c < (g + 1) * per; ++c)
            for (int64_t h = 0; h < 3; ++h)
              for (int64_t q = 0; q < 4; ++q)
                want[size_t(((n * 6 + c) * 3 + h) * 4 + q)] =
                    (read_at(x, {n, c, h, q}) - m) / std::sqrt(var + eps) * read_at(w, {c}) + read_at(b, {c});
        }
      expect_values(y, want, tol(dt), tol(dt), "group_norm G=" + std::to_string(G));
      if (G == 6) expect_values(instance_norm(x, {}, {}, w, b, true, 0.1, eps), want, tol(dt), tol(dt), "instance_norm");
    }
  }
  Tensor x = rnd({2, 6, 3, 3}, 3);
  expect_error([&] { group_norm(x, 4); }, "group_norm: the number of channels 6 must be divisible by num_groups 4");
  expect_error([&] { group_norm(x, 2, rnd({5}, 4)); }, "group_norm: weight of shape [5] must be [C] = [6]");
  expect_error([&] { group_norm(x.to(kInt64), 2); }, "group_norm: expected a floating-point input, got int64");
  expect_error([&] { instance_norm(x, zeros({6}), ones({6})); }, "instance_norm: updating running statistics");
  // use_input_stats=false: the running statistics, as batch_norm in inference.
  Tensor rm = rnd({6}, 5), rv = rnd({6}, 6, kFloat32, 0.5, 2);
  EXPECT_TRUE(kiln::testing::close(instance_norm(x, rm, rv, {}, {}, false), batch_norm(x, {}, {}, rm, rv), 0));
}

TEST(CompositeNn, RmsNormAndLocalResponseNorm) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = make_layout({3, 8}, dt, [](int64_t k) { return std::cos(0.9 * double(k)) * 2; }, Layout::Transposed);
    Tensor w = rnd({8}, 7, dt);
    const double eps = dt == kFloat32 ? 1.1920928955078125e-07 : 2.220446049250313e-16;
    std::vector<double> want;
    for (int64_t i = 0; i < 3; ++i) {
      double ms = 0;
      for (int64_t j = 0; j < 8; ++j) ms += read_at(x, {i, j}) * read_at(x, {i, j}) / 8;
      for (int64_t j = 0; j < 8; ++j) want.push_back(read_at(x, {i, j}) / std::sqrt(ms + eps) * read_at(w, {j}));
    }
    expect_values(rms_norm(x, {8}, w), want, tol(dt), tol(dt), "rms_norm");
    // Over two dims, no weight, eps given.
    Tensor x3 = make({2, 3, 4}, dt, [](int64_t k) { return 0.3 * double(k % 7) - 1; });
    std::vector<double> want3;
    for (int64_t n = 0; n < 2; ++n) {
      double ms = 0;
      for (int64_t k = 0; k < 12; ++k) ms += std::pow(read_at(x3, {n, k / 4, k % 4}), 2) / 12;
      for (int64_t k = 0; k < 12; ++k) want3.push_back(read_at(x3, {n, k / 4, k % 4}) / std::sqrt(ms + 0.01));
    }
    expect_values(rms_norm(x3, {3, 4}, {}, 0.01), want3, tol(dt), tol(dt), "rms_norm 2 dims");

    Tensor img = make({2, 5, 2, 3}, dt, [](int64_t k) { return std::sin(double(k)) * 2; });
    for (int64_t size : {3, 4}) {
      std::vector<double> lrn;
      for_each_index({2, 5, 2, 3}, [&](const Shape &idx, int64_t) {
        double s = 0;
        for (int64_t c = idx[1] - size / 2; c <= idx[1] + (size - 1) / 2; ++c)
          if (c >= 0 && c < 5) s += std::pow(read_at(img, {idx[0], c, idx[2], idx[3]}), 2);
        lrn.push_back(read_at(img, idx) / std::pow(1.5 + 0.2 * s / double(size), 0.6));
      });
      expect_values(local_response_norm(img, size, 0.2, 0.6, 1.5), lrn, tol(dt), tol(dt), "local_response_norm");
    }
  }
  expect_error([&] { rms_norm(rnd({3, 8}, 8), {4}); }, "rms_norm: normalized_shape [4] is not the trailing shape");
  expect_error([&] { rms_norm(rnd({3, 8}, 8), {8}, rnd({3}, 9)); }, "rms_norm: weight of shape [3] must be normalized_shape [8]");
}

TEST(CompositeNn, NormalizeCosinePairwise) {
  Tensor a = make({3, 4}, kFloat64, [](int64_t k) { return std::sin(1.3 * double(k)); });
  Tensor b = make({3, 4}, kFloat64, [](int64_t k) { return std::cos(0.4 * double(k)) - 0.2; });
  std::vector<double> n1, n0, cs, pd;
  for (int64_t i = 0; i < 3; ++i) {
    double s2 = 0, s1 = 0, ab = 0, aa = 0, bb = 0, d = 0;
    for (int64_t j = 0; j < 4; ++j) {
      double x = read_at(a, {i, j}), y = read_at(b, {i, j});
      s2 += x * x, s1 += std::fabs(x), ab += x * y, aa += x * x, bb += y * y, d += std::pow(x - y + 1e-6, 2);
    }
    for (int64_t j = 0; j < 4; ++j) n1.push_back(read_at(a, {i, j}) / std::sqrt(s2));
    (void)s1;
    cs.push_back(ab / std::sqrt(aa * bb));
    pd.push_back(std::sqrt(d));
  }
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double s = 0;
      for (int64_t r = 0; r < 3; ++r) s += std::fabs(read_at(a, {r, j}));
      n0.push_back(read_at(a, {i, j}) / s);
    }
  expect_values(normalize(a), n1, 1e-12, 1e-14, "normalize");
  expect_values(normalize(a, 1, 0), n0, 1e-12, 1e-14, "normalize p=1 dim=0");
  expect_values(cosine_similarity(a, b), cs, 1e-12, 1e-14, "cosine_similarity");
  expect_values(pairwise_distance(a, b), pd, 1e-12, 1e-14, "pairwise_distance");
  EXPECT_EQ(pairwise_distance(a, b, 2, 1e-6, true).sizes().vec(), (Shape{3, 1}));
  // A zero row normalizes to zeros (eps), not NaN.
  expect_values(normalize(zeros({1, 3})), {0, 0, 0}, 0, 0, "normalize zeros");
}

TEST(CompositeNn, Conv1dAndPool1d) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = make({2, 4, 11}, dt, [](int64_t k) { return std::sin(0.37 * double(k)); });
    Tensor w = make({6, 2, 3}, dt, [](int64_t k) { return std::cos(0.5 * double(k)) * 0.5; });
    Tensor b = make({6}, dt, [](int64_t k) { return 0.1 * double(k); });
    // stride 2, padding 1, dilation 2, groups 2: L_out = (11 + 2 - 2 * 2 - 1) / 2 + 1 = 5.
    Tensor y = conv1d(x, w, b, 2, 1, 2, 2);
    ASSERT_EQ(y.sizes().vec(), (Shape{2, 6, 5}));
    std::vector<double> want;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t o = 0; o < 6; ++o)
        for (int64_t l = 0; l < 5; ++l) {
          double s = read_at(b, {o});
          const int64_t g = o / 3;
          for (int64_t c = 0; c < 2; ++c)
            for (int64_t k = 0; k < 3; ++k) {
              const int64_t pos = l * 2 - 1 + k * 2;
              if (pos >= 0 && pos < 11) s += read_at(x, {n, g * 2 + c, pos}) * read_at(w, {o, c, k});
            }
          want.push_back(s);
        }
    expect_values(y, want, tol(dt) * 10, tol(dt) * 10, "conv1d");
    std::vector<double> mx, av, ad;
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t n = r / 4, c = r % 4;
      for (int64_t l = 0; l < 5; ++l) { // kernel 3, stride 2
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < 3; ++k) m = std::max(m, read_at(x, {n, c, l * 2 + k})), s += read_at(x, {n, c, l * 2 + k});
        mx.push_back(m);
        av.push_back(s / 3);
      }
      for (int64_t o = 0; o < 4; ++o) { // adaptive: [floor(o * 11 / 4), ceil((o + 1) * 11 / 4))
        const int64_t lo = o * 11 / 4, hi = ((o + 1) * 11 + 3) / 4;
        double s = 0;
        for (int64_t l = lo; l < hi; ++l) s += read_at(x, {n, c, l});
        ad.push_back(s / double(hi - lo));
      }
    }
    expect_values(max_pool1d(x, 3, 2), mx, 0, 0, "max_pool1d");
    expect_values(avg_pool1d(x, 3, 2), av, tol(dt), tol(dt), "avg_pool1d");
    expect_values(adaptive_avg_pool1d(x, 4), ad, tol(dt), tol(dt), "adaptive_avg_pool1d");
    EXPECT_EQ(conv1d(x.select(0, 0), w, b, 1, 0, 1, 2).sizes().vec(), (Shape{6, 9})); // unbatched [C, L]
  }
  expect_error([&] { conv1d(rnd({2, 4, 5, 5}, 1), rnd({6, 4, 3}, 2)); }, "conv1d: expected a 2-D [C, L] or 3-D [N, C, L] input");
  expect_error([&] { conv1d(rnd({2, 4, 5}, 1), rnd({6, 4, 3, 3}, 2)); }, "conv1d: expected a 3-D weight");
  expect_error([&] { conv1d(rnd({16, 512}, 1), rnd({32, 1, 9}, 2)); },
               "conv1d: given groups=1, weight of size [32, 1, 9], expected input[16, 512] to have 1 channels, but got "
               "16 channels instead");
  expect_error([&] { conv1d(rnd({2, 4, 5}, 1), rnd({6, 2, 3}, 2), {}, 1, 0, 1, 0); }, "conv1d: groups must be >= 1, got 0");
  expect_error([&] { conv1d(ones({2, 4, 5}, kInt64), ones({6, 4, 3}, kInt64)); }, "conv1d");
  expect_error([&] { max_pool1d(rnd({2, 4, 5}, 1), {2, 2}); }, "max_pool1d: kernel_size must be one value, got [2, 2]");
}

TEST(CompositeNn, Pad) {
  Tensor x = make_layout({2, 3, 4}, kFloat32, [](int64_t k) { return double(k) + 1; }, Layout::Transposed);
  const int64_t H = 3, W = 4;
  auto check = [&](const std::string &mode, std::vector<int64_t> p, const std::function<int64_t(int64_t, int64_t)> &src,
                   double fill = 0) {
    // p = (left, right, top, bottom); src(i, n) = source index of padded index i in [-pad, n + pad), -1 = fill.
    Tensor y = mode == "constant" ? pad(x, p, mode, fill) : pad(x, p, mode);
    const int64_t oh = H + p[2] + p[3], ow = W + p[0] + p[1];
    ASSERT_EQ(y.sizes().vec(), (Shape{2, oh, ow})) << mode;
    std::vector<double> want;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t si = src(i - p[2], H), sj = src(j - p[0], W);
          want.push_back(si < 0 || sj < 0 ? fill : read_at(x, {n, si, sj}));
        }
    expect_values(y, want, 0, 0, "pad " + mode);
  };
  check("constant", {1, 2, 2, 0}, [](int64_t i, int64_t n) { return i < 0 || i >= n ? -1 : i; }, -3.5);
  check("reflect", {3, 1, 2, 2}, [](int64_t i, int64_t n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); });
  check("replicate", {2, 3, 1, 4}, [](int64_t i, int64_t n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); });
  check("circular", {4, 1, 3, 2}, [](int64_t i, int64_t n) { return i < 0 ? i + n : (i >= n ? i - n : i); });
  // Negative constant padding crops.
  Tensor c = pad(x, {-1, -2});
  ASSERT_EQ(c.sizes().vec(), (Shape{2, 3, 1}));
  expect_values(c, {read_at(x, {0, 0, 1}), read_at(x, {0, 1, 1}), read_at(x, {0, 2, 1}), read_at(x, {1, 0, 1}),
                    read_at(x, {1, 1, 1}), read_at(x, {1, 2, 1})},
                0, 0, "pad crop");
  expect_error([&] { pad(x, {1, 2, 3}); }, "pad: pad [1, 2, 3] must have an even length");
  expect_error([&] { pad(x, {4, 0}, "reflect"); }, "pad: reflect padding (4, 0) must be less than dim 2's size 4");
  expect_error([&] { pad(x, {1, 1}, "wrap"); }, "pad: mode must be constant, reflect, replicate or circular");
  expect_error([&] { pad(x, {1, 1}, "reflect", 2.0); }, "pad: a padding value is only for mode constant");
}

TEST(CompositeNn, InterpolateMatchesTorchsValues) {
  Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 2, 2});
  // torch.nn.functional.interpolate(x, size=4, ...) for x = [[1, 2], [3, 4]].
  expect_values(interpolate(x, std::vector<int64_t>{4}, std::nullopt, "bilinear", false),
                {1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0}, 1e-6, 0,
                "bilinear");
  expect_values(interpolate(x, std::vector<int64_t>{4}, std::nullopt, "bilinear", true),
                {1.0, 4.0 / 3, 5.0 / 3, 2.0, 5.0 / 3, 2.0, 7.0 / 3, 8.0 / 3, 7.0 / 3, 8.0 / 3, 3.0, 10.0 / 3, 3.0,
                 10.0 / 3, 11.0 / 3, 4.0},
                1e-6, 0, "bilinear align_corners");
  expect_values(interpolate(x, std::nullopt, std::vector<double>{2.0}),
                {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0, 0, "nearest x2");
  // Nearest to an odd size: source floor(o * in / out).
  Tensor r = make({1, 2, 5, 3}, kFloat64, [](int64_t k) { return double(k); });
  Tensor y = interpolate(r, std::vector<int64_t>{3, 7});
  std::vector<double> want;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 7; ++j) want.push_back(read_at(r, {0, c, i * 5 / 3, j * 3 / 7}));
  expect_values(y, want, 0, 0, "nearest 3x7");
  // Linear on [N, C, L], 3 -> 5: sources (o + 0.5) * 3 / 5 - 0.5 = 0, 0.4, 1, 1.6, 2.2 (clamped to the
  // last element); with align_corners o * 2 / 4.
  Tensor l = tensor(std::vector<double>{0.0, 10.0, 20.0}).view({1, 1, 3});
  expect_values(interpolate(l, std::vector<int64_t>{5}, std::nullopt, "linear"), {0, 4, 10, 16, 20}, 1e-12, 1e-12,
                "linear");
  expect_values(interpolate(l, std::vector<int64_t>{5}, std::nullopt, "linear", true), {0, 5, 10, 15, 20}, 1e-12,
                1e-12, "linear align_corners");
  expect_error([&] { interpolate(x, std::vector<int64_t>{4}, std::vector<double>{2.0}); },
               "interpolate: give exactly one of size and scale_factor");
  expect_error([&] { interpolate(x, std::vector<int64_t>{4}, std::nullopt, "bicubic"); },
               "interpolate: mode \"bicubic\" is not supported");
  expect_error([&] { interpolate(x, std::vector<int64_t>{4}, std::nullopt, "nearest", true); },
               "interpolate: align_corners is only for the linear modes");
}

TEST(CompositeNn, PixelShuffleFlipOneHotRelu6) {
  Tensor x = make({2, 8, 2, 3}, kFloat32, [](int64_t k) { return double(k); });
  Tensor y = pixel_shuffle(x, 2);
  ASSERT_EQ(y.sizes().vec(), (Shape{2, 2, 4, 6}));
  std::vector<double> want;
  for_each_index({2, 2, 4, 6}, [&](const Shape &o, int64_t) {
    want.push_back(read_at(x, {o[0], o[1] * 4 + (o[2] % 2) * 2 + o[3] % 2, o[2] / 2, o[3] / 2}));
  });
  expect_values(y, want, 0, 0, "pixel_shuffle");
  Tensor back = pixel_unshuffle(y, 2);
  ASSERT_EQ(back.sizes().vec(), (Shape{2, 8, 2, 3}));
  expect_values(back, values(x), 0, 0, "pixel_unshuffle");
  expect_error([&] { pixel_shuffle(x, 3); }, "pixel_shuffle: expected [..., C * r^2, H, W] with r = 3");

  Tensor f = flip(x, {1, -1});
  std::vector<double> wf;
  for_each_index({2, 8, 2, 3}, [&](const Shape &o, int64_t) { wf.push_back(read_at(x, {o[0], 7 - o[1], o[2], 2 - o[3]})); });
  expect_values(f, wf, 0, 0, "flip");
  expect_error([&] { flip(x, {1, 1}); }, "flip: dim 1 appears more than once");

  Tensor idx = tensor(std::vector<int64_t>{2, 0, 3, 2});
  Tensor oh = one_hot(idx, 5);
  EXPECT_EQ(oh.dtype(), kInt64);
  ASSERT_EQ(oh.sizes().vec(), (Shape{4, 5}));
  expect_values(oh, {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}, 0, 0, "one_hot");
  EXPECT_EQ(one_hot(idx).sizes().vec(), (Shape{4, 4})); // max + 1
  expect_error([&] { one_hot(idx, 3); }, "one_hot: class values must be in [0, 3), got [0, 3]");
  expect_error([&] { one_hot(idx.to(kFloat32), 3); }, "one_hot: expected int64 class indices, got float32");

  expect_values(relu6(tensor({-1.0f, 2.5f, 9.0f, NAN})), {0, 2.5, 6, NAN}, 0, 0, "relu6");
  EXPECT_EQ(relu6(tensor(std::vector<int64_t>{-3, 4, 8})).dtype(), kInt64);
}

// The two model shapes: a U-Net-style block (conv, group norm, silu, nearest
// upsampling, reflect padding) and a text block (embedding, rms_norm, rotary
// embedding written with slices, cat and mul), each compiled equal to eager.
TEST(CompositeNn, CompiledEqualsEager) {
  Tensor cw1 = rnd({8, 4, 3, 3}, 30, kFloat32, -0.3, 0.3), cw2 = rnd({4, 8, 3, 3}, 31, kFloat32, -0.3, 0.3);
  Tensor gw = rnd({8}, 32, kFloat32, 0.5, 1.5), gb = rnd({8}, 33);
  Fn unet = [=](const std::vector<Tensor> &in) {
    Tensor h = silu(group_norm(conv2d(in[0], cw1, {}, 1, 1), 4, gw, gb));
    h = interpolate(h, std::nullopt, std::vector<double>{2.0});
    h = conv2d(pad(h, {1, 1, 1, 1}, "reflect"), cw2);
    return std::vector<Tensor>{h + interpolate(in[0], std::nullopt, std::vector<double>{2.0})};
  };
  Tensor emb = rnd({50, 16}, 34), nw = rnd({16}, 35, kFloat32, 0.5, 1.5);
  Tensor cos_t = rnd({6, 8}, 36), sin_t = rnd({6, 8}, 37);
  Fn text = [=](const std::vector<Tensor> &in) {
    Tensor h = rms_norm(embedding(emb, in[0]), {16}, nw, 1e-6);
    Tensor x1 = h.slice(-1, 0, 8), x2 = h.slice(-1, 8, 16);
    Tensor rot = cat({x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t}, -1);
    return std::vector<Tensor>{softmax(rot, -1)};
  };
  const std::vector<std::pair<Fn, std::vector<Tensor>>> cases = {
      {unet, {rnd({2, 4, 6, 5}, 38)}},
      {text, {tensor(std::vector<int64_t>{3, 7, 49, 0, 12, 3})}},
  };
  for (const auto &[fn, in] : cases) {
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    const std::vector<Tensor> want = fn(kiln::testing::copies(in));
    for (int call = 0; call < 2; ++call)
      EXPECT_TRUE(kiln::testing::all_close(f(kiln::testing::copies(in)), want, 1e-5)) << "call " << call;
  }
}
