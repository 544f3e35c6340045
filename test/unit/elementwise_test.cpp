// Elementwise ops: values against naive double-precision loops written here,
// over layouts (contiguous, transposed, sliced, expanded), dtypes and promotion,
// 0-dim, empty and size-1 shapes; errors; adapters through run_op.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "elementwise_test_util.h"
#include "runtime/kernels/elementwise.h"
#include "runtime/op_registry.h"

using namespace kiln;
using namespace ewt;

namespace {

const std::vector<DType> kAllTypes = {kBool, kInt32, kInt64, kFloat32, kFloat64};

// Mixed-sign values with fractions: -2.75, -1.5, ... (never exactly 0 at odd i).
double signed_frac(int64_t i) { return (i % 11) * 0.625 - 3.1 + (i % 3) * 0.01; }
double positive(int64_t i) { return 0.05 + (i % 13) * 0.37; }
double unit_frac(int64_t i) { return (i % 11) * 0.18 - 0.9 + (i % 3) * 0.01; }   // asin, acos, atanh: [-0.9, 0.92]
double above_one(int64_t i) { return 1.0 + (i % 13) * 0.41; }                    // acosh
double small_int(int64_t i) { return double((i * 7) % 11) - 5; } // -5 .. 5
double nonzero_int(int64_t i) { double v = small_int(i); return v == 0 ? 3 : v; }
double bool_gen(int64_t i) { return (i * 5) % 3 == 0; }

// What a dtype can hold from a generator: ints get small ints, bool 0/1.
Gen gen_for(DType dt, Gen float_gen) {
  if (dt == kBool) return bool_gen;
  if (dt == kInt32 || dt == kInt64) return small_int;
  return float_gen;
}

// Rounds the reference input as the dtype stores it (float32 inputs are floats).
double as_stored(DType dt, double v) { return dt == kFloat32 ? double(float(v)) : v; }

double half_even(double x) {
  double r = std::floor(x), d = x - r;
  if (d > 0.5 || (d == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  return r;
}

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

struct FloatUnaryCase {
  const char *name;
  Tensor (*fn)(const Tensor &);
  double (*ref)(double);
  Gen gen;
};

double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_rsqrt(double x) { return 1 / std::sqrt(x); }
double ref_recip(double x) { return 1 / x; }
double ref_silu(double x) { return x / (1 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
Tensor gelu_none(const Tensor &x) { return gelu(x); }
Tensor gelu_tanh(const Tensor &x) { return gelu(x, "tanh"); }

const std::vector<FloatUnaryCase> kFloatUnary = {
    {"exp", exp, [](double x) { return std::exp(x); }, signed_frac},
    {"exp2", exp2, [](double x) { return std::exp2(x); }, signed_frac},
    {"log", log, [](double x) { return std::log(x); }, positive},
    {"log1p", log1p, [](double x) { return std::log1p(x); }, positive},
    {"expm1", expm1, [](double x) { return std::expm1(x); }, signed_frac},
    {"sqrt", sqrt, [](double x) { return std::sqrt(x); }, positive},
    {"rsqrt", rsqrt, ref_rsqrt, positive},
    {"sin", sin, [](double x) { return std::sin(x); }, signed_frac},
    {"cos", cos, [](double x) { return std::cos(x); }, signed_frac},
    {"tan", tan, [](double x) { return std::tan(x); }, signed_frac},
    {"asin", asin, [](double x) { return std::asin(x); }, unit_frac},
    {"acos", acos, [](double x) { return std::acos(x); }, unit_frac},
    {"atan", atan, [](double x) { return std::atan(x); }, signed_frac},
    {"sinh", sinh, [](double x) { return std::sinh(x); }, signed_frac},
    {"cosh", cosh, [](double x) { return std::cosh(x); }, signed_frac},
    {"asinh", asinh, [](double x) { return std::asinh(x); }, signed_frac},
    {"acosh", acosh, [](double x) { return std::acosh(x); }, above_one},
    {"atanh", atanh, [](double x) { return std::atanh(x); }, unit_frac},
    {"log2", log2, [](double x) { return std::log2(x); }, positive},
    {"log10", log10, [](double x) { return std::log10(x); }, positive},
    {"tanh", tanh, [](double x) { return std::tanh(x); }, signed_frac},
    {"sigmoid", sigmoid, ref_sigmoid, signed_frac},
    {"erf", erf, [](double x) { return std::erf(x); }, signed_frac},
    {"reciprocal", reciprocal, ref_recip, signed_frac},
};

} // namespace

// ---------------------------------------------------------------- unary

TEST(ElementwiseUnary, FloatOpsAllLayoutsAndDtypes) {
  const Shape shape{3, 5};
  for (const auto &c : kFloatUnary) {
    for (DType dt : {kFloat32, kFloat64}) {
      for (Layout l : layouts_for(shape)) {
        Tensor x = make_layout(shape, dt, c.gen, l);
        Tensor y = c.fn(x);
        std::string what = std::string(c.name) + " " + std::string(name(dt)) + " " + layout_name(l);
        EXPECT_EQ(y.dtype(), dt) << what;
        EXPECT_EQ(y.sizes().vec(), shape) << what;
        // torch's layout rule: a transposed x (dense) gives its own strides,
        // a row-major step-2 slice a contiguous result.
        if (l == Layout::Transposed) {
          EXPECT_EQ(y.strides().vec(), x.strides().vec()) << what;
        } else {
          EXPECT_TRUE(y.is_contiguous()) << what;
        }
        expect_values(y, ref_unary(x, c.ref), rtol_for(dt) * 2, 1e-7, what);
      }
    }
  }
}

TEST(ElementwiseUnary, FloatOpsPromoteIntegerAndBoolToFloat32) {
  for (const auto &c : kFloatUnary) {
    for (DType dt : {kBool, kInt32, kInt64}) {
      // Positive ints for log/sqrt; bools may be 0 (log(0) = -inf, 1/0 = inf: both fine).
      Tensor x = make({2, 3}, dt, dt == kBool ? Gen(bool_gen) : Gen([](int64_t i) { return double(i + 1); }));
      Tensor y = c.fn(x);
      EXPECT_EQ(y.dtype(), kFloat32) << c.name << " " << dt;
      expect_values(y, ref_unary(x, c.ref), 2e-6, 1e-7, c.name);
    }
  }
}

// torch's relu6(x + 3) / 6, in double: the composed op of the composed-op list.
double ref_hardsigmoid(double x) { return std::isnan(x) ? x : std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }

TEST(ElementwiseUnary, HardsigmoidValuesNanInfAndErrors) {
  for (DType dt : {kFloat32, kFloat64})
    for (Layout l : layouts_for({4, 6})) {
      // x in [-4.5, 4.5): both clamps and the linear part.
      Tensor x = make_layout({4, 6}, dt, [](int64_t i) { return -4.5 + 0.375 * double(i); }, l);
      Tensor y = hardsigmoid(x);
      EXPECT_EQ(y.dtype(), dt);
      expect_values(y, ref_unary(x, ref_hardsigmoid), rtol_for(dt), 0, "hardsigmoid");
    }
  const double inf = std::numeric_limits<double>::infinity();
  Tensor s = tensor(std::vector<double>{std::nan(""), inf, -inf, -3.0, 3.0, 0.0}).to(kFloat32);
  Tensor y = hardsigmoid(s);
  const float *yp = y.data_ptr<float>();
  EXPECT_TRUE(std::isnan(yp[0]));
  EXPECT_EQ(yp[1], 1.0f);
  EXPECT_EQ(yp[2], 0.0f);
  EXPECT_EQ(yp[3], 0.0f);
  EXPECT_EQ(yp[4], 1.0f);
  EXPECT_EQ(yp[5], 0.5f);
  expect_error([&] { hardsigmoid(make({3}, kInt64, small_int)); }, "hardsigmoid: expected a floating-point tensor, got int64");
  expect_error([&] { hardsigmoid(make({3}, kBool, bool_gen)); }, "hardsigmoid: expected a floating-point tensor, got bool");
}

TEST(ElementwiseUnary, GeluSiluValuesAndErrors) {
  for (auto [fn, ref, nm] : {std::tuple{&gelu_none, &ref_gelu, "gelu"}, std::tuple{&gelu_tanh, &ref_gelu_tanh, "gelu_tanh"},
                             std::tuple{&silu, &ref_silu, "silu"}}) {
    for (DType dt : {kFloat32, kFloat64})
      for (Layout l : layouts_for({4, 6})) {
        Tensor x = make_layout({4, 6}, dt, signed_frac, l);
        Tensor y = fn(x);
        EXPECT_EQ(y.dtype(), dt);
        // gelu's negative tail 0.5 x (1 + erf|tanh(..)) cancels (torch's formula,
        // and the JIT's, which eager matches bit for bit): its float32 error is
        // ~1 epsilon of |x| (|x| <= 3.1 here), not of the small result.
        double atol = dt == kFloat32 ? 4e-7 : 1e-7;
        expect_values(y, ref_unary(x, ref), rtol_for(dt) * 2, atol, nm);
      }
  }
  Tensor i = make({3}, kInt64, small_int);
  expect_error([&] { gelu(i); }, "gelu: expected a floating-point tensor, got int64");
  expect_error([&] { silu(i); }, "silu");
  expect_error([&] { gelu(make({3}, kFloat32, signed_frac), "fast"); }, "gelu: approximate must be 'none' or 'tanh'");
}

TEST(ElementwiseUnary, GeluTanhFloat32MaxAbsErrorBelow1e6) {
  const int64_t n = 200001; // [-8, 8]
  Tensor x = make({n}, kFloat32, [&](int64_t i) { return -8.0 + 16.0 * double(i) / double(n - 1); });
  Tensor y = gelu(x, "tanh");
  std::vector<double> xv = values(x), yv = values(y);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(yv[i] - ref_gelu_tanh(xv[i])));
  EXPECT_LT(worst, 1e-6);
}

TEST(ElementwiseUnary, ExactOpsEveryDtype) {
  struct Case {
    const char *name;
    Tensor (*fn)(const Tensor &);
    std::vector<DType> accepted;
    double (*ref)(double);
  };
  const std::vector<Case> cases = {
      {"neg", neg, {kInt32, kInt64, kFloat32, kFloat64}, [](double x) { return -x; }},
      {"abs", abs, kAllTypes, [](double x) { return std::fabs(x); }},
      {"relu", relu, {kInt32, kInt64, kFloat32, kFloat64}, [](double x) { return x < 0 ? 0.0 : x; }},
      {"floor", floor, {kInt32, kInt64, kFloat32, kFloat64}, [](double x) { return std::floor(x); }},
      {"ceil", ceil, {kInt32, kInt64, kFloat32, kFloat64}, [](double x) { return std::ceil(x); }},
      {"round", round, {kInt32, kInt64, kFloat32, kFloat64}, half_even},
      {"sign", sign, kAllTypes, [](double x) { return double((x > 0) - (x < 0)); }},
  };
  for (const auto &c : cases)
    for (DType dt : c.accepted)
      for (Layout l : layouts_for({3, 4})) {
        Tensor x = make_layout({3, 4}, dt, gen_for(dt, signed_frac), l);
        Tensor y = c.fn(x);
        EXPECT_EQ(y.dtype(), dt) << c.name;
        expect_values(y, ref_unary(x, c.ref), 0, 0, std::string(c.name) + " " + std::string(name(dt)));
      }
}

TEST(ElementwiseUnary, RoundHalfToEven) {
  Tensor x = make({8}, kFloat32, [](int64_t i) { return std::vector<double>{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51}[i]; });
  expect_values(round(x), {0, 2, 2, -0.0, -2, -2, 3, -4});
}

TEST(ElementwiseUnary, SquareLogicalNotAndBoolRules) {
  for (DType dt : kAllTypes) {
    Tensor x = make_layout({2, 5}, dt, gen_for(dt, signed_frac), Layout::Transposed);
    Tensor sq = square(x);
    EXPECT_EQ(sq.dtype(), dt == kBool ? kInt64 : dt); // torch: pow(bool, 2) is int64
    expect_values(sq, ref_unary(x, [](double v) { return v * v; }), rtol_for(dt), 0, "square");
    Tensor n = logical_not(x);
    EXPECT_EQ(n.dtype(), kBool);
    expect_values(n, ref_unary(x, [](double v) { return double(v == 0); }));
  }
  Tensor b = make({3}, kBool, bool_gen);
  expect_error([&] { neg(b); }, "neg: ");
  expect_error([&] { relu(b); }, "relu: not supported on bool");
  expect_error([&] { floor(b); }, "floor");
  // neg of INT_MIN wraps, as torch, rather than trapping.
  Tensor m = make({1}, kInt32, [](int64_t) { return double(std::numeric_limits<int32_t>::min()); });
  expect_values(neg(m), {double(std::numeric_limits<int32_t>::min())});
}

TEST(ElementwiseUnary, NanPropagatesThroughReluAndClamp) {
  Tensor x = make({3}, kFloat32, [](int64_t i) { return i == 1 ? NAN : -1.0 + i; });
  std::vector<double> r = values(relu(x));
  EXPECT_EQ(r[0], 0);
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_TRUE(std::isnan(values(clamp(x, 0, 0.5))[1]));
}

// ---------------------------------------------------------------- casts and copies

TEST(ElementwiseCopy, ToEveryDtypePair) {
  for (DType from : kAllTypes)
    for (DType to_dt : kAllTypes) {
      Tensor x = make_layout({3, 4}, from, gen_for(from, signed_frac), Layout::Transposed);
      Tensor y = to(x, to_dt);
      EXPECT_EQ(y.dtype(), to_dt);
      if (from == to_dt) {
        EXPECT_TRUE(y.is_same(x)); // as torch: no copy
        continue;
      }
      std::vector<double> want = ref_unary(x, [&](double v) {
        if (to_dt == kBool) return double(v != 0);
        if (is_integral(to_dt)) return std::trunc(v);
        return as_stored(to_dt, v);
      });
      expect_values(y, want, 0, 0, std::string(name(from)) + "->" + std::string(name(to_dt)));
    }
}

TEST(ElementwiseCopy, ContiguousCloneCopy) {
  Tensor x = make({3, 4}, kFloat32, signed_frac);
  EXPECT_TRUE(contiguous(x).is_same(x));
  Tensor t = x.t();
  Tensor c = contiguous(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.is_alias_of(x));
  expect_values(c, values(t));
  Tensor k = clone(x);
  EXPECT_FALSE(k.is_alias_of(x));
  expect_values(k, values(x));
  Tensor ks = clone(make_layout({2, 3}, kInt64, small_int, Layout::Sliced));
  EXPECT_TRUE(ks.is_contiguous());
  // Functional copy: src broadcast to self's shape, converted to self's dtype.
  Tensor self = make({2, 3}, kInt32, small_int);
  Tensor src = make({3}, kFloat64, [](int64_t i) { return 1.75 * double(i + 1); });
  Tensor r = copy(self, src);
  EXPECT_EQ(r.dtype(), kInt32);
  expect_values(r, {1, 3, 5, 1, 3, 5});
  expect_values(self, ref_unary(make({2, 3}, kInt32, small_int), [](double v) { return v; })); // untouched
  expect_error([&] { copy(self, make({4}, kFloat32, positive)); }, "copy: ");
}

TEST(ElementwiseCopy, CopyInPlaceBroadcastConvertNonContiguous) {
  Tensor base = make({4, 3}, kFloat64, [](int64_t) { return -1; });
  Tensor self = base.t(); // [3, 4], non-contiguous
  Tensor src = make({4}, kInt32, small_int);
  Tensor &r = copy_(self, src);
  EXPECT_TRUE(r.is_same(self));
  Shape shape;
  expect_values(self, ref_binary(self, src, [](double, double s) { return s; }, &shape));
  // copy_ from an overlapping different view of itself: x.copy_(x.t()).
  Tensor sq = make({3, 3}, kFloat32, signed_frac);
  Tensor orig = clone(sq);
  sq.copy_(sq.t());
  expect_values(sq, values(orig.t()));
  expect_error([&] { copy_(self, make({5}, kFloat32, positive)); }, "copy_: shapes [3, 4] and [5] are not broadcastable");
}

TEST(ElementwiseCopy, FillZeroOnNonContiguous) {
  for (DType dt : kAllTypes) {
    Tensor x = make_layout({3, 4}, dt, gen_for(dt, signed_frac), Layout::Sliced);
    fill_(x, 1);
    expect_values(x, std::vector<double>(12, 1.0));
    zero_(x);
    expect_values(x, std::vector<double>(12, 0.0));
  }
  Tensor i = make({2}, kInt64, small_int);
  i.fill_(2.9); // truncates, as torch
  expect_values(i, {2, 2});
  Tensor e = make({1}, kFloat32, positive).expand({4});
  expect_error([&] { e.fill_(1); }, "fill_: unsupported operation: more than one element");
}

// ---------------------------------------------------------------- binary

namespace {
struct BinCase {
  const char *name;
  Tensor (*fn)(const Tensor &, const Tensor &);
  double (*ref)(double, double);
  bool bool_ok;
};
Tensor add2(const Tensor &a, const Tensor &b) { return add(a, b); }
Tensor sub2(const Tensor &a, const Tensor &b) { return sub(a, b); }
Tensor mul2(const Tensor &a, const Tensor &b) { return mul(a, b); }
Tensor rem2(const Tensor &a, const Tensor &b) { return remainder(a, b); }

const std::vector<BinCase> kArith = {
    {"add", add2, [](double a, double b) { return a + b; }, true},
    {"sub", sub2, [](double a, double b) { return a - b; }, false},
    {"mul", mul2, [](double a, double b) { return a * b; }, true},
    {"maximum", maximum, [](double a, double b) { return std::max(a, b); }, true},
    {"minimum", minimum, [](double a, double b) { return std::min(a, b); }, true},
    {"remainder", rem2, py_mod, false},
};

// Applies the result dtype's semantics to a double reference value.
double in_dtype(DType dt, double v) {
  if (dt == kBool) return v != 0;
  return as_stored(dt, v);
}
} // namespace

TEST(ElementwiseBinary, ArithmeticPromotionBroadcastLayouts) {
  // (dtype a, dtype b, expected result)
  const std::vector<std::tuple<DType, DType, DType>> pairs = {
      {kFloat32, kFloat32, kFloat32}, {kFloat64, kFloat32, kFloat64}, {kInt32, kInt64, kInt64},
      {kInt32, kFloat32, kFloat32},   {kBool, kInt32, kInt32},        {kBool, kBool, kBool},
      {kInt64, kFloat64, kFloat64}};
  const Shape sa{3, 1, 4}, sb{5, 4};
  for (const auto &c : kArith)
    for (auto [da, db, dr] : pairs) {
      if (dr == kBool && !c.bool_ok) continue;
      if ((da == kBool || db == kBool) && std::string(c.name) == "sub") continue;
      for (Layout la : layouts_for(sa))
        for (Layout lb : layouts_for(sb)) {
          Tensor a = make_layout(sa, da, gen_for(da, signed_frac), la);
          Tensor b = make_layout(sb, db, gen_for(db, [](int64_t i) { return nonzero_int(i) * 0.75; }), lb);
          if (std::string(c.name) == "remainder" && is_integral(db)) b = make_layout(sb, db, nonzero_int, lb);
          Tensor y = c.fn(a, b);
          std::string what = std::string(c.name) + " " + std::string(name(da)) + "," + std::string(name(db)) + " " +
                             layout_name(la) + "/" + layout_name(lb);
          EXPECT_EQ(y.dtype(), dr) << what;
          Shape shape;
          std::vector<double> want = ref_binary(a, b, c.ref, &shape);
          for (double &v : want) v = in_dtype(dr, v);
          EXPECT_EQ(y.sizes().vec(), shape) << what;
          expect_values(y, want, rtol_for(dr) * 4, 1e-6, what);
        }
    }
}

TEST(ElementwiseBinary, ExpandedOperandsAndScalarsReadOnce) {
  Tensor row = make({1, 6}, kFloat32, signed_frac).expand({5, 6});
  Tensor col = make({5, 1}, kFloat32, positive);
  Tensor y = add(row, col, 2.5);
  expect_values(y, ref_binary(row, col, [](double a, double b) { return a + 2.5 * b; }), 2e-6, 1e-6);
  Tensor s0 = make({}, kFloat32, [](int64_t) { return 4.0; }); // 0-dim
  expect_values(mul(row, s0), ref_unary(row, [](double v) { return double(float(v * 4)); }), 2.5e-7);
  Tensor d = make({}, kFloat64, [](int64_t) { return 0.1; });
  // 0-dim float64 does not promote a float32 tensor (same category), as torch.
  EXPECT_EQ(mul(row, d).dtype(), kFloat32);
  EXPECT_EQ(mul(make({2}, kInt32, small_int), d).dtype(), kFloat64);
}

TEST(ElementwiseBinary, ZeroDimEmptyAndSizeOne) {
  Tensor a = make({}, kInt64, [](int64_t) { return 7; });
  Tensor b = make({}, kInt64, [](int64_t) { return -3; });
  Tensor s = add(a, b);
  EXPECT_EQ(s.dim(), 0);
  expect_values(s, {4});
  Tensor e = make({0, 3}, kFloat32, positive);
  Tensor r = add(e, make({3}, kFloat32, positive));
  EXPECT_EQ(r.sizes().vec(), (Shape{0, 3}));
  EXPECT_EQ(mul(e, 2).numel(), 0);
  EXPECT_EQ(exp(e).sizes().vec(), (Shape{0, 3}));
  Tensor o = make({1, 1, 3}, kFloat64, signed_frac);
  Tensor p = make({2, 1, 1}, kFloat64, positive);
  expect_values(sub(o, p), ref_binary(o, p, [](double x, double y) { return x - y; }), 1e-15);
  expect_error([&] { add(make({2, 3}, kFloat32, positive), make({4}, kFloat32, positive)); },
               "add: shapes [2, 3] and [4] are not broadcastable");
}

TEST(ElementwiseBinary, ScalarOverloadsFollowTorchPromotion) {
  Tensor i = make({2, 3}, kInt32, small_int);
  Tensor f = make({2, 3}, kFloat32, signed_frac);
  EXPECT_EQ(add(i, 2).dtype(), kInt32);
  EXPECT_EQ(add(i, 2.5).dtype(), kFloat32);
  EXPECT_EQ(mul(f, 2.0).dtype(), kFloat32);
  EXPECT_EQ(add(make({2}, kBool, bool_gen), 1).dtype(), kInt64);
  expect_values(add(i, 2, 3), ref_unary(i, [](double v) { return v + 6; }));
  expect_values(sub(f, 1.5, 2), ref_unary(f, [](double v) { return double(float(v) - 3.0f); }), 1e-6);
  expect_values(mul(i, 2.5), ref_unary(i, [](double v) { return v * 2.5; }), 2.5e-7);
  expect_values(div(i, 4), ref_unary(i, [](double v) { return double(float(v / 4)); }), 2.5e-7);
  expect_values(f * 3.0 + 1.0, ref_unary(f, [](double v) { return v * 3 + 1; }), 1e-6, 1e-6);
  expect_values(2.0 - f, ref_unary(f, [](double v) { return 2 - v; }), 1e-6, 1e-6);
}

TEST(ElementwiseBinary, AlphaAndBoolRules) {
  Tensor i = make({3}, kInt64, small_int);
  Tensor b = make({3}, kBool, bool_gen);
  expect_error([&] { add(i, i, 0.5); }, "add: for integral input tensors, argument alpha must not be a floating point");
  expect_error([&] { add(i, i, true); }, "add: boolean alpha only supported for boolean results");
  expect_error([&] { sub(b, b); }, "sub: subtraction, the `-` operator, with two bool tensors");
  expect_error([&] { sub(i, b); }, "sub: subtraction, the `-` operator, with a bool tensor");
  expect_values(add(b, b), ref_binary(b, b, [](double x, double y) { return double(x || y); }));
  expect_values(mul(b, b), values(b));
}

TEST(ElementwiseBinary, DivTrueTruncFloor) {
  Tensor a = make({3, 4}, kInt64, [](int64_t k) { return double(k * 5 % 23) - 11; });
  Tensor b = make({4}, kInt64, [](int64_t k) { return std::vector<double>{3, -3, 7, -2}[k]; });
  Tensor q = div(a, b);
  EXPECT_EQ(q.dtype(), kFloat32);
  expect_values(q, ref_binary(a, b, [](double x, double y) { return double(float(x / y)); }), 2.5e-7);
  Tensor t = div(a, b, "trunc");
  EXPECT_EQ(t.dtype(), kInt64);
  expect_values(t, ref_binary(a, b, [](double x, double y) { return std::trunc(x / y); }));
  expect_values(div(a, b, "floor"), ref_binary(a, b, [](double x, double y) { return std::floor(x / y); }));
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor fa = make_layout({3, 4}, dt, signed_frac, Layout::Transposed);
    Tensor fb = make({4}, dt, [](int64_t k) { return std::vector<double>{0.75, -1.25, 2.0, -0.5}[k]; });
    expect_values(div(fa, fb), ref_binary(fa, fb, [](double x, double y) { return x / y; }), rtol_for(dt) * 2);
    expect_values(div(fa, fb, "trunc"), ref_binary(fa, fb, [](double x, double y) { return std::trunc(x / y); }));
    expect_values(div(fa, fb, "floor"), ref_binary(fa, fb, [](double x, double y) { return std::floor(x / y); }));
  }
  // Float division by zero is IEEE; integer division by zero is an Error, never SIGFPE.
  Tensor z = make({2}, kFloat32, [](int64_t) { return 0; });
  expect_values(div(make({2}, kFloat32, [](int64_t k) { return k ? -1.0 : 1.0; }), z), {INFINITY, -INFINITY});
  Tensor iz = make({2}, kInt32, [](int64_t k) { return double(k); });
  expect_error([&] { div(a.slice(1, 0, 2), iz, "trunc"); }, "div: integer division by zero");
  expect_error([&] { div(a.slice(1, 0, 2), iz, "floor"); }, "div: integer division by zero");
  expect_error([&] { remainder(a.slice(1, 0, 2), iz); }, "remainder: integer division by zero");
  expect_error([&] { div(a, b, "round"); }, "div: expected rounding_mode to be one of None, 'trunc' or 'floor'");
  Tensor mn = make({1}, kInt32, [](int64_t) { return double(std::numeric_limits<int32_t>::min()); });
  Tensor m1 = make({1}, kInt32, [](int64_t) { return -1; });
  expect_values(div(mn, m1, "trunc"), {double(std::numeric_limits<int32_t>::min())}); // wraps, no trap
  expect_values(remainder(mn, m1), {0});
}

TEST(ElementwiseBinary, RemainderPythonSign) {
  Tensor a = make({6}, kInt32, [](int64_t k) { return std::vector<double>{7, -7, 7, -7, 0, 5}[k]; });
  Tensor b = make({6}, kInt32, [](int64_t k) { return std::vector<double>{3, 3, -3, -3, 2, 5}[k]; });
  expect_values(remainder(a, b), {1, 2, -2, -1, 0, 0});
  Tensor fa = to(a, kFloat64);
  expect_values(remainder(fa, -2.5), ref_unary(fa, [](double v) { return py_mod(v, -2.5); }), 1e-15);
  expect_error([&] { remainder(make({2}, kBool, bool_gen), make({2}, kBool, bool_gen)); }, "remainder: ");
}

TEST(ElementwiseBinary, PowThreeOverloads) {
  for (DType dt : {kFloat32, kFloat64})
    for (Layout l : layouts_for({3, 4})) {
      Tensor x = make_layout({3, 4}, dt, positive, l);
      Tensor e = make({4}, dt, [](int64_t k) { return std::vector<double>{0.5, 2, -1.5, 3}[k]; });
      expect_values(pow(x, e), ref_binary(x, e, [](double a, double b) { return std::pow(a, b); }), rtol_for(dt) * 4);
      expect_values(pow(x, 2), ref_unary(x, [](double a) { return a * a; }), rtol_for(dt));
      expect_values(pow(x, 0.5), ref_unary(x, [](double a) { return std::sqrt(a); }), rtol_for(dt));
      expect_values(pow(x, 1.7), ref_unary(x, [](double a) { return std::pow(a, 1.7); }), rtol_for(dt) * 4);
      expect_values(pow(2.0, x), ref_unary(x, [](double a) { return std::pow(2.0, a); }), rtol_for(dt) * 4);
    }
  Tensor i = make({7}, kInt64, [](int64_t k) { return double(k) - 3; }); // -3..3
  Tensor ie = make({7}, kInt64, [](int64_t k) { return std::vector<double>{3, -1, 2, 5, -2, 0, 4}[k]; });
  // torch's powi: negative exponents give 0 unless |base| == 1.
  expect_values(pow(i, ie), {-27, 0, 1, 0, 1, 1, 81});
  EXPECT_EQ(pow(i, 2).dtype(), kInt64);
  expect_values(pow(i, 3), ref_unary(i, [](double v) { return v * v * v; }));
  EXPECT_EQ(pow(i, 2.0).dtype(), kFloat32);
  EXPECT_EQ(pow(2, make({2}, kInt32, small_int)).dtype(), kInt32);
  expect_error([&] { pow(i, -1); }, "pow: integers to negative integer powers are not allowed");
  Tensor bb = make({2}, kBool, bool_gen);
  expect_error([&] { pow(bb, bb); }, "pow: not supported on bool tensors");
  EXPECT_EQ(pow(bb, 2).dtype(), kInt64);
}

TEST(ElementwiseBinary, ComparisonsAndLogical) {
  struct Case {
    const char *name;
    Tensor (*fn)(const Tensor &, const Tensor &);
    bool (*ref)(double, double);
  };
  const std::vector<Case> cases = {
      {"eq", eq, [](double a, double b) { return a == b; }}, {"ne", ne, [](double a, double b) { return a != b; }},
      {"lt", lt, [](double a, double b) { return a < b; }},  {"le", le, [](double a, double b) { return a <= b; }},
      {"gt", gt, [](double a, double b) { return a > b; }},  {"ge", ge, [](double a, double b) { return a >= b; }},
      {"logical_and", logical_and, [](double a, double b) { return a != 0 && b != 0; }},
      {"logical_or", logical_or, [](double a, double b) { return a != 0 || b != 0; }},
  };
  for (const auto &c : cases)
    for (auto [da, db] : {std::pair{kInt32, kFloat32}, std::pair{kFloat64, kFloat64}, std::pair{kBool, kInt64},
                          std::pair{kInt64, kInt64}}) {
      Tensor a = make_layout({4, 3}, da, gen_for(da, small_int), Layout::Transposed);
      Tensor b = make({3}, db, gen_for(db, small_int));
      Tensor y = c.fn(a, b);
      EXPECT_EQ(y.dtype(), kBool) << c.name;
      expect_values(y, ref_binary(a, b, [&](double x, double z) { return double(c.ref(x, z)); }), 0, 0, c.name);
    }
  Tensor f = make({5}, kFloat32, signed_frac);
  expect_values(gt(f, 0.5), ref_unary(f, [](double v) { return double(v > 0.5); }));
  expect_values(eq(make({3}, kInt64, small_int), 2), ref_unary(make({3}, kInt64, small_int), [](double v) { return double(v == 2); }));
  expect_values(le(f, 1), ref_unary(f, [](double v) { return double(v <= 1); }));
  // Comparisons happen in the promoted dtype: int 1 vs float 1.5.
  expect_values(lt(make({1}, kInt32, [](int64_t) { return 1; }), 1.5), {1});
}

TEST(ElementwiseBinary, MaximumMinimumPropagateNan) {
  Tensor a = make({3}, kFloat64, [](int64_t k) { return k == 0 ? NAN : double(k); });
  Tensor b = make({3}, kFloat64, [](int64_t k) { return k == 2 ? NAN : 1.5; });
  std::vector<double> mx = values(maximum(a, b)), mn = values(minimum(a, b));
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[2]) && std::isnan(mn[0]) && std::isnan(mn[2]));
  EXPECT_EQ(mx[1], 1.5);
  EXPECT_EQ(mn[1], 1.0);
}

// ---------------------------------------------------------------- where / clamp / masked_fill / lerp

TEST(ElementwiseTernary, WhereThreeOverloads) {
  Tensor c = make({3, 1}, kBool, bool_gen);
  Tensor a = make_layout({3, 4}, kFloat32, signed_frac, Layout::Transposed);
  Tensor b = make({4}, kInt64, small_int);
  Tensor y = where(c, a, b);
  EXPECT_EQ(y.dtype(), kFloat32);
  expect_values(y, ref_nary({c, a, b}, [](const std::vector<double> &v) { return v[0] ? v[1] : v[2]; }), 2.5e-7);
  Tensor y2 = where(c, a, 0.0);
  expect_values(y2, ref_nary({c, a}, [](const std::vector<double> &v) { return v[0] ? v[1] : 0.0; }), 2.5e-7);
  Tensor y3 = where(c, 7, b);
  EXPECT_EQ(y3.dtype(), kInt64);
  expect_values(y3, ref_nary({c, b}, [](const std::vector<double> &v) { return v[0] ? 7.0 : v[1]; }));
  EXPECT_EQ(where(c, make({4}, kInt32, small_int), 0.5).dtype(), kFloat32);
  expect_error([&] { where(b, a, a); }, "where: expected condition to be a boolean tensor, but got a tensor with dtype int64");
  expect_error([&] { where(c, make({2, 5}, kFloat32, positive), a); }, "where: shapes");
}

TEST(ElementwiseTernary, ClampVariants) {
  for (DType dt : {kInt32, kInt64, kFloat32, kFloat64})
    for (Layout l : layouts_for({3, 4})) {
      Tensor x = make_layout({3, 4}, dt, gen_for(dt, signed_frac), l);
      expect_values(clamp(x, -1, 2), ref_unary(x, [](double v) { return std::min(std::max(v, -1.0), 2.0); }));
      expect_values(clamp(x, 0), ref_unary(x, [](double v) { return std::max(v, 0.0); }));
      expect_values(clamp(x, std::nullopt, 1), ref_unary(x, [](double v) { return std::min(v, 1.0); }));
      expect_values(clamp(x, 3, 1), ref_unary(x, [](double) { return 1.0; })); // min > max: max, as torch
    }
  Tensor i = make({4}, kInt32, small_int);
  Tensor f = clamp(i, -0.5, 2.5);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_values(f, ref_unary(i, [](double v) { return std::min(std::max(v, -0.5), 2.5); }));
  expect_error([&] { clamp(i, std::nullopt, std::nullopt); }, "clamp: at least one of 'min' or 'max' must not be None");
  expect_error([&] { clamp(make({2}, kBool, bool_gen), 0); }, "clamp: not supported on bool");
}

TEST(ElementwiseTernary, MaskedFillBroadcastsMask) {
  for (DType dt : kAllTypes) {
    Tensor x = make_layout({3, 4}, dt, gen_for(dt, signed_frac), Layout::Transposed);
    Tensor m = make({4}, kBool, bool_gen);
    Tensor y = masked_fill(x, m, 1);
    EXPECT_EQ(y.dtype(), dt);
    expect_values(y, ref_binary(x, m, [](double v, double k) { return k ? 1.0 : v; }));
  }
  Tensor x = make({1, 4}, kFloat32, signed_frac);
  Tensor m = make({3, 1}, kBool, bool_gen);
  Tensor y = masked_fill(x, m, -2.5);
  EXPECT_EQ(y.sizes().vec(), (Shape{3, 4}));
  expect_values(y, ref_binary(x, m, [](double v, double k) { return k ? -2.5 : v; }), 2.5e-7);
  expect_error([&] { masked_fill(x, make({4}, kInt64, small_int), 0); },
               "masked_fill: only supports boolean masks, but got mask with dtype int64");
}

TEST(ElementwiseTernary, LerpScalarAndTensorWeight) {
  auto ref = [](const std::vector<double> &v) { return v[0] + v[2] * (v[1] - v[0]); };
  for (DType dt : {kFloat32, kFloat64})
    for (Layout l : layouts_for({3, 4})) {
      Tensor a = make_layout({3, 4}, dt, signed_frac, l);
      Tensor b = make({4}, dt, positive);
      Tensor w = make({3, 1}, dt, [](int64_t k) { return std::vector<double>{0.0, 0.3, 0.9}[k]; });
      Tensor y = lerp(a, b, w);
      EXPECT_EQ(y.dtype(), dt);
      expect_values(y, ref_nary({a, b, w}, ref), rtol_for(dt) * 4, 1e-6);
      Tensor ws = make({}, kFloat64, [](int64_t) { return 0.75; });
      expect_values(lerp(a, b, 0.75), ref_nary({a, b, ws}, ref), rtol_for(dt) * 4, 1e-6);
      expect_values(lerp(a, b, 1.0), ref_binary(a, b, [](double, double e) { return e; }), rtol_for(dt));
    }
  Tensor a = make({2}, kFloat32, positive);
  expect_error([&] { lerp(a, make({2}, kFloat64, positive), 0.5); }, "lerp: expected dtype float32 for `end`");
  expect_error([&] { lerp(a, a, make({2}, kFloat64, positive)); }, "lerp: expected dtype float32 for `weight`");
  expect_error([&] { lerp(make({2}, kInt64, small_int), make({2}, kInt64, small_int), 0.5); }, "lerp: expected a floating-point");
}

// ---------------------------------------------------------------- large and threaded

TEST(ElementwiseParallel, LargeStridedAndFlatMatchReferenceAtTwoThreads) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor a = make_layout({300, 257}, kFloat32, signed_frac, Layout::Transposed); // 77100 elements > grain
    Tensor b = make({257}, kFloat32, positive);
    expect_values(add(a, b), ref_binary(a, b, [](double x, double y) { return x + y; }), 2e-6, 1e-6);
    Tensor c = make({100000}, kFloat64, signed_frac), d = make({100000}, kFloat64, positive);
    expect_values(mul(c, d), ref_binary(c, d, [](double x, double y) { return x * y; }), 1e-15);
    expect_values(exp(a), ref_unary(a, [](double v) { return std::exp(v); }), 2e-6);
    Tensor i = make({70000}, kInt32, small_int);
    expect_values(where(gt(i, 0), i, 0), ref_unary(i, [](double v) { return v > 0 ? v : 0.0; }));
  }
}

TEST(ElementwiseParallel, FourDimPermutedBroadcastAcrossChunks) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    // [3, 65, 7, 33] permuted to [7, 33, 65, 3]: 45045 elements, no dim coalesces,
    // so chunk boundaries fall inside runs and carries cross several dims.
    Tensor a = make({3, 65, 7, 33}, kFloat64, signed_frac).permute({2, 3, 1, 0});
    Tensor b = make({33, 1, 3}, kFloat64, positive);
    expect_values(sub(a, b, 0.5), ref_binary(a, b, [](double x, double z) { return x - 0.5 * z; }), 1e-15, 1e-15);
    std::vector<double> av = values(a);
    Tensor a_copy = make({7, 33, 65, 3}, kFloat64, [&](int64_t k) { return av[size_t(k)]; });
    a.mul_(b); // in place through the permuted view
    expect_values(a, ref_binary(a_copy, b, [](double x, double z) { return x * z; }), 1e-15);
  }
}

// ---------------------------------------------------------------- meta tensors (the shape rule)

TEST(ElementwiseMeta, MetaInMetaOut) {
  Tensor a = detail::make_tensor({3, 1, 4}, kInt32, /*meta=*/true);
  Tensor b = detail::make_tensor({5, 4}, kFloat32, true);
  Tensor y = add(a, b);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes().vec(), (Shape{3, 5, 4}));
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_EQ(exp(a).dtype(), kFloat32);
  EXPECT_EQ(lt(a, b).dtype(), kBool);
  EXPECT_EQ(div(a, a).dtype(), kFloat32);
  EXPECT_TRUE(where(lt(a, b), a, b).is_meta());
  EXPECT_THROW(add(a, detail::make_tensor({2}, kInt32, true)), Error);
}

// ---------------------------------------------------------------- adapters

namespace {
void expect_same(const Tensor &x, const Tensor &y, const std::string &what) {
  EXPECT_EQ(x.dtype(), y.dtype()) << what;
  EXPECT_EQ(x.sizes().vec(), y.sizes().vec()) << what;
  expect_values(x, values(y), 0, 0, what);
}
} // namespace

// exp2 (torch.exp2) against std::exp2 in double: the specials, exact powers of two, the
// overflow edge and float32's subnormal range (2^-149 .. 2^-126), in both float dtypes.
TEST(ElementwiseUnary, Exp2NanInfPowersAndSubnormals) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xs = {std::nan(""), inf, -inf, 0.0, -0.0, 1.0, -1.0, 10.0, -24.0, 127.0, 127.99, 128.0,
                            -126.0, -130.5, -140.25, -149.0, -149.6, -150.0, -200.0, 0.5, -0.5, 3.3, 1023.5, 1024.0,
                            -1074.0, -1080.0};
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = tensor(xs).to(dt);
    std::vector<double> xv = values(x), want;
    for (double v : xv) want.push_back(dt == kFloat32 ? double(float(std::exp2(v))) : std::exp2(v));
    // float32: results within 2 ulp of the correctly rounded one; subnormal ones within one subnormal step.
    expect_values(exp2(x), want, dt == kFloat32 ? 2.4e-7 : 1e-15, dt == kFloat32 ? 1.5e-45 : 0, "exp2 specials");
    std::vector<double> y = values(exp2(x));
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(y[1], inf);
    EXPECT_EQ(y[2], 0.0);
    EXPECT_EQ(y[3], 1.0);
    EXPECT_EQ(y[4], 1.0);
    EXPECT_EQ(y[9], std::ldexp(1.0, 127)); // integer exponents are exact
    EXPECT_EQ(y[15], std::ldexp(1.0, -149));
    if (dt == kFloat32) {
      EXPECT_EQ(y[11], inf);
    }
  }
  // Non-contiguous float32 input (a transposed, then a step-2 slice view) through the generated kernel.
  Tensor base = make({8, 6}, kFloat32, [](int64_t i) { return -140.0 + 5.3 * double(i); });
  for (Tensor v : {base.t(), base.slice(0, 0, 8, 2)}) {
    std::vector<double> want;
    for (double e : values(v)) want.push_back(double(float(std::exp2(e))));
    expect_values(exp2(v), want, 2.4e-7, 1.5e-45, "exp2 strided");
  }
}

// torch's formulas for the composed activations, in double (aten's CPU kernels).
double ref_hardswish(double x) { return std::isnan(x) ? x : x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }
double ref_mish(double x) { return x * std::tanh(x > 20 ? x : std::log1p(std::exp(x))); } // softplus, threshold 20
double ref_log_sigmoid(double x) { return x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x)); }
double ref_selu(double x) {
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return x > 0 ? scale * x : scale * alpha * std::expm1(x);
}

// hardswish, mish, log_sigmoid and selu (the composed-op list): values over
// [-30, 30] in each float dtype and layout against torch's formulas, NaN and
// +-inf as torch gives them, and integer or bool input refused.
TEST(ElementwiseUnary, ComposedActivationsValuesNanInfAndErrors) {
  struct C {
    const char *name;
    Tensor (*fn)(const Tensor &);
    double (*ref)(double);
    double inf_result, minus_inf_result;
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<C> cases = {
      {"hardswish", hardswish, ref_hardswish, inf, nan},      // -inf * 0
      {"mish", mish, ref_mish, inf, nan},                     // -inf * tanh(0)
      {"log_sigmoid", log_sigmoid, ref_log_sigmoid, 0.0, -inf},
      {"selu", selu, ref_selu, inf, -1.7580993408473766},    // -scale * alpha
  };
  for (const C &c : cases) {
    for (DType dt : {kFloat32, kFloat64}) {
      for (Layout l : layouts_for({6, 10})) {
        Tensor x = make_layout({6, 10}, dt, [](int64_t i) { return -30.0 + double(i) * 1.0171 - (i % 2) * 0.003; }, l);
        Tensor y = c.fn(x);
        EXPECT_EQ(y.dtype(), dt) << c.name;
        EXPECT_EQ(y.sizes().vec(), (Shape{6, 10})) << c.name;
        expect_values(y, ref_unary(x, c.ref), dt == kFloat32 ? 1e-5 : 1e-12, dt == kFloat32 ? 1e-6 : 1e-14,
                      std::string(c.name) + " " + std::string(name(dt)) + " " + layout_name(l));
      }
      std::vector<double> y = values(c.fn(tensor(std::vector<double>{nan, inf, -inf}).to(dt)));
      EXPECT_TRUE(std::isnan(y[0])) << c.name;
      EXPECT_EQ(y[1], c.inf_result) << c.name;
      if (std::isnan(c.minus_inf_result)) EXPECT_TRUE(std::isnan(y[2])) << c.name << " " << y[2];
      else if (std::isinf(c.minus_inf_result)) EXPECT_EQ(y[2], c.minus_inf_result) << c.name;
      else EXPECT_NEAR(y[2], c.minus_inf_result, 1e-6) << c.name;
    }
    for (DType dt : {kInt64, kInt32, kBool})
      expect_error([&] { c.fn(make({3}, dt, dt == kBool ? Gen(bool_gen) : Gen(small_int))); },
                   std::string(c.name) + ": expected a floating-point tensor, got " + std::string(name(dt)));
  }
}

// torch.nn.functional.softsign, x / (1 + |x|), in double: a composed op.
double ref_softsign(double x) { return x / (1.0 + std::abs(x)); }

TEST(ElementwiseUnary, SoftsignValuesNanInfAndErrors) {
  for (DType dt : {kFloat32, kFloat64})
    for (Layout l : layouts_for({4, 6})) {
      Tensor x = make_layout({4, 6}, dt, [](int64_t i) { return (-11.5 + double(i)) * std::pow(1.7, double(i % 7)); }, l);
      Tensor y = softsign(x);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_EQ(y.sizes().vec(), (Shape{4, 6}));
      expect_values(y, ref_unary(x, ref_softsign), rtol_for(dt), 0, "softsign");
    }
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {kFloat32, kFloat64}) {
    // torch: softsign(+-inf) = inf / inf = NaN; -0 keeps its sign; huge values round to +-1.
    Tensor s = tensor(std::vector<double>{std::nan(""), inf, -inf, -0.0, 1e30, -1e30, 1.0}).to(dt);
    std::vector<double> y = values(softsign(s));
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_TRUE(std::isnan(y[1]));
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 0.0);
    EXPECT_TRUE(std::signbit(y[3]));
    EXPECT_EQ(y[4], 1.0);
    EXPECT_EQ(y[5], -1.0);
    EXPECT_EQ(y[6], 0.5);
  }
  // torch's softsign is x / (1 + |x|): integers and bools promote to float32 (true division).
  for (DType dt : {kInt64, kInt32, kBool}) {
    Tensor i = make({6}, dt, dt == kBool ? Gen(bool_gen) : Gen(small_int));
    Tensor y = softsign(i);
    EXPECT_EQ(y.dtype(), kFloat32) << dt;
    expect_values(y, ref_unary(i, ref_softsign), 2e-7, 0, "softsign promoted");
  }
}

TEST(ElementwiseAdapters, RunOpMatchesTypedCall) {
  Tensor f = make_layout({3, 4}, kFloat32, signed_frac, Layout::Transposed);
  Tensor p = make({3, 4}, kFloat32, positive);
  Tensor g = make({4}, kFloat32, positive);
  Tensor i = make({3, 4}, kInt64, small_int);
  Tensor nz = make({4}, kInt64, nonzero_int);
  Tensor m = make({3, 1}, kBool, bool_gen);
  struct U {
    OpId id;
    Tensor (*fn)(const Tensor &);
    Tensor in;
  };
  for (const U &u : std::vector<U>{{OpId::Neg, neg, f},       {OpId::Abs, abs, f},          {OpId::Exp, exp, f},
                                   {OpId::Exp2, exp2, f},
                                   {OpId::Log, log, p},       {OpId::Log1p, log1p, p},      {OpId::Expm1, expm1, f},
                                   {OpId::Sqrt, sqrt, p},     {OpId::Rsqrt, rsqrt, p},      {OpId::Sin, sin, f},
                                   {OpId::Cos, cos, f},       {OpId::Tanh, tanh, f},        {OpId::Sigmoid, sigmoid, f},
                                   {OpId::Tan, tan, f},       {OpId::Asin, asin, f},        {OpId::Acos, acos, f},
                                   {OpId::Atan, atan, f},     {OpId::Sinh, sinh, f},        {OpId::Cosh, cosh, f},
                                   {OpId::Asinh, asinh, f},   {OpId::Acosh, acosh, p},      {OpId::Atanh, atanh, f},
                                   {OpId::Log2, log2, p},     {OpId::Log10, log10, p},      {OpId::Mish, mish, f},
                                   {OpId::Hardswish, hardswish, f}, {OpId::LogSigmoid, log_sigmoid, f},
                                   {OpId::Selu, selu, f},
                                   {OpId::Relu, relu, f},     {OpId::Silu, silu, f},        {OpId::Erf, erf, f},
                                   {OpId::Hardsigmoid, hardsigmoid, f}, {OpId::Softsign, softsign, f},
                                   {OpId::Reciprocal, reciprocal, f}, {OpId::Square, square, i},
                                   {OpId::Floor, floor, f},   {OpId::Ceil, ceil, f},        {OpId::Round, round, f},
                                   {OpId::Sign, sign, f},     {OpId::LogicalNot, logical_not, i},
                                   {OpId::Contiguous, contiguous, f}, {OpId::Clone, clone, f}})
    expect_same(run_op(u.id, {u.in}, {}).at(0), u.fn(u.in), std::string(op_info(u.id).mnemonic));

  expect_same(run_op(OpId::Gelu, {f}, {"tanh"}).at(0), gelu(f, "tanh"), "gelu");
  expect_same(run_op(OpId::Gelu, {f}, {"none"}).at(0), gelu(f), "gelu");
  expect_same(run_op(OpId::Cast, {f}, {kInt32}).at(0), to(f, kInt32), "to");
  expect_same(run_op(OpId::Add, {f, g}, {2.5}).at(0), add(f, g, 2.5), "add");
  expect_same(run_op(OpId::Sub, {i, nz}, {3}).at(0), sub(i, nz, 3), "sub");
  expect_same(run_op(OpId::Div, {i, nz}, {std::monostate()}).at(0), div(i, nz), "div");
  expect_same(run_op(OpId::Div, {i, nz}, {"floor"}).at(0), div(i, nz, "floor"), "div floor");
  struct B {
    OpId id;
    Tensor (*fn)(const Tensor &, const Tensor &);
  };
  for (const B &b : std::vector<B>{{OpId::Mul, mul},       {OpId::Pow, pow},         {OpId::Maximum, maximum},
                                   {OpId::Minimum, minimum}, {OpId::Remainder, remainder}, {OpId::Eq, eq},
                                   {OpId::Ne, ne},         {OpId::Lt, lt},           {OpId::Le, le},
                                   {OpId::Gt, gt},         {OpId::Ge, ge},           {OpId::LogicalAnd, logical_and},
                                   {OpId::LogicalOr, logical_or}, {OpId::Copy, copy}})
    expect_same(run_op(b.id, {p, g}, {}).at(0), b.fn(p, g), std::string(op_info(b.id).mnemonic));
  expect_same(run_op(OpId::Where, {m, f, g}, {}).at(0), where(m, f, g), "where");
  expect_same(run_op(OpId::Clamp, {f}, {-0.5, std::monostate()}).at(0), clamp(f, -0.5), "clamp");
  expect_same(run_op(OpId::Clamp, {f}, {std::monostate(), 1}).at(0), clamp(f, std::nullopt, 1), "clamp max");
  expect_same(run_op(OpId::MaskedFill, {f, m}, {3.0}).at(0), masked_fill(f, m, 3.0), "masked_fill");
  expect_same(run_op(OpId::Lerp, {f, p, g}, {}).at(0), lerp(f, p, g), "lerp");
  expect_error([&] { run_op(OpId::Add, {f}, {1}); }, "add: expected 2 inputs, got 1");
  expect_error([&] { run_op(OpId::Where, {m, f}, {}); }, "where: expected 3 inputs, got 2");
}
