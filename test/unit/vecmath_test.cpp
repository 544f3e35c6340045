// Exhaustive float32 sweeps of the JIT's transcendental approximations against
// double-precision std:: functions. The bounds live in codegen/vecmath.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <vector>

#include "codegen/jit.h"
#include "codegen/vecmath.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

#include "float_sweep_util.h"

using namespace kiln::codegen;

namespace {

// The sweep method and error definitions shared with eager_vecmath_test.
using namespace float_sweep;

std::shared_ptr<const CompiledKernel> unary_kernel(Jit &jit, KOp op) {
  KernelBuilder k({kChunk});
  Expr x = k.input(kiln::kFloat32);
  k.output(k.unary(op, x));
  return jit.compile(k.build());
}

// The shared sweep, evaluating the JIT kernel of `op` on each chunk.
Errors jit_sweep(KOp op, Ref ref, float lo, float hi) {
  static Jit jit;
  auto kernel = unary_kernel(jit, op);
  return sweep(
      [&](const float *x, float *y, int64_t) {
        void *bufs[] = {const_cast<float *>(x), y};
        kernel->run(bufs);
      },
      ref, lo, hi);
}

void check(const char *name, KOp op, Ref ref, float lo, float hi, vecmath_bounds::Bound bound) {
  kiln::set_num_threads(2);
  Errors e = jit_sweep(op, ref, lo, hi);
  std::printf("%-8s [%g, %g]: %lld floats, max abs %.3g (x=%.9g), max rel %.3g (x=%.9g)\n", name,
              double(lo), double(hi), static_cast<long long>(e.count), e.max_abs,
              double(e.worst_abs_x), e.max_rel, double(e.worst_rel_x));
  EXPECT_GT(e.count, 1000000);
  EXPECT_EQ(e.mismatched_specials, 0) << name << ": inf/nan mismatch, first at x=" << e.special_x;
  if (bound.max_abs > 0) {
    EXPECT_LE(e.max_abs, bound.max_abs) << name << ": worst x=" << e.worst_abs_x;
  }
  EXPECT_LE(e.max_rel, bound.max_rel) << name << ": worst x=" << e.worst_rel_x;
}

double ref_exp(double x) { return std::exp(x); }
double ref_expm1(double x) { return std::expm1(x); }
double ref_log(double x) { return std::log(x); }
double ref_log1p(double x) { return std::log1p(x); }
double ref_tanh(double x) { return std::tanh(x); }
double ref_erf(double x) { return std::erf(x); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

} // namespace

TEST(VecMath, ExpSweep) { check("exp", KOp::Exp, ref_exp, -87.3f, 88.7f, vecmath_bounds::kExp); }
TEST(VecMath, Expm1Sweep) {
  check("expm1", KOp::Expm1, ref_expm1, -20.f, 88.7f, vecmath_bounds::kExpm1);
}
TEST(VecMath, LogSweep) { check("log", KOp::Log, ref_log, 1e-6f, 1e6f, vecmath_bounds::kLog); }
TEST(VecMath, Log1pSweep) {
  check("log1p", KOp::Log1p, ref_log1p, -0.999999f, 1e4f, vecmath_bounds::kLog1p);
}
TEST(VecMath, TanhSweep) { check("tanh", KOp::Tanh, ref_tanh, -20.f, 20.f, vecmath_bounds::kTanh); }
TEST(VecMath, ErfSweep) { check("erf", KOp::Erf, ref_erf, -10.f, 10.f, vecmath_bounds::kErf); }
TEST(VecMath, SigmoidSweep) {
  check("sigmoid", KOp::Sigmoid, ref_sigmoid, -30.f, 30.f, vecmath_bounds::kSigmoid);
}

// Whole float line, sparsely: subnormals, huge values, overflow/underflow edges.
TEST(VecMath, FullRangeSparse) {
  struct Case {
    const char *name;
    KOp op;
    Ref ref;
    float lo, hi;
  } cases[] = {{"exp", KOp::Exp, ref_exp, -FLT_MAX, FLT_MAX},
               {"expm1", KOp::Expm1, ref_expm1, -FLT_MAX, FLT_MAX},
               {"log", KOp::Log, ref_log, 0.f, FLT_MAX},
               {"log1p", KOp::Log1p, ref_log1p, -1.f, FLT_MAX},
               {"tanh", KOp::Tanh, ref_tanh, -FLT_MAX, FLT_MAX},
               {"erf", KOp::Erf, ref_erf, -FLT_MAX, FLT_MAX},
               {"sigmoid", KOp::Sigmoid, ref_sigmoid, -FLT_MAX, FLT_MAX}};
  Jit jit;
  for (const Case &c : cases) {
    auto kernel = unary_kernel(jit, c.op);
    std::vector<float> x(kChunk), y(kChunk);
    int64_t lo = ordered(c.lo), hi = ordered(c.hi), step = std::max<int64_t>(1, (hi - lo) / kChunk);
    for (int64_t i = 0; i < kChunk; ++i) x[i] = from_ordered(std::min(hi, lo + i * step));
    void *bufs[] = {x.data(), y.data()};
    kernel->run(bufs);
    int64_t bad = 0;
    float first_bad = 0;
    for (int64_t i = 0; i < kChunk; ++i) {
      double r = c.ref(double(x[i]));
      float rf = float(r);
      // Loose: a few ulp, plus absolute 1e-6 near zero crossings and subnormal results.
      bool ok = (std::isnan(rf) && std::isnan(y[i])) || rf == y[i] ||
                std::abs(double(y[i]) - r) <= 1e-6 * std::abs(r) + 1e-37 ||
                (std::abs(r) < 1e-30 && std::abs(double(y[i]) - r) < 1e-30);
      if (!ok && !bad++) first_bad = x[i];
    }
    EXPECT_EQ(bad, 0) << c.name << ": first bad x=" << first_bad << " got "
                      << y[std::find(x.begin(), x.end(), first_bad) - x.begin()] << " want "
                      << c.ref(first_bad);
  }
}

TEST(VecMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    KOp op;
    float x, want;
  } cases[] = {
      {KOp::Exp, -inf, 0.f},      {KOp::Exp, inf, inf},         {KOp::Exp, 0.f, 1.f},
      {KOp::Exp, 100.f, inf},     {KOp::Exp, -200.f, 0.f},      {KOp::Expm1, -inf, -1.f},
      {KOp::Expm1, inf, inf},     {KOp::Expm1, 0.f, 0.f},       {KOp::Log, 0.f, -inf},
      {KOp::Log, inf, inf},       {KOp::Log, 1.f, 0.f},         {KOp::Log, -1.f, nan},
      {KOp::Log1p, -1.f, -inf},   {KOp::Log1p, inf, inf},       {KOp::Log1p, -2.f, nan},
      {KOp::Tanh, inf, 1.f},      {KOp::Tanh, -inf, -1.f},      {KOp::Tanh, 0.f, 0.f},
      {KOp::Erf, inf, 1.f},       {KOp::Erf, -inf, -1.f},       {KOp::Sigmoid, inf, 1.f},
      {KOp::Sigmoid, -inf, 0.f},  {KOp::Sigmoid, 0.f, 0.5f},    {KOp::Exp, nan, nan},
      {KOp::Log, nan, nan},       {KOp::Tanh, nan, nan},        {KOp::Erf, nan, nan},
      {KOp::Sigmoid, nan, nan},   {KOp::Expm1, nan, nan},       {KOp::Log1p, nan, nan},
  };
  Jit jit;
  for (const Case &c : cases) {
    KernelBuilder k({1});
    k.output(k.unary(c.op, k.input(kiln::kFloat32)));
    auto kernel = jit.compile(k.build());
    float x = c.x, y = 12345.f;
    void *bufs[] = {&x, &y};
    kernel->run(bufs);
    if (std::isnan(c.want)) EXPECT_TRUE(std::isnan(y)) << op_name(c.op) << "(" << c.x << ") = " << y;
    else EXPECT_EQ(y, c.want) << op_name(c.op) << "(" << c.x << ")";
  }
}
