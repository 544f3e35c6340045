// Exhaustive float32 sweeps of the JIT's transcendental approximations
// (codegen/vecmath.cpp, one IR builder per line of runtime/ops.def's KILN_VECMATH_OPS)
// against double-precision std:: functions, each with its error bound, asserted here.
//
// The sweep covers EVERY float32 x in the listed range whose magnitude is >= 2^-12,
// and every 61st float below 2^-12 (including subnormals); a test fails if a bound is
// exceeded. Relative error is taken where the reference is a normal float
// (|ref| >= FLT_MIN); inf/nan results must match std:: exactly.
// Measured maxima on this AMD EPYC host (LLVM 19.1.7 reports znver4, AVX-512) (floats tested; max abs error; max relative error):
//   exp      x in [-87.3, 88.7]     340M   abs n/a (outputs up to 3e38)   rel 8.5e-8
//   exp2     x in [-150, 128]       352M   abs n/a (outputs up to 3e38)   rel 8.0e-8 (x = -0.496)
//   expm1    x in [-20, 88.7]       322M   abs n/a                         rel 1.21e-7
//   log      x in [1e-6, 1e6]       269M   abs 5.0e-7 (|log x| ~ 13.5)      rel 8.2e-8
//   log1p    x in [-0.999999, 1e4]  344M   abs 5.1e-7 (|log1p x| ~ 8.3)     rel 1.34e-7
//   tanh     x in [-20, 20]         304M   abs 2.9e-7 (near |x| = 5.1)      rel 2.9e-7
//   erf      x in [-10, 10]         287M   abs 4.0e-7 (near |x| = 3.80,     rel 4.0e-7
//                                          just below the +-1 clamp)
//   sigmoid  x in [-30, 30]         315M   abs 8.9e-8                      rel 1.48e-7
// (float32 epsilon is 1.19e-7: every relative error is below 3.5 epsilon.)
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
#include "runtime/op_lists.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

#include "float_sweep_util.h"

using namespace kiln::codegen;

namespace {

// The sweep method and error definitions shared with eager_vecmath_test.
using namespace float_sweep;

// A function's asserted accuracy (the measured value rounded up, with a little headroom).
struct Bound {
  double max_abs; // <= 0: not checked (unbounded outputs)
  double max_rel;
};

double ref_exp(double x) { return std::exp(x); }
double ref_exp2(double x) { return std::exp2(x); }
double ref_expm1(double x) { return std::expm1(x); }
double ref_log(double x) { return std::log(x); }
double ref_log1p(double x) { return std::log1p(x); }
double ref_tanh(double x) { return std::tanh(x); }
double ref_erf(double x) { return std::erf(x); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One per function of the list: its double reference, the swept range and its bound.
struct Sweep {
  KOp op;
  const char *name;
  Ref ref;
  float lo, hi;
  Bound bound;
};
constexpr Sweep kSweeps[] = {
    {KOp::Exp, "exp", ref_exp, -87.3f, 88.7f, {0, 1.0e-7}},
    {KOp::Exp2, "exp2", ref_exp2, -150.f, 128.f, {0, 1.0e-7}},
    {KOp::Expm1, "expm1", ref_expm1, -20.f, 88.7f, {0, 1.4e-7}},
    {KOp::Log, "log", ref_log, 1e-6f, 1e6f, {5.5e-7, 1.0e-7}},
    {KOp::Log1p, "log1p", ref_log1p, -0.999999f, 1e4f, {5.5e-7, 1.5e-7}},
    {KOp::Tanh, "tanh", ref_tanh, -20.f, 20.f, {3.3e-7, 3.3e-7}},
    {KOp::Erf, "erf", ref_erf, -10.f, 10.f, {4.5e-7, 4.5e-7}},
    {KOp::Sigmoid, "sigmoid", ref_sigmoid, -30.f, 30.f, {1.0e-7, 1.7e-7}},
};

const Sweep *sweep_of(KOp op) {
  for (const Sweep &s : kSweeps)
    if (s.op == op) return &s;
  return nullptr;
}

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

void check(KOp op) {
  const Sweep *s = sweep_of(op);
  ASSERT_NE(s, nullptr) << op_name(op) << " has no sweep";
  kiln::set_num_threads(2);
  Errors e = jit_sweep(op, s->ref, s->lo, s->hi);
  std::printf("%-8s [%g, %g]: %lld floats, max abs %.3g (x=%.9g), max rel %.3g (x=%.9g)\n", s->name,
              double(s->lo), double(s->hi), static_cast<long long>(e.count), e.max_abs,
              double(e.worst_abs_x), e.max_rel, double(e.worst_rel_x));
  EXPECT_GT(e.count, 1000000);
  EXPECT_EQ(e.mismatched_specials, 0) << s->name << ": inf/nan mismatch, first at x=" << e.special_x;
  if (s->bound.max_abs > 0) {
    EXPECT_LE(e.max_abs, s->bound.max_abs) << s->name << ": worst x=" << e.worst_abs_x;
  }
  EXPECT_LE(e.max_rel, s->bound.max_rel) << s->name << ": worst x=" << e.worst_rel_x;
}

} // namespace

// A function of the list without a bounded sweep above fails here.
TEST(VecMath, EveryListFunctionHasABoundedSweep) {
#define X(Id, fn, f64) EXPECT_NE(sweep_of(KOp::Id), nullptr) << #fn " has no sweep in vecmath_test.cpp's kSweeps";
  KILN_VECMATH_OPS(X)
#undef X
}

TEST(VecMath, ExpSweep) { check(KOp::Exp); }
TEST(VecMath, Exp2Sweep) { check(KOp::Exp2); }
TEST(VecMath, Expm1Sweep) { check(KOp::Expm1); }
TEST(VecMath, LogSweep) { check(KOp::Log); }
TEST(VecMath, Log1pSweep) { check(KOp::Log1p); }
TEST(VecMath, TanhSweep) { check(KOp::Tanh); }
TEST(VecMath, ErfSweep) { check(KOp::Erf); }
TEST(VecMath, SigmoidSweep) { check(KOp::Sigmoid); }

// Whole float line, sparsely: subnormals, huge values, overflow/underflow edges.
TEST(VecMath, FullRangeSparse) {
  struct Case {
    const char *name;
    KOp op;
    Ref ref;
    float lo, hi;
  } cases[] = {{"exp", KOp::Exp, ref_exp, -FLT_MAX, FLT_MAX},
               {"exp2", KOp::Exp2, ref_exp2, -FLT_MAX, FLT_MAX},
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
      {KOp::Exp2, -inf, 0.f},     {KOp::Exp2, inf, inf},        {KOp::Exp2, 0.f, 1.f},
      {KOp::Exp2, -0.f, 1.f},     {KOp::Exp2, 127.f, 0x1p127f}, {KOp::Exp2, 128.f, inf},
      {KOp::Exp2, -126.f, 0x1p-126f}, {KOp::Exp2, -149.f, 0x1p-149f}, {KOp::Exp2, -140.f, 0x1p-140f},
      {KOp::Exp2, -150.f, 0.f},   {KOp::Exp2, -1000.f, 0.f},    {KOp::Exp2, nan, nan},
      {KOp::Exp2, 1.f, 2.f},      {KOp::Exp2, -1.f, 0.5f},      {KOp::Exp2, 200.f, inf},
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
