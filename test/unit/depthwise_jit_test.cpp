// kiln's compiled depthwise conv2d (codegen/gemm/depthwise.h) against a naive
// double loop over a sweep of (N, C, H, W, kernel 1/3/5, stride 1/2, padding
// 0/1/2, dilation 1/2, channel multiplier 1/2), f32 and f64, with and without
// a bias, strided inputs, NaN / inf in input and weight, 1 and 2 threads and
// several blockings (the output in y, or per block to a callback); then the
// compiled conv step (codegen/epilogue.cpp) against eager with each epilogue
// (none, bias, batch norm + relu, residual add), that it is the path taken
// (gemm::depthwise_calls), an in-place weight update between calls, a weight
// that is a graph input, KILN_GEMM=blas, and concurrent callers.
//
// Tolerance: an output is bias + kH * kW products; its rounding error is at
// most (kH * kW + 2) u times the sum of the terms' magnitudes (u the unit
// roundoff); compiled vs eager allows the all_close tolerance of the other
// conv tests (2e-5 relative), the sums being in the same order.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <thread>

#include "graph_test_util.h"

#include "codegen/gemm/depthwise.h"
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
  int64_t N, C, H, W, M, k, s, p, d;
};

gemm::ConvShape shape_of(const Case &c) {
  gemm::ConvShape s;
  s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W, s.O = c.C * c.M, s.kH = c.k, s.kW = c.k, s.groups = c.C;
  s.sh = s.sw = c.s, s.ph = s.pw = c.p, s.dh = s.dw = c.d;
  s.Ho = (c.H + 2 * c.p - c.d * (c.k - 1) - 1) / c.s + 1;
  s.Wo = (c.W + 2 * c.p - c.d * (c.k - 1) - 1) / c.s + 1;
  return s;
}

// Each axis moves: kernel 1, 3, 5; stride 1, 2; padding 0, 1, 2; dilation 1,
// 2; multiplier 1, 2; rows wider than a vector (16 floats), as wide, narrower
// (8, 4 and scalar chunks), a last chunk that overlaps; MobileNet's shape.
std::vector<Case> cases() {
  std::vector<Case> v = {
      {2, 8, 28, 28, 1, 3, 1, 1, 1}, // the example's geometry, fewer channels
      {1, 5, 13, 37, 1, 3, 2, 1, 1}, // stride 2, odd width
      {2, 3, 9, 9, 2, 5, 1, 2, 1},   // 5x5, multiplier 2
      {1, 4, 17, 19, 1, 3, 1, 2, 2}, // dilation 2
      {1, 6, 6, 5, 1, 3, 1, 1, 1},   // rows of 5: scalar-ish chunks
      {1, 3, 10, 11, 2, 1, 1, 0, 1}, // 1x1
      {1, 3, 11, 20, 1, 1, 2, 0, 1}, // 1x1 stride 2
      {1, 2, 1, 1, 1, 3, 1, 1, 1},   // a 1x1 image: all but one tap padding
      {2, 4, 12, 40, 1, 5, 2, 2, 2}, // 5x5, stride 2, dilation 2
  };
  for (int64_t k : {1, 3, 5})
    for (int64_t st : {1, 2})
      for (int64_t p : {0, 1, 2})
        for (int64_t d : {1, 2})
          for (int64_t m : {1, 2}) {
            const int64_t H = 7 + (k + st + p + d + m) % 5 * 3, W = 9 + (k * 3 + p + d) % 7 * 4;
            if (H + 2 * p < d * (k - 1) + 1 || W + 2 * p < d * (k - 1) + 1) continue;
            v.push_back({1 + (k + p) % 2, 3, H, W, m, k, st, p, d});
          }
  return v;
}

template <class T> Tensor rnd(std::vector<int64_t> shape, uint64_t seed) {
  return kiln::testing::rnd(std::move(shape), seed, std::is_same_v<T, float> ? kFloat32 : kFloat64, -1, 1);
}

// The naive double loop, out-of-range taps skipped (eager's rule): y and the
// sum of each output's terms' magnitudes.
struct NaiveRef {
  std::vector<double> y, mag;
};
NaiveRef naive(const gemm::ConvShape &s, const std::vector<double> &x, const std::vector<double> &w,
          const std::vector<double> *bias) {
  NaiveRef r;
  const int64_t M = s.O / s.C;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t oh = 0; oh < s.Ho; ++oh)
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          double acc = bias ? (*bias)[size_t(o)] : 0, mag = bias ? std::abs((*bias)[size_t(o)]) : 0;
          for (int64_t kh = 0; kh < s.kH; ++kh)
            for (int64_t kw = 0; kw < s.kW; ++kw) {
              const int64_t ih = oh * s.sh - s.ph + kh * s.dh, iw = ow * s.sw - s.pw + kw * s.dw;
              if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
              const double t = x[size_t(((n * s.C + o / M) * s.H + ih) * s.W + iw)] * w[size_t((o * s.kH + kh) * s.kW + kw)];
              acc += t, mag += std::abs(t);
            }
          r.y.push_back(acc);
          r.mag.push_back(mag);
        }
  return r;
}

template <class T>
::testing::AssertionResult matches(const gemm::ConvShape &s, const std::vector<double> &got, const NaiveRef &ref) {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  if (got.size() != ref.y.size()) return ::testing::AssertionFailure() << got.size() << " outputs, want " << ref.y.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ref.y[i];
    if (std::isnan(want) || std::isinf(want)) {
      if (std::isnan(want) ? std::isnan(got[i]) : got[i] == want) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", want " << want;
    }
    const double tol = double(s.kH * s.kW + 2) * u * ref.mag[i] + 1e-300;
    if (!(std::abs(got[i] - want) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", want " << want << " (tol " << tol
                                           << ")";
  }
  return ::testing::AssertionSuccess();
}

// Runs kiln's depthwise conv on x (rows contiguous) with a freshly packed w,
// into y, or (to_blocks) block by block through the callback into a copy.
template <class T>
std::vector<double> run_dw(const gemm::ConvShape &s, const Tensor &x, const Tensor &w, const Tensor &bias,
                           gemm::DwBlocking blk, int threads, bool to_blocks = false) {
  const int64_t xs[4] = {x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
  const int64_t ws[4] = {w.stride(0), w.stride(1), w.stride(2), w.stride(3)};
  auto pw = gemm::pack_depthwise_weight<T>(s, static_cast<const T *>(w.raw_data()), ws);
  Tensor y = detail::make_tensor({s.N, s.O, s.Ho, s.Wo}, x.dtype());
  std::fill_n(static_cast<T *>(y.raw_data()), y.numel(), T(12345)); // any value left unwritten shows
  struct Ctx {
    const gemm::ConvShape *s;
    T *y;
  } ctx{&s, static_cast<T *>(y.raw_data())};
  auto copy = [](void *p, int64_t image, int64_t c0, int64_t nc, int64_t p0, int64_t np, void *block, int64_t ldc) {
    auto *c = static_cast<Ctx *>(p);
    for (int64_t i = 0; i < nc; ++i)
      for (int64_t j = 0; j < np; ++j)
        c->y[((image * c->s->O) + c0 + i) * c->s->pixels() + p0 + j] = static_cast<const T *>(block)[i * ldc + j];
  };
  gemm::depthwise_conv2d<T>(s, static_cast<const T *>(x.raw_data()), xs, *pw,
                            bias.defined() ? static_cast<const T *>(bias.raw_data()) : nullptr,
                            to_blocks ? nullptr : static_cast<T *>(y.raw_data()), to_blocks ? +copy : nullptr, &ctx,
                            blk, threads);
  return kiln::testing::vals(y);
}

template <class T> void sweep() {
  uint64_t seed = 1;
  for (const Case &c : cases()) {
    const gemm::ConvShape s = shape_of(c);
    ASSERT_FALSE(gemm::depthwise_unsupported(s)) << s.str();
    Tensor x = rnd<T>({c.N, c.C, c.H, c.W}, seed++), w = rnd<T>({s.O, 1, c.k, c.k}, seed++), b = rnd<T>({s.O}, seed++);
    const std::vector<double> xv = kiln::testing::vals(x), wv = kiln::testing::vals(w), bv = kiln::testing::vals(b);
    const NaiveRef plain = naive(s, xv, wv, nullptr), biased = naive(s, xv, wv, &bv);
    const std::vector<gemm::DwBlocking> blockings = {gemm::depthwise_blocking<T>(s, 1), {1, 1}, {3, 2}, {s.O, s.Ho}};
    for (int threads : {1, 2})
      for (const gemm::DwBlocking &blk : blockings) {
        SCOPED_TRACE(s.str() + " threads " + std::to_string(threads) + " block " + std::to_string(blk.channels) +
                     " x " + std::to_string(blk.rows));
        EXPECT_TRUE(matches<T>(s, run_dw<T>(s, x, w, Tensor(), blk, threads), plain));
        EXPECT_TRUE(matches<T>(s, run_dw<T>(s, x, w, b, blk, threads), biased));
        EXPECT_TRUE(matches<T>(s, run_dw<T>(s, x, w, b, blk, threads, true), biased));
      }
    // Input channels and images strided apart (a slice of a wider batch).
    SCOPED_TRACE(s.str() + " strided input");
    Tensor wide = rnd<T>({c.N, 2 * c.C + 1, c.H, c.W}, seed++);
    Tensor xs = wide.slice(1, 1, 2 * c.C + 1, 2);
    EXPECT_TRUE(matches<T>(s, run_dw<T>(s, xs, w, Tensor(), {2, 3}, 1), naive(s, kiln::testing::vals(xs), wv, nullptr)));
  }
}

} // namespace

TEST(DepthwiseJit, MatchesNaiveLoopF32) { sweep<float>(); }
TEST(DepthwiseJit, MatchesNaiveLoopF64) { sweep<double>(); }

// NaN and inf in the input propagate; a NaN or inf weight never meets the
// padding (skipped taps, as eager's kernel): only outputs whose in-range taps
// include it are NaN / inf.
TEST(DepthwiseJit, NanAndInfPropagateAsEager) {
  for (const Case &c : std::vector<Case>{{2, 4, 11, 21, 1, 3, 1, 1, 1}, {1, 3, 12, 18, 2, 5, 2, 2, 1}}) {
    const gemm::ConvShape s = shape_of(c);
    Tensor x = rnd<float>({c.N, c.C, c.H, c.W}, 40), w = rnd<float>({s.O, 1, c.k, c.k}, 41);
    float *xp = static_cast<float *>(x.raw_data()), *wp = static_cast<float *>(w.raw_data());
    xp[3] = std::numeric_limits<float>::quiet_NaN();
    xp[c.H * c.W + 2 * c.W + 5] = std::numeric_limits<float>::infinity();
    xp[x.numel() - 1] = -std::numeric_limits<float>::infinity();
    wp[c.k * c.k * 2] = std::numeric_limits<float>::infinity(); // channel 2's first tap
    wp[c.k * c.k * 3 + c.k * c.k - 1] = std::numeric_limits<float>::quiet_NaN(); // channel 3's last tap
    const NaiveRef ref = naive(s, kiln::testing::vals(x), kiln::testing::vals(w), nullptr);
    for (int threads : {1, 2}) EXPECT_TRUE(matches<float>(s, run_dw<float>(s, x, w, Tensor(), {3, 4}, threads), ref));
    // The reference's NaN and inf are eager's.
    const std::vector<double> eager = kiln::testing::vals(conv2d(x, w, {}, c.s, c.p, c.d, c.C));
    ASSERT_EQ(eager.size(), ref.y.size());
    int nonfinite = 0;
    for (size_t i = 0; i < eager.size(); ++i) {
      ASSERT_EQ(std::isnan(eager[i]), std::isnan(ref.y[i])) << i;
      ASSERT_EQ(std::isinf(eager[i]), std::isinf(ref.y[i])) << i;
      nonfinite += !std::isfinite(eager[i]);
    }
    EXPECT_GT(nonfinite, 0);
  }
}

TEST(DepthwiseJit, RefusesWhatItDoesNotCover) {
  EXPECT_TRUE(gemm::depthwise_unsupported(shape_of({1, 4, 8, 8, 1, 3, 1, 1, 1})) == std::nullopt);
  gemm::ConvShape g = shape_of({1, 4, 8, 8, 1, 3, 1, 1, 1});
  g.groups = 2;
  EXPECT_TRUE(gemm::depthwise_unsupported(g));
  gemm::ConvShape huge = shape_of({1, 1, 4, 4, 1, 3, 1, 1, 1});
  huge.pw = 100000, huge.Wo = 200002;
  EXPECT_TRUE(gemm::depthwise_unsupported(huge));
}

// ---------------------------------------------------------------- compiled

namespace {
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct Bn {
  Tensor w, b, mean, var;
  Bn(int64_t c, uint64_t seed, DType t)
      : w(1.0 + 0.2 * kiln::testing::rnd({c}, seed, t)), b(0.2 * kiln::testing::rnd({c}, seed + 1, t)),
        mean(0.2 * kiln::testing::rnd({c}, seed + 2, t)), var(1.1 + 0.5 * kiln::testing::rnd({c}, seed + 3, t)) {}
  Tensor operator()(const Tensor &x) const { return batch_norm(x, w, b, mean, var, false, 0.1, 1e-5); }
};

::testing::AssertionResult close_to_eager(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  return kiln::testing::all_close(got, want, 2e-5);
}

int64_t calls_of(const CompiledFunction &f, const std::vector<Tensor> &in, int times = 1) {
  const int64_t before = gemm::depthwise_calls();
  for (int i = 0; i < times; ++i) f(kiln::testing::copies(in));
  return gemm::depthwise_calls() - before;
}

CompiledFunction compile_strict(const Fn &fn) {
  CompileOptions o;
  o.fallback = Fallback::Off;
  return compile(fn, o);
}

// The epilogues a depthwise conv carries in MobileNet-like blocks, for C
// channels, multiplier M, stride st, padding p, dilation d.
std::vector<std::pair<std::string, Fn>> epilogue_fns(int64_t C, int64_t M, int64_t k, int64_t st, int64_t p, int64_t d,
                                                     DType t, uint64_t seed) {
  Tensor w = 0.3 * kiln::testing::rnd({C * M, 1, k, k}, seed, t), b = kiln::testing::rnd({C * M}, seed + 1, t);
  const Bn bn(C * M, seed + 2, t);
  std::vector<std::pair<std::string, Fn>> v = {
      {"none", [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{conv2d(in[0], w, {}, st, p, d, C)}; }},
      {"bias", [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{conv2d(in[0], w, b, st, p, d, C)}; }},
      {"bn + relu", [=](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{relu(bn(conv2d(in[0], w, {}, st, p, d, C)))};
       }},
      {"bias + relu6 + conv output kept", [=](const std::vector<Tensor> &in) {
         Tensor y = conv2d(in[0], w, b, st, p, d, C);
         return std::vector<Tensor>{clamp(y, 0.0, 6.0), y};
       }},
  };
  if (M == 1 && st == 1 && 2 * p == d * (k - 1)) // same shape: a residual add
    v.push_back({"bn + residual", [=](const std::vector<Tensor> &in) {
                   return std::vector<Tensor>{bn(conv2d(in[0], w, {}, st, p, d, C)) + in[0]};
                 }});
  return v;
}
} // namespace

TEST(DepthwiseJitCompiled, EpiloguesEqualEager) {
  ThreadsGuard guard;
  struct G {
    int64_t N, C, H, W, M, k, st, p, d;
  };
  const std::vector<G> geoms = {{2, 16, 14, 14, 1, 3, 1, 1, 1}, {1, 8, 15, 17, 2, 3, 2, 1, 1}, {2, 6, 12, 10, 1, 5, 1, 4, 2},
                                {1, 4, 9, 33, 1, 1, 1, 0, 1},
                                // padded rows over an item's L1 budget: blocks of 2 channels x 10 (f64: 5) rows
                                {1, 8, 40, 200, 1, 3, 1, 1, 1}};
  uint64_t seed = 300;
  for (DType t : {kFloat32, kFloat64})
    for (const G &g : geoms) {
      Tensor x = kiln::testing::rnd({g.N, g.C, g.H, g.W}, seed++, t);
      for (const auto &[name, fn] : epilogue_fns(g.C, g.M, g.k, g.st, g.p, g.d, t, seed += 10))
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          SCOPED_TRACE(name + ", " + std::string(kiln::name(t)) + ", C " + std::to_string(g.C) + " k " +
                       std::to_string(g.k) + " stride " + std::to_string(g.st) + ", threads " + std::to_string(threads));
          CompiledFunction f = compile_strict(fn);
          const std::vector<Tensor> want = fn(kiln::testing::copies({x}));
          EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), want));
          EXPECT_EQ(calls_of(f, {x}), 1) << "the compiled conv did not run kiln's depthwise kernel";
        }
    }
}

TEST(DepthwiseJitCompiled, NanAndInfEqualEager) {
  Tensor w = 0.3 * kiln::testing::rnd({8, 1, 3, 3}, 400);
  static_cast<float *>(w.raw_data())[9 * 2] = std::numeric_limits<float>::infinity(); // next to the padding
  static_cast<float *>(w.raw_data())[9 * 5 + 4] = std::numeric_limits<float>::quiet_NaN();
  const Bn bn(8, 410, kFloat32);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(bn(conv2d(in[0], w, {}, 1, 1, 1, 8)))}; };
  Tensor x = kiln::testing::rnd({2, 8, 9, 20}, 420);
  float *p = static_cast<float *>(x.raw_data());
  p[5] = std::numeric_limits<float>::quiet_NaN();
  p[180 + 47] = std::numeric_limits<float>::infinity();
  p[x.numel() - 3] = -std::numeric_limits<float>::infinity();
  CompiledFunction f = compile_strict(fn);
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
  EXPECT_EQ(calls_of(f, {x}), 1);
}

// KILN_GEMM=blas keeps eager's depthwise kernel: kiln's never runs.
TEST(DepthwiseJitCompiled, BlasPathDoesNotRunIt) {
  Tensor w = 0.3 * kiln::testing::rnd({8, 1, 3, 3}, 430);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], w, {}, 1, 1, 1, 8))}; };
  Tensor x = kiln::testing::rnd({2, 8, 10, 10}, 431);
  const gemm::Path saved = gemm::path();
  gemm::set_path(gemm::Path::Blas);
  CompiledFunction f = compile_strict(fn);
  const int64_t calls = calls_of(f, {x});
  gemm::set_path(saved);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(calls_of(f, {x}), 0);
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
}

// The prepared taps follow in-place updates of the captured weight.
TEST(DepthwiseJitCompiled, InPlaceWeightUpdateChangesTheNextResult) {
  Tensor w = 0.3 * kiln::testing::rnd({12, 1, 3, 3}, 440), b = kiln::testing::rnd({12}, 441);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], w, b, 1, 1, 1, 12))}; };
  Tensor x = kiln::testing::rnd({2, 12, 12, 12}, 442);
  CompiledFunction f = compile_strict(fn);
  const std::vector<Tensor> before = f(kiln::testing::copies({x}));
  EXPECT_TRUE(close_to_eager(before, fn(kiln::testing::copies({x}))));
  EXPECT_GT(f.stats().packed_weight_bytes, 0);
  w.mul_(-2.0);
  const std::vector<Tensor> after = f(kiln::testing::copies({x}));
  EXPECT_TRUE(close_to_eager(after, fn(kiln::testing::copies({x}))));
  EXPECT_FALSE(kiln::testing::all_close(after, before, 1e-3));
  static_cast<float *>(w.data_ptr())[4] = 7.f; // a write through data_ptr()
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
  b.add_(1.0); // the bias is read per call
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
}

// A weight that is a graph input: each call's own weight, prepared into the call's scratch.
TEST(DepthwiseJitCompiled, InputWeight) {
  Fn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], in[1], {}, 2, 1, 1, 8))}; };
  Tensor x = kiln::testing::rnd({2, 8, 13, 12}, 450);
  CompiledFunction f = compile_strict(fn);
  const int64_t heap = gemm::depthwise_weight_heap_packs();
  for (uint64_t i = 0; i < 3; ++i) {
    Tensor w = 0.3 * kiln::testing::rnd({8, 1, 3, 3}, 451 + i);
    EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x, w})), fn(kiln::testing::copies({x, w}))));
    EXPECT_EQ(calls_of(f, {x, w}), 1);
  }
  EXPECT_EQ(f.stats().packed_weight_bytes, 0);
  EXPECT_EQ(gemm::depthwise_weight_heap_packs() - heap, 0) << "a call allocated its weight's taps";
}

// A lone depthwise conv (no epilogue) is a step on kiln's kernel, its taps
// prepared once (CompileStats), not an eager op.
TEST(DepthwiseJitCompiled, LoneConvRunsOnKilnsKernel) {
  Tensor w = 0.3 * kiln::testing::rnd({8, 1, 3, 3}, 490), b = kiln::testing::rnd({8}, 491);
  Fn fn = [=](const std::vector<Tensor> &in) { return std::vector<Tensor>{conv2d(in[0], w, b, 2, 1, 1, 8)}; };
  Tensor x = kiln::testing::rnd({2, 8, 13, 11}, 492);
  CompiledFunction f = compile_strict(fn);
  EXPECT_TRUE(close_to_eager(f(kiln::testing::copies({x})), fn(kiln::testing::copies({x}))));
  EXPECT_EQ(calls_of(f, {x}, 2), 2);
  EXPECT_EQ(f.stats().packed_weight_bytes, 8 * 9 * 4);
}

// Callers on several threads at once (each call spreading over the pool),
// images large enough that their calls overlap.
TEST(DepthwiseJitCompiled, ConcurrentCallers) {
  ThreadsGuard guard;
  set_num_threads(2);
  Tensor w = 0.3 * kiln::testing::rnd({16, 1, 3, 3}, 460);
  const Bn bn(16, 470, kFloat32);
  Fn fn = [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(bn(conv2d(in[0], w, {}, 1, 1, 1, 16)) + in[0])};
  };
  CompiledFunction f = compile_strict(fn);
  std::vector<Tensor> xs, want;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(kiln::testing::rnd({4, 16, 28, 30}, 480 + uint64_t(i)));
    want.push_back(fn(kiln::testing::copies({xs.back()}))[0]);
  }
  const int64_t before = gemm::depthwise_calls();
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 20; ++r)
        if (!close_to_eager(f({xs[size_t(t)]}), {want[size_t(t)]})) ++bad[size_t(t)];
    });
  for (std::thread &t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[size_t(t)], 0) << "caller " << t;
  EXPECT_GE(gemm::depthwise_calls() - before, 80);
}
