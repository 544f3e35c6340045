// The binary functions of the C library (runtime/ops.def KILN_LIBM2_OPS: atan2, hypot,
// fmod, copysign) and the ops lowered through fmod (float remainder, float floor
// division). Eager values are checked against long double references computed here
// (exact for fmod and copysign; within an ulp or two for the others),
// on broadcast, transposed and sliced operands, both float dtypes and integers, with
// IEEE specials (signed zeros, infinities, NaN); torch's dtype rules and errors; the
// in-place forms; and compiled code: one fused kernel per function, bitwise equal to
// eager, and integer fmod raising inside a compiled function as eagerly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "runtime/version.h"

using namespace kiln;
using namespace ewt;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

// Values that exercise every branch: signed zeros, infinities, NaN, tiny and huge
// magnitudes, exact multiples and near-multiples.
const std::vector<double> kSpecials = {0.0,  -0.0, 1.0,   -1.0,  2.5,  -2.5,  7.0,   -7.0,   0.1,  1e-30,
                                       1e30, -1e30, kInf, -kInf, kNan, 3.0,   -3.0,  1e-40, 0.75, 123.456};

// Python's % on doubles, computed independently of kiln: the divisor's sign.
long double py_mod_ref(long double a, long double b) {
  long double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// torch's floor division, as Python's //: a - (a % b) over b, rounded to the nearest
// integer (exact: a - a % b is a multiple of b).
long double floor_div_ref(long double a, long double b) {
  if (b == 0) return a / b;
  long double mod = std::fmod(a, b);
  long double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(0.0L, a / b);
  long double fl = std::floor(div);
  return div - fl > 0.5L ? fl + 1 : fl;
}

// Every pair of specials, as two [n] tensors of dtype dt.
std::pair<Tensor, Tensor> pairs(DType dt) {
  std::vector<double> a, b;
  for (double x : kSpecials)
    for (double y : kSpecials) {
      a.push_back(x);
      b.push_back(y);
    }
  int64_t n = int64_t(a.size());
  return {make({n}, dt, [&](int64_t i) { return a[size_t(i)]; }),
          make({n}, dt, [&](int64_t i) { return b[size_t(i)]; })};
}

// got[i] equals want[i] rounded to got's dtype within `ulps` units in the last place;
// with ulps == 0, exactly, the sign of zero included. NaN matches NaN.
void expect_ulps(const Tensor &got, const std::vector<long double> &want, int ulps, const std::string &what) {
  std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  bool f32 = got.dtype() == kFloat32;
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    double w = f32 ? double(float(want[i])) : double(want[i]);
    if (std::isnan(w) && std::isnan(g[i])) continue;
    bool ok;
    if (ulps == 0 || std::isinf(w) || w == 0) {
      ok = g[i] == w && std::signbit(g[i]) == std::signbit(w);
    } else {
      double ulp = f32 ? double(std::nextafter(float(std::fabs(w)), float(kInf)) - float(std::fabs(w)))
                       : std::nextafter(std::fabs(w), kInf) - std::fabs(w);
      ok = std::fabs(g[i] - w) <= ulps * ulp;
    }
    if (ok) continue;
    ++bad;
    ADD_FAILURE() << what << " (" << got.dtype() << "): element " << i << " is " << g[i] << ", expected " << w;
  }
}

std::vector<long double> ref2(const Tensor &a, const Tensor &b, long double (*f)(long double, long double)) {
  std::vector<long double> out;
  Shape shape = broadcast(a.sizes().vec(), b.sizes().vec());
  for_each_index(shape, [&](const Shape &idx, int64_t) {
    out.push_back(f((long double)read_bcast(a, idx), (long double)read_bcast(b, idx)));
  });
  return out;
}

long double atan2_ref(long double a, long double b) { return std::atan2(a, b); }
long double hypot_ref(long double a, long double b) { return std::hypot(a, b); }
long double fmod_ref(long double a, long double b) { return std::fmod(a, b); }
long double copysign_ref(long double a, long double b) { return std::copysign(a, b); }

// Bits of every element (NaNs folded to one pattern), for eager == compiled.
std::vector<uint64_t> bits(const Tensor &t) {
  std::vector<uint64_t> out;
  for (double v : values(t)) out.push_back(std::isnan(v) ? ~uint64_t(0) : std::bit_cast<uint64_t>(v));
  return out;
}

TEST(LibmBinary, SpecialsAgainstLongDoubleReferences) {
  for (DType dt : {kFloat32, kFloat64}) {
    auto [a, b] = pairs(dt);
    expect_ulps(atan2(a, b), ref2(a, b, atan2_ref), 2, "atan2");
    expect_ulps(hypot(a, b), ref2(a, b, hypot_ref), 1, "hypot");
    expect_ulps(fmod(a, b), ref2(a, b, fmod_ref), 0, "fmod");
    expect_ulps(copysign(a, b), ref2(a, b, copysign_ref), 0, "copysign");
    // r + b and (a - mod) / b round once in the dtype: within an ulp of the exact value.
    expect_ulps(remainder(a, b), ref2(a, b, py_mod_ref), 1, "remainder");
    expect_ulps(div(a, b, "floor"), ref2(a, b, floor_div_ref), 1, "div floor");
  }
}

// A dense sweep of finite values, broadcast against a row, through strided views.
TEST(LibmBinary, BroadcastAndStridedOperands) {
  for (DType dt : {kFloat32, kFloat64})
    for (Layout la : layouts_for({9, 13})) {
      SCOPED_TRACE(std::string(layout_name(la)) + " " + std::string(name(dt)));
      Tensor a = make_layout({9, 13}, dt, [](int64_t i) { return std::sin(double(i) * 0.7) * double(i % 11 + 1) * 3.1; }, la);
      Tensor b = make({13}, dt, [](int64_t i) { return (i % 2 ? -1.0 : 1.0) * (0.3 + double(i) * 0.9); });
      expect_ulps(atan2(a, b), ref2(a, b, atan2_ref), 2, "atan2");
      expect_ulps(hypot(a, b), ref2(a, b, hypot_ref), 1, "hypot");
      expect_ulps(fmod(a, b), ref2(a, b, fmod_ref), 0, "fmod");
      expect_ulps(copysign(b, a), ref2(b, a, copysign_ref), 0, "copysign");
      expect_ulps(a.remainder(b), ref2(a, b, py_mod_ref), 1, "remainder");
      EXPECT_EQ(atan2(a, b).sizes().vec(), (Shape{9, 13}));
    }
}

TEST(LibmBinary, DtypeRulesAsTorch) {
  Tensor i = make({5}, kInt64, [](int64_t k) { return double(k * 3 - 7); });  // -7 -4 -1 2 5
  Tensor j = make({5}, kInt64, [](int64_t k) { return double(k % 2 ? -3 : 3); }); // 3 -3 3 -3 3
  Tensor f = make({5}, kFloat32, [](int64_t k) { return 0.5 + double(k); });
  Tensor d = make({5}, kFloat64, [](int64_t k) { return 1.5 - double(k); });
  Tensor m = make({5}, kBool, [](int64_t k) { return double(k % 2); });
  // atan2 and copysign promote integers and bools to float32.
  EXPECT_EQ(atan2(i, j).dtype(), kFloat32);
  EXPECT_EQ(copysign(m, m).dtype(), kFloat32);
  EXPECT_EQ(copysign(i, -1).dtype(), kFloat32);
  expect_ulps(atan2(i, j), ref2(i, j, atan2_ref), 2, "atan2 int");
  expect_values(copysign(i, j), {7, -4, 1, -2, 5});
  // Mixed dtypes follow result_type.
  EXPECT_EQ(atan2(f, d).dtype(), kFloat64);
  EXPECT_EQ(hypot(i, f).dtype(), kFloat32);
  EXPECT_EQ(fmod(i, f).dtype(), kFloat32);
  EXPECT_EQ(fmod(i, 2.5).dtype(), kFloat32);
  EXPECT_EQ(fmod(f, 2).dtype(), kFloat32);
  // Integer fmod is C's %: exact, the dividend's sign.
  Tensor r = fmod(i, j);
  EXPECT_EQ(r.dtype(), kInt64);
  expect_values(r, {-1, -1, -1, 2, 2});
  expect_values(fmod(i, 4), {-3, 0, -1, 2, 1});
  expect_values(remainder(i, j), {2, -1, 2, -1, 2});
  // 2^53 + 1 has no double: the int64 result is exact, not computed through a float.
  Tensor big = make({2}, kInt64, [](int64_t k) { return double(k); }) * 2 - 1; // -1, 1
  big = big * int64_t(9007199254740993);
  expect_values(fmod(big, 10), {-3, 3});
  EXPECT_EQ(fmod(big, 10).data_ptr<int64_t>()[1], 3);
  // hypot takes floating inputs only; fmod takes numbers, not bool.
  expect_error([&] { hypot(i, j); }, "hypot: not supported for int64 inputs (self int64 [5], other int64 [5])");
  expect_error([&] { fmod(m, m); }, "fmod: not supported for bool inputs");
  expect_error([&] { fmod(i, make({5}, kInt64, [](int64_t k) { return double(k); })); }, "fmod: integer division by zero");
  expect_error([&] { remainder(i, 0); }, "remainder: integer division by zero");
  expect_error([&] { atan2(f, make({4}, kFloat32, [](int64_t) { return 1.0; })); }, "atan2");
  expect_error([&] { atan2(Tensor(), f); }, "atan2");
}

TEST(LibmBinary, InPlaceForms) {
  Tensor a = make({3, 4}, kFloat32, [](int64_t k) { return double(k) - 5.5; });
  Tensor b = make({4}, kFloat32, [](int64_t k) { return 1.25 * double(k + 1) * (k % 2 ? -1 : 1); });
  for (const char *name : {"atan2_", "hypot_", "fmod_", "copysign_"}) {
    SCOPED_TRACE(name);
    Tensor t = a.clone();
    std::string n = name;
    Tensor want = n == "atan2_" ? atan2(a, b) : n == "hypot_" ? hypot(a, b) : n == "fmod_" ? fmod(a, b) : copysign(a, b);
    int64_t v0 = tensor_version(t);
    Tensor &r = n == "atan2_" ? t.atan2_(b) : n == "hypot_" ? t.hypot_(b) : n == "fmod_" ? t.fmod_(b) : t.copysign_(b);
    EXPECT_EQ(&r, &t);
    EXPECT_GT(tensor_version(t), v0);
    EXPECT_EQ(bits(t), bits(want));
  }
  // Scalar forms, chained.
  Tensor t = a.clone();
  t.fmod_(2.0).copysign_(-1.0);
  std::vector<long double> want;
  for (double v : values(a)) want.push_back(-std::fabs(std::fmod((long double)v, 2.0L)));
  expect_ulps(t, want, 0, "fmod_(2).copysign_(-1)");
  // Integer self: fmod_ stays integer; atan2_ and hypot_ cannot write their float result.
  Tensor i = make({4}, kInt32, [](int64_t k) { return double(k * 5 - 9); }); // -9 -4 1 6
  i.fmod_(4);
  expect_values(i, {-1, 0, 1, 2});
  expect_error([&] { i.atan2_(i); }, "atan2_: result type float32 can't be cast to the desired output type int32");
  expect_error([&] { i.copysign_(-1.0); }, "copysign_: result type float32 can't be cast");
  expect_error([&] { i.hypot_(i); }, "hypot_: not supported for int32 inputs");
  // A broadcast self cannot hold the result.
  expect_error([&] { Tensor s = b.clone(); s.atan2_(a); }, "atan2_: output with shape [4] doesn't match the broadcast shape [3, 4]");
  // The unary in-place forms of the libm and vector-math functions write f(self).
  Tensor u = make({6}, kFloat64, [](int64_t k) { return 0.1 + 0.15 * double(k); });
  Tensor w = u.clone();
  w.atan_().sinh_().log1p_().erf_().trunc_();
  EXPECT_EQ(bits(w), bits(trunc(erf(log1p(sinh(atan(u)))))));
  Tensor v = u.clone();
  v.tan_().asin_().log2_().exp2_().expm1_().frac_();
  EXPECT_EQ(bits(v), bits(frac(expm1(exp2(log2(asin(tan(u))))))));
  expect_error([&] { Tensor k = make({2}, kInt64, [](int64_t) { return 1.0; }); k.log10_(); }, "log10_: the result type");
}

// One fused kernel computes each function (and remainder, floor division through
// fmod) with eager's bits, NaN and signed zeros included, in both float dtypes.
TEST(LibmBinary, CompiledIsOneKernelBitwiseEqualToEager) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(name(dt)));
    auto [a, b] = pairs(dt);
    auto fn = [](const std::vector<Tensor> &in) {
      const Tensor &x = in[0], &y = in[1];
      return std::vector<Tensor>{atan2(x, y) * 2.0, hypot(x, y) + 1.0, fmod(x, y).neg(), copysign(x, y) * 0.5,
                                 remainder(x, y) - 1.0, div(x, y, "floor").abs(), fmod(x, 1.5), copysign(x, -0.0)};
    };
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    std::vector<Tensor> want = fn({a, b});
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> got = f({a, b});
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].dtype(), want[k].dtype()) << "output " << k;
        EXPECT_EQ(bits(got[k]), bits(want[k])) << "output " << k;
      }
    }
    EXPECT_EQ(f.kernels_per_call({a, b}), 1);
    EXPECT_EQ(f.stats().eager_calls, 0);
  }
}

// Integer fmod and remainder run eagerly inside compiled code, so a zero divisor raises
// there too (a kernel could only return a value); a float divisor of 0 gives NaN.
TEST(LibmBinary, IntegerFmodRaisesInsideCompiledCode) {
  auto fn = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{fmod(in[0] + 1, in[1]), remainder(in[0], in[1]) * 2};
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  Tensor i = make({6}, kInt64, [](int64_t k) { return double(k * 7 - 20); });
  Tensor j = make({6}, kInt64, [](int64_t k) { return double(k % 3 + 1) * (k % 2 ? -1 : 1); });
  std::vector<Tensor> got = f({i, j}), want = fn({i, j});
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(values(got[k]), values(want[k])) << "output " << k;
  Tensor z = make({6}, kInt64, [](int64_t k) { return double(k % 2); });
  expect_error([&] { f({i, z}); }, "integer division by zero");
  Tensor x = make({3}, kFloat32, [](int64_t k) { return double(k) - 1; });
  Tensor zero = make({3}, kFloat32, [](int64_t) { return 0.0; });
  CompiledFunction g = compile([](const std::vector<Tensor> &in) { return std::vector<Tensor>{fmod(in[0], in[1])}; }, o);
  for (double v : values(g({x, zero})[0])) EXPECT_TRUE(std::isnan(v));
}

} // namespace
