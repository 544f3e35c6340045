// The composites of runtime/ops.h (runtime/kernels/composite.cpp): torch's functions
// built from kiln's ops. Each is checked against a naive double-precision loop
// written from torch's definition (never against the ops it is built from), on
// contiguous and transposed inputs, NaN and inf where they matter, integer inputs
// where torch takes them, and bad input; compiled equals eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace ewt;
using kiln::testing::vals;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

namespace {
double bool_gen(int64_t i) { return double(i % 3 == 0); }
const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

// -6 .. 6 with a few NaN and +-inf among them.
double spread(int64_t i) {
  if (i % 17 == 5) return kNan;
  if (i % 19 == 7) return kInf;
  if (i % 23 == 11) return -kInf;
  return -6.0 + 0.37 * double(i % 33) + 0.001 * double(i % 5);
}
double unit_open(int64_t i) { return 0.02 + 0.96 * double(i % 29) / 28.0; } // (0, 1)

double tol(DType dt) { return dt == kFloat32 ? 2e-6 : 1e-13; }

struct Activation {
  const char *name;
  std::function<Tensor(const Tensor &)> fn;
  std::function<double(double)> ref;
  Gen gen = spread;
};

std::vector<Activation> activations() {
  return {
      {"leaky_relu", [](const Tensor &x) { return leaky_relu(x, 0.2); },
       [](double v) { return v > 0 ? v : v * 0.2; }},
      {"leaky_relu default", [](const Tensor &x) { return leaky_relu(x); },
       [](double v) { return v > 0 ? v : v * 0.01; }},
      {"elu", [](const Tensor &x) { return elu(x, 1.5, 1.2, 0.7); },
       [](double v) { return v > 0 ? v * 1.2 : std::expm1(v * 0.7) * 1.5 * 1.2; }},
      {"celu", [](const Tensor &x) { return celu(x, 0.5); },
       [](double v) { return v > 0 ? v : 0.5 * std::expm1(v / 0.5); }},
      {"softplus", [](const Tensor &x) { return softplus(x, 2, 5); },
       [](double v) { return v * 2 > 5 ? v : std::log1p(std::exp(v * 2)) / 2; }},
      {"softplus default", [](const Tensor &x) { return softplus(x); },
       [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }},
      {"hardtanh", [](const Tensor &x) { return hardtanh(x, -0.5, 0.8); },
       [](double v) { return std::isnan(v) ? v : std::min(std::max(v, -0.5), 0.8); }},
      {"threshold", [](const Tensor &x) { return threshold(x, 0.1, -7); },
       [](double v) { return v <= 0.1 ? -7.0 : v; }},
      {"clamp_min", [](const Tensor &x) { return clamp_min(x, -0.3); },
       [](double v) { return std::isnan(v) ? v : std::max(v, -0.3); }},
      {"clamp_max", [](const Tensor &x) { return x.clamp_max(0.4); },
       [](double v) { return std::isnan(v) ? v : std::min(v, 0.4); }},
      {"logit", [](const Tensor &x) { return logit(x); }, [](double v) { return std::log(v / (1 - v)); }, unit_open},
      {"logit eps", [](const Tensor &x) { return x.logit(0.1); },
       [](double v) {
         double z = std::min(std::max(v, 0.1), 0.9);
         return std::log(z / (1 - z));
       }},
  };
}
} // namespace

TEST(Composite, ActivationsMatchTorchsFormulas) {
  for (const Activation &a : activations())
    for (DType dt : {kFloat32, kFloat64})
      for (Layout l : layouts_for({5, 8})) {
        Tensor x = make_layout({5, 8}, dt, a.gen, l);
        Tensor y = a.fn(x);
        std::string what = std::string(a.name) + " " + std::string(name(dt)) + " " + layout_name(l);
        EXPECT_EQ(y.dtype(), dt) << what;
        EXPECT_EQ(y.sizes().vec(), (Shape{5, 8})) << what;
        expect_values(y, ref_unary(x, a.ref), tol(dt) * 4, tol(dt), what);
      }
}

TEST(Composite, ActivationsOnIntegersAndBadInput) {
  Tensor i = make({2, 5}, kInt64, [](int64_t k) { return double(k) - 4; });
  Tensor h = hardtanh(i, -2, 3);
  EXPECT_EQ(h.dtype(), kInt64);
  expect_values(h, ref_unary(i, [](double v) { return std::min(std::max(v, -2.0), 3.0); }), 0, 0, "hardtanh int");
  Tensor t = threshold(i, 1, 9);
  EXPECT_EQ(t.dtype(), kInt64);
  expect_values(t, ref_unary(i, [](double v) { return v <= 1 ? 9.0 : v; }), 0, 0, "threshold int");
  EXPECT_EQ(clamp_min(i, 0).dtype(), kInt64);
  Tensor lg = logit(make({3}, kInt64, [](int64_t k) { return double(k); }));
  EXPECT_EQ(lg.dtype(), kFloat32); // integer inputs promote, as torch's
  expect_values(lg, {-kInf, kInf, kNan}, 0, 0, "logit int"); // log(0 / 1), log(1 / 0), log(2 / -1)
  const std::string not_float = ": expected a floating-point tensor, got int64";
  expect_error([&] { leaky_relu(i); }, "leaky_relu" + not_float);
  expect_error([&] { elu(i); }, "elu" + not_float);
  expect_error([&] { celu(i); }, "celu" + not_float);
  expect_error([&] { softplus(i); }, "softplus" + not_float);
  expect_error([&] { hardtanh(make({2}, kBool, bool_gen)); }, "hardtanh: not supported on bool tensors");
  expect_error([&] { celu(make({2}, kFloat32, spread), 0.0); }, "celu: alpha must not be 0");
  expect_error([&] { leaky_relu(Tensor()); }, "leaky_relu");
}

TEST(Composite, Classification) {
  for (DType dt : {kFloat32, kFloat64})
    for (Layout l : layouts_for({4, 9})) {
      Tensor x = make_layout({4, 9}, dt, spread, l);
      std::string what = std::string(name(dt)) + " " + layout_name(l);
      auto b = [](bool v) { return v ? 1.0 : 0.0; };
      struct C {
        Tensor got;
        std::function<double(double)> ref;
      };
      for (const C &c : std::vector<C>{
               {isnan(x), [&](double v) { return b(std::isnan(v)); }},
               {x.isinf(), [&](double v) { return b(std::isinf(v)); }},
               {isposinf(x), [&](double v) { return b(v == kInf); }},
               {isneginf(x), [&](double v) { return b(v == -kInf); }},
               {x.isfinite(), [&](double v) { return b(std::isfinite(v)); }},
           }) {
        EXPECT_EQ(c.got.dtype(), kBool) << what;
        expect_values(c.got, ref_unary(x, c.ref), 0, 0, what);
      }
      const double hi = dt == kFloat32 ? double(std::numeric_limits<float>::max()) : std::numeric_limits<double>::max();
      expect_values(nan_to_num(x), ref_unary(x, [&](double v) { return std::isnan(v) ? 0 : v == kInf ? hi : v == -kInf ? -hi : v; }),
                    0, 0, "nan_to_num " + what);
      expect_values(x.nan_to_num(1.5, 100, -200),
                    ref_unary(x, [](double v) { return std::isnan(v) ? 1.5 : v == kInf ? 100 : v == -kInf ? -200 : v; }),
                    tol(dt), 0, "nan_to_num values " + what);
    }
  for (DType dt : {kInt32, kInt64, kBool}) {
    Tensor i = make({6}, dt, dt == kBool ? Gen(bool_gen) : Gen([](int64_t k) { return double(k) - 3; }));
    expect_values(isnan(i), std::vector<double>(6, 0.0), 0, 0, "isnan int");
    expect_values(isinf(i), std::vector<double>(6, 0.0), 0, 0, "isinf int");
    expect_values(isfinite(i), std::vector<double>(6, 1.0), 0, 0, "isfinite int");
    Tensor c = nan_to_num(i);
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_FALSE(c.is_alias_of(i));
    expect_values(c, values(i), 0, 0, "nan_to_num int");
  }
}

TEST(Composite, AnyAllAndLogsumexp) {
  Tensor x = make({3, 4}, kFloat32, [](int64_t k) { return k % 5 == 0 ? 0.0 : (k == 7 ? kNan : 1.0); });
  // Row-major values: 0 1 1 1 / 1 0 1 nan / 1 1 0 1.
  EXPECT_TRUE(any(x).item<bool>());
  EXPECT_FALSE(all(x).item<bool>());
  expect_values(any(x, 1), {1, 1, 1}, 0, 0, "any dim");
  expect_values(all(x, -1), {0, 0, 0}, 0, 0, "all dim -1");
  expect_values(all(make({2, 3}, kInt64, [](int64_t k) { return double(k % 3 == 2 ? 0 : 1); }), 0), {1, 1, 0}, 0, 0,
                "all dim 0");
  expect_values(all(make({2, 2}, kFloat32, [](int64_t) { return kNan; })), {1}, 0, 0, "NaN counts as true");
  EXPECT_EQ(any(x, 0, true).sizes().vec(), (Shape{1, 4}));
  EXPECT_EQ(any(x, 0).dtype(), kBool);
  EXPECT_FALSE(any(zeros({0})).item<bool>());
  EXPECT_TRUE(all(zeros({0})).item<bool>());
  expect_error([&] { any(x, 2); }, "any");

  for (DType dt : {kFloat32, kFloat64}) {
    Tensor v = make_layout({3, 4, 5}, dt, [](int64_t k) { return -3.0 + 0.29 * double(k % 31) + (k == 9 ? 80 : 0); },
                           Layout::Transposed);
    auto ref = [&](const std::vector<int64_t> &red, const Shape &kept) {
      // logsumexp over the dims in red, in double, without subtracting a max (the values are small).
      std::vector<double> out;
      for_each_index(kept, [&](const Shape &o, int64_t) {
        double s = 0;
        for_each_index(v.sizes().vec(), [&](const Shape &idx, int64_t) {
          size_t k = 0;
          for (size_t d = 0; d < idx.size(); ++d) {
            bool reduced = std::find(red.begin(), red.end(), int64_t(d)) != red.end();
            if (reduced) continue;
            if (idx[d] != o[k++]) return;
          }
          s += std::exp(read_at(v, idx));
        });
        out.push_back(std::log(s));
      });
      return out;
    };
    expect_values(logsumexp(v, {1}), ref({1}, {3, 5}), tol(dt) * 4, tol(dt), "logsumexp dim 1");
    expect_values(v.logsumexp({-1}, true), ref({2}, {3, 4}), tol(dt) * 4, tol(dt), "logsumexp dim -1");
    EXPECT_EQ(v.logsumexp({-1}, true).sizes().vec(), (Shape{3, 4, 1}));
    expect_values(logsumexp(v, {0, 2}), ref({0, 2}, {4}), tol(dt) * 4, tol(dt), "logsumexp dims 0, 2");
  }
  // Rows of -inf give -inf, a +inf gives +inf, a NaN NaN (torch's).
  Tensor s = tensor(std::vector<float>{-INFINITY, -INFINITY, 1, INFINITY, 2, NAN}).view({3, 2});
  expect_values(logsumexp(s, {1}), {-kInf, kInf, kNan}, 0, 0, "logsumexp specials");
  Tensor li = logsumexp(make({2, 2}, kInt64, [](int64_t k) { return double(k); }), {1});
  EXPECT_EQ(li.dtype(), kFloat32);
  expect_values(li, {std::log(1 + std::exp(1.0)), std::log(std::exp(2.0) + std::exp(3.0))}, 2e-6, 0, "logsumexp int");
  expect_error([&] { logsumexp(zeros({0, 3}), {1}); }, "logsumexp: the input of shape [0, 3] is empty");
}

TEST(Composite, AllcloseAndEqual) {
  Tensor a = tensor({1.0f, 2.0f, NAN, INFINITY});
  Tensor b = tensor({1.0f + 1e-6f, 2.0f, NAN, INFINITY});
  EXPECT_FALSE(allclose(a, b));          // NaN != NaN
  EXPECT_TRUE(allclose(a, b, 1e-5, 1e-8, true));
  EXPECT_FALSE(a.allclose(tensor({1.1f, 2.0f, NAN, INFINITY}), 1e-5, 1e-8, true));
  EXPECT_FALSE(allclose(tensor({1.0f}), tensor({INFINITY}))); // inf is close only to itself
  EXPECT_TRUE(allclose(tensor({1.0f, 2.0f}), tensor({2.0f}), 0, 1.0)); // broadcasting
  EXPECT_TRUE(allclose(tensor(std::vector<int64_t>{3, 4}), tensor(std::vector<int64_t>{3, 5}), 0, 1));
  expect_error([&] { allclose(a, a.to(kFloat64)); }, "allclose: expected both tensors to have the same dtype");
  EXPECT_TRUE(equal(tensor({1.0f, 2.0f}), tensor({1.0f, 2.0f})));
  EXPECT_FALSE(equal(tensor({1.0f, 2.0f}), tensor({1.0f, 3.0f})));
  EXPECT_FALSE(tensor({1.0f, 2.0f}).equal(tensor({1.0f, 2.0f, 3.0f}))); // sizes differ
  EXPECT_FALSE(equal(tensor({NAN}), tensor({NAN})));
}

TEST(Composite, OuterBaddbmmAddbmm) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor u = make({4}, dt, [](int64_t k) { return 0.5 * double(k) - 1; });
    Tensor w = make({6}, dt, [](int64_t k) { return 0.25 * double(k) + 0.1; }).slice(0, 0, 6, 2); // strided
    Tensor o = outer(u, w);
    EXPECT_EQ(o.sizes().vec(), (Shape{4, 3}));
    std::vector<double> want;
    for (double p : values(u))
      for (double q : values(w)) want.push_back(p * q);
    expect_values(o, want, tol(dt), 0, "outer");

    Tensor b1 = make({2, 3, 4}, dt, [](int64_t k) { return std::sin(0.3 * double(k)); });
    Tensor b2 = make({2, 5, 4}, dt, [](int64_t k) { return std::cos(0.2 * double(k)); }).transpose(1, 2);
    Tensor in = make({3, 1}, dt, [](int64_t k) { return double(k) - 1; }); // broadcast to [2, 3, 5]
    auto prod = [&](int64_t b, int64_t i, int64_t j) {
      double s = 0;
      for (int64_t k = 0; k < 4; ++k) s += read_at(b1, {b, i, k}) * read_at(b2, {b, k, j});
      return s;
    };
    std::vector<double> want_b, want_a;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) want_b.push_back(0.5 * double(i - 1) + 2 * prod(b, i, j));
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) want_a.push_back(0.5 * double(i - 1) + 2 * (prod(0, i, j) + prod(1, i, j)));
    Tensor bb = baddbmm(in, b1, b2, 0.5, 2);
    EXPECT_EQ(bb.sizes().vec(), (Shape{2, 3, 5}));
    expect_values(bb, want_b, tol(dt) * 10, tol(dt) * 10, "baddbmm");
    Tensor ab = addbmm(in, b1, b2, 0.5, 2);
    EXPECT_EQ(ab.sizes().vec(), (Shape{3, 5}));
    expect_values(ab, want_a, tol(dt) * 10, tol(dt) * 10, "addbmm");
    // beta = 0: input ignored, NaN included (torch's).
    Tensor nan_in = full({3, 5}, NAN, dt);
    std::vector<double> plain;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) plain.push_back(prod(b, i, j));
    expect_values(baddbmm(nan_in, b1, b2, 0), plain, tol(dt) * 10, tol(dt) * 10, "baddbmm beta 0");
  }
  expect_error([&] { outer(zeros({2, 2}), zeros({2})); }, "outer: expected 1-D tensors, got self of shape [2, 2]");
  expect_error([&] { baddbmm(zeros({4, 5}), zeros({2, 3, 4}), zeros({2, 4, 5})); },
               "baddbmm: input of shape [4, 5] does not broadcast to the product's shape [2, 3, 5]");
  expect_error([&] { addbmm(zeros({3, 5}), zeros({2, 3, 4}), zeros({2, 3, 5})); }, "bmm");
}

TEST(Composite, Diff) {
  Tensor x = make_layout({3, 5}, kFloat64, [](int64_t k) { return double(k * k % 7); }, Layout::Transposed);
  auto at = [&](int64_t i, int64_t j) { return read_at(x, {i, j}); };
  std::vector<double> d1, d2, d0;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) d1.push_back(at(i, j + 1) - at(i, j));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) d2.push_back(at(i, j + 2) - 2 * at(i, j + 1) + at(i, j));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) d0.push_back(at(i + 1, j) - at(i, j));
  expect_values(diff(x), d1, 0, 0, "diff");
  expect_values(x.diff(2), d2, 0, 0, "diff n=2");
  expect_values(diff(x, 1, 0), d0, 0, 0, "diff dim 0");
  EXPECT_EQ(diff(x, 7).sizes().vec(), (Shape{3, 0}));
  EXPECT_EQ(diff(x, 0).sizes().vec(), (Shape{3, 5}));
  Tensor bits = make({4}, kBool, [](int64_t k) { return double(k == 1 || k == 2); });
  Tensor db = diff(bits);
  EXPECT_EQ(db.dtype(), kBool);
  expect_values(db, {1, 0, 1}, 0, 0, "diff bool");
  expect_error([&] { diff(x, -1); }, "diff: n must be non-negative, got -1");
  expect_error([&] { diff(scalar_tensor(1.0)); }, "diff: expects a tensor of at least one dimension");
  expect_error([&] { diff(x, 1, 2); }, "diff");
}

TEST(Composite, Movement) {
  Tensor x = make_layout({2, 3, 4}, kFloat32, [](int64_t k) { return double(k); }, Layout::Transposed);
  // unbind
  std::vector<Tensor> parts = unbind(x, 1);
  ASSERT_EQ(parts.size(), 3u);
  for (int64_t j = 0; j < 3; ++j) {
    EXPECT_EQ(parts[size_t(j)].sizes().vec(), (Shape{2, 4}));
    std::vector<double> want;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) want.push_back(read_at(x, {i, j, k}));
    expect_values(parts[size_t(j)], want, 0, 0, "unbind");
  }
  EXPECT_EQ(x.unbind(-1).size(), 4u);
  // movedim: dim 0 to the end, the others keep their order.
  Tensor m = movedim(x, {0}, {-1});
  EXPECT_EQ(m.sizes().vec(), (Shape{3, 4, 2}));
  std::vector<double> want_m;
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t i = 0; i < 2; ++i) want_m.push_back(read_at(x, {i, j, k}));
  expect_values(m, want_m, 0, 0, "movedim");
  EXPECT_EQ(x.movedim({2, 0}, {0, 1}).sizes().vec(), (Shape{4, 2, 3}));
  expect_error([&] { movedim(x, {0, 0}, {1, 2}); }, "movedim: repeated dim 0 in source");
  expect_error([&] { movedim(x, {0}, {1, 2}); }, "movedim: source ([0]) and destination ([1, 2])");
  // unflatten
  Tensor c = make({2, 12}, kFloat32, [](int64_t k) { return double(k); });
  Tensor u = unflatten(c, 1, {3, -1});
  EXPECT_EQ(u.sizes().vec(), (Shape{2, 3, 4}));
  expect_values(u, values(c), 0, 0, "unflatten");
  EXPECT_EQ(c.unflatten(-1, {2, 2, 3}).sizes().vec(), (Shape{2, 2, 2, 3}));
  expect_error([&] { unflatten(c, 1, {5, 3}); }, "unflatten: sizes [5, 3] multiply to 15, not to dim 1's size 12");
  // repeat / tile: out[i] = x[i mod size] per dim.
  Tensor r = x.repeat({2, 1, 2, 3});
  EXPECT_EQ(r.sizes().vec(), (Shape{2, 2, 6, 12}));
  std::vector<double> want_r;
  for_each_index({2, 2, 6, 12}, [&](const Shape &idx, int64_t) {
    want_r.push_back(read_at(x, {idx[1] % 2, idx[2] % 3, idx[3] % 4}));
  });
  expect_values(r, want_r, 0, 0, "repeat");
  EXPECT_EQ(repeat(x, {1, 0, 1}).numel(), 0);
  Tensor t = tile(x, {2});
  EXPECT_EQ(t.sizes().vec(), (Shape{2, 3, 8}));
  std::vector<double> want_t;
  for_each_index({2, 3, 8}, [&](const Shape &idx, int64_t) { want_t.push_back(read_at(x, {idx[0], idx[1], idx[2] % 4})); });
  expect_values(t, want_t, 0, 0, "tile");
  expect_error([&] { repeat(x, {2, 2}); }, "repeat: the number of repeats (2) cannot be smaller");
  // roll: out[i] = x[(i - shift) mod size].
  Tensor ro = roll(x, {1, -5}, {0, 2});
  std::vector<double> want_ro;
  for_each_index({2, 3, 4}, [&](const Shape &idx, int64_t) {
    want_ro.push_back(read_at(x, {(idx[0] + 2 - 1) % 2, idx[1], ((idx[2] + 5) % 4 + 4) % 4}));
  });
  expect_values(ro, want_ro, 0, 0, "roll");
  Tensor flat = x.roll({3});
  std::vector<double> xv = values(x), want_f;
  for (size_t i = 0; i < xv.size(); ++i) want_f.push_back(xv[(i + xv.size() - 3) % xv.size()]);
  expect_values(flat, want_f, 0, 0, "roll flat");
  EXPECT_EQ(flat.sizes().vec(), (Shape{2, 3, 4}));
  expect_error([&] { roll(x, {1, 2}, {0}); }, "roll: shifts [1, 2] and dims [0] must have the same length");
}

TEST(Composite, MethodsAndInPlace) {
  Tensor x = make({2, 3}, kFloat32, [](int64_t k) { return 0.5 * double(k) - 1; });
  EXPECT_EQ(x.new_zeros({4}).dtype(), kFloat32);
  expect_values(x.new_ones({2}, kInt64), {1, 1}, 0, 0, "new_ones");
  expect_values(x.new_full({3}, 2.5), {2.5, 2.5, 2.5}, 0, 0, "new_full");
  EXPECT_EQ(x.new_empty({1, 2}).sizes().vec(), (Shape{1, 2}));
  EXPECT_EQ(x.type_as(zeros({1}, kFloat64)).dtype(), kFloat64);
  Tensor y = x.clone();
  y.exp_();
  expect_values(y, ref_unary(x, [](double v) { return std::exp(v); }), 2e-6, 0, "exp_");
  Tensor s = x.clone();
  s.sigmoid_().tanh_();
  expect_values(s, ref_unary(x, [](double v) { return std::tanh(1 / (1 + std::exp(-v))); }), 4e-6, 0, "sigmoid_ tanh_");
  Tensor i = make({3}, kInt64, [](int64_t k) { return double(k) - 1; });
  i.neg_();
  expect_values(i, {1, 0, -1}, 0, 0, "neg_ int");
  expect_error([&] { i.exp_(); }, "exp_: the result type float32 cannot be cast to self's type int64");
  Tensor f = x.clone();
  f.masked_fill_(gt(x, 0.0), -9);
  expect_values(f, ref_unary(x, [](double v) { return v > 0 ? -9.0 : v; }), 0, 0, "masked_fill_");
  expect_error([&] { f.masked_fill_(zeros({4, 3}, kBool), 1); },
               "masked_fill_: mask of shape [4, 3] does not broadcast to self's shape [2, 3]");
}

// A model using the composites: traced (no graph break), compiled equal to eager
// (the activations fuse with their neighbours into JIT kernels).
TEST(Composite, CompiledEqualsEager) {
  Tensor w = kiln::testing::rnd({16, 8}, 11);
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor h = linear(in[0], w);
    Tensor a = leaky_relu(h, 0.1) + elu(h) * 0.5 + softplus(h, 2) - hardtanh(h) + celu(h, 0.7);
    Tensor b = logsumexp(a, {-1}, true) + nan_to_num(logit(sigmoid(a), 1e-3));
    Tensor c = threshold(b, 0.2, -1.0) + clamp_min(b, 0.0) * isfinite(b);
    Tensor d = roll(repeat(c, {1, 2}), {3}, {1}) + outer(in[1], in[2]).unsqueeze(0).sum({0});
    return std::vector<Tensor>{movedim(unflatten(d, 1, {4, -1}), {1}, {0}), diff(c, 1, -1), any(gt(c, 0.0), 1)};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({5, 8}, 12), kiln::testing::rnd({5}, 13),
                                  kiln::testing::rnd({32}, 14)};
  CompiledFunction f = kiln::testing::expect_compiled_equals_eager(fn, in, 1e-5);
  EXPECT_GE(f.kernels_per_call(in), 1);
}

// repeat_interleave: out[..., k, ...] = x[..., src(k), ...] where src maps output positions to
// input ones by the counts (written as a loop over the counts here).
TEST(Composite, RepeatInterleave) {
  auto sources = [](const std::vector<int64_t> &counts) {
    std::vector<int64_t> src;
    for (size_t i = 0; i < counts.size(); ++i)
      for (int64_t r = 0; r < counts[i]; ++r) src.push_back(int64_t(i));
    return src;
  };
  for (DType dt : {kFloat32, kFloat64, kInt64, kBool})
    for (Layout l : layouts_for({3, 4})) {
      Tensor x = make_layout({3, 4}, dt, [](int64_t k) { return double(k % 7) - 2; }, l);
      const std::string what = std::string(name(dt)) + " " + layout_name(l);
      for (int64_t dim : {0, 1, -1}) {
        const int64_t d = dim < 0 ? dim + 2 : dim;
        for (const std::vector<int64_t> &counts : {std::vector<int64_t>{2, 2, 2, 2}, {0, 3, 1, 2}}) {
          std::vector<int64_t> cs(counts.begin(), counts.begin() + x.size(d));
          const std::vector<int64_t> src = sources(cs);
          Shape shape = {3, 4};
          shape[size_t(d)] = int64_t(src.size());
          std::vector<double> want;
          for_each_index(shape, [&](const Shape &o, int64_t) {
            Shape at = o;
            at[size_t(d)] = src[size_t(o[size_t(d)])];
            want.push_back(read_at(x, at));
          });
          Tensor y = repeat_interleave(x, tensor(cs), dim);
          EXPECT_EQ(y.dtype(), dt) << what;
          ASSERT_EQ(y.sizes().vec(), shape) << what << " dim " << dim;
          expect_values(y, want, 0, 0, what + " tensor repeats dim " + std::to_string(dim));
          if (std::all_of(cs.begin(), cs.end(), [](int64_t c) { return c == 2; })) {
            expect_values(repeat_interleave(x, 2, dim), want, 0, 0, what + " int repeats");
            expect_values(x.repeat_interleave(tensor(std::vector<int64_t>{2}), dim), want, 0, 0, what + " one count");
          }
        }
      }
      // No dim: the flattened input.
      std::vector<double> flat;
      for (double v : values(x)) flat.insert(flat.end(), {v, v, v});
      expect_values(x.repeat_interleave(3), flat, 0, 0, what + " flattened");
      EXPECT_EQ(repeat_interleave(x, 0).sizes().vec(), (Shape{0}));
    }
  Tensor idx = repeat_interleave(tensor(std::vector<int64_t>{1, 0, 3, 2}));
  EXPECT_EQ(idx.dtype(), kInt64);
  expect_values(idx, {0, 2, 2, 2, 3, 3}, 0, 0, "repeat_interleave(repeats)");
  Tensor i32 = repeat_interleave(tensor(std::vector<int32_t>{2, 1}));
  EXPECT_EQ(i32.dtype(), kInt32);
  expect_values(i32, {0, 0, 1}, 0, 0, "int32 repeats");
  expect_values(repeat_interleave(scalar_tensor(5.0), 3, 0), {5, 5, 5}, 0, 0, "0-dim");
  expect_values(repeat_interleave(tensor({1.0f, 2.0f}), scalar_tensor(2, kInt64)), {1, 1, 2, 2}, 0, 0, "0-dim repeats");
  Tensor x = zeros({2, 3});
  expect_error([&] { repeat_interleave(x, -1); }, "repeat_interleave: repeats can not be negative, got -1");
  expect_error([&] { repeat_interleave(x, tensor(std::vector<int64_t>{1, -2}), 0); },
               "repeat_interleave: repeats can not be negative, got -2");
  expect_error([&] { repeat_interleave(x, tensor(std::vector<int64_t>{1, 2}), 1); },
               "repeat_interleave: repeats must have the same size as input along dim, but got repeats of shape [2] and "
               "input of shape [2, 3] along dim 1");
  expect_error([&] { repeat_interleave(x, tensor({1.0f, 2.0f}), 0); },
               "repeat_interleave: repeats must be an int64 or int32 tensor, got float32");
  expect_error([&] { repeat_interleave(x, zeros({2, 1}, kInt64), 0); },
               "repeat_interleave: repeats must be a 0-dim or 1-D tensor, got shape [2, 1]");
  expect_error([&] { repeat_interleave(scalar_tensor(2, kInt64)); },
               "repeat_interleave: repeat_interleave(repeats) accepts only a 1-D repeats tensor");
  expect_error([&] { repeat_interleave(x, 2, 2); }, "repeat_interleave");
  expect_error([&] { repeat_interleave(x, INT64_MAX, 0); },
               "repeat_interleave: 9223372036854775807 repeats of dim 0 of input of shape [2, 3] overflow int64");
  expect_error([&] { repeat_interleave(x, tensor(std::vector<int64_t>{INT64_MAX, INT64_MAX}), 0); },
               "repeat_interleave: the repeats add up past int64");
}

// The int form traces (shapes only); the tensor form reads the counts, which a traced
// call cannot: compile falls back to eager for it and still gives eager's values.
TEST(Composite, RepeatInterleaveCompiled) {
  Fn fn = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{repeat_interleave(in[0] * 2.0, 3, 1).exp()};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({2, 3}, 81)};
  kiln::testing::expect_compiled_equals_eager(fn, in, 1e-5);
  Fn counted = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{repeat_interleave(in[0], in[1], 0) + 1.0}; };
  const std::vector<Tensor> in2 = {kiln::testing::rnd({3, 2}, 82), tensor(std::vector<int64_t>{1, 0, 2})};
  CompileOptions allow;
  allow.fallback = Fallback::Allow;
  CompiledFunction g = compile(counted, allow); // the read breaks the trace: the call runs eagerly
  const std::vector<Tensor> want2 = counted(kiln::testing::copies(in2));
  EXPECT_EQ(want2[0].sizes().vec(), (Shape{3, 2}));
  EXPECT_TRUE(kiln::testing::all_close(g(kiln::testing::copies(in2)), want2, 0));
  EXPECT_EQ(g.stats().eager_calls, 1);
  CompileOptions off;
  off.fallback = Fallback::Off;
  EXPECT_THROW(compile(counted, off)(kiln::testing::copies(in2)), kiln::Error);
  // Counts captured as a constant (a strided view) are known while tracing: no graph break.
  Tensor counts = tensor(std::vector<int64_t>{2, 9, 0, 9, 1}).slice(0, 0, 5, 2); // {2, 0, 1}
  Fn captured = [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{repeat_interleave(in[0], counts, 0) * 3.0, repeat_interleave(counts) + 0};
  };
  CompiledFunction h = compile(captured, off);
  const std::vector<Tensor> want3 = captured(kiln::testing::copies(in2));
  ASSERT_EQ(want3[0].sizes().vec(), (Shape{3, 2}));
  std::vector<double> rows;
  for (int64_t r : {0, 0, 2})
    for (int64_t c = 0; c < 2; ++c) rows.push_back(3.0 * read_at(in2[0], {r, c}));
  expect_values(want3[0], rows, 1e-6, 0, "captured counts");
  expect_values(want3[1], {0, 0, 2}, 0, 0, "captured counts' indices");
  for (int call = 0; call < 2; ++call)
    EXPECT_TRUE(kiln::testing::all_close(h(kiln::testing::copies(in2)), want3, 0)) << "call " << call;
}

// trunc rounds toward zero (floor for x >= 0, ceil below); frac = x - trunc(x).
TEST(Composite, TruncAndFrac) {
  for (DType dt : {kFloat32, kFloat64})
    for (Layout l : layouts_for({5, 8})) {
      Tensor x = make_layout({5, 8}, dt, spread, l);
      const std::string what = std::string(name(dt)) + " " + layout_name(l);
      auto tr = [](double v) { return std::isnan(v) || std::isinf(v) ? v : (v < 0 ? std::ceil(v) : std::floor(v)); };
      Tensor t = trunc(x);
      EXPECT_EQ(t.dtype(), dt);
      expect_values(t, ref_unary(x, tr), 0, 0, what + " trunc");
      expect_values(x.frac(), ref_unary(x, [&](double v) { return std::isinf(v) ? kNan : v - tr(v); }), 0, 0,
                    what + " frac");
      expect_values(x.trunc(), ref_unary(x, tr), 0, 0, what + " trunc method");
    }
  Tensor neg_half = trunc(tensor({-0.5f}));
  EXPECT_TRUE(std::signbit(values(neg_half)[0])) << "trunc(-0.5) is -0";
  Tensor i = make({4}, kInt64, [](int64_t k) { return double(k) - 2; });
  Tensor ti = trunc(i);
  EXPECT_EQ(ti.dtype(), kInt64);
  expect_values(ti, {-2, -1, 0, 1}, 0, 0, "trunc int");
  EXPECT_NE(ti.impl().storage->data(), i.impl().storage->data()) << "trunc of an integer tensor is a copy";
  expect_error([&] { frac(i); }, "frac: expected a floating-point tensor, got int64");
  expect_error([&] { trunc(make({2}, kBool, bool_gen)); }, "trunc: not supported on bool tensors");
  EXPECT_EQ(trunc(zeros({0, 3})).sizes().vec(), (Shape{0, 3}));
  Fn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{trunc(in[0] * 3.0) + frac(in[0] * 3.0)}; };
  const std::vector<Tensor> in = {kiln::testing::rnd({4, 5}, 91)};
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  const std::vector<Tensor> want = fn(kiln::testing::copies(in));
  expect_values(want[0], ref_unary(in[0], [](double v) { return double(float(v * 3.0)); }), 1e-6, 1e-6, "trunc + frac");
  EXPECT_TRUE(kiln::testing::all_close(f(kiln::testing::copies(in)), want, 0));
}
