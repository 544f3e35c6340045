// scatter, scatter_add, scatter_reduce and index_add, and their in-place forms
// (runtime/kernels/scatter.cpp), against naive loops written here from torch's
// definitions: every index position in row-major order sends its src value to self's
// element with dim's coordinate replaced by the index. Contiguous and strided operands,
// each dim, the dtypes, repeated indices, empty index and bad input; compiled == eager.
#include <gtest/gtest.h>

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

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();

double floor_div(double a, double c) { return std::floor(a / c); }

// The reference: out = self's values; reduce in {"replace","sum","prod","mean","amax","amin"}.
std::vector<double> ref_scatter(const Tensor &self, int64_t d, const Tensor &index, const Tensor &src,
                                const std::string &reduce, bool include_self) {
  const Shape shape = self.sizes().vec();
  std::vector<double> out = values(self);
  std::vector<int64_t> count(out.size(), 0);
  std::vector<bool> touched(out.size(), false);
  auto flat = [&](const Shape &idx) {
    int64_t f = 0;
    for (size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + idx[k];
    return size_t(f);
  };
  for_each_index(index.sizes().vec(), [&](const Shape &p, int64_t) {
    Shape t = p;
    t[size_t(d)] = int64_t(read_at(index, p));
    const size_t f = flat(t);
    const double v = read_at(src, p);
    if (!include_self && !touched[f]) {
      touched[f] = true;
      out[f] = v;
      count[f] = 1;
      return;
    }
    touched[f] = true;
    ++count[f];
    double &o = out[f];
    if (reduce == "replace") o = v;
    else if (reduce == "sum" || reduce == "mean") o += v;
    else if (reduce == "prod") o *= v;
    else if (reduce == "amax") o = (std::isnan(v) || v > o) ? v : o;
    else if (reduce == "amin") o = (std::isnan(v) || v < o) ? v : o;
  });
  if (reduce == "mean")
    for (size_t f = 0; f < out.size(); ++f) {
      if (!touched[f]) continue;
      const double c = double(count[f] + (include_self ? 1 : 0));
      out[f] = is_floating(self.dtype()) ? out[f] / c : floor_div(out[f], c);
    }
  return out;
}

// An index of `shape` whose values along d are in [0, n) with repeats.
Tensor make_index(const Shape &shape, int64_t n, Layout lay) {
  return make_layout(shape, kInt64, [n](int64_t i) { return double((i * 7 + i / 3) % n); }, lay);
}

double vals_gen(int64_t i) { return double((i * 5) % 9) - 4.0 + 0.25 * double(i % 2); }

TEST(Scatter, AllReductionsMatchNaiveLoops) {
  const Shape self_shape = {4, 5, 3}, index_shape = {3, 4, 2}, src_shape = {3, 6, 3};
  for (DType dt : {kFloat32, kFloat64, kInt64, kInt32}) {
    for (Layout lay : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
      Tensor self = make_layout(self_shape, dt, vals_gen, lay);
      Tensor src = make_layout(src_shape, dt, [](int64_t i) { return vals_gen(i + 3); }, lay);
      for (int64_t dim : {0, 1, -1}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        Tensor index = make_index(index_shape, self_shape[size_t(d)], lay);
        const std::string what = std::string(layout_name(lay)) + " dim " + std::to_string(dim);
        expect_values(scatter(self, dim, index, src), ref_scatter(self, d, index, src, "replace", true), 0, 0,
                      "scatter " + what);
        expect_values(scatter_add(self, dim, index, src), ref_scatter(self, d, index, src, "sum", true), 1e-6, 0,
                      "scatter_add " + what);
        for (const char *r : {"sum", "prod", "mean", "amax", "amin"})
          for (bool inc : {true, false})
            expect_values(scatter_reduce(self, dim, index, src, r, inc), ref_scatter(self, d, index, src, r, inc),
                          1e-6, 0, std::string("scatter_reduce ") + r + (inc ? " include_self " : " ") + what);
      }
    }
  }
}

TEST(Scatter, ValueFormNanBoolEmptyAndInPlace) {
  Tensor self = zeros({3, 4});
  Tensor index = tensor(std::vector<int64_t>{2, 0, 1, 2}).view({1, 4});
  expect_values(scatter(self, 0, index, 1.5), {0, 1.5, 0, 0, 0, 0, 1.5, 0, 1.5, 0, 0, 1.5}, 0, 0, "scatter value");
  // amax / amin propagate NaN from src and from self.
  Tensor s = make({1, 4}, kFloat32, [](int64_t i) { return i == 1 ? kNan : double(i); });
  Tensor x = make({3, 4}, kFloat32, [](int64_t i) { return i == 8 ? kNan : 0.5; });
  expect_values(scatter_reduce(x, 0, index, s, "amax"), ref_scatter(x, 0, index, s, "amax", true), 0, 0, "amax NaN");
  expect_values(scatter_reduce(x, 0, index, s, "amin", false), ref_scatter(x, 0, index, s, "amin", false), 0, 0,
                "amin NaN");
  // bool scatter and sum (a logical or).
  Tensor b = zeros({2, 3}, kBool), bs = ones({2, 3}, kBool);
  Tensor bi = tensor(std::vector<int64_t>{1, 1, 0}).view({1, 3});
  expect_values(scatter(b, 0, bi, bs), {0, 0, 1, 1, 1, 0}, 0, 0, "scatter bool");
  expect_values(scatter_add(b, 0, bi, bs), {0, 0, 1, 1, 1, 0}, 0, 0, "scatter_add bool");
  // Repeated indices: the last write wins (in index order along dim).
  Tensor r = scatter(zeros({1, 3}), 1, tensor(std::vector<int64_t>{2, 2, 2}).view({1, 3}),
                     tensor({1.0f, 2.0f, 3.0f}).view({1, 3}));
  expect_values(r, {0, 0, 3}, 0, 0, "repeated index");
  // An empty index gives a copy.
  Tensor e = scatter_add(self + 1, 1, zeros({3, 0}, kInt64), zeros({3, 0}));
  expect_values(e, std::vector<double>(12, 1.0), 0, 0, "empty index");
  // 0-dim self, index and src.
  Tensor z = scatter(scalar_tensor(1.0), 0, scalar_tensor(0, kInt64), scalar_tensor(5.0));
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.item<double>(), 5.0);
  // In place: the tensor (and its views) change.
  Tensor y = zeros({3, 4});
  Tensor view = y.select(0, 2);
  y.scatter_(0, index, 2.0).scatter_add_(0, index, ones({1, 4})).scatter_reduce_(0, index, full({1, 4}, 4.0), "prod");
  expect_values(y, {0, 12, 0, 0, 0, 0, 12, 0, 12, 0, 0, 12}, 0, 0, "in place");
  expect_values(view, {12, 0, 0, 12}, 0, 0, "in place view");
  Tensor t = zeros({3, 4});
  t.scatter_(1, tensor(std::vector<int64_t>{3, 0}).view({2, 1}), tensor({7.0f, 8.0f}).view({2, 1}));
  expect_values(t, {0, 0, 0, 7, 8, 0, 0, 0, 0, 0, 0, 0}, 0, 0, "scatter_ dim 1");
}

TEST(Scatter, BadInputNamesTheOpAndArgument) {
  Tensor self = zeros({3, 4}), src = ones({3, 4});
  Tensor index = zeros({2, 2}, kInt64);
  expect_error([&] { scatter(self, 0, index.to(kFloat32), src); }, "scatter: expected index of dtype int64");
  expect_error([&] { scatter(self, 0, zeros({2}, kInt64), src); }, "must have the same number of dimensions");
  expect_error([&] { scatter(self, 0, zeros({2, 5}, kInt64), src); }, "scatter: expected index [2, 5] to be no larger than src");
  expect_error([&] { scatter(self, 1, zeros({4, 2}, kInt64), ones({4, 4})); },
               "scatter: expected index [4, 2] to be no larger than self [3, 4] apart from dimension 1");
  expect_error([&] { scatter(self, 0, full({2, 2}, 3, kInt64), src); },
               "scatter: index 3 is out of bounds for dimension 0 with size 3");
  expect_error([&] { scatter_add(self, 0, full({2, 2}, -1, kInt64), src); }, "scatter_add: index -1 is out of bounds");
  expect_error([&] { scatter(self, 0, index, src.to(kFloat64)); }, "scatter: expected self and src to have one dtype");
  expect_error([&] { scatter(self, 2, index, src); }, "scatter");
  expect_error([&] { scatter_reduce(self, 0, index, src, "max"); },
               "scatter_reduce: reduce argument must be one of sum, prod, mean, amax, amin, got 'max'");
  expect_error([&] { scatter_reduce(zeros({2}, kBool), 0, zeros({1}, kInt64), ones({1}, kBool), "mean"); },
               "reduce 'mean' is not supported on bool");
  expect_error([&] { scatter(self, 0, Tensor(), src); }, "scatter: index");
  // Nothing is written when an index is bad.
  Tensor y = zeros({3, 4});
  expect_error([&] { y.scatter_(0, tensor(std::vector<int64_t>{0, 9}).view({1, 2}), 1.0); }, "index 9");
  expect_values(y, std::vector<double>(12, 0.0), 0, 0, "untouched");
}

// index_add's reference: out.select(d, index[k]) += alpha * source.select(d, k), k in order.
std::vector<double> ref_index_add(const Tensor &self, int64_t d, const std::vector<int64_t> &idx, const Tensor &source,
                                  double alpha) {
  const Shape shape = self.sizes().vec();
  std::vector<double> out = values(self);
  for_each_index(source.sizes().vec(), [&](const Shape &p, int64_t) {
    Shape t = p;
    t[size_t(d)] = idx[size_t(p[size_t(d)])];
    int64_t f = 0;
    for (size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + t[k];
    out[size_t(f)] += alpha * read_at(source, p);
  });
  return out;
}

TEST(IndexAdd, MatchesNaiveLoopsWithRepeatsAlphaAndLayouts) {
  const Shape self_shape = {4, 5, 3};
  const std::vector<int64_t> idx = {3, 0, 3, 1, 3, 2};
  for (DType dt : {kFloat32, kFloat64, kInt64, kInt32}) {
    for (Layout lay : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
      Tensor self = make_layout(self_shape, dt, vals_gen, lay);
      for (int64_t dim : {0, 1, -1}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        Shape src_shape = self_shape;
        src_shape[size_t(d)] = int64_t(idx.size());
        Tensor source = make_layout(src_shape, dt, [](int64_t i) { return vals_gen(i + 1); }, lay);
        std::vector<int64_t> wrapped;
        for (int64_t v : idx) wrapped.push_back(v % self_shape[size_t(d)]);
        Tensor index = tensor(wrapped);
        const double alpha = is_floating(dt) ? 0.5 : 3;
        const Scalar alpha_arg = is_floating(dt) ? Scalar(0.5) : Scalar(int64_t(3));
        const std::string what = std::string(layout_name(lay)) + " dim " + std::to_string(dim);
        expect_values(index_add(self, dim, index, source, alpha_arg), ref_index_add(self, d, wrapped, source, alpha), 1e-6,
                      0, "index_add " + what);
        expect_values(self.index_add(dim, index.to(kInt32), source), ref_index_add(self, d, wrapped, source, 1), 1e-6,
                      0, "index_add int32 index " + what);
      }
    }
  }
  Tensor y = zeros({3, 2});
  y.index_add_(0, tensor(std::vector<int64_t>{2, 2}), ones({2, 2}), 2);
  expect_values(y, {0, 0, 0, 0, 4, 4}, 0, 0, "index_add_");
  Tensor self = zeros({3, 4});
  expect_error([&] { index_add(self, 0, zeros({2, 1}, kInt64), ones({2, 4})); }, "index_add: index must be 0-D or 1-D");
  expect_error([&] { index_add(self, 0, zeros({3}, kInt64), ones({2, 4})); },
               "index_add: the number of indices (3) must equal source's size (2) along dimension 0");
  expect_error([&] { index_add(self, 0, zeros({2}, kInt64), ones({2, 5})); }, "differ at dimension 1");
  expect_error([&] { index_add(self, 0, full({2}, 3, kInt64), ones({2, 4})); }, "index_add: index 3 is out of bounds");
  expect_error([&] { index_add(self, 0, zeros({2}, kInt64), ones({2, 4}, kFloat64)); },
               "index_add: self (float32) and source (float64) must have the same dtype");
  expect_error([&] { index_add(zeros({3}, kInt64), 0, zeros({1}, kInt64), ones({1}, kInt64), 0.5); },
               "alpha must not be a floating-point number");
  expect_error([&] { index_add(self, 0, zeros({2}), ones({2, 4})); }, "index_add: expected index of dtype int64");
}

TEST(ScatterIndexAdd, CompiledEqualsEager) {
  Tensor idx = tensor(std::vector<int64_t>{0, 2, 2, 1, 0, 3});
  Tensor sidx = make({2, 6}, kInt64, [](int64_t i) { return double((i * 5) % 4); });
  auto fn = [=](const std::vector<Tensor> &in) {
    Tensor h = in[0] * 2 - 1;
    Tensor a = zeros({4, 5}).index_add(0, idx, h.sigmoid());
    Tensor b = scatter_add(zeros({2, 4}), 1, sidx, in[1]) + 1;
    Tensor c = scatter_reduce(b, 1, sidx, in[1].exp(), "amax", false);
    Tensor d = in[1].clone();
    d.scatter_(1, sidx.slice(1, 0, 3), 0.0);
    return std::vector<Tensor>{a.relu(), b * c, d + 1};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({6, 5}, 8), kiln::testing::rnd({2, 6}, 9)};
  kiln::testing::expect_compiled_equals_eager(fn, in, 1e-6);
}

} // namespace
