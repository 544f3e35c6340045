// Winograd F(2x2, 3x3) in kiln's conv2d (codegen/gemm/winograd.h) against a
// naive double loop: odd and even output sizes (half tiles), padding 0..2,
// channel counts with an mr tail and with several k blocks, a 1x1 image, tiles
// whose panel spans several tile rows, bias, channels-last and strided inputs,
// 1 and 2 threads and blocks of every size; that it is the path taken
// (gemm::conv_winograd_items), and that NaN, inf and huge values take the
// direct conv where they lie and give the direct conv's (eager's) NaN and inf.
//
// Tolerance (the bound winograd.h states): with u the unit roundoff, an output
// may differ from the exact conv by (C + 8) u times the Winograd formula
// evaluated on magnitudes,
//   |A^T| [ sum_c (|G| |g_c| |G^T|) (.) (|B^T| |d_c| |B|) ] |A|,
// plus |bias| u. The check allows twice that. It is computed here from the
// transforms' matrices on magnitudes, independently of the code under test;
// the expected values are the double loop's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_support.h"
#include "graph_test_util.h"

#include "codegen/gemm/conv.h"
#include "codegen/gemm/winograd.h"
#include "runtime/ops.h"

using namespace kiln;
namespace gemm = kiln::gemm;
using kiln::testing::ThreadsGuard;

namespace {

struct Case {
  int64_t N, C, H, W, O, pad;
};

gemm::ConvShape shape_of(const Case &c) {
  gemm::ConvShape s;
  s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W, s.O = c.O, s.kH = 3, s.kW = 3, s.ph = c.pad, s.pw = c.pad;
  s.Ho = c.H + 2 * c.pad - 2, s.Wo = c.W + 2 * c.pad - 2;
  return s;
}

const std::vector<Case> kCases = {
    {2, 64, 12, 13, 64, 1},  // W7's conv on a small image; Wo = 13: a half tile per row
    {1, 16, 7, 9, 17, 0},    // no padding, Ho = 5 and Wo = 7 odd, O = 17: an mr tail of one row
    {1, 300, 6, 6, 24, 1},   // C = 300: k blocks of the micro-kernels (kc < 300)
    {3, 16, 1, 1, 16, 1},    // a 1x1 image: one half tile per image
    {2, 20, 30, 4, 16, 2},   // padding 2, Wo = 6: a panel spans many tile rows
    {1, 24, 40, 50, 33, 1},  // 25 tiles per row: panels start inside tile rows
};

template <class T> int64_t nr_of(const gemm::ConvShape &s) { return gemm::conv_config<T>(s).nr(); }

template <class T> Tensor rnd(std::vector<int64_t> shape, uint64_t seed) {
  return kiln::testing::rnd(std::move(shape), seed, std::is_same_v<T, float> ? kFloat32 : kFloat64, -1, 1);
}

// y from the double loop, and per output the Winograd bound's magnitude sum
// and the direct conv's (sum |w x|: where a NaN or inf makes the first one
// NaN, the item ran the direct conv, within (9 C + 2) u of it).
struct WinoRef {
  std::vector<double> y, mag, direct_mag;
};

double at(const gemm::ConvShape &s, const std::vector<double> &x, int64_t n, int64_t c, int64_t ih, int64_t iw) {
  if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) return 0;
  return x[size_t(((n * s.C + c) * s.H + ih) * s.W + iw)];
}

WinoRef reference(const gemm::ConvShape &s, const std::vector<double> &x, const std::vector<double> &w,
              const std::vector<double> *bias) {
  WinoRef r;
  r.y.assign(size_t(s.N * s.O * s.Ho * s.Wo), 0.0);
  r.mag.assign(r.y.size(), 0.0);
  r.direct_mag.assign(r.y.size(), 0.0);
  auto out = [&](int64_t n, int64_t o, int64_t oh, int64_t ow) { return size_t(((n * s.O + o) * s.Ho + oh) * s.Wo + ow); };
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t oh = 0; oh < s.Ho; ++oh)
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          double acc = bias ? (*bias)[size_t(o)] : 0, mag = bias ? std::abs((*bias)[size_t(o)]) : 0;
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t kh = 0; kh < 3; ++kh)
              for (int64_t kw = 0; kw < 3; ++kw) {
                const double t =
                    at(s, x, n, c, oh - s.ph + kh, ow - s.pw + kw) * w[size_t(((o * s.C + c) * 3 + kh) * 3 + kw)];
                acc += t, mag += std::abs(t);
              }
          r.y[out(n, o, oh, ow)] = acc;
          r.direct_mag[out(n, o, oh, ow)] = mag;
        }
  // The bound's magnitudes, tile by tile: |G|, |B^T| and |A^T| as matrices.
  const double G[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, .5, .5}, {0, 0, 1}};
  const double Bt[4][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}};
  const double At[2][4] = {{1, 1, 1, 0}, {0, 1, 1, 1}};
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t th = 0; th < (s.Ho + 1) / 2; ++th)
        for (int64_t tc = 0; tc < (s.Wo + 1) / 2; ++tc) {
          double m[4][4] = {};
          for (int64_t c = 0; c < s.C; ++c) {
            double U[4][4] = {}, V[4][4] = {};
            for (int a = 0; a < 4; ++a)
              for (int b = 0; b < 4; ++b)
                for (int i = 0; i < 3; ++i)
                  for (int j = 0; j < 3; ++j)
                    U[a][b] += G[a][i] * std::abs(w[size_t(((o * s.C + c) * 3 + i) * 3 + j)]) * G[b][j];
            for (int a = 0; a < 4; ++a)
              for (int b = 0; b < 4; ++b)
                for (int i = 0; i < 4; ++i)
                  for (int j = 0; j < 4; ++j)
                    V[a][b] += Bt[a][i] * std::abs(at(s, x, n, c, 2 * th - s.ph + i, 2 * tc - s.pw + j)) * Bt[b][j];
            for (int a = 0; a < 4; ++a)
              for (int b = 0; b < 4; ++b) m[a][b] += U[a][b] * V[a][b];
          }
          for (int u = 0; u < 2; ++u)
            for (int v = 0; v < 2; ++v) {
              if (2 * th + u >= s.Ho || 2 * tc + v >= s.Wo) continue;
              double y = 0;
              for (int a = 0; a < 4; ++a)
                for (int b = 0; b < 4; ++b) y += At[u][a] * m[a][b] * At[v][b];
              r.mag[out(n, o, 2 * th + u, 2 * tc + v)] = y + (bias ? std::abs((*bias)[size_t(o)]) : 0);
            }
        }
  return r;
}

template <class T>
::testing::AssertionResult within_bound(const gemm::ConvShape &s, const std::vector<double> &got, const WinoRef &ref) {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ref.y[i];
    if (!std::isfinite(want)) {
      if (std::isnan(want) ? std::isnan(got[i]) : got[i] == want) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", want " << want;
    }
    const double tol = (std::isfinite(ref.mag[i]) ? 2 * (double(s.C) + 8) * u * ref.mag[i]
                                                   : (9 * double(s.C) + 2) * u * ref.direct_mag[i]) +
                       1e-300;
    if (!(std::abs(got[i] - want) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", want " << want << " (tol "
                                           << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

template <class T>
std::vector<double> run_conv(const gemm::ConvShape &s, const Tensor &x, const Tensor &w, const Tensor &bias,
                             int64_t block_pixels, int threads) {
  const int64_t xs[4] = {x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
  const int64_t ws[4] = {w.stride(0), w.stride(1), w.stride(2), w.stride(3)};
  // Winograd panels whether or not the shape's cost would choose them (the
  // small edge shapes here would not: ShapesItTakes tests that choice).
  gemm::PackedConvWeight<T> k = gemm::conv_kernels<T>(s);
  k.winograd = true;
  std::vector<T> panels(size_t(k.bytes()) / sizeof(T) + 64);
  T *dst = panels.data() + (64 - reinterpret_cast<uintptr_t>(panels.data()) % 64) % 64 / sizeof(T);
  const gemm::PackedConvWeight<T> packed = gemm::pack_conv_weight_into<T>(k, static_cast<const T *>(w.raw_data()), ws, dst);
  const gemm::PackedConvWeight<T> *pw = &packed;
  Tensor y = detail::make_tensor({s.N, s.O, s.Ho, s.Wo}, x.dtype());
  std::fill_n(static_cast<T *>(y.raw_data()), y.numel(), T(12345)); // any value left unwritten shows
  gemm::conv2d<T>(s, static_cast<const T *>(x.raw_data()), xs, *pw,
                  bias.defined() ? static_cast<const T *>(bias.raw_data()) : nullptr, static_cast<T *>(y.raw_data()),
                  nullptr, nullptr, block_pixels, threads);
  return kiln::testing::vals(y);
}

template <class T> void sweep() {
  ThreadsGuard guard;
  uint64_t seed = 1;
  for (const Case &c : kCases) {
    const gemm::ConvShape s = shape_of(c);
    ASSERT_TRUE(gemm::winograd_eligible(s)) << s.str();
    Tensor x = rnd<T>({c.N, c.C, c.H, c.W}, seed++), w = rnd<T>({c.O, c.C, 3, 3}, seed++), b = rnd<T>({c.O}, seed++);
    const std::vector<double> xv = kiln::testing::vals(x), wv = kiln::testing::vals(w), bv = kiln::testing::vals(b);
    const WinoRef plain = reference(s, xv, wv, nullptr), biased = reference(s, xv, wv, &bv);
    const int64_t items = gemm::conv_winograd_items(), direct = gemm::conv_winograd_direct_items();
    for (int threads : {1, 2})
      for (int64_t block : {int64_t(0), int64_t(1), int64_t(100)}) {
        SCOPED_TRACE(s.str() + " threads " + std::to_string(threads) + " block " + std::to_string(block));
        EXPECT_TRUE(within_bound<T>(s, run_conv<T>(s, x, w, Tensor(), block, threads), plain));
        EXPECT_TRUE(within_bound<T>(s, run_conv<T>(s, x, w, b, block, threads), biased));
      }
    SCOPED_TRACE(s.str() + " strided inputs");
    EXPECT_TRUE(within_bound<T>(s, run_conv<T>(s, x.contiguous(MemoryFormat::ChannelsLast), w, Tensor(), 0, 2), plain));
    Tensor wide = rnd<T>({c.N, c.C, c.H, 2 * c.W}, seed++);
    Tensor xs = wide.slice(3, 0, 2 * c.W, 2);
    EXPECT_TRUE(within_bound<T>(s, run_conv<T>(s, xs, w, Tensor(), 0, 1), reference(s, kiln::testing::vals(xs), wv, nullptr)));
    EXPECT_GE(gemm::conv_winograd_items() - items, 14 * c.N) << "the convs did not run Winograd";
    EXPECT_EQ(gemm::conv_winograd_direct_items(), direct) << "finite inputs took the direct conv";
  }
}

} // namespace

TEST(WinogradConv, MatchesNaiveLoopF32) { sweep<float>(); }
TEST(WinogradConv, MatchesNaiveLoopF64) { sweep<double>(); }

// Which shapes it computes: 3x3, stride 1, no dilation, one group; and which
// conv2d sends to it: also 16+ channels, and tiles that fill the
// micro-kernels' panels well enough to save a quarter of the multiplies.
TEST(WinogradConv, ShapesItTakes) {
  auto takes = [](const gemm::ConvShape &s) { return gemm::winograd_shape(s, nr_of<float>(s)); };
  gemm::ConvShape s = shape_of({1, 64, 16, 16, 64, 1});
  EXPECT_TRUE(takes(s));
  // Shapes Winograd does not compute: neither eligible nor taken.
  std::vector<std::pair<const char *, gemm::ConvShape>> others(4, {"", s});
  others[0].first = "stride 2", others[0].second.sh = others[0].second.sw = 2, others[0].second.Ho = others[0].second.Wo = 8;
  others[1].first = "dilation 2", others[1].second.dh = others[1].second.dw = 2, others[1].second.Ho = others[1].second.Wo = 14;
  others[2].first = "groups 2", others[2].second.groups = 2;
  others[3].first = "5x5", others[3].second.kH = others[3].second.kW = 5, others[3].second.Ho = others[3].second.Wo = 14;
  for (const auto &[why, o] : others) {
    EXPECT_FALSE(gemm::winograd_eligible(o)) << why;
    EXPECT_FALSE(takes(o)) << why;
  }
  gemm::ConvShape t = s;
  t.C = 8;
  EXPECT_FALSE(takes(t)) << "8 input channels";
  EXPECT_TRUE(gemm::winograd_eligible(t));
  EXPECT_FALSE(takes(shape_of({1, 64, 2, 2, 64, 1}))) << "one tile per image";
  // 16 tiles of a 7 x 7 image in a panel of 48 (nr = 48 on AVX-512): about
  // as many multiplies padded as saved; 14 x 14 fills it well enough.
  if (nr_of<float>(s) == 48) {
    EXPECT_FALSE(takes(shape_of({8, 512, 7, 7, 512, 1})));
    EXPECT_TRUE(takes(shape_of({8, 256, 14, 14, 256, 1})));
  }
}

// NaN and inf in the input: the items whose windows hold them take the direct
// conv (exactly its NaN and inf, which are eager's), the others Winograd.
TEST(WinogradConv, NanAndInfTakeTheDirectConvWhereTheyLie) {
  ThreadsGuard guard;
  const Case c{2, 16, 20, 11, 16, 1};
  const gemm::ConvShape s = shape_of(c);
  Tensor x = rnd<float>({c.N, c.C, c.H, c.W}, 70), w = rnd<float>({c.O, c.C, 3, 3}, 71);
  float *xp = static_cast<float *>(x.raw_data());
  xp[3 * 11 + 4] = std::numeric_limits<float>::quiet_NaN();                // image 0, channel 0, row 3
  xp[(1 * 16 + 4) * 220 + 5 * 11 + 5] = std::numeric_limits<float>::infinity();   // image 1, channel 4, row 5
  xp[(1 * 16 + 5) * 220 + 5 * 11 + 6] = -std::numeric_limits<float>::infinity();  // a neighbour: inf - inf
  const WinoRef ref = reference(s, kiln::testing::vals(x), kiln::testing::vals(w), nullptr);
  const std::vector<double> eager = kiln::testing::vals(conv2d(x, w, {}, 1, 1));
  int nans = 0, infs = 0;
  for (size_t i = 0; i < eager.size(); ++i) {
    nans += std::isnan(eager[i]), infs += std::isinf(eager[i]);
    ASSERT_EQ(std::isnan(eager[i]), std::isnan(ref.y[i])) << i;
    ASSERT_EQ(std::isinf(eager[i]), std::isinf(ref.y[i])) << i;
  }
  ASSERT_GT(nans, 0);
  ASSERT_GT(infs, 0);
  for (int threads : {1, 2}) {
    const int64_t items = gemm::conv_winograd_items(), direct = gemm::conv_winograd_direct_items();
    // Blocks of one pair of output rows: 10 items per image, 2 or 3 of them hold a bad value.
    EXPECT_TRUE(within_bound<float>(s, run_conv<float>(s, x, w, Tensor(), 2 * s.Wo, threads), ref));
    EXPECT_GE(gemm::conv_winograd_direct_items() - direct, 4);
    EXPECT_LE(gemm::conv_winograd_direct_items() - direct, 6);
    EXPECT_GE(gemm::conv_winograd_items() - items, 14);
  }
}

// An infinite weight, or a finite one past the limit, sends every item to the
// direct conv; so does a huge finite input, where it lies.
TEST(WinogradConv, OutOfRangeValuesTakeTheDirectConv) {
  const Case c{1, 16, 8, 8, 16, 1};
  const gemm::ConvShape s = shape_of(c);
  for (double bad : {double(std::numeric_limits<float>::infinity()), 1e12}) {
    SCOPED_TRACE("weight " + std::to_string(bad));
    Tensor x = rnd<float>({1, 16, 8, 8}, 80), w = rnd<float>({16, 16, 3, 3}, 81);
    static_cast<float *>(w.raw_data())[20] = float(bad);
    const WinoRef ref = reference(s, kiln::testing::vals(x), kiln::testing::vals(w), nullptr);
    const int64_t items = gemm::conv_winograd_items(), direct = gemm::conv_winograd_direct_items();
    EXPECT_TRUE(within_bound<float>(s, run_conv<float>(s, x, w, Tensor(), 2 * s.Wo, 1), ref));
    EXPECT_EQ(gemm::conv_winograd_items(), items);
    EXPECT_EQ(gemm::conv_winograd_direct_items() - direct, 4);
  }
  Tensor x = rnd<float>({1, 16, 8, 8}, 82), w = rnd<float>({16, 16, 3, 3}, 83);
  static_cast<float *>(x.raw_data())[7 * 8 + 7] = 1e30f; // channel 0, the last row: the last item's window
  const WinoRef ref = reference(s, kiln::testing::vals(x), kiln::testing::vals(w), nullptr);
  const int64_t items = gemm::conv_winograd_items(), direct = gemm::conv_winograd_direct_items();
  EXPECT_TRUE(within_bound<float>(s, run_conv<float>(s, x, w, Tensor(), 2 * s.Wo, 1), ref));
  EXPECT_EQ(gemm::conv_winograd_items() - items, 3);
  EXPECT_EQ(gemm::conv_winograd_direct_items() - direct, 1);
}

// A compiled ResNet block (W7's structure, smaller) whose convs take Winograd,
// with the epilogue in registers: equals eager, and NaN and inf in the input
// come out where eager has them (those items take the direct conv).
TEST(WinogradConv, CompiledBlockEqualsEagerNanAndInf) {
  ThreadsGuard guard;
  set_num_threads(2);
  const int64_t C = 32;
  Tensor w1 = rnd<float>({C, C, 3, 3}, 90) * 0.1, w2 = rnd<float>({C, C, 3, 3}, 91) * 0.1;
  Tensor g = 1.0 + 0.2 * rnd<float>({C}, 92), b = 0.2 * rnd<float>({C}, 93), m = 0.2 * rnd<float>({C}, 94),
         v = 1.1 + 0.5 * rnd<float>({C}, 95);
  auto bn = [=](const Tensor &t) { return batch_norm(t, g, b, m, v, false, 0.1, 1e-5); };
  kiln::TracedFunction fn = [=](const std::vector<Tensor> &in) {
    Tensor h = relu(bn(conv2d(in[0], w1, {}, 1, 1)));
    return std::vector<Tensor>{relu(bn(conv2d(h, w2, {}, 1, 1)) + in[0])};
  };
  Tensor x = rnd<float>({2, C, 24, 24}, 96);
  ASSERT_TRUE(gemm::winograd_shape(shape_of({2, C, 24, 24, C, 1}), nr_of<float>(shape_of({2, C, 24, 24, C, 1}))));
  int64_t items = gemm::conv_winograd_items();
  kiln::testing::expect_compiled_equals_eager(fn, {x}, 2e-5);
  EXPECT_GE(gemm::conv_winograd_items() - items, 4) << "the compiled convs did not run Winograd";
  float *xp = static_cast<float *>(x.raw_data());
  xp[5 * 24 + 7] = std::numeric_limits<float>::quiet_NaN();
  xp[(1 * C + 3) * 576 + 20 * 24 + 2] = std::numeric_limits<float>::infinity();
  xp[(1 * C + 4) * 576 + 20 * 24 + 3] = -std::numeric_limits<float>::infinity();
  const std::vector<double> eager = kiln::testing::vals(fn(kiln::testing::copies({x}))[0]);
  int nans = 0, infs = 0;
  for (double e : eager) nans += std::isnan(e), infs += std::isinf(e);
  ASSERT_GT(nans, 0);
  ASSERT_GT(infs + nans, 100);
  const int64_t direct = gemm::conv_winograd_direct_items();
  items = gemm::conv_winograd_items();
  kiln::testing::expect_compiled_equals_eager(fn, {x}, 2e-5);
  EXPECT_GE(gemm::conv_winograd_direct_items() - direct, 2);
  EXPECT_GE(gemm::conv_winograd_items() - items, 2);
}
