// In-place elementwise ops: non-contiguous self, broadcasting other, dtype rules,
// aliasing (x.add_(x.t())), internal overlap and error messages.
#include <gtest/gtest.h>

#include "elementwise_test_util.h"

using namespace kiln;
using namespace ewt;

namespace {
double signed_frac(int64_t i) { return (i % 11) * 0.625 - 3.1 + (i % 3) * 0.01; }
double positive(int64_t i) { return 0.05 + (i % 13) * 0.37; }
double small_int(int64_t i) { return double((i * 7) % 11) - 5; }
} // namespace

TEST(ElementwiseInplace, ArithmeticOnNonContiguousSelfWithBroadcast) {
  struct Case {
    const char *name;
    std::function<void(Tensor &, const Tensor &)> op;
    double (*ref)(double, double);
  };
  const std::vector<Case> cases = {
      {"add_", [](Tensor &s, const Tensor &o) { add_(s, o); }, [](double a, double b) { return a + b; }},
      {"add_ alpha", [](Tensor &s, const Tensor &o) { add_(s, o, 2); }, [](double a, double b) { return a + 2 * b; }},
      {"sub_", [](Tensor &s, const Tensor &o) { sub_(s, o); }, [](double a, double b) { return a - b; }},
      {"sub_ alpha", [](Tensor &s, const Tensor &o) { s.sub_(o, 3); }, [](double a, double b) { return a - 3 * b; }},
      {"mul_", [](Tensor &s, const Tensor &o) { mul_(s, o); }, [](double a, double b) { return a * b; }},
      {"div_", [](Tensor &s, const Tensor &o) { div_(s, o); }, [](double a, double b) { return a / b; }},
  };
  for (const auto &c : cases)
    for (DType dt : {kFloat32, kFloat64})
      for (Layout l : layouts_for({4, 5})) {
        Tensor self = make_layout({4, 5}, dt, signed_frac, l);
        Tensor before = make({4, 5}, dt, signed_frac);
        Tensor other = make({5}, dt, positive);
        void *data = self.raw_data();
        c.op(self, other);
        EXPECT_EQ(self.raw_data(), data) << c.name; // written in place
        std::string what = std::string(c.name) + " " + std::string(name(dt)) + " " + layout_name(l);
        expect_values(self, ref_binary(before, other, c.ref), rtol_for(dt) * 4, 1e-6, what);
      }
}

TEST(ElementwiseInplace, ScalarOverloadsAndOperators) {
  Tensor x = make_layout({3, 4}, kFloat32, signed_frac, Layout::Transposed);
  Tensor before = make({3, 4}, kFloat32, signed_frac);
  x.add_(1.5).mul_(2).sub_(0.5, 2).div_(4);
  expect_values(x, ref_unary(before, [](double v) { return ((v + 1.5) * 2 - 1.0) / 4; }), 2e-6, 1e-6);
  Tensor i = make({5}, kInt64, small_int);
  Tensor ib = make({5}, kInt64, small_int);
  i += 3;
  i *= 2;
  i -= ib;
  expect_values(i, ref_unary(ib, [](double v) { return (v + 3) * 2 - v; }));
}

TEST(ElementwiseInplace, DtypeRules) {
  Tensor i = make({2, 3}, kInt64, small_int);
  Tensor f = make({3}, kFloat32, positive);
  expect_error([&] { i.add_(f); }, "add_: result type float32 can't be cast to the desired output type int64");
  expect_error([&] { i.mul_(2.5); }, "mul_: result type float32 can't be cast to the desired output type int64");
  expect_error([&] { i.div_(2); }, "div_: result type float32 can't be cast to the desired output type int64");
  Tensor b = make({3}, kBool, [](int64_t k) { return double(k % 2); });
  expect_error([&] { b.add_(make({3}, kInt32, small_int)); }, "add_: result type int32 can't be cast");
  // Same category, wider other: computed in int64, stored into int32 (torch allows it).
  Tensor i32 = make({2, 3}, kInt32, small_int);
  Tensor i64 = make({3}, kInt64, [](int64_t k) { return double(k) * 10; });
  i32.add_(i64);
  expect_values(i32, ref_binary(make({2, 3}, kInt32, small_int), i64, [](double a, double c) { return a + c; }));
  // float32 self with a float64 tensor: computed in float64, rounded into float32.
  Tensor f32 = make({3}, kFloat32, signed_frac);
  Tensor f64 = make({3}, kFloat64, [](int64_t) { return 0.1; });
  f32.mul_(f64);
  expect_values(f32, ref_binary(make({3}, kFloat32, signed_frac), f64, [](double a, double c) { return double(float(a * c)); }), 2.5e-7);
  // Float self with an int other is fine.
  Tensor g = make({3}, kFloat64, positive);
  g.add_(make({3}, kInt32, small_int));
  expect_values(g, ref_binary(make({3}, kFloat64, positive), make({3}, kInt32, small_int), [](double a, double c) { return a + c; }), 1e-15);
}

TEST(ElementwiseInplace, ShapeRules) {
  Tensor x = make({3, 1}, kFloat32, positive);
  expect_error([&] { x.add_(make({3, 4}, kFloat32, positive)); },
               "add_: output with shape [3, 1] doesn't match the broadcast shape [3, 4]");
  expect_error([&] { x.mul_(make({2, 1}, kFloat32, positive)); }, "mul_: shapes [3, 1] and [2, 1] are not broadcastable");
  Tensor e = make({1, 4}, kFloat32, positive).expand({3, 4});
  expect_error([&] { e.add_(1); }, "add_: unsupported operation: more than one element of the written-to tensor");
  expect_error([&] { relu_(e); }, "relu_: unsupported operation");
  Tensor b = make({2}, kBool, positive);
  expect_error([&] { b.sub_(b); }, "sub_: subtraction");
}

TEST(ElementwiseInplace, AliasingSelfAndOther) {
  for (DType dt : {kFloat32, kInt64}) {
    Gen gen = dt == kInt64 ? Gen(small_int) : Gen(signed_frac);
    // x.add_(x.t()) on a square matrix: every element must see the original values.
    Tensor x = make({5, 5}, dt, gen);
    Tensor orig = make({5, 5}, dt, gen);
    x.add_(x.t());
    expect_values(x, ref_binary(orig, orig.t(), [](double a, double b) { return a + b; }), rtol_for(dt), 0, "add_ t");
    // The exact same view is safe in place.
    Tensor y = make({4, 3}, dt, gen);
    y.mul_(y);
    expect_values(y, ref_unary(make({4, 3}, dt, gen), [](double v) { return v * v; }), rtol_for(dt), 0, "mul_ self");
    // A broadcast view of self's first row: rows below must use the original row 0.
    Tensor z = make({4, 3}, dt, gen);
    Tensor zo = make({4, 3}, dt, gen);
    z.sub_(z[0]);
    expect_values(z, ref_binary(zo, zo[0], [](double a, double b) { return a - b; }), rtol_for(dt), 0, "sub_ row");
    // Overlapping shifted views.
    Tensor w = make({8}, dt, gen);
    Tensor wo = make({8}, dt, gen);
    Tensor head = w.slice(0, 0, 7), tail = w.slice(0, 1, 8);
    head.add_(tail);
    std::vector<double> want = values(wo);
    for (int k = 0; k < 7; ++k) want[k] = values(wo)[k] + values(wo)[k + 1];
    expect_values(w, want, rtol_for(dt), 0, "add_ shifted");
  }
}

TEST(ElementwiseInplace, ClampReluOnNonContiguous) {
  for (DType dt : {kInt32, kFloat32, kFloat64}) {
    Gen gen = dt == kInt32 ? Gen(small_int) : Gen(signed_frac);
    Tensor x = make_layout({3, 4}, dt, gen, Layout::Transposed);
    Tensor before = make({3, 4}, dt, gen);
    clamp_(x, -1, 2);
    expect_values(x, ref_unary(before, [](double v) { return std::min(std::max(v, -1.0), 2.0); }));
  }
  Tensor i = make_layout({3, 4}, kInt32, small_int, Layout::Sliced);
  Tensor ib = make({3, 4}, kInt32, small_int);
  expect_error([&] { clamp_(i, -1, 1.5); }, "clamp_: result type float32 can't be cast to the desired output type int32");
  i.clamp_(-2, std::nullopt);
  expect_values(i, ref_unary(ib, [](double v) { return std::max(v, -2.0); }));
  Tensor r = make_layout({4, 2}, kFloat32, signed_frac, Layout::Sliced);
  Tensor rb = make({4, 2}, kFloat32, signed_frac);
  Tensor &rr = relu_(r);
  EXPECT_TRUE(rr.is_same(r));
  expect_values(r, ref_unary(rb, [](double v) { return v < 0 ? 0.0 : v; }));
}

TEST(ElementwiseInplace, LargeTransposedSelfAtTwoThreads) {
  set_num_threads(2);
  Tensor x = make_layout({400, 300}, kFloat32, signed_frac, Layout::Transposed);
  Tensor before = make({400, 300}, kFloat32, signed_frac);
  Tensor o = make({300}, kFloat32, positive);
  x.add_(o, 0.5);
  expect_values(x, ref_binary(before, o, [](double a, double b) { return a + 0.5 * b; }), 2e-6, 1e-6);
  Tensor sq = make({300, 300}, kFloat32, signed_frac);
  Tensor sqo = make({300, 300}, kFloat32, signed_frac);
  sq.add_(sq.t());
  expect_values(sq, ref_binary(sqo, sqo.t(), [](double a, double b) { return a + b; }), 2e-6);
}
