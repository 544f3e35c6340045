// conv_transpose1d / conv_transpose2d (runtime/kernels/composite_conv.cpp) against a naive
// scatter loop written here from the definition: every input element, times every kernel
// tap, is added to the output element it lands on (ih * stride - padding + kh * dilation).
// Strides 1 and 2, padding, output_padding, dilation, groups, bias, batch-less input,
// non-contiguous input and weight, torch's argument errors; compiled equals eager.
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

struct Geom {
  Shape s, p, op, d;
  int64_t groups;
};

// x [N, C, H, W], w [C, O/g, kH, kW] -> [N, O, Ho, Wo].
std::vector<double> naive_conv_transpose2d(const Tensor &x, const Tensor &w, const Tensor &bias, const Geom &g,
                                           Shape *out_shape) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Og = w.size(1), kH = w.size(2), kW = w.size(3), O = Og * g.groups, Cg = C / g.groups;
  const int64_t Ho = (H - 1) * g.s[0] - 2 * g.p[0] + g.d[0] * (kH - 1) + g.op[0] + 1;
  const int64_t Wo = (W - 1) * g.s[1] - 2 * g.p[1] + g.d[1] * (kW - 1) + g.op[1] + 1;
  *out_shape = {N, O, Ho, Wo};
  std::vector<double> out(size_t(N * O * Ho * Wo), 0.0);
  auto at = [&](int64_t n, int64_t o, int64_t h, int64_t ww) -> double & {
    return out[size_t(((n * O + o) * Ho + h) * Wo + ww)];
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t oc = 0; oc < Og; ++oc)
            for (int64_t kh = 0; kh < kH; ++kh)
              for (int64_t kw = 0; kw < kW; ++kw) {
                const int64_t oh = ih * g.s[0] - g.p[0] + kh * g.d[0], ow = iw * g.s[1] - g.p[1] + kw * g.d[1];
                if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                at(n, (c / Cg) * Og + oc, oh, ow) += read_at(x, {n, c, ih, iw}) * read_at(w, {c, oc, kh, kw});
              }
  if (bias.defined())
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t h = 0; h < Ho; ++h)
          for (int64_t ww = 0; ww < Wo; ++ww) at(n, o, h, ww) += read_at(bias, {o});
  return out;
}

double gx(int64_t k) { return 0.1 * double((k * 5) % 13) - 0.6; }
double gw(int64_t k) { return 0.07 * double((k * 3) % 17) - 0.5; }

} // namespace

TEST(ConvTranspose, Conv2dMatchesScatterLoop) {
  // {C, O/g, groups, H, W, kH, kW, geometry}
  struct Cfg {
    int64_t C, Og, groups, H, W, kH, kW;
    Geom g;
  };
  const std::vector<Cfg> cfgs = {
      {3, 2, 1, 4, 5, 3, 3, {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1}},
      {3, 2, 1, 4, 5, 3, 3, {{2, 2}, {0, 0}, {0, 0}, {1, 1}, 1}},
      {2, 3, 1, 3, 4, 3, 2, {{2, 1}, {1, 0}, {1, 0}, {1, 1}, 1}},  // padding, output_padding
      {2, 2, 1, 4, 3, 2, 3, {{1, 2}, {1, 1}, {0, 1}, {2, 1}, 1}},  // dilation
      {4, 3, 2, 3, 3, 3, 3, {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 2}},  // groups
      {6, 1, 3, 5, 4, 2, 2, {{3, 2}, {0, 1}, {2, 0}, {1, 2}, 3}},  // groups, mixed
      {2, 2, 1, 3, 3, 3, 3, {{1, 1}, {2, 2}, {0, 0}, {1, 1}, 1}},  // padding crops the full result
      {2, 2, 1, 3, 3, 2, 2, {{1, 1}, {0, 0}, {1, 1}, {2, 2}, 1}},  // output_padding < dilation
  };
  for (const Cfg &c : cfgs)
    for (DType dt : {kFloat32, kFloat64})
      for (bool with_bias : {false, true})
        for (bool strided : {false, true}) {
          const Shape xs = {2, c.C, c.H, c.W}, ws = {c.C, c.Og, c.kH, c.kW};
          Tensor x = make_layout(xs, dt, gx, strided ? Layout::Transposed : Layout::Contiguous);
          Tensor w = make_layout(ws, dt, gw, strided ? Layout::Sliced : Layout::Contiguous);
          Tensor b = with_bias ? make({c.Og * c.g.groups}, dt, [](int64_t k) { return 0.3 * double(k) - 0.4; }) : Tensor();
          Shape want_shape;
          const std::vector<double> want = naive_conv_transpose2d(x, w, b, c.g, &want_shape);
          Tensor y = conv_transpose2d(x, w, b, c.g.s, c.g.p, c.g.op, c.g.groups, c.g.d);
          std::ostringstream os;
          os << "C" << c.C << " g" << c.g.groups << " s" << c.g.s[0] << " " << name(dt) << (with_bias ? " bias" : "")
             << (strided ? " strided" : "");
          const std::string what = os.str();
          EXPECT_EQ(y.dtype(), dt) << what;
          EXPECT_EQ(y.sizes().vec(), want_shape) << what;
          const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
          expect_values(y, want, tol, tol, what);
          // Batch-less input: the same values for one image.
          Tensor y1 = conv_transpose2d(x.select(0, 1), w, b, c.g.s, c.g.p, c.g.op, c.g.groups, c.g.d);
          EXPECT_EQ(y1.sizes().vec(), (Shape{want_shape[1], want_shape[2], want_shape[3]})) << what;
          const size_t per = want.size() / 2;
          expect_values(y1, std::vector<double>(want.begin() + long(per), want.end()), tol, tol, what + " unbatched");
          // F:: with its options gives the same.
          Tensor yf = F::conv_transpose2d(x, w, F::ConvTranspose2dFuncOptions()
                                                   .bias(b)
                                                   .stride(c.g.s)
                                                   .padding(c.g.p)
                                                   .output_padding(c.g.op)
                                                   .groups(c.g.groups)
                                                   .dilation(c.g.d));
          expect_values(yf, want, tol, tol, what + " F::");
        }
}

TEST(ConvTranspose, Conv1dMatchesScatterLoop) {
  // The 1-D result is the 2-D one with H = 1 (the reference's kernel is 1 x K).
  for (DType dt : {kFloat32, kFloat64})
    for (int64_t s : {1, 2})
      for (int64_t groups : {1, 2}) {
        Tensor x = make_layout({2, 4, 5}, dt, gx, Layout::Sliced);
        Tensor w = make({4, 3, 3}, dt, gw);
        Tensor b = make({3 * groups}, dt, [](int64_t k) { return 0.2 * double(k); });
        const Geom g{{1, s}, {0, 1}, {0, s - 1}, {1, 2}, groups};
        Shape want_shape;
        const std::vector<double> want = naive_conv_transpose2d(x.unsqueeze(2), w.unsqueeze(2), b, g, &want_shape);
        Tensor y = conv_transpose1d(x, w, b, s, 1, s - 1, groups, 2);
        const std::string what = "1d s" + std::to_string(s) + " g" + std::to_string(groups) + " " + std::string(name(dt));
        EXPECT_EQ(y.sizes().vec(), (Shape{want_shape[0], want_shape[1], want_shape[3]})) << what;
        const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
        expect_values(y, want, tol, tol, what);
        Tensor y1 = conv_transpose1d(x.select(0, 0), w, b, s, 1, s - 1, groups, 2);
        EXPECT_EQ(y1.sizes().vec(), (Shape{want_shape[1], want_shape[3]})) << what;
        expect_values(y1, std::vector<double>(want.begin(), want.begin() + long(want.size() / 2)), tol, tol, what);
        expect_values(F::conv_transpose1d(x, w, F::ConvTranspose1dFuncOptions().bias(b).stride(s).padding(1)
                                                   .output_padding(s - 1).groups(groups).dilation(2)),
                      want, tol, tol, what + " F::");
      }
}

TEST(ConvTranspose, BadArguments) {
  Tensor x = zeros({1, 4, 3, 3}), w = zeros({4, 2, 3, 3});
  expect_error([&] { conv_transpose2d(x, w, {}, 1, 0, 1); },
               "conv_transpose2d: output padding must be smaller than either stride or dilation");
  expect_error([&] { conv_transpose2d(x, w, {}, 2, 0, 0, 3); }, "conv_transpose2d: in_channels 4 must be divisible by groups 3");
  expect_error([&] { conv_transpose2d(x, zeros({3, 2, 3, 3})); }, "conv_transpose2d: weight of shape [3, 2, 3, 3] expects 3 input channels");
  expect_error([&] { conv_transpose2d(x, w, zeros({3})); }, "conv_transpose2d: expected bias of shape [2], got [3]");
  expect_error([&] { conv_transpose2d(x, zeros({4, 2, 3})); }, "conv_transpose2d: expected a 4-D weight");
  expect_error([&] { conv_transpose2d(zeros({4, 3}), w); }, "conv_transpose2d: expected a 3-D [C, H, W] or 4-D");
  expect_error([&] { conv_transpose2d(x, w, {}, 0); }, "conv_transpose2d: stride and dilation must be positive");
  expect_error([&] { conv_transpose2d(x, w, {}, 1, -1); }, "conv_transpose2d: padding and output_padding must be non-negative");
  expect_error([&] { conv_transpose2d(x, w, {}, {1, 1, 1}); }, "conv_transpose2d: expected stride to have 1 or 2 values");
  expect_error([&] { conv_transpose2d(x, w, {}, 1, 3); }, "conv_transpose2d: the output size -1 (spatial dim 0)");
  expect_error([&] { conv_transpose2d(zeros({1, 4, 0, 3}), w); }, "conv_transpose2d: expected a non-empty spatial input");
  expect_error([&] { conv_transpose2d(Tensor(), w); }, "conv_transpose2d");
  expect_error([&] { conv_transpose2d(x.to(kInt64), w.to(kInt64)); },
               "conv_transpose2d: expected a floating-point input, got int64");
  expect_error([&] { conv_transpose2d(x, w.to(kFloat64)); },
               "conv_transpose2d: expected weight to have dtype float32 (as input), got float64");
  expect_error([&] { conv_transpose2d(x, w, zeros({2}, kFloat64)); },
               "conv_transpose2d: expected bias to have dtype float32 (as input), got float64");
  expect_error([&] { conv_transpose2d(x, w, {}, int64_t(1) << 62); }, "conv_transpose2d: stride [4611686018427387904, "
                                                                       "4611686018427387904], padding [0, 0]");
  expect_error([&] { conv_transpose1d(zeros({1, 4, 3}, kInt32), zeros({4, 2, 3}, kInt32)); },
               "conv_transpose1d: expected a floating-point input, got int32");
  expect_error([&] { conv_transpose1d(zeros({1, 4, 3}), zeros({4, 2, 3}), {}, 1, 0, 0, 1, {2, 2}); },
               "conv_transpose1d: expected dilation to have 1 value");
  expect_error([&] { conv_transpose1d(zeros({1, 4, 3}), zeros({4, 2, 3}), {}, 1, 0, 1); },
               "conv_transpose1d: output padding must be smaller than either stride or dilation");
  expect_error([&] { conv_transpose1d(zeros({4, 3, 3, 1}), zeros({4, 2, 3})); }, "conv_transpose1d: expected a 2-D [C, L] or 3-D");
}

// A decoder step (transposed conv up-sampling, then an activation and a conv): traced
// without a graph break, compiled equal to eager.
TEST(ConvTranspose, CompiledEqualsEager) {
  Tensor w1 = kiln::testing::rnd({4, 3, 3, 3}, 51, kFloat32, -0.4, 0.4), b1 = kiln::testing::rnd({6}, 52);
  Tensor w2 = kiln::testing::rnd({6, 2, 3}, 53, kFloat32, -0.4, 0.4);
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor h = relu(conv_transpose2d(in[0], w1, b1, 2, 1, 1, 2));
    Tensor l = conv_transpose1d(in[1], w2, {}, 2, 0, 1, 1, 1);
    return std::vector<Tensor>{h * 0.5 + 1.0, l.tanh()};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({2, 4, 5, 6}, 54), kiln::testing::rnd({3, 6, 7}, 55)};
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  const std::vector<Tensor> want = fn(kiln::testing::copies(in));
  ASSERT_EQ(want[0].sizes().vec(), (Shape{2, 6, 10, 12}));
  for (int call = 0; call < 2; ++call)
    EXPECT_TRUE(kiln::testing::all_close(f(kiln::testing::copies(in)), want, 1e-5)) << "call " << call;
}
