// Advanced indexing (runtime/kernels/index.cpp): kiln::index, index_put, index_put_ and
// the torch::indexing API (Tensor::index / index_put_ with Slice, None, Ellipsis,
// integers, bools and tensors). Values are checked against loops written here over
// elements read by hand; layouts (contiguous, transposed), every dtype, negative and
// int32 indices, masks, broadcast index tensors, both placements of the index dims
// (adjacent: in place; apart: first), empty results; bad input; compiled equals eager.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace kiln::indexing;
using namespace ewt;

namespace {

Tensor ints(const std::vector<int64_t> &v, Shape shape = {}, DType dt = kInt64) {
  if (shape.empty()) shape = {int64_t(v.size())};
  return make(shape, dt, [&](int64_t i) { return double(v[size_t(i)]); });
}

// x[a, b, c] of a [4, 5, 6] tensor: a distinct value per element.
double val(int64_t a, int64_t b, int64_t c) { return double(a * 100 + b * 10 + c); }

Tensor x456(DType dt = kFloat32, Layout layout = Layout::Contiguous) {
  // Transposed layout: built [4, 6, 5] and transposed, so strides are not row-major.
  return make_layout({4, 5, 6}, dt, [](int64_t i) { return val(i / 30, (i / 6) % 5, i % 6); }, layout);
}

void expect_shape(const Tensor &t, const Shape &s) { EXPECT_EQ(t.sizes().vec(), s); }

TEST(Index, OneTensorPerPlaceAgainstLoops) {
  for (Layout layout : {Layout::Contiguous, Layout::Transposed})
    for (DType dt : {kFloat32, kFloat64, kInt64, kInt32}) {
      SCOPED_TRACE(std::string(layout_name(layout)) + " " + std::string(name(dt)));
      Tensor x = x456(dt, layout);
      // dim 0, negative index included
      Tensor i0 = ints({3, -4, 1});
      Tensor r = index(x, {i0});
      expect_shape(r, {3, 5, 6});
      std::vector<double> want;
      for (int64_t a : {3, 0, 1})
        for (int64_t b = 0; b < 5; ++b)
          for (int64_t c = 0; c < 6; ++c) want.push_back(val(a, b, c));
      expect_values(r, want);
      // dim 2 through a None (int32 indices, 2-D index shape): in place of dim 2
      Tensor i2 = ints({5, 0, 2, 2}, {2, 2}, kInt32);
      r = index(x, {std::nullopt, std::nullopt, i2});
      expect_shape(r, {4, 5, 2, 2});
      want.clear();
      for (int64_t a = 0; a < 4; ++a)
        for (int64_t b = 0; b < 5; ++b)
          for (int64_t c : {5, 0, 2, 2}) want.push_back(val(a, b, c));
      expect_values(r, want);
    }
}

TEST(Index, AdjacentTensorsStayInPlaceApartTheyComeFirst) {
  Tensor x = x456();
  // dims 1 and 2, broadcast [2, 1] with [3]: the index shape [2, 3] replaces them.
  Tensor ib = ints({4, 1}, {2, 1}), ic = ints({0, -1, 3});
  Tensor r = index(x, {std::nullopt, ib, ic});
  expect_shape(r, {4, 2, 3});
  std::vector<double> want;
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b : {4, 1})
      for (int64_t c : {0, 5, 3}) want.push_back(val(a, b, c));
  expect_values(r, want);
  // dims 0 and 2 are apart: the index shape [3] comes first, then dim 1.
  Tensor ia = ints({2, 0, 3}), ic2 = ints({1, 1, 5});
  r = index(x, {ia, std::nullopt, ic2});
  expect_shape(r, {3, 5});
  want.clear();
  const int64_t as[] = {2, 0, 3}, cs[] = {1, 1, 5};
  for (int k = 0; k < 3; ++k)
    for (int64_t b = 0; b < 5; ++b) want.push_back(val(as[k], b, cs[k]));
  expect_values(r, want);
  // All three dims: one element per index position.
  r = index(x, {ints({1, 3}), ints({2, 0}), ints({5, 4})});
  expect_values(r, {val(1, 2, 5), val(3, 0, 4)});
}

TEST(Index, MasksIndexByTheirNonzeroPositions) {
  Tensor x = x456();
  Tensor m = make({4, 5}, kBool, [](int64_t i) { return double((i * 7) % 3 == 0); });
  Tensor r = index(x, {m});
  std::vector<double> want;
  int64_t n = 0;
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b = 0; b < 5; ++b) {
      if ((a * 5 + b) * 7 % 3 != 0) continue;
      ++n;
      for (int64_t c = 0; c < 6; ++c) want.push_back(val(a, b, c));
    }
  expect_shape(r, {n, 6});
  expect_values(r, want);
  // A 1-D mask on the last dim, through the indexing API.
  Tensor m6 = make({6}, kBool, [](int64_t i) { return double(i % 2); });
  r = x.index({"...", m6});
  expect_shape(r, {4, 5, 3});
  EXPECT_EQ(r.index({1, 2, 0}).item<float>(), float(val(1, 2, 1)));
  EXPECT_EQ(r.index({3, 4, 2}).item<float>(), float(val(3, 4, 5)));
}

TEST(Index, TorchIndexingViews) {
  Tensor x = x456();
  EXPECT_TRUE(x.index({1}).equal(x.select(0, 1)));
  EXPECT_TRUE(x.index({Slice(), -1}).equal(x.select(1, 4)));
  EXPECT_TRUE(x.index({Ellipsis, 2}).equal(x.select(2, 2)));
  EXPECT_TRUE(x.index({"...", Slice(None, None, 2)}).equal(x.slice(2, 0, std::nullopt, 2)));
  EXPECT_TRUE(x.index({Slice(1, 3), None, Slice(2)}).equal(x.slice(0, 1, 3).unsqueeze(1).slice(2, 2)));
  expect_shape(x.index({None, Ellipsis, None}), {1, 4, 5, 6, 1});
  expect_shape(x.index({true}), {1, 4, 5, 6});
  expect_shape(x.index({false}), {0, 4, 5, 6});
  // An integer view shares x's memory; a tensor index copies.
  EXPECT_TRUE(x.index({1}).is_alias_of(x));
  EXPECT_FALSE(x.index({ints({1})}).is_alias_of(x));
  // Slices, an integer and a tensor together: x[1:, idx, None, ..., 0] is [3, 2, 1].
  Tensor idx = ints({4, 0});
  Tensor r = x.index({Slice(1, None), idx, None, Ellipsis, 0});
  expect_shape(r, {3, 2, 1});
  std::vector<double> want;
  for (int64_t a = 1; a < 4; ++a)
    for (int64_t b : {4, 0}) want.push_back(val(a, b, 0));
  expect_values(r, want);
}

TEST(Index, EmptyIndexAndEmptySelf) {
  Tensor x = x456();
  Tensor none = ints({}, {0});
  expect_shape(index(x, {none}), {0, 5, 6});
  expect_shape(index(x, {std::nullopt, none, ints({}, {0})}), {4, 0});
  Tensor e = zeros({0, 3});
  expect_shape(index(e, {std::nullopt, ints({2, 0})}), {0, 2});
  // An empty result still checks its indices.
  expect_error([&] { index(e, {std::nullopt, ints({3})}); }, "index: index 3 is out of bounds for dimension 1 with size 3");
}

TEST(IndexPut, WritesAndAccumulatesAgainstLoops) {
  for (DType dt : {kFloat32, kInt64, kFloat64}) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = make({5, 3}, dt, [](int64_t i) { return double(i); });
    Tensor idx = ints({4, 0, 4, -1});
    Tensor v = make({4, 3}, dt, [](int64_t i) { return double(100 + i); });
    // Without accumulate, a repeated index keeps the last write (torch leaves it unspecified).
    Tensor r = index_put(x, {idx}, v);
    std::vector<double> want = values(x);
    const int64_t rows[] = {4, 0, 4, 4};
    for (int k = 0; k < 4; ++k)
      for (int c = 0; c < 3; ++c) want[size_t(rows[k] * 3 + c)] = 100 + k * 3 + c;
    expect_values(r, want);
    expect_values(x, values(make({5, 3}, dt, [](int64_t i) { return double(i); }))); // x unchanged
    // With accumulate, repeated indices add up.
    r = index_put(x, {idx}, v, true);
    want = values(x);
    for (int k = 0; k < 4; ++k)
      for (int c = 0; c < 3; ++c) want[size_t(rows[k] * 3 + c)] += 100 + k * 3 + c;
    expect_values(r, want);
    // In place, values broadcast over the indexed rows.
    Tensor y = x.clone();
    Tensor row = make({3}, dt, [](int64_t i) { return double(-1 - i); });
    Tensor &same = index_put_(y, {ints({1, 3})}, row);
    EXPECT_EQ(&same, &y);
    want = values(x);
    for (int64_t rr : {1, 3})
      for (int c = 0; c < 3; ++c) want[size_t(rr * 3 + c)] = -1 - c;
    expect_values(y, want);
  }
}

TEST(IndexPut, TorchIndexingForms) {
  Tensor x = make({4, 6}, kFloat32, [](int64_t i) { return double(i) - 7.5; });
  // x[mask] = 0 (the where form), x[:, idx] = v through a view, x[1] = row, x[..., 2] = 9.
  Tensor m = make({4, 6}, kBool, [](int64_t i) { return double(i % 5 == 0); });
  Tensor y = x.clone();
  y.index_put_({m}, 0.0);
  std::vector<double> want = values(x);
  for (size_t i = 0; i < want.size(); ++i)
    if (i % 5 == 0) want[i] = 0;
  expect_values(y, want);
  y = x.clone();
  y.index_put_({Slice(), ints({5, 1})}, make({4, 2}, kFloat32, [](int64_t i) { return 50.0 + double(i); }));
  want = values(x);
  for (int64_t r = 0; r < 4; ++r) {
    want[size_t(r * 6 + 5)] = 50.0 + double(r * 2);
    want[size_t(r * 6 + 1)] = 51.0 + double(r * 2);
  }
  expect_values(y, want);
  y = x.clone();
  y.index_put_({1}, make({6}, kFloat32, [](int64_t i) { return double(i); }));
  y.index_put_({Ellipsis, 2}, 9.0);
  want = values(x);
  for (int c = 0; c < 6; ++c) want[size_t(6 + c)] = c;
  for (int r = 0; r < 4; ++r) want[size_t(r * 6 + 2)] = 9;
  expect_values(y, want);
  // A mask on the last dim with one value, and a mask with many values (the nonzero form).
  y = x.clone();
  Tensor m6 = make({6}, kBool, [](int64_t i) { return double(i >= 4); });
  y.index_put_({Slice(), m6}, -1.0);
  want = values(x);
  for (int r = 0; r < 4; ++r) want[size_t(r * 6 + 4)] = want[size_t(r * 6 + 5)] = -1;
  expect_values(y, want);
  y = x.clone();
  Tensor m2 = make({4, 6}, kBool, [](int64_t i) { return double(i == 3 || i == 20); });
  y.index_put_({m2}, make({2}, kFloat32, [](int64_t i) { return 7.0 + double(i); }));
  want = values(x);
  want[3] = 7;
  want[20] = 8;
  expect_values(y, want);
  // Values with more leading size-1 dims than the selection: torch strips them, for tensor
  // entries ([1, 1, 2] into a [2] selection) and for view-only ones ([1, 6] into a row).
  y = x.clone();
  y.index_put_({m2}, make({1, 1, 2}, kFloat32, [](int64_t i) { return 7.0 + double(i); }));
  expect_values(y, want);
  y = x.clone();
  y.index_put_({2}, make({1, 1, 6}, kFloat32, [](int64_t i) { return -double(i); }));
  want = values(x);
  for (int c = 0; c < 6; ++c) want[size_t(12 + c)] = -c;
  expect_values(y, want);
  // A leading dim that is not 1 still does not fit.
  expect_error([&] { x.clone().index_put_({2}, zeros({2, 6})); }, "copy_");
}

TEST(IndexPut, NanAndInfAreWrittenAsTheyAre) {
  Tensor x = zeros({3});
  Tensor v = make({2}, kFloat32, [](int64_t i) { return i ? std::numeric_limits<double>::infinity() : NAN; });
  index_put_(x, {ints({2, 0})}, v);
  std::vector<double> got = values(x);
  EXPECT_TRUE(std::isinf(got[0]));
  EXPECT_EQ(got[1], 0.0);
  EXPECT_TRUE(std::isnan(got[2]));
}

TEST(Index, BadInput) {
  Tensor x = x456();
  expect_error([&] { index(x, {ints({1, 5})}); }, "index: index 5 is out of bounds for dimension 0 with size 4");
  expect_error([&] { index(x, {std::nullopt, ints({-6})}); }, "index: index -6 is out of bounds for dimension 1 with size 5");
  expect_error([&] { index(x, {make({2}, kFloat32, [](int64_t) { return 0.0; })}); },
               "index: tensors used as indices must be int64, int32 or bool tensors, got float32");
  expect_error([&] { index(x, {ints({0}), ints({0}), ints({0}), ints({0})}); }, "index: too many indices for tensor of dimension 3");
  expect_error([&] { index(x, {ints({0, 1}), ints({0, 1, 2})}); }, "index");
  expect_error([&] { index(x, {make({4, 4}, kBool, [](int64_t) { return 1.0; })}); },
               "index: the shape of the mask [4, 4] at index 0 does not match the shape of the indexed tensor [4, 5, 6]");
  expect_error([&] { index(x, {std::nullopt}); }, "index: expected at least one index tensor");
  expect_error([&] { x.index({0, 0, 0, 0}); }, "index: too many indices for tensor of dimension 3");
  expect_error([&] { x.index({Ellipsis, "..."}); }, "index: an index can only have a single ellipsis");
  expect_error([&] { x.index({Slice(0, 2, -1)}); }, "index: slice step must be positive, got -1");
  expect_error([&] { x.index({7}); }, "select");
  expect_error([&] { indexing::TensorIndex t("::"); }, "TensorIndex: expected \"...\"");
  expect_error([&] { index(Tensor(), {ints({0})}); }, "index: self");
  Tensor y = x.clone();
  expect_error([&] { index_put_(y, {ints({0, 1})}, zeros({3})); },
               "index_put_: shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of shape [2, 5, 6]");
  expect_error([&] { index_put_(y, {ints({0})}, zeros({6}, TensorOptions().dtype(kFloat64))); },
               "index_put_: index_put requires the source and destination dtypes to match, got float32 for the destination and float64");
  expect_error([&] { y.index_put_({ints({9})}, 1.0); }, "index_put_: index 9 is out of bounds for dimension 0 with size 4");
  // A failed index_put_ wrote nothing.
  EXPECT_TRUE(y.equal(x));
  Tensor z = zeros({2});
  expect_error([&] { z.index_put_({0}, 1e300); }, "index_put_");
}

// Compiled functions: tensor indices run as eager steps inside the compiled plan, a
// one-value mask write traces as where() and fuses; a mask read (data-dependent shape)
// falls back to eager. Each equals eager.
TEST(Index, CompiledEqualsEager) {
  Tensor x = make({6, 8}, kFloat32, [](int64_t i) { return std::sin(double(i)) * 3.0; });
  Tensor idx = ints({5, 0, 3, 3});
  TracedFunction fn2 = [](const std::vector<Tensor> &in) {
    Tensor h = in[0].relu() * 2.0;
    Tensor g = h.index({in[1], Slice(1, None, 2)}) + 1.0;
    Tensor y = in[0] * 1.0;
    index_put_(y, {std::nullopt, in[1]}, in[0].index({Slice(), Slice(0, 4)}), true);
    Tensor z = in[0] * 0.5;
    z.index_put_({gt(in[0], 1.0)}, -3.0); // where form
    return std::vector<Tensor>{g, y, z.exp()};
  };
  CompiledFunction f = kiln::testing::expect_compiled_equals_eager(fn2, {x, idx}, 1e-6);
  EXPECT_GE(f.kernels_per_call({x, idx}), 1);
  // A mask read has a data-dependent shape: the default compile falls back to eager.
  auto masked = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].index({gt(in[0], 0.0)}) * 2.0}; };
  CompiledFunction fm = compile(masked);
  expect_values(fm({x})[0], values(masked({x})[0]));
}

} // namespace
