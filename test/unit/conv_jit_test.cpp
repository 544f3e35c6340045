// kiln's implicit-GEMM conv2d (codegen/gemm/conv.h) against a naive double
// loop over a sweep of (N, C, H, W, O, kernel, stride, padding, dilation,
// groups), 1x1 included, f32 and f64, with a bias, strided and channels-last
// inputs, NaN / inf, 1 and 2 threads, and blocks of every size; the compiled
// conv step (codegen/epilogue.cpp) against eager with each epilogue (batch
// norm, relu, residual add), that it is the path taken (gemm::conv_calls), an
// in-place weight update between calls, and concurrent callers.
//
// Tolerance: a conv output is a dot product of K = C/groups * kH * kW terms
// plus a bias; its rounding error is bounded by gamma_K = K u / (1 - K u) times
// the sum of the terms' magnitudes (u the unit roundoff), whatever the order of
// the sum, so the checks allow (K + 2) u * sum |w x| + |bias| u. Compiled vs
// eager (OpenBLAS, another order) allows twice that.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <thread>

#include "graph_test_util.h"

#include "codegen/gemm/conv.h"
#include "codegen/gemm/ukernel.h"
#include "codegen/executable.h"
#include "codegen/jit.h"
#include "codegen/gemm/path.h"
#include "frontend/compile.h"
#include "runtime/ops.h"

using namespace kiln;
namespace gemm = kiln::gemm;

namespace {

struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

struct Case {
  int64_t N, C, H, W, O, kH, kW, sh, sw, ph, pw, dh, dw, groups;
};

gemm::ConvShape shape_of(const Case &c) {
  gemm::ConvShape s;
  s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W, s.O = c.O, s.kH = c.kH, s.kW = c.kW, s.groups = c.groups;
  s.sh = c.sh, s.sw = c.sw, s.ph = c.ph, s.pw = c.pw, s.dh = c.dh, s.dw = c.dw;
  s.Ho = (c.H + 2 * c.ph - c.dh * (c.kH - 1) - 1) / c.sh + 1;
  s.Wo = (c.W + 2 * c.pw - c.dw * (c.kW - 1) - 1) / c.sw + 1;
  return s;
}

// Every axis moves: K below, at and above the k block (one, two, three
// blocks), O/groups below, at and above the 8-row tile (a row tail), pixels
// below, at and past the 48-column panel, rows narrower than a panel (many
// row segments per panel), stride 2 and 3, dilation 2, padding 0..3, groups
// 2 and 4, 1x1 (a plain GEMM), non-square kernels, N = 1.
const std::vector<Case> kCases = {
    {2, 64, 12, 13, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // W7's conv, small image: K = 576, three k blocks
    {1, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1},      // K = 27, O = 5: a tail tile only
    {2, 16, 8, 8, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1},     // 1x1: a plain GEMM, 17 rows
    {1, 8, 15, 17, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1},    // stride 2
    {2, 6, 13, 14, 9, 3, 3, 1, 1, 2, 2, 2, 2, 1},     // dilation 2
    {1, 8, 10, 12, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2},     // groups 2
    {1, 12, 9, 9, 20, 3, 3, 1, 1, 1, 1, 1, 1, 4},     // groups 4, 5 rows per group
    {2, 5, 7, 3, 7, 2, 3, 1, 2, 0, 1, 1, 1, 1},       // non-square kernel, rows of 2 pixels
    {1, 4, 1, 1, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1},       // a 1x1 image, all but one tap padding
    {1, 2, 40, 40, 8, 5, 5, 3, 3, 3, 3, 1, 1, 1},     // stride 3, padding 3
    {3, 32, 11, 11, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // K = 288, O = 33
    {1, 70, 6, 5, 16, 3, 3, 1, 1, 0, 0, 1, 1, 1},     // K = 630: blocks of 210, no padding
    {1, 600, 2, 2, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1},     // 1x1 with K = 600
    {1, 3, 30, 50, 8, 1, 3, 1, 1, 0, 1, 1, 3, 1},     // 1x3, dilation (1, 3)
};

template <class T> Tensor rnd(std::vector<int64_t> shape, uint64_t seed) {
  return kiln::testing::rnd(std::move(shape), seed, std::is_same_v<T, float> ? kFloat32 : kFloat64, -1, 1);
}

// The naive double loop: y[n, o, oh, ow] and the sum of its terms' magnitudes.
// A tap in the padding adds 0 * w, as eager's im2col + GEMM (and torch's) do:
// an infinite weight gives NaN next to the border.
struct NaiveRef {
  std::vector<double> y, mag;
};

NaiveRef naive(const gemm::ConvShape &s, const std::vector<double> &x, const std::vector<double> &w,
          const std::vector<double> *bias) {
  NaiveRef r;
  const int64_t Cg = s.Cg(), Og = s.Og();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t oh = 0; oh < s.Ho; ++oh)
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          double acc = bias ? (*bias)[size_t(o)] : 0, mag = bias ? std::abs((*bias)[size_t(o)]) : 0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < s.kH; ++kh)
              for (int64_t kw = 0; kw < s.kW; ++kw) {
                const int64_t ih = oh * s.sh - s.ph + kh * s.dh, iw = ow * s.sw - s.pw + kw * s.dw;
                const bool in = ih >= 0 && ih < s.H && iw >= 0 && iw < s.W;
                const double a = in ? x[size_t(((n * s.C + g * Cg + c) * s.H + ih) * s.W + iw)] : 0.0;
                const double b = w[size_t(((o * Cg + c) * s.kH + kh) * s.kW + kw)];
                acc += a * b, mag += std::abs(a * b);
              }
          r.y.push_back(acc);
          r.mag.push_back(mag);
        }
  return r;
}

template <class T>
::testing::AssertionResult matches(const gemm::ConvShape &s, const std::vector<double> &got, const NaiveRef &ref,
                                   double slack = 1) {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ref.y[i];
    if (std::isnan(want) || std::isinf(want)) {
      if (std::isnan(want) ? std::isnan(got[i]) : got[i] == want) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", want " << want;
    }
    const double tol = slack * (double(s.K()) + 2) * u * ref.mag[i] + 1e-300;
    if (!(std::abs(got[i] - want) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", want " << want << " (tol "
                                           << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// Runs kiln's conv on x (any layout) with a freshly packed w.
template <class T>
std::vector<double> run_conv(const gemm::ConvShape &s, const Tensor &x, const Tensor &w, const Tensor &bias,
                             int64_t block_pixels, int threads) {
  const int64_t xs[4] = {x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
  const int64_t ws[4] = {w.stride(0), w.stride(1), w.stride(2), w.stride(3)};
  auto pw = gemm::pack_conv_weight<T>(s, static_cast<const T *>(w.raw_data()), ws);
  Tensor y = detail::make_tensor({s.N, s.O, s.Ho, s.Wo}, x.dtype());
  std::fill_n(static_cast<T *>(y.raw_data()), y.numel(), T(12345)); // any value left unwritten shows
  gemm::conv2d<T>(s, static_cast<const T *>(x.raw_data()), xs, *pw,
                  bias.defined() ? static_cast<const T *>(bias.raw_data()) : nullptr, static_cast<T *>(y.raw_data()),
                  nullptr, nullptr, block_pixels, threads);
  return kiln::testing::vals(y);
}

template <class T> void sweep() {
  uint64_t seed = 1;
  for (const Case &c : kCases) {
    const gemm::ConvShape s = shape_of(c);
    ASSERT_FALSE(gemm::conv_unsupported(s)) << s.str();
    Tensor x = rnd<T>({c.N, c.C, c.H, c.W}, seed++), w = rnd<T>({c.O, c.C / c.groups, c.kH, c.kW}, seed++);
    Tensor b = rnd<T>({c.O}, seed++);
    const std::vector<double> xv = kiln::testing::vals(x), wv = kiln::testing::vals(w), bv = kiln::testing::vals(b);
    const NaiveRef plain = naive(s, xv, wv, nullptr), biased = naive(s, xv, wv, &bv);
    for (int threads : {1, 2})
      for (int64_t block : {int64_t(0), int64_t(1), int64_t(100)}) {
        SCOPED_TRACE(s.str() + " threads " + std::to_string(threads) + " block " + std::to_string(block));
        EXPECT_TRUE(matches<T>(s, run_conv<T>(s, x, w, Tensor(), block, threads), plain));
        EXPECT_TRUE(matches<T>(s, run_conv<T>(s, x, w, b, block, threads), biased));
      }
    // Any input strides: channels-last, and a view with a column stride of 2.
    SCOPED_TRACE(s.str() + " strided inputs");
    EXPECT_TRUE(matches<T>(s, run_conv<T>(s, x.contiguous(MemoryFormat::ChannelsLast), w, Tensor(), 0, 2), plain));
    Tensor wide = rnd<T>({c.N, c.C, c.H, 2 * c.W}, seed++);
    Tensor xs = wide.slice(3, 0, 2 * c.W, 2);
    const NaiveRef strided = naive(s, kiln::testing::vals(xs), wv, nullptr);
    EXPECT_TRUE(matches<T>(s, run_conv<T>(s, xs, w, Tensor(), 0, 1), strided));
    // A transposed weight layout ([kH, kW, C/g, O] memory) packs the same.
    Tensor wt = w.permute({2, 3, 1, 0}).contiguous().permute({3, 2, 0, 1});
    EXPECT_TRUE(matches<T>(s, run_conv<T>(s, x, wt, Tensor(), 0, 1), plain));
  }
}

} // namespace

TEST(ConvJit, MatchesNaiveLoopF32) {
  ThreadsGuard guard;
  sweep<float>();
}

TEST(ConvJit, MatchesNaiveLoopF64) {
  ThreadsGuard guard;
  sweep<double>();
}

TEST(ConvJit, NanAndInfPropagate) {
  const Case c{2, 9, 10, 11, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  const gemm::ConvShape s = shape_of(c);
  Tensor x = rnd<float>({c.N, c.C, c.H, c.W}, 50), w = rnd<float>({c.O, c.C, 3, 3}, 51);
  float *xp = static_cast<float *>(x.raw_data());
  xp[3 * 11 + 4] = std::numeric_limits<float>::quiet_NaN();      // image 0, channel 0
  xp[(1 * 9 + 4) * 110 + 55] = std::numeric_limits<float>::infinity();  // image 1, channel 4
  xp[(1 * 9 + 5) * 110 + 56] = -std::numeric_limits<float>::infinity(); // a neighbour: inf - inf = NaN
  static_cast<float *>(w.raw_data())[7] = std::numeric_limits<float>::infinity();
  const NaiveRef ref = naive(s, kiln::testing::vals(x), kiln::testing::vals(w), nullptr);
  int nans = 0, infs = 0;
  for (double v : ref.y) nans += std::isnan(v), infs += std::isinf(v);
  ASSERT_GT(nans, 0);
  ASSERT_GT(infs, 0);
  for (int threads : {1, 2}) EXPECT_TRUE(matches<float>(s, run_conv<float>(s, x, w, Tensor(), 0, threads), ref));
  // The reference's NaN and inf are eager's (im2col + OpenBLAS).
  const std::vector<double> eager = kiln::testing::vals(conv2d(x, w, {}, 1, 1));
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(std::isnan(eager[i]), std::isnan(ref.y[i])) << i;
    ASSERT_EQ(std::isinf(eager[i]), std::isinf(ref.y[i])) << i;
  }
}

TEST(ConvJit, DepthwiseIsLeftToItsKernel) {
  gemm::ConvShape s = shape_of({1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8});
  ASSERT_TRUE(gemm::conv_unsupported(s));
  EXPECT_NE(gemm::conv_unsupported(s)->find("depthwise"), std::string::npos);
  const int64_t ws[4] = {9, 9, 3, 1};
  std::vector<float> w(72);
  EXPECT_THROW(gemm::pack_conv_weight<float>(s, w.data(), ws), Error);
  // Channel multiplier 2, and a single input channel: eager's depthwise kernel too.
  EXPECT_TRUE(gemm::conv_unsupported(shape_of({1, 6, 6, 6, 12, 3, 3, 1, 1, 1, 1, 1, 1, 6})));
  EXPECT_TRUE(gemm::conv_unsupported(shape_of({1, 1, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1})));
}

// ---------------------------------------------------------------- compiled

namespace {
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct Bn {
  Tensor w, b, mean, var;
  Bn(int64_t c, uint64_t seed)
      : w(1.0 + 0.2 * rnd<float>({c}, seed)), b(0.2 * rnd<float>({c}, seed + 1)), mean(0.2 * rnd<float>({c}, seed + 2)),
        var(1.1 + 0.5 * rnd<float>({c}, seed + 3)) {}
  Tensor operator()(const Tensor &x) const { return batch_norm(x, w, b, mean, var, false, 0.1, 1e-5); }
};

// Compiled (KILN_GEMM as set) against eager, each result within twice the
// conv's bound (the eager conv sums in another order) times the epilogue's
// growth, NaN and inf where eager has them.
::testing::AssertionResult close_to_eager(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  return kiln::testing::all_close(got, want, 2e-5);
}

int64_t calls_of(const CompiledFunction &f, const std::vector<Tensor> &in, int times = 1) {
  const int64_t before = gemm::conv_calls();
  for (int i = 0; i < times; ++i) f(kiln::testing::copies(in));
  return gemm::conv_calls() - before;
}

// The steps of one compiled call by category ("gemm-jit", "blas", "kernel", ...).
std::vector<std::string> categories(const CompiledFunction &f, const std::vector<Tensor> &in) {
  std::vector<std::string> cats;
  codegen::ScopedStepObserver obs([&](const codegen::StepEvent &e) { cats.emplace_back(e.category); });
  f(kiln::testing::copies(in));
  return cats;
}

CompiledFunction compile_strict(const Fn &fn) {
  CompileOptions o;
  o.fallback = Fallback::Off;
  return compile(fn, o);
}
} // namespace

// W7 (a ResNet basic block) at a smaller size, and convs with a bias, stride 2
// and groups, each with its epilogue: compiled equals eager, through kiln's conv.
TEST(ConvJitCompiled, EpiloguesEqualEager) {
  ThreadsGuard guard;
  Tensor c1 = 0.1 * rnd<float>({16, 16, 3, 3}, 70), c2 = 0.1 * rnd<float>({16, 16, 3, 3}, 71);
  Tensor c3 = 0.1 * rnd<float>({24, 8, 3, 3}, 72), b3 = rnd<float>({24}, 73);
  const Bn bn1(16, 80), bn2(16, 90), bn3(24, 100);
  const std::vector<std::pair<const char *, Fn>> fns = {
      {"resnet block", [=](const std::vector<Tensor> &in) {
         Tensor h = relu(bn1(conv2d(in[0], c1, {}, 1, 1)));
         return std::vector<Tensor>{relu(bn2(conv2d(h, c2, {}, 1, 1)) + in[0])};
       }},
      {"bias, stride 2, groups 2, relu", [=](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{relu(bn3(conv2d(in[0], c3, b3, 2, 1, 1, 2)))};
       }},
      {"residual add only", [=](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{conv2d(in[0], c1, {}, 1, 1) + in[0]};
       }},
  };
  Tensor x = rnd<float>({3, 16, 17, 19}, 60);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto &[name, fn] : fns) {
      SCOPED_TRACE(std::string(name) + ", threads " + std::to_string(threads));
      CompiledFunction f = compile_strict(fn);
      const std::vector<Tensor> want = fn(kiln::testing::copies({x}));
      EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), want));
      EXPECT_GE(calls_of(f, {x}), 1) << "the compiled conv did not run kiln's conv";
      EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), want));
    }
  }
}

TEST(ConvJitCompiled, NanAndInfEqualEager) {
  Tensor w = 0.1 * rnd<float>({16, 16, 3, 3}, 110);
  const Bn bn(16, 120);
  Fn fn = [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(bn(conv2d(in[0], w, {}, 1, 1)) + in[0])};
  };
  Tensor x = rnd<float>({2, 16, 9, 10}, 130);
  float *p = static_cast<float *>(x.raw_data());
  p[5] = std::numeric_limits<float>::quiet_NaN();
  p[16 * 90 + 300] = std::numeric_limits<float>::infinity();
  p[16 * 90 + 391] = -std::numeric_limits<float>::infinity();
  CompiledFunction f = compile_strict(fn);
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
  EXPECT_GE(calls_of(f, {x}), 1);
}

// KILN_GEMM=blas keeps today's im2col + OpenBLAS conv: kiln's conv never runs.
TEST(ConvJitCompiled, BlasPathDoesNotRunIt) {
  Tensor w = 0.1 * rnd<float>({8, 8, 3, 3}, 140);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], w, {}, 1, 1))}; };
  Tensor x = rnd<float>({2, 8, 10, 10}, 141);
  const gemm::Path saved = gemm::path();
  gemm::set_path(gemm::Path::Blas); // read when the specialization is built: at the first call
  CompiledFunction f = compile_strict(fn);
  const int64_t calls = calls_of(f, {x});
  gemm::set_path(saved);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(calls_of(f, {x}), 0); // the function keeps the path it was built with
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
}

// The packed weight follows in-place updates of the captured weight (its
// version counter): the next call sees the new values, and eager agrees.
TEST(ConvJitCompiled, InPlaceWeightUpdateRepacks) {
  Tensor w = 0.1 * rnd<float>({16, 8, 3, 3}, 150);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], w, {}, 1, 1))}; };
  Tensor x = rnd<float>({2, 8, 12, 12}, 151);
  CompiledFunction f = compile_strict(fn);
  const std::vector<Tensor> before = f(kiln::testing::copies({x}));
  EXPECT_TRUE(close_to_eager(before, fn(kiln::testing::copies({x}))));
  w.mul_(-2.0); // flips which outputs relu keeps
  const std::vector<Tensor> after = f(kiln::testing::copies({x}));
  EXPECT_TRUE(close_to_eager(after, fn(kiln::testing::copies({x}))));
  EXPECT_FALSE(kiln::testing::all_close(after, before, 1e-3));
  // A write through data_ptr() counts as an update too.
  static_cast<float *>(w.data_ptr())[0] = 5.f;
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
}

// A weight that is a graph input (no parameter) is packed for each call into
// the call's scratch (the plan's arena), not into a packing allocated per call;
// every call sees its own weight.
TEST(ConvJitCompiled, InputWeightIsPackedIntoTheCallsScratch) {
  Fn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], in[1], {}, 1, 1))}; };
  Tensor x = rnd<float>({2, 8, 12, 12}, 200);
  CompiledFunction f = compile_strict(fn);
  Tensor w0 = 0.1 * rnd<float>({16, 8, 3, 3}, 201);
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x, w0})), fn(kiln::testing::copies({x, w0}))));
  EXPECT_GE(calls_of(f, {x, w0}), 1) << "the compiled conv did not run kiln's conv";
  const int64_t before = gemm::conv_weight_heap_packs();
  for (uint64_t i = 0; i < 3; ++i) {
    Tensor w = 0.1 * rnd<float>({16, 8, 3, 3}, 202 + i);
    EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x, w})), fn(kiln::testing::copies({x, w}))));
  }
  EXPECT_EQ(gemm::conv_weight_heap_packs() - before, 0) << "a call allocated its weight's packing";
}

// A conv2d with no epilogue runs as the same step as the fused ones (not as an
// eager op): kiln's conv with its weight packed once, a bias and stride 2
// included, the step counted in CompileStats; a depthwise conv runs on kiln's
// depthwise kernel (codegen/gemm/depthwise.h, depthwise_jit_test), not this one.
TEST(ConvJitCompiled, LoneConvRunsOnKilnsConv) {
  Tensor w = 0.1 * rnd<float>({24, 8, 3, 3}, 210), b = rnd<float>({24}, 211);
  Tensor dw = 0.1 * rnd<float>({8, 1, 3, 3}, 212);
  const std::vector<std::pair<const char *, Fn>> fns = {
      {"plain", [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{conv2d(in[0], w, {}, 1, 1)}; }},
      {"bias, stride 2", [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{conv2d(in[0], w, b, 2, 1)}; }},
      {"weight an input", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{conv2d(in[0], in[1], {}, 1)}; }},
  };
  Tensor x = rnd<float>({2, 8, 13, 11}, 213);
  for (const auto &[name, fn] : fns) {
    SCOPED_TRACE(name);
    const std::vector<Tensor> in = {x, w};
    CompiledFunction f = compile_strict(fn);
    EXPECT_TRUE(close_to_eager(f(kiln::testing::copies(in)), fn(kiln::testing::copies(in))));
    EXPECT_EQ(calls_of(f, in, 2), 2) << "the lone conv did not run kiln's conv";
    EXPECT_EQ(categories(f, in), std::vector<std::string>{"gemm-jit"});
    EXPECT_EQ(f.stats().packed_weight_bytes > 0, std::string(name) != "weight an input");
    w.mul_(-1); // a captured weight's update is seen
    EXPECT_TRUE(close_to_eager(f(kiln::testing::copies(in)), fn(kiln::testing::copies(in))));
  }
  Fn depthwise = [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{conv2d(in[0], dw, {}, 1, 1, 1, 8)};
  };
  CompiledFunction g = compile_strict(depthwise);
  EXPECT_TRUE(close_to_eager(g(kiln::testing::copies({x})), depthwise(kiln::testing::copies({x}))));
  EXPECT_EQ(calls_of(g, {x}), 0);
  EXPECT_EQ(categories(g, {x}), std::vector<std::string>{"gemm-jit"}); // kiln's depthwise kernel
}

// A chain of three 64-channel 3x3 convs: the layout pass's cost model (measured
// on eager's convs) would run it channels-last, where kiln's conv does not
// take a conv (eager's kernel ran them: 1.14x eager against 2.0x at [4, 64,
// 56, 56]); codegen's answer to the pass keeps it NCHW, so all three run on
// kiln's conv.
TEST(ConvJitCompiled, ConvChainStaysOnKilnsConv) {
  std::vector<Tensor> ws;
  for (int i = 0; i < 3; ++i) ws.push_back(0.05 * rnd<float>({64, 64, 3, 3}, uint64_t(230 + i)));
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor h = in[0];
    for (const Tensor &w : ws) h = relu(conv2d(h, w, {}, 1, 1));
    return std::vector<Tensor>{h};
  };
  const std::vector<Tensor> in = {rnd<float>({1, 64, 10, 10}, 240)};
  CompiledFunction f = compile_strict(fn);
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies(in)), fn(kiln::testing::copies(in))));
  EXPECT_EQ(calls_of(f, in), 3) << "a conv of the chain did not run kiln's conv";
  EXPECT_EQ(categories(f, in), std::vector<std::string>(3, "gemm-jit"));
}

// torch's rule, which eager follows: a channels-last input gives a
// channels-last conv result. A compiled function called with one (also after a
// call with an NCHW input, a second specialization) returns eager's strides, and
// so does the meta conv tracing records them from (found by fuzz_random_graph:
// test/fuzz-regressions/random_graph/crash-conv-channels-last-output-strides).
TEST(ConvJitCompiled, ChannelsLastInputGivesEagersChannelsLastResult) {
  Tensor w = 0.1 * rnd<float>({4, 3, 1, 1}, 230), w3 = 0.1 * rnd<float>({6, 3, 3, 3}, 231);
  Tensor dw = 0.1 * rnd<float>({3, 1, 3, 3}, 232);
  const std::vector<std::pair<const char *, Fn>> fns = {
      {"1x1, stride 2x1, dilation", [=](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{conv2d(in[0], w, {}, {2, 1}, {1, 2}, {2, 1})};
       }},
      {"3x3 with relu", [=](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{relu(conv2d(in[0], w3, {}, 1, 1))};
       }},
      {"depthwise", [=](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{conv2d(in[0], dw, {}, 1, 1, 1, 3)};
       }},
  };
  const Tensor nchw = rnd<float>({2, 3, 9, 7}, 233);
  const Tensor nhwc = nchw.contiguous(MemoryFormat::ChannelsLast);
  const Tensor meta = detail::make_view(detail::make_tensor({0}, kFloat32, true), nhwc.sizes(), nhwc.strides(), 0);
  for (const auto &[name, fn] : fns) {
    SCOPED_TRACE(name);
    const Tensor m = fn({meta})[0];
    EXPECT_TRUE(m.is_meta());
    EXPECT_TRUE(m.is_contiguous(MemoryFormat::ChannelsLast) && !m.is_contiguous()) << shape_str(m.strides());
    CompiledFunction f = compile_strict(fn);
    for (const Tensor &x : {nchw, nhwc, nhwc}) {
      const std::vector<Tensor> want = fn(kiln::testing::copies({x}));
      const std::vector<Tensor> got = f(kiln::testing::copies({x}));
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].strides(), want[0].strides()) << "input strides " << shape_str(x.strides());
      EXPECT_TRUE(close_to_eager(got, want));
    }
  }
}

// Callers on several threads at once (each call also spreading over the pool),
// while the weight stays the same: every result equals eager's.
TEST(ConvJitCompiled, ConcurrentCallers) {
  ThreadsGuard guard;
  set_num_threads(2);
  Tensor w = 0.1 * rnd<float>({16, 16, 3, 3}, 160);
  const Bn bn(16, 170);
  Fn fn = [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(bn(conv2d(in[0], w, {}, 1, 1)) + in[0])};
  };
  CompiledFunction f = compile_strict(fn);
  std::vector<Tensor> xs, want;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(rnd<float>({2, 16, 11, 13}, 180 + uint64_t(i)));
    want.push_back(fn(kiln::testing::copies({xs.back()}))[0]);
  }
  const int64_t before = gemm::conv_calls();
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 10; ++r)
        if (!close_to_eager(f({xs[size_t(t)]}), {want[size_t(t)]})) ++bad[size_t(t)];
    });
  for (std::thread &t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[size_t(t)], 0) << "caller " << t;
  EXPECT_GE(gemm::conv_calls() - before, 40);
}

// A function compiled under a ScopedJit (kiln bench's cold-compile timing) that
// is gone before the next compile: the micro-kernels the first one compiled
// must outlive it (they are kept process-wide, in Jit::global()).
TEST(ConvJitCompiled, MicroKernelsOutliveAScopedJit) {
  Tensor w = 0.1 * rnd<float>({24, 8, 3, 3}, 190);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], w, {}, 1, 1))}; };
  Tensor x = rnd<float>({2, 8, 9, 9}, 191);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln-conv-jit-test-" + std::to_string(::getpid()));
  codegen::JitOptions jo;
  jo.cache_dir = dir.string();
  for (int round = 0; round < 2; ++round) { // cold, then warm from the disk cache, as kiln bench does
    auto jit = std::make_unique<codegen::Jit>(jo);
    codegen::ScopedJit use(*jit);
    CompiledFunction f = compile_strict(fn);
    EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
  }
  CompiledFunction g = compile_strict(fn);
  EXPECT_TRUE(close_to_eager(g(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
  EXPECT_GE(calls_of(g, {x}), 1);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// The micro-kernels are kept in a process-wide table, so they compile in
// Jit::global() (never destroyed), not in a ScopedJit that may be gone when the
// table hands them out again (kiln bench crashed in W7 that way). The global
// Jit reads KILN_CACHE_DIR once per process: the check runs in a child (this
// binary again, this test only) whose disk cache is an empty directory of its
// own, so that it compiles whatever cache the user running it has (a kernel
// found on disk counts no compile).
TEST(ConvJit, MicroKernelsCompileInTheGlobalJit) {
  if (std::getenv("KILN_CONV_JIT_TEST_CHILD")) {
    const char *dir = std::getenv("KILN_CACHE_DIR");
    ASSERT_TRUE(dir && *dir);
    ASSERT_EQ(codegen::Jit::global().options().cache_dir, dir);
    ASSERT_EQ(codegen::Jit::global().stats().disk_hits, 0);
    gemm::Config c = gemm::default_config<float>();
    c.mr = 5, c.unroll = 3, c.mc = 250; // a tile no other test uses
    const int64_t before = codegen::Jit::global().stats().compiles;
    {
      codegen::Jit jit;
      codegen::ScopedJit use(jit);
      ASSERT_TRUE(gemm::micro_kernel<float>(c, 5));
      EXPECT_EQ(jit.stats().requests, 0);
    }
    EXPECT_EQ(codegen::Jit::global().stats().compiles, before + 1);
    return;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-conv-jit-global-XXXXXX").string();
  ASSERT_TRUE(::mkdtemp(tmpl.data())) << "mkdtemp " << tmpl;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "KILN_CONV_JIT_TEST_CHILD=1 KILN_CACHE_DIR='" + tmpl + "' '" + self +
                          "' --gtest_filter=ConvJit.MicroKernelsCompileInTheGlobalJit 2>&1";
  FILE *p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p) << cmd;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}
