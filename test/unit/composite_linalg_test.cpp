// einsum (runtime/kernels/composite_linalg.cpp) against a naive loop written here: every
// assignment of every subscript is visited and the operands' elements multiplied into the
// output element (never through kiln's ops). Each case spells out its operands' subscripts
// dim by dim and its output subscripts, implicit outputs and ellipses written out by hand,
// so the reference parses nothing. Contiguous, transposed and sliced inputs, broadcasting,
// empty dims, bad equations; compiled equals eager.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "graph_test_util.h"

using namespace kiln;
using namespace ewt;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

namespace {

// out[o...] = sum over the other subscripts of prod_k x_k[its subscripts]; a size-1 dim of an
// operand broadcasts (read at 0). `dims[k]` names operand k's dims, one char each.
std::vector<double> naive_einsum(const std::vector<Tensor> &xs, const std::vector<std::string> &dims,
                                 const std::string &out, Shape *out_shape) {
  std::map<char, int64_t> size;
  for (size_t k = 0; k < xs.size(); ++k)
    for (size_t d = 0; d < dims[k].size(); ++d) {
      int64_t &s = size[dims[k][d]];
      if (s <= 1) s = xs[k].size(int64_t(d));
    }
  std::string all = out;
  for (const auto &[c, s] : size)
    if (out.find(c) == std::string::npos) all.push_back(c);
  Shape full;
  for (char c : all) full.push_back(size[c]);
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  std::vector<double> res(size_t(numel_of(*out_shape)), 0.0);
  for_each_index(full, [&](const Shape &idx, int64_t) {
    double p = 1;
    for (size_t k = 0; k < xs.size(); ++k) {
      Shape at;
      for (size_t d = 0; d < dims[k].size(); ++d)
        at.push_back(xs[k].size(int64_t(d)) == 1 ? 0 : idx[all.find(dims[k][d])]);
      p *= read_at(xs[k], at);
    }
    int64_t o = 0;
    for (size_t d = 0; d < out.size(); ++d) o = o * (*out_shape)[d] + idx[d];
    res[size_t(o)] += p;
  });
  return res;
}

struct Case {
  std::string equation;
  std::vector<Shape> shapes;
  std::vector<std::string> dims; // the reference's subscripts per operand dim
  std::string out;               // the reference's output subscripts
};

std::vector<Case> cases() {
  return {
      {"ij,jk->ik", {{3, 4}, {4, 5}}, {"ij", "jk"}, "ik"},                    // matmul
      {"ij,jk", {{3, 4}, {4, 5}}, {"ij", "jk"}, "ik"},                        // implicit
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, {"bij", "bjk"}, "bik"},        // batched matmul
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}, {"bn", "anm", "bm"}, "ba"}, // bilinear
      {"ii", {{4, 4}}, {"ii"}, ""},                                          // trace
      {"ii->i", {{4, 4}}, {"ii"}, "i"},                                      // diagonal
      {"i,j->ij", {{3}, {5}}, {"i", "j"}, "ij"},                             // outer
      {"ij->ji", {{3, 5}}, {"ij"}, "ji"},                                    // transpose
      {"ij->", {{3, 5}}, {"ij"}, ""},                                        // sum
      {"ba", {{3, 5}}, {"ba"}, "ab"},                                        // implicit: alphabetical
      {"Ab,bA->", {{3, 2}, {2, 3}}, {"Ab", "bA"}, ""},                       // upper case
      {"iij->j", {{3, 3, 2}}, {"iij"}, "j"},
      {"iji->ij", {{3, 2, 3}}, {"iji"}, "ij"},
      {"iii->i", {{3, 3, 3}}, {"iii"}, "i"},
      {"i,i->", {{5}, {5}}, {"i", "i"}, ""},                                 // dot
      {"i,i->i", {{5}, {1}}, {"i", "i"}, "i"},                               // size 1 broadcasts
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}, {"XYij", "Yjk"}, "XYik"}, // broadcast batch dims
      {"...ij,...jk", {{3, 3, 4}, {4, 2}}, {"Xij", "jk"}, "Xik"},
      {"i...->...", {{3, 2, 4}}, {"iXY"}, "XY"},
      {"...ij->ij", {{2, 3, 4, 5}}, {"XYij"}, "ij"},                          // ellipsis absent from the output: summed
      {"...i,...i->i", {{2, 3}, {4, 1, 3}}, {"Yi", "XYi"}, "i"},
      {"...ii->...i", {{2, 3, 3}}, {"Xii"}, "Xi"},
      {"...,...->...", {{2, 3}, {3}}, {"XY", "Y"}, "XY"},
      {"b...,b...->b", {{2, 3, 4}, {2, 3, 4}}, {"bXY", "bXY"}, "b"},
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, {"ij", "jk", "kl"}, "il"},  // three operands
      {"ab,bc,ca->", {{2, 3}, {3, 4}, {4, 2}}, {"ab", "bc", "ca"}, ""},
      {"ai,bi,ci,di->abcd", {{2, 3}, {2, 3}, {3, 3}, {1, 3}}, {"ai", "bi", "ci", "di"}, "abcd"},
      {"ij,kl->", {{2, 3}, {4, 5}}, {"ij", "kl"}, ""},
      {" i j , j k -> k i ", {{3, 4}, {4, 2}}, {"ij", "jk"}, "ki"},                 // spaces
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}, {"bhqd", "bhkd"}, "bhqk"}, // attention scores
  };
}

double gen(int64_t k) { return 0.25 * double((k * 7) % 11) - 1.0; }

} // namespace

TEST(Einsum, MatchesNaiveLoops) {
  for (const Case &c : cases())
    for (DType dt : {kFloat32, kFloat64, kInt64})
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        std::vector<Tensor> xs;
        for (const Shape &s : c.shapes) {
          const Layout li = (l == Layout::Transposed && s.size() < 2) || s.empty() ? Layout::Contiguous : l;
          xs.push_back(make_layout(s, dt, gen, li));
        }
        const std::string what = c.equation + " " + std::string(name(dt)) + " " + layout_name(l);
        Shape want_shape;
        const std::vector<double> want = naive_einsum(xs, c.dims, c.out, &want_shape);
        Tensor y = einsum(c.equation, xs);
        EXPECT_EQ(y.dtype(), dt) << what;
        EXPECT_EQ(y.sizes().vec(), want_shape) << what;
        expect_values(y, want, dt == kFloat32 ? 1e-5 : 1e-12, dt == kFloat32 ? 1e-5 : 1e-12, what);
      }
}

// torch's path argument (opt_einsum's format): every contraction order of the multi-operand
// cases gives the naive loop's values, and the order is the one asked for, as the traced
// bmm's show (their [batch, m, n] result shapes, in order).
namespace {
// Every path for n operands: at each step a pair i < j of the remaining positions.
void all_paths(int64_t n, std::vector<int64_t> &prefix, std::vector<std::vector<int64_t>> &out) {
  if (n == 1) {
    out.push_back(prefix);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) {
      prefix.insert(prefix.end(), {(i + j) % 2 ? j : i, (i + j) % 2 ? i : j}); // both orders of a pair
      all_paths(n - 1, prefix, out);
      prefix.resize(prefix.size() - 2);
    }
}

std::vector<Shape> bmm_shapes(const std::string &eq, const std::vector<Tensor> &xs,
                              const std::optional<std::vector<int64_t>> &path) {
  auto g = trace([&](const std::vector<Tensor> &in) { return std::vector<Tensor>{einsum(eq, in, path)}; }, xs);
  std::vector<Shape> out;
  for (const ir::Node *n : g->nodes())
    if (n->kind() == ir::Node::Kind::Op && n->op() == OpId::Bmm) out.push_back(n->result()->type().shape.vec());
  return out;
}
} // namespace

TEST(Einsum, PathOrdersTheContractions) {
  int checked = 0;
  for (const Case &c : cases()) {
    if (c.shapes.size() < 2) continue;
    std::vector<Tensor> xs;
    for (const Shape &s : c.shapes) xs.push_back(make_layout(s, kFloat64, gen, Layout::Contiguous));
    Shape want_shape;
    const std::vector<double> want = naive_einsum(xs, c.dims, c.out, &want_shape);
    std::vector<int64_t> prefix;
    std::vector<std::vector<int64_t>> paths;
    all_paths(int64_t(xs.size()), prefix, paths);
    for (const auto &path : paths) {
      const std::string what = c.equation + " path " + shape_str(path);
      Tensor y = einsum(c.equation, xs, path);
      EXPECT_EQ(y.sizes().vec(), want_shape) << what;
      expect_values(y, want, 1e-12, 1e-12, what);
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
  // ij,jk,kl with A [2, 3], B [3, 4], C [4, 5]: left to right multiplies A B ([1, 2, 4]) first,
  // then A B by C; the path (1, 2), (0, 1) multiplies B C ([1, 3, 5]) first, then A by it.
  std::vector<Tensor> abc = {make_layout({2, 3}, kFloat32, gen, Layout::Contiguous),
                             make_layout({3, 4}, kFloat32, gen, Layout::Contiguous),
                             make_layout({4, 5}, kFloat32, gen, Layout::Contiguous)};
  // A path appends each product, so (0, 1), (0, 1) multiplies C by A B: [1, 5, 2].
  EXPECT_EQ(bmm_shapes("ij,jk,kl->il", abc, std::nullopt), (std::vector<Shape>{{1, 2, 4}, {1, 2, 5}}));
  EXPECT_EQ(bmm_shapes("ij,jk,kl->il", abc, std::vector<int64_t>{0, 1, 0, 1}), (std::vector<Shape>{{1, 2, 4}, {1, 5, 2}}));
  EXPECT_EQ(bmm_shapes("ij,jk,kl->il", abc, std::vector<int64_t>{1, 2, 0, 1}), (std::vector<Shape>{{1, 3, 5}, {1, 2, 5}}));
  EXPECT_EQ(bmm_shapes("ij,jk,kl->il", abc, std::vector<int64_t>{2, 1, 1, 0}), (std::vector<Shape>{{1, 3, 5}, {1, 2, 5}}));
  // Bad paths.
  expect_error([&] { einsum("ij,jk,kl->il", abc, std::vector<int64_t>{0, 1}); },
               "einsum: path must hold 2 * (number of operands - 1) = 4 positions (a pair per contraction) for 3 "
               "operand(s), got 2");
  expect_error([&] { einsum("ij,jk,kl->il", abc, std::vector<int64_t>{1, 1, 0, 1}); },
               "einsum: invalid contraction (1, 1) at path step 0: cannot contract an operand with itself");
  expect_error([&] { einsum("ij,jk,kl->il", abc, std::vector<int64_t>{0, 1, 0, 2}); },
               "einsum: invalid contraction (0, 2) at path step 1: operand position is out of bounds for 2 remaining "
               "operands");
  expect_error([&] { einsum("ij,jk,kl->il", abc, std::vector<int64_t>{-1, 1, 0, 1}); }, "einsum: invalid contraction (-1, 1)");
  expect_error([&] { einsum("ij->ji", {abc[0]}, std::vector<int64_t>{0, 1}); }, "einsum: path must hold");
  Tensor t = einsum("ij->ji", {abc[0]}, std::vector<int64_t>{}); // one operand: the empty path
  EXPECT_EQ(t.sizes().vec(), (Shape{3, 2}));
}

TEST(Einsum, EmptyDims) {
  // A contracted dim of size 0 sums nothing (zeros); an output dim of size 0 gives no elements.
  Tensor z = einsum("ij,jk->ik", {zeros({3, 0}), zeros({0, 2})});
  EXPECT_EQ(z.sizes().vec(), (Shape{3, 2}));
  expect_values(z, std::vector<double>(6, 0.0), 0, 0, "contracted dim 0");
  Tensor e = einsum("ij,jk->ik", {zeros({0, 4}), ones({4, 2})});
  EXPECT_EQ(e.sizes().vec(), (Shape{0, 2}));
  Tensor t = einsum("ii", {zeros({0, 0})});
  EXPECT_EQ(t.dim(), 0);
  expect_values(t, {0.0}, 0, 0, "trace of 0x0");
  Tensor b = einsum("...ij,...jk->...ik", {zeros({0, 2, 3}), zeros({3, 4})});
  EXPECT_EQ(b.sizes().vec(), (Shape{0, 2, 4}));
  Tensor d = einsum("ii->i", {zeros({0, 0})});
  EXPECT_EQ(d.sizes().vec(), (Shape{0}));
}

TEST(Einsum, BadEquations) {
  Tensor a = zeros({2, 3}), b = zeros({3, 4});
  expect_error([&] { einsum("ij,jk->ik", {a}); }, "einsum: the equation \"ij,jk->ik\" has subscripts for 2 operand(s), but 1");
  expect_error([&] { einsum("ij->ik", {a}); }, "einsum: output subscript 'k' does not appear");
  expect_error([&] { einsum("ij->ii", {a}); }, "einsum: output subscript 'i' appears more than once");
  expect_error([&] { einsum("i1,jk", {a, b}); }, "einsum: invalid subscript '1' in the subscripts of operand 0");
  expect_error([&] { einsum("ij,jk->i$", {a, b}); }, "einsum: invalid subscript '$' in the output");
  expect_error([&] { einsum("ijk,jk", {a, b}); }, "einsum: the subscripts of operand 0 (3 subscript(s)) do not match its 2 dims");
  expect_error([&] { einsum("i,jk", {a, b}); }, "einsum: the subscripts of operand 0");
  expect_error([&] { einsum("ij,ik", {a, b}); }, "einsum: operand 1 has size 3 for subscript 'i', where another operand has size 2");
  expect_error([&] { einsum("ii", {a}); }, "einsum: subscript 'i' is repeated for operand 0 but the sizes don't match, 2 != 3");
  expect_error([&] { einsum("..i.", {a}); }, "einsum: found '.' in the subscripts of operand 0 that is not part of an ellipsis");
  expect_error([&] { einsum("...i...", {a}); }, "einsum: more than one ellipsis");
  expect_error([&] { einsum("...ij,...jk", {zeros({2, 2, 3}), zeros({3, 3, 4})}); },
               "einsum: operand 1 has size 3 for the ellipsis (...) dims, where another operand has size 2");
  expect_error([&] { einsum("ij,jk", {a, b.to(kFloat64)}); }, "einsum: operand 1 has dtype float64 but operand 0 has dtype float32");
  expect_error([&] { einsum("ij", {}); }, "einsum: must provide at least one operand");
  expect_error([&] { einsum("i,i", {zeros({2}, kBool), zeros({2}, kBool)}); },
               "einsum: operand 0 is a bool tensor (shape [2]); expected a numeric dtype");
  expect_error([&] { einsum("ij,jk", {a, Tensor()}); }, "einsum");
}

// Attention-like block and a bilinear form: traced without a graph break, compiled equal to eager.
TEST(Einsum, CompiledEqualsEager) {
  Tensor w = kiln::testing::rnd({4, 6, 5}, 41);
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor s = einsum("bqd,bkd->bqk", {in[0], in[1]}) * 0.5;
    Tensor o = einsum("bqk,bkd->bqd", {softmax(s, -1), in[1]});
    Tensor bil = einsum("bn,anm,bm->ba", {in[2], w, in[3]});
    Tensor tr = einsum("...ii->...", {einsum("bqd,bkd->bqk", {o, o})});
    return std::vector<Tensor>{o + 1.0, relu(bil), tr, einsum("ij->ji", {in[2]}).exp()};
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({2, 3, 8}, 42), kiln::testing::rnd({2, 3, 8}, 43),
                                  kiln::testing::rnd({7, 6}, 44), kiln::testing::rnd({7, 5}, 45)};
  kiln::testing::expect_compiled_equals_eager(fn, in, 1e-5);
  // The reference is a separate check: the bilinear form against the naive loop.
  Shape s;
  expect_values(fn(kiln::testing::copies(in))[1], [&] {
    std::vector<double> v = naive_einsum({in[2], w, in[3]}, {"bn", "anm", "bm"}, "ba", &s);
    for (double &e : v) e = std::max(e, 0.0);
    return v;
  }(), 1e-5, 1e-5, "bilinear");
}
