// Exhaustive float32 sweeps of the eager transcendental kernels (generated at
// build time from the JIT's codegen/vecmath.cpp: runtime/kernels/vecmath_kernels.h)
// through the public ops (kiln::exp(t) on a tensor
// holding the swept floats), against double-precision std:: functions.
//
// Every float32 x in the listed range with |x| >= 2^-12 is tested, and every 61st
// float below 2^-12 (subnormals included). Relative error is taken where the
// reference is a normal float (|ref| >= FLT_MIN); for gelu it is taken relative
// to |x| (see float_sweep_util.h). inf/nan results must match the reference exactly.
// Measured maxima (LLVM 19 O3 for the host CPU, AMD Zen 5, AVX-512)
// (floats tested; max abs error; max relative error), float32 epsilon = 1.19e-7:
//   exp        [-87.3, 88.7]     340M  abs n/a (outputs up to 3e38)        rel 8.46e-8
//   expm1      [-20, 88.7]       322M  abs n/a                             rel 1.21e-7
//   log        [1e-30, 1e30]     948M  abs 3.84e-6 (1/2 ulp of |log| ~65)  rel 8.14e-8
//   log1p      [-0.999999, 1e4]  344M  abs 5.14e-7                         rel 1.34e-7
//   tanh       [-20, 20]         304M  abs 2.92e-7 (near |x| = 5.1)        rel 2.92e-7
//   erf        [-10, 10]         287M  abs 4.0e-7 (near |x| = 3.80)        rel 4.0e-7
//   sigmoid    [-30, 30]         315M  abs 8.93e-8                         rel 1.48e-7
//   silu       [-80, 80]         338M  abs 1.27e-6 (outputs up to 80)      rel 2.02e-7 (x sigmoid(x))
//   gelu tanh  [-10, 10]         287M  abs 9.15e-7                         rel to |x| 2.1e-7
//   gelu erf   [-10, 10]         287M  abs 1.22e-6 (near x = 5.37)         rel to |x| 2.28e-7
// (both gelus' negative tails 0.5 x (1 + tanh|erf(..)) keep torch's formula and its
// cancellation: accurate relative to |x|, not to the tiny result. The eager gelu
// once switched to x/2 erfc(-x/sqrt(2)) below x = -sqrt(2), 4.2e-7 relative to the
// result; it computes the JIT's formula now, so that both agree bit for bit.)
// These are the JIT's errors too (codegen/vecmath.h): the code is the same.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "float_sweep_util.h"
#include <kiln/kiln.h>

using float_sweep::Bound;
using kiln::Tensor;

namespace {

using UnaryOp = Tensor (*)(const Tensor &);

Tensor gelu_tanh(const Tensor &x) { return kiln::gelu(x, "tanh"); }
Tensor gelu_erf(const Tensor &x) { return kiln::gelu(x, "none"); }

// y = op(x) through the eager op on a tensor viewing x (the contiguous float32 path).
void eval(UnaryOp op, const float *x, float *y, int64_t n) {
  Tensor in = kiln::from_blob(const_cast<float *>(x), {n}, kiln::kFloat32);
  Tensor out = op(in);
  ASSERT_EQ(out.dtype(), kiln::kFloat32);
  std::memcpy(y, out.data_ptr<float>(), size_t(n) * sizeof(float));
}

void check(const char *name, UnaryOp op, float_sweep::Ref ref, float lo, float hi, Bound bound,
           bool rel_to_x = false) {
  kiln::set_num_threads(2);
  float_sweep::Errors e = float_sweep::sweep(
      [op](const float *x, float *y, int64_t n) { eval(op, x, y, n); }, ref, lo, hi, rel_to_x);
  float_sweep::expect_within(name, lo, hi, e, bound);
}

double ref_exp(double x) { return std::exp(x); }
double ref_expm1(double x) { return std::expm1(x); }
double ref_log(double x) { return std::log(x); }
double ref_log1p(double x) { return std::log1p(x); }
double ref_tanh(double x) { return std::tanh(x); }
double ref_erf(double x) { return std::erf(x); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_silu(double x) { return x / (1.0 + std::exp(-x)); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
// erfc(-x/sqrt(2)) = 1 + erf(x/sqrt(2)) without the cancellation, even in double.
double ref_gelu_erf(double x) { return 0.5 * x * std::erfc(-x * 0.7071067811865476); }

// Asserted bounds: the measured maxima above, rounded up with a little headroom.
constexpr Bound kExp{0, 1.0e-7};
constexpr Bound kExpm1{0, 1.4e-7};
constexpr Bound kLog{4.0e-6, 1.0e-7}; // abs: half an ulp of log(1e28) = 64.8
constexpr Bound kLog1p{5.5e-7, 1.5e-7};
constexpr Bound kTanh{3.3e-7, 3.3e-7};
constexpr Bound kErf{4.5e-7, 4.5e-7};
constexpr Bound kSigmoid{1.0e-7, 1.7e-7};
constexpr Bound kSilu{0, 2.1e-7}; // abs unbounded (outputs up to 80)
constexpr Bound kGeluTanh{1.0e-6, 2.5e-7};
constexpr Bound kGeluErf{1.3e-6, 2.5e-7};

} // namespace

TEST(EagerVecMath, ExpSweep) { check("exp", kiln::exp, ref_exp, -87.3f, 88.7f, kExp); }
TEST(EagerVecMath, Expm1Sweep) { check("expm1", kiln::expm1, ref_expm1, -20.f, 88.7f, kExpm1); }
TEST(EagerVecMath, LogSweep) { check("log", kiln::log, ref_log, 1e-30f, 1e30f, kLog); }
TEST(EagerVecMath, Log1pSweep) { check("log1p", kiln::log1p, ref_log1p, -0.999999f, 1e4f, kLog1p); }
TEST(EagerVecMath, TanhSweep) { check("tanh", kiln::tanh, ref_tanh, -20.f, 20.f, kTanh); }
TEST(EagerVecMath, ErfSweep) { check("erf", kiln::erf, ref_erf, -10.f, 10.f, kErf); }
TEST(EagerVecMath, SigmoidSweep) { check("sigmoid", kiln::sigmoid, ref_sigmoid, -30.f, 30.f, kSigmoid); }
TEST(EagerVecMath, SiluSweep) { check("silu", kiln::silu, ref_silu, -80.f, 80.f, kSilu); }
TEST(EagerVecMath, GeluTanhSweep) {
  check("gelu_tanh", gelu_tanh, ref_gelu_tanh, -10.f, 10.f, kGeluTanh, /*rel_to_x=*/true);
}
TEST(EagerVecMath, GeluErfSweep) {
  check("gelu_erf", gelu_erf, ref_gelu_erf, -10.f, 10.f, kGeluErf, /*rel_to_x=*/true);
}

// The whole float line, sparsely (4M floats): subnormals, huge values,
// overflow/underflow edges. Loose: a few ulp, plus an absolute slack near zero
// crossings and subnormal results.
TEST(EagerVecMath, FullRangeSparse) {
  struct Case {
    const char *name;
    UnaryOp op;
    float_sweep::Ref ref;
    float lo, hi;
  } cases[] = {{"exp", kiln::exp, ref_exp, -FLT_MAX, FLT_MAX},
               {"expm1", kiln::expm1, ref_expm1, -FLT_MAX, FLT_MAX},
               {"log", kiln::log, ref_log, 0.f, FLT_MAX},
               {"log1p", kiln::log1p, ref_log1p, -1.f, FLT_MAX},
               {"tanh", kiln::tanh, ref_tanh, -FLT_MAX, FLT_MAX},
               {"erf", kiln::erf, ref_erf, -FLT_MAX, FLT_MAX},
               {"sigmoid", kiln::sigmoid, ref_sigmoid, -FLT_MAX, FLT_MAX},
               {"silu", kiln::silu, ref_silu, -FLT_MAX, FLT_MAX}};
  const int64_t n = float_sweep::kChunk;
  std::vector<float> x(n), y(n);
  for (const Case &c : cases) {
    int64_t lo = float_sweep::ordered(c.lo), hi = float_sweep::ordered(c.hi);
    int64_t step = std::max<int64_t>(1, (hi - lo) / n);
    for (int64_t i = 0; i < n; ++i) x[i] = float_sweep::from_ordered(std::min(hi, lo + i * step));
    eval(c.op, x.data(), y.data(), n);
    int64_t bad = 0, first_bad = -1;
    for (int64_t i = 0; i < n; ++i) {
      double r = c.ref(double(x[i]));
      float rf = float(r);
      bool ok = (std::isnan(rf) && std::isnan(y[i])) || rf == y[i] ||
                std::abs(double(y[i]) - r) <= 1e-6 * std::abs(r) + 1e-37 ||
                (std::abs(r) < 1e-30 && std::abs(double(y[i]) - r) < 1e-30);
      if (!ok && !bad++) first_bad = i;
    }
    EXPECT_EQ(bad, 0) << c.name << ": first bad x=" << (first_bad < 0 ? 0.f : x[first_bad]) << " got "
                      << (first_bad < 0 ? 0.f : y[first_bad]) << " want "
                      << (first_bad < 0 ? 0.0 : c.ref(x[first_bad]));
  }
}

// Special values as torch gives them, signed zeros included; through the
// contiguous path and a strided view (every other element), which must agree.
TEST(EagerVecMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char *name;
    UnaryOp op;
    float x, want;
  } cases[] = {
      {"exp", kiln::exp, -inf, 0.f},          {"exp", kiln::exp, inf, inf},
      {"exp", kiln::exp, 0.f, 1.f},           {"exp", kiln::exp, -0.f, 1.f},
      {"exp", kiln::exp, 100.f, inf},         {"exp", kiln::exp, 88.73f, inf},
      {"exp", kiln::exp, -200.f, 0.f},        {"exp", kiln::exp, nan, nan},
      {"expm1", kiln::expm1, -inf, -1.f},     {"expm1", kiln::expm1, inf, inf},
      {"expm1", kiln::expm1, 0.f, 0.f},       {"expm1", kiln::expm1, -0.f, -0.f},
      {"expm1", kiln::expm1, 100.f, inf},     {"expm1", kiln::expm1, nan, nan},
      {"log", kiln::log, 0.f, -inf},          {"log", kiln::log, -0.f, -inf},
      {"log", kiln::log, inf, inf},           {"log", kiln::log, 1.f, 0.f},
      {"log", kiln::log, -1.f, nan},          {"log", kiln::log, -inf, nan},
      {"log", kiln::log, nan, nan},           {"log1p", kiln::log1p, -1.f, -inf},
      {"log1p", kiln::log1p, inf, inf},       {"log1p", kiln::log1p, -2.f, nan},
      {"log1p", kiln::log1p, -0.f, -0.f},     {"log1p", kiln::log1p, nan, nan},
      {"tanh", kiln::tanh, inf, 1.f},         {"tanh", kiln::tanh, -inf, -1.f},
      {"tanh", kiln::tanh, 0.f, 0.f},         {"tanh", kiln::tanh, -0.f, -0.f},
      {"tanh", kiln::tanh, nan, nan},         {"erf", kiln::erf, inf, 1.f},
      {"erf", kiln::erf, -inf, -1.f},         {"erf", kiln::erf, -0.f, -0.f},
      {"erf", kiln::erf, nan, nan},           {"sigmoid", kiln::sigmoid, inf, 1.f},
      {"sigmoid", kiln::sigmoid, -inf, 0.f},  {"sigmoid", kiln::sigmoid, 0.f, 0.5f},
      {"sigmoid", kiln::sigmoid, nan, nan},   {"silu", kiln::silu, inf, inf},
      {"silu", kiln::silu, -inf, nan},        {"silu", kiln::silu, nan, nan}, // -inf / inf, as torch
      {"gelu_tanh", gelu_tanh, inf, inf},     {"gelu_tanh", gelu_tanh, 0.f, 0.f},
      {"gelu_tanh", gelu_tanh, nan, nan},     {"gelu_erf", gelu_erf, inf, inf},
      {"gelu_erf", gelu_erf, 0.f, 0.f},       {"gelu_erf", gelu_erf, nan, nan},
  };
  // 40 copies so the contiguous loop runs its vector body, not only its tail.
  constexpr int kCopies = 40;
  for (const Case &c : cases) {
    std::vector<float> xs(2 * kCopies, c.x);
    Tensor contiguous = c.op(kiln::from_blob(xs.data(), {kCopies}, kiln::kFloat32));
    Tensor strided = c.op(kiln::from_blob(xs.data(), {kCopies}, {2}, kiln::kFloat32));
    for (const Tensor &y : {contiguous, strided}) {
      for (int i = 0; i < kCopies; ++i) {
        float got = y.contiguous().data_ptr<float>()[i];
        if (std::isnan(c.want)) {
          EXPECT_TRUE(std::isnan(got)) << c.name << "(" << c.x << ") = " << got;
        } else {
          EXPECT_EQ(got, c.want) << c.name << "(" << c.x << ")";
          EXPECT_EQ(std::signbit(got), std::signbit(c.want)) << c.name << "(" << c.x << ") = " << got;
        }
      }
    }
  }
}

// The strided (non-contiguous) path evaluates the same functions element by
// element: it must match the contiguous path bit for bit.
TEST(EagerVecMath, StridedMatchesContiguous) {
  const int64_t n = 1 << 16;
  std::vector<float> xs(2 * n);
  for (int64_t i = 0; i < 2 * n; ++i) xs[i] = -12.f + 24.f * float(i) / float(2 * n);
  std::vector<float> pos(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) pos[i] = std::abs(xs[i]) * 3.f;
  for (UnaryOp op : {UnaryOp(kiln::exp), UnaryOp(kiln::expm1), UnaryOp(kiln::log), UnaryOp(kiln::log1p),
                     UnaryOp(kiln::tanh), UnaryOp(kiln::erf), UnaryOp(kiln::sigmoid), UnaryOp(kiln::silu),
                     UnaryOp(gelu_tanh), UnaryOp(gelu_erf)}) {
    std::vector<float> &src = (op == UnaryOp(kiln::log) || op == UnaryOp(kiln::log1p)) ? pos : xs;
    Tensor strided = kiln::from_blob(src.data(), {n}, {2}, kiln::kFloat32);
    Tensor a = op(strided), b = op(strided.contiguous());
    ASSERT_EQ(std::memcmp(a.contiguous().data_ptr<float>(), b.data_ptr<float>(), size_t(n) * sizeof(float)), 0);
  }
}

// float64 keeps libm: exact agreement with std:: on a few values.
TEST(EagerVecMath, Float64UsesLibm) {
  std::vector<double> xs{-3.5, -0.25, 0.0, 1e-8, 0.7, 2.0, 9.5};
  Tensor x = kiln::from_blob(xs.data(), {int64_t(xs.size())}, kiln::kFloat64);
  Tensor e = kiln::exp(x), t = kiln::tanh(x), f = kiln::erf(x);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(e.data_ptr<double>()[i], std::exp(xs[i]));
    EXPECT_EQ(t.data_ptr<double>()[i], std::tanh(xs[i]));
    EXPECT_EQ(f.data_ptr<double>()[i], std::erf(xs[i]));
  }
}
