// Scans (cumsum, cumprod, logcumsumexp), sorting (sort, argsort, topk), nonzero and
// masked_select, random fills and the element accessor (runtime/kernels/scan_sort.cpp).
// Values are checked against naive loops over row-major values written here, on
// contiguous, transposed and sliced inputs, each dim (negative too), every dtype the op
// takes, empty and 0-dim tensors, and bad input; a compiled function equals eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "frontend/trace.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace ewt;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

// Row-major position of the element at line `l` (over the other dims) and step i along d.
struct Lines {
  Shape shape;
  int64_t d;
  int64_t n() const { return shape[size_t(d)]; }
  int64_t inner() const {
    int64_t s = 1;
    for (size_t k = size_t(d) + 1; k < shape.size(); ++k) s *= shape[k];
    return s;
  }
  int64_t count() const { return n() == 0 ? 0 : numel_of(shape) / n(); }
  int64_t at(int64_t l, int64_t i) const { return (l / inner()) * n() * inner() + i * inner() + l % inner(); }
};

// The scan of each line of v (x's row-major values) by f, starting from `init`.
std::vector<double> ref_scan(const std::vector<double> &v, const Lines &L, double init,
                             const std::function<double(double, double)> &f) {
  std::vector<double> out(v.size());
  for (int64_t l = 0; l < L.count(); ++l) {
    double acc = init;
    for (int64_t i = 0; i < L.n(); ++i) out[size_t(L.at(l, i))] = acc = f(acc, v[size_t(L.at(l, i))]);
  }
  return out;
}

// log(sum(exp)) of what the line holds so far, written from its definition.
double ref_lse(double acc_max, const std::vector<double> &seen) {
  for (double s : seen)
    if (std::isnan(s)) return kNan;
  if (acc_max == kInf) return kInf;
  if (acc_max == -kInf) return -kInf;
  double sum = 0;
  for (double s : seen) sum += std::exp(s - acc_max);
  return acc_max + std::log(sum);
}

double mixed(int64_t i) { return -3.0 + 0.5 * double((i * 7) % 13) + 0.25 * double(i % 3); }

TEST(Scan, CumsumCumprodMatchNaiveLoopsOverDimsLayoutsAndDtypes) {
  const Shape shape = {3, 5, 4};
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBool}) {
    for (Layout lay : layouts_for(shape)) {
      Gen gen = dt == kBool ? Gen([](int64_t i) { return double(i % 3 == 0); })
                            : (is_floating(dt) ? Gen(mixed) : Gen([](int64_t i) { return double(i % 5) - 2; }));
      Tensor x = make_layout(shape, dt, gen, lay);
      const std::vector<double> v = values(x);
      for (int64_t dim : {0, 1, 2, -1, -3}) {
        const Lines L{shape, dim < 0 ? dim + 3 : dim};
        const std::string what = std::string(layout_name(lay)) + " dim " + std::to_string(dim);
        Tensor s = cumsum(x, dim);
        EXPECT_EQ(s.dtype(), is_floating(dt) ? dt : kInt64) << what;
        expect_values(s, ref_scan(v, L, 0, [](double a, double b) { return a + b; }), 1e-6, 1e-6, "cumsum " + what);
        Tensor p = x.cumprod(dim);
        expect_values(p, ref_scan(v, L, 1, [](double a, double b) { return a * b; }), 1e-6, 1e-6, "cumprod " + what);
      }
    }
  }
  // dtype: the input is converted first, as torch's.
  Tensor i = make({4}, kInt32, [](int64_t k) { return double(k) + 1; });
  Tensor f = cumsum(i, 0, kFloat64);
  EXPECT_EQ(f.dtype(), kFloat64);
  expect_values(f, {1, 3, 6, 10}, 0, 0, "cumsum dtype");
  // float32 accumulates in double, as torch's CPU kernel: 2^24 + 1 + 1 reaches 2^24 + 2,
  // where a float32 accumulator would stay at 2^24.
  Tensor steps = make({3}, kFloat32, [](int64_t i) { return i == 0 ? 16777216.0 : 1.0; });
  EXPECT_EQ(values(cumsum(steps, 0)).back(), 16777218.0);
  // Integers wrap as int64 arithmetic.
  Tensor big = make({2}, kInt64, [](int64_t) { return double(int64_t(1) << 62); });
  Tensor w = cumsum(big, 0); // 2^62 + 2^62 = 2^63 wraps to -2^63
  EXPECT_EQ(static_cast<const int64_t *>(w.raw_data())[1], std::numeric_limits<int64_t>::min());
}

TEST(Scan, LogcumsumexpMatchesItsDefinitionWithInfAndNan) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = make({2, 7}, dt, [](int64_t i) {
      const double row0[] = {-kInf, -kInf, 0.5, 100.0, -3.0, kInf, 2.0};
      const double row1[] = {1.0, -2.0, kNan, 4.0, -kInf, 0.0, 7.0};
      return i < 7 ? row0[i] : row1[i - 7];
    });
    std::vector<double> want;
    for (int r = 0; r < 2; ++r) {
      std::vector<double> seen;
      double m = -kInf;
      for (int i = 0; i < 7; ++i) {
        const double v = values(x)[size_t(r * 7 + i)];
        seen.push_back(v);
        if (!std::isnan(v)) m = std::max(m, v);
        want.push_back(ref_lse(m, seen));
      }
    }
    Tensor got = logcumsumexp(x, 1);
    expect_values(got, want, dt == kFloat32 ? 1e-6 : 1e-13, 0, "logcumsumexp");
    expect_values(logcumsumexp(x.t().contiguous().t(), -1), want, dt == kFloat32 ? 1e-6 : 1e-13, 0,
                  "logcumsumexp transposed");
  }
  expect_error([] { logcumsumexp(tensor(std::vector<int64_t>{1, 2}), 0); }, "logcumsumexp: expected a floating-point");
}

TEST(Scan, EmptyZeroDimAndBadDims) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(cumsum(e, 0).sizes(), e.sizes());
  EXPECT_EQ(cumprod(e, 1).sizes(), e.sizes());
  EXPECT_EQ(logcumsumexp(e, 1).sizes(), e.sizes());
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(cumsum(s, 0).dim(), 0);
  EXPECT_EQ(cumsum(s, -1).item<double>(), 2.5);
  expect_error([&] { cumsum(s, 1); }, "cumsum");
  expect_error([] { cumsum(zeros({2, 3}), 2); }, "cumsum");
  expect_error([] { cumprod(Tensor(), 0); }, "cumprod: self");
}

// torch's order: ascending with NaN above everything, ties by position (stable).
std::vector<int64_t> ref_order(const std::vector<double> &line, bool desc) {
  std::vector<int64_t> p(line.size());
  std::iota(p.begin(), p.end(), 0);
  auto key_less = [&](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
    return a < b;
  };
  std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
    return desc ? key_less(line[size_t(b)], line[size_t(a)]) : key_less(line[size_t(a)], line[size_t(b)]);
  });
  return p;
}

// The reference values and indices of the first k of each line in ref_order.
void ref_topk(const Tensor &x, const Lines &L, int64_t k, bool desc, std::vector<double> &vals,
              std::vector<double> &idx) {
  const std::vector<double> v = values(x);
  Shape out = L.shape;
  out[size_t(L.d)] = k;
  const Lines O{out, L.d};
  vals.assign(size_t(numel_of(out)), 0);
  idx.assign(vals.size(), 0);
  for (int64_t l = 0; l < L.count(); ++l) {
    std::vector<double> line;
    for (int64_t i = 0; i < L.n(); ++i) line.push_back(v[size_t(L.at(l, i))]);
    const std::vector<int64_t> p = ref_order(line, desc);
    for (int64_t i = 0; i < k; ++i) {
      vals[size_t(O.at(l, i))] = line[size_t(p[size_t(i)])];
      idx[size_t(O.at(l, i))] = double(p[size_t(i)]);
    }
  }
}

// Values with duplicates, and NaN / inf in the floating dtypes.
double sort_gen(int64_t i) {
  if (i % 11 == 3) return kNan;
  if (i % 13 == 5) return -kInf;
  return double((i * 5) % 7) - 3.0;
}

TEST(Sort, SortArgsortTopkMatchAStableReferenceWithNan) {
  const Shape shape = {4, 6, 5};
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBool}) {
    Gen gen = dt == kBool ? Gen([](int64_t i) { return double(i % 3 == 1); })
                          : (is_floating(dt) ? Gen(sort_gen) : Gen([](int64_t i) { return double((i * 5) % 7) - 3; }));
    for (Layout lay : layouts_for(shape)) {
      Tensor x = make_layout(shape, dt, gen, lay);
      for (int64_t dim : {0, 1, -1}) {
        const Lines L{shape, dim < 0 ? dim + 3 : dim};
        const std::string what = std::string(layout_name(lay)) + " dim " + std::to_string(dim);
        for (bool desc : {false, true}) {
          std::vector<double> wv, wi;
          ref_topk(x, L, L.n(), desc, wv, wi);
          auto [v, i] = sort(x, dim, desc);
          EXPECT_EQ(v.dtype(), dt);
          EXPECT_EQ(i.dtype(), kInt64);
          expect_values(v, wv, 0, 0, "sort values " + what);
          expect_values(i, wi, 0, 0, "sort indices " + what);
          expect_values(argsort(x, dim, desc), wi, 0, 0, "argsort " + what);
          if (dt == kBool) continue;
          for (int64_t k : {int64_t(0), int64_t(1), int64_t(3), L.n()}) {
            ref_topk(x, L, k, /*desc=*/true, wv, wi);
            auto [tv, ti] = topk(x, k, dim);
            expect_values(tv, wv, 0, 0, "topk values " + what);
            expect_values(ti, wi, 0, 0, "topk indices " + what);
            ref_topk(x, L, k, /*desc=*/false, wv, wi);
            auto [sv, si] = x.topk(k, dim, /*largest=*/false);
            expect_values(sv, wv, 0, 0, "topk smallest " + what);
            expect_values(si, wi, 0, 0, "topk smallest indices " + what);
          }
        }
      }
    }
  }
}

TEST(Sort, EmptyZeroDimAndBadInput) {
  auto [ev, ei] = sort(zeros({3, 0}), 1);
  EXPECT_EQ(ev.sizes(), IntArrayRef({3, 0}));
  EXPECT_EQ(ei.dtype(), kInt64);
  auto [sv, si] = sort(scalar_tensor(4.0), 0);
  EXPECT_EQ(sv.dim(), 0);
  EXPECT_EQ(sv.item<double>(), 4.0);
  EXPECT_EQ(si.item<int64_t>(), 0);
  auto [tv, ti] = topk(zeros({2, 3}), 0, 1);
  EXPECT_EQ(tv.sizes(), IntArrayRef({2, 0}));
  expect_error([] { topk(zeros({2, 3}), 4, 1); }, "topk: k (4) is out of range for dimension 1 of size 3");
  expect_error([] { topk(zeros({2, 3}), -1); }, "topk: k (-1) is out of range");
  expect_error([] { sort(zeros({2, 3}), 2); }, "sort");
  expect_error([] { argsort(Tensor()); }, "sort: self");
}

TEST(DataDependent, NonzeroAndMaskedSelectMatchLoopsAndRefuseTracing) {
  for (DType dt : {kFloat32, kInt64, kBool}) {
    Tensor x = make_layout({3, 4}, dt, [](int64_t i) { return double(i % 3 == 1 ? 0 : i % 4); }, Layout::Transposed);
    std::vector<double> want;
    int64_t count = 0;
    for_each_index({3, 4}, [&](const Shape &idx, int64_t) {
      if (read_at(x, idx) == 0) return;
      want.push_back(double(idx[0]));
      want.push_back(double(idx[1]));
      ++count;
    });
    Tensor nz = nonzero(x);
    EXPECT_EQ(nz.sizes(), IntArrayRef({count, 2}));
    EXPECT_EQ(nz.dtype(), kInt64);
    expect_values(nz, want, 0, 0, "nonzero");
  }
  EXPECT_EQ(nonzero(zeros({2, 0, 3})).sizes(), IntArrayRef({0, 3}));
  EXPECT_EQ(nonzero(scalar_tensor(1.0)).sizes(), IntArrayRef({1, 0}));
  // masked_select broadcasts self and mask.
  Tensor x = make({2, 3}, kFloat32, [](int64_t i) { return double(i) + 0.5; });
  Tensor m = make({3}, kBool, [](int64_t i) { return double(i != 1); });
  expect_values(masked_select(x, m), {0.5, 2.5, 3.5, 5.5}, 0, 0, "masked_select");
  expect_values(x.t().masked_select(make({2}, kBool, [](int64_t i) { return double(i == 0); })), {0.5, 1.5, 2.5}, 0, 0,
                "masked_select transposed");
  expect_error([&] { masked_select(x, m.to(kInt64)); }, "masked_select: expected a bool mask");
  expect_error([&] { masked_select(x, zeros({4}, kBool)); }, "masked_select");
  for (auto fn : {TracedFunction([](const std::vector<Tensor> &in) { return std::vector<Tensor>{nonzero(in[0])}; }),
                  TracedFunction([](const std::vector<Tensor> &in) {
                    return std::vector<Tensor>{masked_select(in[0], gt(in[0], 0.0))};
                  })}) {
    try {
      trace(fn, {kiln::testing::rnd({4}, 3)});
      ADD_FAILURE() << "no TraceError";
    } catch (const TraceError &e) {
      EXPECT_NE(std::string(e.what()).find("data-dependent"), std::string::npos) << e.what();
    }
  }
}

TEST(Random, FillsHaveTheirDistributionsAndCheckArguments) {
  manual_seed(3);
  Tensor x = zeros({20000});
  x.uniform_(-2, 3);
  std::vector<double> v = values(x);
  double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  EXPECT_GE(lo, -2);
  EXPECT_LT(hi, 3);
  EXPECT_NEAR(std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()), 0.5, 0.05);
  x.normal_(1, 2);
  v = values(x);
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()), var = 0;
  for (double e : v) var += (e - mean) * (e - mean) / double(v.size());
  EXPECT_NEAR(mean, 1, 0.06);
  EXPECT_NEAR(std::sqrt(var), 2, 0.06);
  Tensor b = zeros({20000}, kInt64);
  b.bernoulli_(0.25);
  v = values(b);
  EXPECT_EQ(std::count_if(v.begin(), v.end(), [](double e) { return e != 0 && e != 1; }), 0);
  EXPECT_NEAR(std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()), 0.25, 0.02);
  Tensor p = make({2, 10000}, kFloat64, [](int64_t i) { return i < 10000 ? 0.0 : 1.0; });
  v = values(bernoulli(p));
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0.0), 10000.0); // p = 0 and p = 1 are certain
  Tensor n = normal(5, 0.5, {4, 5000}, kFloat64);
  EXPECT_EQ(n.dtype(), kFloat64);
  v = values(n);
  EXPECT_NEAR(std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()), 5, 0.02);
  expect_error([] { zeros({2}).uniform_(1, 0); }, "uniform_: expected from <= to");
  expect_error([] { zeros({2}).normal_(0, -1); }, "normal_: expected std >= 0.0");
  expect_error([] { zeros({2}, kInt64).normal_(); }, "normal_: expected a floating-point tensor");
  expect_error([] { zeros({2}).bernoulli_(1.5); }, "bernoulli_: expected p in [0, 1]");
  expect_error([] { bernoulli(full({2}, 2.0)); }, "bernoulli: expected all values of p in [0, 1]");
  expect_error([] { zeros({2}).bernoulli_(zeros({3})); }, "bernoulli_: p of shape [3] does not broadcast");
  expect_error([] { normal(0, -1, {2}); }, "normal: expected std >= 0.0");
}

TEST(Accessor, ReadsAndWritesThroughStridesAndChecksIndices) {
  Tensor x = make({3, 4}, kFloat32, [](int64_t i) { return double(i); });
  Tensor t = x.t(); // [4, 3], strides (1, 4)
  auto a = t.accessor<float, 2>();
  EXPECT_EQ(a.size(0), 4);
  EXPECT_EQ(a.stride(1), 4);
  EXPECT_EQ(a[1][2], 9.0f); // x[2][1]
  a[3][0] = -1.0f;
  EXPECT_EQ(values(x)[3], -1.0);
  auto c = x.accessor<const float, 1 + 1>();
  EXPECT_EQ(c[0][3], -1.0f);
  expect_error([&] { (void)a[4]; }, "accessor: index 4 is out of range for a dimension of size 4");
  expect_error([&] { (void)a[0][-1]; }, "accessor: index -1 is out of range");
  expect_error([&] { (void)x.accessor<double, 2>(); }, "accessor: tensor has dtype float32 but was read as float64");
  expect_error([&] { (void)x.accessor<float, 3>(); }, "accessor: expected a 3-dim tensor, got shape [3, 4]");
  // A compiled function that captured x sees a write made through an accessor.
  Tensor w = x.clone();
  CompiledFunction f = compile([w](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + w}; });
  Tensor one = ones({3, 4});
  EXPECT_EQ(values(f({one})[0])[0], 1.0);
  w.accessor<float, 2>()[0][0] = 10.0f;
  EXPECT_EQ(values(f({one})[0])[0], 11.0);
}

// A model with scans and sorts: one trace, the eager steps run inside the compiled
// function, and the result equals eager's.
TEST(ScanSort, CompiledEqualsEager) {
  auto fn = [](const std::vector<Tensor> &in) {
    Tensor h = relu(in[0]) * 2 + 1;
    Tensor c = cumsum(h, 1) + cumprod(sigmoid(h), 0) + logcumsumexp(h, -1);
    auto [v, i] = sort(c, -1, true);
    auto [tv, ti] = topk(c * 0.5, 3, 0, false);
    Tensor pos = cumsum(gt(in[0], 0.0), 1); // int64 position ids from a mask
    return std::vector<Tensor>{v + 1, i, tv.exp(), ti, argsort(h, 1), pos * 2};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({6, 9}, 4)};
  kiln::testing::expect_compiled_equals_eager(fn, in, 1e-6);
}

} // namespace
