// Shape and indexing ops: tril/triu, cat, stack, split, chunk, index_select,
// gather, embedding. Values against naive loops over multi-indices.
#include "unit/shape_test_util.h"

#include <limits>
#include <numeric>

using namespace kiln;
using namespace shape_test;

namespace {

// Inputs of a given logical shape in several layouts: contiguous, transposed
// (last two dims), sliced (every other row of a larger buffer) and expanded.
std::vector<std::pair<std::string, Tensor>> layouts(const Idx &shape, DType dt, int seed = 0) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("contiguous", filled(shape, dt, seed));
  if (shape.size() >= 2) out.emplace_back("transposed", transposed(shape, dt, seed));
  Idx big = shape;
  big[0] = big[0] * 2 + 1;
  out.emplace_back("sliced", filled(big, dt, seed).slice(0, 1, std::nullopt, 2));
  Idx one = shape;
  one[0] = 1;
  out.emplace_back("expanded", filled(one, dt, seed).expand(shape));
  return out;
}

} // namespace

// ---------------------------------------------------------------- tril / triu

TEST(Tril, ValuesAllDtypesLayoutsDiagonals) {
  for (DType dt : kAllDTypes)
    for (const Idx &shape : {Idx{4, 5}, Idx{3, 4, 2}, Idx{2, 1, 3, 3}, Idx{1, 1}})
      for (auto &[name, x] : layouts(shape, dt))
        for (int64_t diag : {-10, -2, -1, 0, 1, 3, 10}) {
          SCOPED_TRACE(name + " " + idx_str(shape) + " diag " + std::to_string(diag) + " " + std::string(kiln::name(dt)));
          Tensor lo = tril(x, diag), hi = triu(x, diag);
          EXPECT_EQ(lo.dtype(), dt);
          EXPECT_FALSE(lo.is_alias_of(x));
          const size_t r = shape.size() - 2, c = shape.size() - 1;
          expect_values(lo, shape, [&](const Idx &i) { return i[c] - i[r] <= diag ? get(x, i) : 0.0; });
          expect_values(hi, shape, [&](const Idx &i) { return i[c] - i[r] >= diag ? get(x, i) : 0.0; });
        }
}

TEST(Tril, EmptyAndErrors) {
  for (const Idx &shape : {Idx{0, 3}, Idx{3, 0}, Idx{2, 0, 4}}) {
    EXPECT_EQ(tril(filled(shape, kFloat32)).sizes().vec(), shape);
    EXPECT_EQ(triu(filled(shape, kInt64), 1).sizes().vec(), shape);
  }
  expect_error([] { tril(filled({5}, kFloat32)); }, {"tril", "at least 2 dimensions", "[5]"});
  expect_error([] { triu(filled({}, kFloat32)); }, {"triu", "[]"});
  expect_error([] { tril(Tensor()); }, {"tril", "undefined"});
}

TEST(Tril, AdapterAndTrace) {
  Tensor x = transposed({3, 4}, kFloat64);
  expect_same(run_op(OpId::Tril, {x}, {int64_t(1)}).at(0), tril(x, 1));
  expect_same(run_op(OpId::Triu, {x}, {int64_t(-1)}).at(0), triu(x, -1));
  Tensor t = traced([&] { return triu(x, 2); });
  EXPECT_EQ(recorded().id, OpId::Triu);
  EXPECT_EQ(recorded().attrs, Attrs{int64_t(2)});
  expect_same(t, triu(x, 2));
  EXPECT_EQ(tril(meta({2, 5, 5}, kInt32)).sizes().vec(), (Idx{2, 5, 5}));
  EXPECT_TRUE(tril(meta({2, 5, 5}, kInt32)).is_meta());
}

// ---------------------------------------------------------------- cat

namespace {
// Reference cat along d (inputs not skipped).
double cat_ref(const TensorList &ts, int64_t d, const Idx &i) {
  int64_t pos = i[size_t(d)];
  for (const Tensor &t : ts) {
    if (t.dim() == 1 && t.size(0) == 0) continue;
    if (pos < t.size(d)) {
      Idx j = i;
      j[size_t(d)] = pos;
      return get(t, j);
    }
    pos -= t.size(d);
  }
  ADD_FAILURE() << "index past the inputs";
  return 0;
}
} // namespace

TEST(Cat, ValuesDimsLayoutsDtypes) {
  for (DType dt : kAllDTypes)
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Idx sa{2, 3, 4}, sb{2, 3, 4}, sc{2, 3, 4};
      sb[size_t(d)] = 1;
      sc[size_t(d)] = 3;
      auto la = layouts(sa, dt, 1), lb = layouts(sb, dt, 2), lc = layouts(sc, dt, 3);
      for (size_t k = 0; k < la.size(); ++k) {
        TensorList ts{la[k].second, lb[(k + 1) % lb.size()].second, lc[(k + 2) % lc.size()].second};
        SCOPED_TRACE(la[k].first + " dim " + std::to_string(dim) + " " + std::string(name(dt)));
        Tensor out = cat(ts, dim);
        EXPECT_EQ(out.dtype(), dt);
        Idx shape = sa;
        shape[size_t(d)] = sa[size_t(d)] + sb[size_t(d)] + sc[size_t(d)];
        expect_values(out, shape, [&](const Idx &i) { return cat_ref(ts, d, i); });
      }
    }
}

TEST(Cat, PromotesDtypes) {
  struct Case {
    DType a, b, want;
  } cases[] = {{kInt32, kFloat32, kFloat32}, {kBool, kInt64, kInt64}, {kInt32, kInt64, kInt64},
               {kFloat32, kFloat64, kFloat64}, {kBool, kBool, kBool}, {kInt64, kFloat32, kFloat32}};
  for (const Case &c : cases) {
    TensorList ts{filled({2, 2}, c.a, 1), transposed({3, 2}, c.b, 2)};
    Tensor out = cat(ts, 0);
    EXPECT_EQ(out.dtype(), c.want);
    expect_values(out, {5, 2}, [&](const Idx &i) { return as_dtype(cat_ref(ts, 0, i), c.want); });
  }
}

TEST(Cat, SkipsLegacyEmptyVectors) {
  Tensor a = filled({2, 3}, kFloat32, 1), b = filled({1, 3}, kFloat32, 2);
  Tensor e = filled({0}, kFloat64);
  TensorList ts{e, a, e, b};
  // dim -1 wraps against the first tensor not skipped (2-D), not the skipped 1-D one.
  TensorList cols{e, a, filled({2, 2}, kFloat32, 3)};
  Tensor wide = cat(cols, -1);
  expect_values(wide, {2, 5}, [&](const Idx &i) { return cat_ref(cols, 1, i); });
  Tensor rows = cat(ts, 0);
  EXPECT_EQ(rows.dtype(), kFloat64); // skipped tensors still take part in promotion, as torch
  expect_values(rows, {3, 3}, [&](const Idx &i) { return cat_ref(ts, 0, i); });
  Tensor all_empty = cat({e, filled({0}, kInt32)}, 0);
  EXPECT_EQ(all_empty.sizes().vec(), (Idx{0}));
  EXPECT_EQ(all_empty.dtype(), kFloat64);
  // A 2-D empty tensor is not skipped: its other dims must match.
  EXPECT_EQ(cat({filled({0, 3}, kFloat32), a}, 0).sizes().vec(), (Idx{2, 3}));
  expect_error([&] { cat({filled({0, 4}, kFloat32), a}, 0); }, {"cat", "tensor 1", "[0, 4]", "[2, 3]"});
}

TEST(Cat, SizeOneAndEmptyDims) {
  Tensor a = filled({1, 0, 2}, kInt32), b = filled({1, 0, 2}, kInt32);
  EXPECT_EQ(cat({a, b}, 1).sizes().vec(), (Idx{1, 0, 2}));
  EXPECT_EQ(cat({a, b}, 0).sizes().vec(), (Idx{2, 0, 2}));
  Tensor s = filled({1}, kInt64, 3);
  Tensor out = cat({s, s, s}, 0);
  expect_values(out, {3}, [&](const Idx &) { return get(s, {0}); });
}

TEST(Cat, Errors) {
  Tensor a = filled({2, 3}, kFloat32), b = filled({2, 4}, kFloat32);
  expect_error([&] { cat({a, b}, 0); }, {"cat", "tensor 1", "[2, 3]", "[2, 4]", "dimension 1"});
  expect_error([&] { cat({a, a, filled({2, 3, 1}, kFloat32)}, 0); }, {"cat", "tensor 2", "[2, 3, 1]"});
  expect_error([&] { cat({a, filled({}, kFloat32)}, 0); }, {"cat", "zero-dimensional", "position 1"});
  expect_error([&] { cat({}, 0); }, {"cat", "non-empty"});
  expect_error([&] { cat({a, b}, 2); }, {"cat", "dim 2", "out of range"});
  expect_error([&] { cat({a, Tensor()}, 0); }, {"cat", "position 1", "undefined"});
}

TEST(Cat, AdapterTraceAndMeta) {
  TensorList ts{filled({2, 3}, kInt32), transposed({2, 2}, kFloat32)};
  expect_same(run_op(OpId::Cat, ts, {int64_t(1)}).at(0), cat(ts, 1));
  Tensor t = traced([&] { return cat(ts, -1); });
  EXPECT_EQ(recorded().id, OpId::Cat);
  EXPECT_EQ(recorded().attrs, Attrs{int64_t(1)}); // recorded wrapped
  EXPECT_EQ(recorded().calls, 1);
  expect_same(t, cat(ts, 1));
  Tensor m = cat({meta({2, 3}), filled({2, 1}, kFloat64)}, 1);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.sizes().vec(), (Idx{2, 4}));
  EXPECT_EQ(m.dtype(), kFloat64);
}

// ---------------------------------------------------------------- stack

TEST(Stack, ValuesDimsLayoutsDtypes) {
  for (DType dt : kAllDTypes)
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      const Idx shape{2, 3};
      auto la = layouts(shape, dt, 1), lb = layouts(shape, dt, 2);
      for (size_t k = 0; k < la.size(); ++k) {
        TensorList ts{la[k].second, lb[(k + 1) % lb.size()].second, la[(k + 2) % la.size()].second};
        Tensor out = stack(ts, dim);
        const size_t d = size_t(dim < 0 ? dim + 3 : dim);
        Idx want = shape;
        want.insert(want.begin() + int64_t(d), 3);
        expect_values(out, want, [&](const Idx &i) {
          Idx j = i;
          j.erase(j.begin() + int64_t(d));
          return get(ts[size_t(i[d])], j);
        });
      }
    }
}

TEST(Stack, ScalarsPromotionEmptyAndErrors) {
  TensorList scalars{filled({}, kInt32, 1), filled({}, kFloat64, 2)};
  Tensor s = stack(scalars, 0);
  EXPECT_EQ(s.dtype(), kFloat64);
  expect_values(s, {2}, [&](const Idx &i) { return get(scalars[size_t(i[0])], {}); });
  EXPECT_EQ(stack({filled({0, 2}, kFloat32), filled({0, 2}, kFloat32)}, 1).sizes().vec(), (Idx{0, 2, 2}));
  // No legacy skip in stack: 1-D empty tensors stack into [n, 0].
  EXPECT_EQ(stack({filled({0}, kFloat32), filled({0}, kFloat32)}, 0).sizes().vec(), (Idx{2, 0}));
  expect_error([] { stack({filled({2, 3}, kFloat32), filled({2, 4}, kFloat32)}, 0); },
               {"stack", "[2, 3]", "entry 0", "[2, 4]", "entry 1"});
  expect_error([] { stack({}, 0); }, {"stack", "non-empty"});
  expect_error([] { stack({filled({2}, kFloat32)}, 3); }, {"stack", "dim 3"});
}

TEST(Stack, AdapterAndTrace) {
  TensorList ts{filled({2, 3}, kInt64), transposed({2, 3}, kInt64)};
  expect_same(run_op(OpId::Stack, ts, {int64_t(2)}).at(0), stack(ts, 2));
  Tensor t = traced([&] { return stack(ts, -1); });
  EXPECT_EQ(recorded().attrs, Attrs{int64_t(2)});
  expect_same(t, stack(ts, 2));
  EXPECT_EQ(stack({meta({4}), meta({4})}, 0).sizes().vec(), (Idx{2, 4}));
}

// ---------------------------------------------------------------- split / chunk

namespace {
// Checks that pieces are views of x covering dim d in order with the given sizes.
void expect_pieces(const Tensor &x, const std::vector<Tensor> &pieces, int64_t d, const Idx &sizes) {
  ASSERT_EQ(pieces.size(), sizes.size());
  int64_t start = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    SCOPED_TRACE("piece " + std::to_string(p));
    EXPECT_TRUE(pieces[p].is_alias_of(x));
    Idx shape = x.sizes().vec();
    shape[size_t(d)] = sizes[p];
    expect_values(pieces[p], shape, [&](const Idx &i) {
      Idx j = i;
      j[size_t(d)] += start;
      return get(x, j);
    });
    start += sizes[p];
  }
}
} // namespace

TEST(Split, BySizeIsViewsAllLayouts) {
  for (DType dt : {kBool, kInt32, kFloat32, kFloat64})
    for (auto &[name, x] : layouts({5, 4}, dt)) {
      SCOPED_TRACE(name);
      expect_pieces(x, split(x, 2, 0), 0, {2, 2, 1});
      expect_pieces(x, split(x, 3, -1), 1, {3, 1});
      expect_pieces(x, split(x, 5, 0), 0, {5});
      expect_pieces(x, split(x, 7, 0), 0, {5});
      expect_pieces(x, x.split(1, 1), 1, {1, 1, 1, 1});
    }
}

TEST(Split, BySizesAndEmpty) {
  Tensor x = transposed({3, 6}, kFloat32);
  expect_pieces(x, split(x, Idx{1, 0, 5}, 1), 1, {1, 0, 5});
  expect_pieces(x, split(x, Idx{3}, -2), 0, {3});
  Tensor e = filled({0, 3}, kInt64);
  expect_pieces(e, split(e, 0, 0), 0, {0});
  expect_pieces(e, split(e, 2, 0), 0, {0});
  expect_pieces(e, split(e, Idx{0, 0}, 0), 0, {0, 0});
}

TEST(Split, Errors) {
  Tensor x = filled({5, 2}, kFloat32);
  expect_error([&] { split(x, Idx{2, 2}, 0); }, {"split", "[2, 2]", "sum", "5", "[5, 2]"});
  expect_error([&] { split(x, Idx{6, -1}, 0); }, {"split", "negative", "-1"});
  expect_error([&] { split(x, -1, 0); }, {"split", "non-negative", "-1"});
  expect_error([&] { split(x, 0, 0); }, {"split", "0", "size 5"});
  expect_error([&] { split(x, 1, 2); }, {"split", "dim 2"});
  expect_error([] { split(filled({}, kFloat32), 1, 0); }, {"split", "1-dimensional"});
  // Huge sizes: reported (or handled), never an overflow.
  const int64_t big = std::numeric_limits<int64_t>::max();
  expect_error([&] { split(x, Idx{big, big}, 0); }, {"split", "sum exactly to 5"});
  expect_pieces(x, split(x, big, 0), 0, {5});
  expect_pieces(x, chunk(x, big, 0), 0, {1, 1, 1, 1, 1});
}

TEST(Chunk, TorchRule) {
  struct Case {
    int64_t n, chunks;
    Idx sizes;
  } cases[] = {{5, 3, {2, 2, 1}}, {6, 4, {2, 2, 2}}, {6, 3, {2, 2, 2}}, {1, 4, {1}},
               {7, 1, {7}},       {0, 3, {0, 0, 0}}, {10, 4, {3, 3, 3, 1}}};
  for (const Case &c : cases) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " chunks " + std::to_string(c.chunks));
    Tensor x = transposed({c.n, 2}, kInt32); // [n, 2], non-contiguous
    if (c.n > 1) {
      ASSERT_FALSE(x.is_contiguous());
    }
    expect_pieces(x, chunk(x, c.chunks, 0), 0, c.sizes);
    expect_pieces(x, x.chunk(c.chunks, -2), 0, c.sizes);
  }
  expect_error([] { chunk(filled({4}, kFloat32), 0); }, {"chunk", "greater than 0", "0"});
  expect_error([] { chunk(filled({}, kFloat32), 2); }, {"chunk", "1-dimensional"});
}

TEST(Split, AdapterAndTraceRecordSizes) {
  Tensor x = filled({7, 3}, kFloat32);
  auto viaop = run_op(OpId::Split, {x}, {Idx{2, 5}, int64_t(0)});
  expect_pieces(x, viaop, 0, {2, 5});
  auto check = [&](auto fn, const Idx &sizes, int64_t d) {
    auto pieces = traced(fn);
    EXPECT_EQ(recorded().id, OpId::Split);
    EXPECT_EQ(recorded().calls, 1);
    EXPECT_EQ(recorded().attrs, (Attrs{sizes, d}));
    expect_pieces(x, pieces, d, sizes);
  };
  check([&] { return split(x, 3, 0); }, {3, 3, 1}, 0);
  check([&] { return split(x, Idx{1, 2}, -1); }, {1, 2}, 1);
  check([&] { return chunk(x, 2, -1); }, {2, 1}, 1);
  check([&] { return chunk(x, 3, 0); }, {3, 3, 1}, 0);
  auto m = split(meta({4, 6}), 4, 1);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(m[1].is_meta());
  EXPECT_EQ(m[1].sizes().vec(), (Idx{4, 2}));
}

// ---------------------------------------------------------------- index_select

TEST(IndexSelect, ValuesDimsLayoutsDtypes) {
  for (DType dt : kAllDTypes)
    for (DType it : {kInt32, kInt64})
      for (int64_t dim : {0, 1, 2, -1}) {
        const Idx shape{4, 3, 5};
        const int64_t d = dim < 0 ? dim + 3 : dim;
        const int64_t n = shape[size_t(d)];
        Tensor idx = ints({n - 1, 0, 1, n - 1, 0}, {5}, it);
        Tensor strided_idx = ints({n - 1, 9, 0, 9, 1, 9}, {6}, it).slice(0, 0, std::nullopt, 2); // [n-1, 0, 1]
        for (auto &[name, x] : layouts(shape, dt))
          for (const Tensor &ix : {idx, strided_idx}) {
            SCOPED_TRACE(name + " dim " + std::to_string(dim));
            Tensor out = index_select(x, dim, ix);
            Idx want = shape;
            want[size_t(d)] = ix.numel();
            expect_values(out, want, [&](const Idx &i) {
              Idx j = i;
              j[size_t(d)] = int64_t(get(ix, {i[size_t(d)]}));
              return get(x, j);
            });
          }
      }
}

TEST(IndexSelect, EmptyScalarAndErrors) {
  Tensor x = filled({5, 2}, kFloat32);
  EXPECT_EQ(index_select(x, 0, ints({}, {0})).sizes().vec(), (Idx{0, 2}));
  EXPECT_EQ(index_select(filled({0, 2}, kFloat32), 1, ints({1, 1}, {2})).sizes().vec(), (Idx{0, 2}));
  Tensor s = filled({}, kFloat64, 3);
  Tensor r = index_select(s, 0, ints({0}, {}));
  EXPECT_EQ(r.dim(), 0);
  EXPECT_EQ(get(r, {}), get(s, {}));
  Tensor one = index_select(x, 1, ints({1}, {}));
  expect_values(one, {5, 1}, [&](const Idx &i) { return get(x, {i[0], 1}); });
  expect_error([&] { index_select(x, 0, ints({1, 5}, {2})); }, {"index_select", "index 5", "size 5"});
  expect_error([&] { index_select(x, 1, ints({-1}, {1})); }, {"index_select", "index -1", "size 2"});
  expect_error([&] { index_select(x, 0, ints({0, 1}, {1, 2})); }, {"index_select", "vector", "[1, 2]"});
  expect_error([&] { index_select(x, 0, filled({2}, kFloat32)); }, {"index_select", "int32 or int64", "float32"});
  expect_error([&] { index_select(x, 2, ints({0}, {1})); }, {"index_select", "dim 2"});
  expect_error([&] { index_select(s, 0, ints({0, 0}, {2})); }, {"index_select", "only 1 value", "2"});
}

TEST(IndexSelect, AdapterAndTrace) {
  Tensor x = transposed({3, 4}, kInt64);
  Tensor ix = ints({2, 0}, {2}, kInt32);
  expect_same(run_op(OpId::IndexSelect, {x, ix}, {int64_t(1)}).at(0), index_select(x, 1, ix));
  Tensor t = traced([&] { return x.index_select(-2, ix); });
  EXPECT_EQ(recorded().id, OpId::IndexSelect);
  EXPECT_EQ(recorded().attrs, Attrs{int64_t(0)});
  expect_same(t, index_select(x, 0, ix));
  EXPECT_EQ(index_select(meta({3, 4}), 1, meta({7}, kInt64)).sizes().vec(), (Idx{3, 7}));
}

// ---------------------------------------------------------------- gather

TEST(Gather, ValuesDimsLayoutsDtypes) {
  const Idx xshape{3, 4, 5};
  for (DType dt : kAllDTypes)
    for (DType it : {kInt32, kInt64})
      for (int64_t dim : {0, 1, 2, -1}) {
        const size_t d = size_t(dim < 0 ? dim + 3 : dim);
        const int64_t n = xshape[d];
        // Index no larger than x outside d, longer than x along d (repeats allowed).
        Idx ishape{2, 3, 4};
        ishape[d] = 6;
        std::vector<int64_t> vals;
        const int64_t numel = ishape[0] * ishape[1] * ishape[2];
        for (int64_t i = 0; i < numel; ++i) vals.push_back((i * 7 + 3) % n);
        Tensor index = ints(vals, ishape, it);
        Idx tshape = ishape;
        std::swap(tshape[1], tshape[2]);
        Tensor tindex = ints(vals, tshape, it).transpose(1, 2); // non-contiguous index
        Idx eshape = ishape;
        eshape[0] = 1;
        Tensor eindex = ints(std::vector<int64_t>(vals.begin(), vals.begin() + numel / ishape[0]), eshape, it)
                            .expand(ishape); // stride-0 index
        for (auto &[name, x] : layouts(xshape, dt))
          for (const Tensor &ix : {index, tindex, eindex}) {
            SCOPED_TRACE(name + " dim " + std::to_string(dim));
            Tensor out = gather(x, dim, ix);
            EXPECT_EQ(out.dtype(), dt);
            expect_values(out, ishape, [&](const Idx &i) {
              Idx j = i;
              j[d] = int64_t(get(ix, i));
              return get(x, j);
            });
          }
      }
}

TEST(Gather, EmptyScalarAndErrors) {
  Tensor x = filled({3, 4}, kFloat32);
  EXPECT_EQ(gather(x, 1, ints({}, {0, 2})).sizes().vec(), (Idx{0, 2}));
  // An empty index skips the dtype and shape checks, as torch.
  EXPECT_EQ(gather(x, 0, filled({5, 0}, kFloat32)).sizes().vec(), (Idx{5, 0}));
  Tensor s = filled({}, kInt32, 5);
  Tensor r = gather(s, 0, ints({0, 0, 0}, {3}));
  expect_values(r, {3}, [&](const Idx &) { return get(s, {}); });
  expect_error([&] { gather(x, 1, ints({0, 4}, {1, 2})); }, {"gather", "index 4", "size 4"});
  expect_error([&] { gather(x, 0, ints({-1}, {1, 1})); }, {"gather", "index -1", "size 3"});
  expect_error([&] { gather(x, 0, ints({0, 0}, {2})); }, {"gather", "[2]", "same number of dimensions", "[3, 4]"});
  expect_error([&] { gather(x, 0, ints({0, 0, 0, 0, 0}, {1, 5})); }, {"gather", "dimension 1", "[1, 5]", "[3, 4]"});
  expect_error([&] { gather(x, 0, filled({1, 1}, kFloat64)); }, {"gather", "int32 or int64", "float64"});
  expect_error([&] { gather(x, -3, ints({0}, {1, 1})); }, {"gather", "dim -3"});
}

TEST(Gather, AdapterAndTrace) {
  Tensor x = transposed({3, 4}, kFloat64);
  Tensor ix = ints({3, 0, 1, 2}, {2, 2});
  expect_same(run_op(OpId::Gather, {x, ix}, {int64_t(1)}).at(0), gather(x, 1, ix));
  Tensor t = traced([&] { return x.gather(-1, ix); });
  EXPECT_EQ(recorded().id, OpId::Gather);
  EXPECT_EQ(recorded().attrs, Attrs{int64_t(1)});
  expect_same(t, gather(x, 1, ix));
  EXPECT_EQ(gather(meta({3, 4}), 0, meta({2, 4}, kInt64)).sizes().vec(), (Idx{2, 4}));
}

// ---------------------------------------------------------------- embedding

TEST(Embedding, ValuesShapesDtypes) {
  for (DType dt : kAllDTypes)
    for (DType it : {kInt32, kInt64}) {
      for (auto &[name, w] : layouts({10, 4}, dt)) {
        for (const Idx &ishape : {Idx{}, Idx{3}, Idx{2, 3}, Idx{0}, Idx{2, 0, 2}}) {
          SCOPED_TRACE(name + " indices " + idx_str(ishape));
          int64_t n = 1;
          for (int64_t s : ishape) n *= s;
          std::vector<int64_t> vals;
          for (int64_t i = 0; i < n; ++i) vals.push_back((i * 7 + 9) % 10);
          Tensor ix = ints(vals, ishape, it);
          Tensor out = embedding(w, ix);
          Idx want = ishape;
          want.push_back(4);
          EXPECT_EQ(out.dtype(), dt);
          expect_values(out, want, [&](const Idx &i) {
            Idx row(i.begin(), i.end() - 1);
            return get(w, {int64_t(get(ix, row)), i.back()});
          });
        }
        // Non-contiguous indices.
        Tensor tix = ints({9, 0, 3, 3, 1, 8}, {2, 3}, it).transpose(0, 1);
        expect_values(embedding(w, tix), {3, 2, 4},
                      [&](const Idx &i) { return get(w, {int64_t(get(tix, {i[0], i[1]})), i[2]}); });
      }
    }
}

TEST(Embedding, ErrorsAdapterTrace) {
  Tensor w = filled({10, 4}, kFloat32);
  expect_error([&] { embedding(w, ints({1, 10}, {2})); }, {"embedding", "index 10", "size 10"});
  expect_error([&] { embedding(w, ints({-1}, {1})); }, {"embedding", "index -1"});
  expect_error([&] { embedding(filled({10}, kFloat32), ints({1}, {1})); }, {"embedding", "2-D", "[10]"});
  expect_error([&] { embedding(w, filled({2}, kFloat32)); }, {"embedding", "int32 or int64"});
  Tensor ix = ints({3, 1, 4, 1}, {2, 2}, kInt32);
  expect_same(run_op(OpId::Embedding, {w, ix}, {}).at(0), embedding(w, ix));
  Tensor t = traced([&] { return embedding(w, ix); });
  EXPECT_EQ(recorded().id, OpId::Embedding);
  EXPECT_TRUE(recorded().attrs.empty());
  expect_same(t, embedding(w, ix));
  EXPECT_EQ(embedding(meta({10, 4}), meta({2, 5}, kInt64)).sizes().vec(), (Idx{2, 5, 4}));
}

// Large inputs go through the thread pool: compare against the naive loop too.
TEST(ShapeOps, LargeInputsParallel) {
  Tensor a = transposed({300, 257}, kFloat32, 1), b = filled({300, 100}, kFloat32, 2);
  Tensor c = cat({a, b}, 1);
  TensorList ts{a, b};
  expect_values(c, {300, 357}, [&](const Idx &i) { return cat_ref(ts, 1, i); });
  // Batched transposed sources with a dtype conversion (the tiled copy path, partial tiles).
  TensorList mixed{transposed({3, 70, 45}, kInt32, 4), transposed({3, 70, 33}, kFloat64, 5)};
  Tensor m = cat(mixed, -1);
  EXPECT_EQ(m.dtype(), kFloat64);
  expect_values(m, {3, 70, 78}, [&](const Idx &i) { return cat_ref(mixed, 2, i); });
  Tensor st = stack({mixed[0], mixed[0]}, 1);
  expect_values(st, {3, 2, 70, 45}, [&](const Idx &i) { return get(mixed[0], {i[0], i[2], i[3]}); });
  Tensor lo = tril(a, 3);
  expect_values(lo, {300, 257}, [&](const Idx &i) { return i[1] - i[0] <= 3 ? get(a, i) : 0.0; });
  std::vector<int64_t> vals;
  for (int64_t i = 0; i < 2000; ++i) vals.push_back((i * 13) % 300);
  Tensor ix = ints(vals, {2000});
  Tensor sel = index_select(a, 0, ix);
  expect_values(sel, {2000, 257}, [&](const Idx &i) { return get(a, {vals[size_t(i[0])], i[1]}); });
}
