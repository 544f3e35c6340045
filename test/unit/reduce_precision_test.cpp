// Compiled float reductions against naive double loops: long rows and long
// columns keep their digits (codegen/lower_common.h, "float sums"), var of a
// constant row is exactly 0, a reduction over the strided last dim of a
// permuted tensor runs in tiles without a copy, and batch norm's loop over
// sub-rows stays rolled (its compile time grew with the batch).
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "codegen/jit.h"
#include "codegen/kernel.h"
#include "frontend/compile.h"
#include "ir/graph.h"

#include "jit_test_util.h"

using namespace kiln;
using namespace kiln::codegen;
using namespace kiln::test;

namespace {

// No eager fallback: a kernel that fails to compile fails the test.
CompileOptions strict() {
  CompileOptions o;
  o.fallback = Fallback::Off;
  return o;
}

// Largest |got - want| / |want| over the rows (want from a double loop).
double max_rel_error(const std::vector<float> &got, const std::vector<double> &want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::abs(want[i]));
  return worst;
}

// Per row r of `rows` rows of `len` elements at x[r * rs + j * js]: the sum of
// x (or of x * x, done in double) in double.
std::vector<double> sums_ref(const std::vector<float> &x, int64_t rows, int64_t len, int64_t rs, int64_t js,
                             bool squares) {
  std::vector<double> out(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < len; ++j) {
      double v = x[size_t(r * rs + j * js)];
      out[size_t(r)] += squares ? v * v : v;
    }
  return out;
}

// sum(x) or sum(x * x) of each row of `rows` rows of `len` float32 elements at
// x[r * rs + j * js], compiled.
std::vector<float> compiled_sums(const std::vector<float> &x, int64_t rows, int64_t len, int64_t rs, int64_t js,
                                 bool squares) {
  KernelBuilder k({rows, len});
  Expr in = k.input(DType::Float32, {rs, js});
  k.output_per_row(reduce_sum(squares ? in * in : in));
  std::vector<float> out(size_t(rows), -1.f);
  auto bufs = run_jit(k.build(), {bytes_of(x), bytes_of(out)});
  return values_of<float>(bufs[1]);
}

// Rows of 2M elements: before, the vectorizer's 64 float32 partial sums (32K
// adds each) were 3e-4 off for uniform [0, 1) data, 1e-3 for a constant 0.1.
TEST(ReducePrecision, LongRowSumsMatchDouble) {
  const int64_t rows = 2, len = int64_t(1) << 21;
  std::vector<float> x = random_values<float>(size_t(rows * len), 0.0, 1.0, 11);
  std::fill(x.begin() + len, x.end(), 0.1f); // row 1: constant
  for (bool squares : {false, true}) {
    double err = max_rel_error(compiled_sums(x, rows, len, len, 1, squares), sums_ref(x, rows, len, len, 1, squares));
    // Float32 partial sums over blocks of 1024 elements, the blocks added in
    // double (sum(x) folds x - x[0]: the constant row is exact).
    EXPECT_LE(err, 1e-6) << (squares ? "sum(x * x)" : "sum(x)");
  }
}

// Columns (rows that run down memory: tiles) of 16384 elements: each column
// was one sequential float32 sum, 1.5e-4 off for a constant 0.1.
TEST(ReducePrecision, LongColumnSumsMatchDouble) {
  const int64_t n = 16384, cols = 64;
  std::vector<float> x = random_values<float>(size_t(n * cols), 0.0, 1.0, 12);
  for (int64_t i = 0; i < n; ++i) x[size_t(i * cols)] = 0.1f; // column 0: constant
  for (bool squares : {false, true}) {
    double err = max_rel_error(compiled_sums(x, cols, n, 1, cols, squares), sums_ref(x, cols, n, 1, cols, squares));
    // Double accumulation: the rounding of the result (and of each float32 x * x).
    EXPECT_LE(err, squares ? 2.5e-7 : 1.2e-7) << (squares ? "sum(x * x)" : "sum(x)");
  }
}

// Through compile(): sum and mean over long rows and columns against a double
// loop (eager sums in blocks folded into double too).
TEST(ReducePrecision, CompiledSumAndMeanOfLongRowsAndColumns) {
  manual_seed(13);
  ModelFn fn = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{sum(in[0], {0}), mean(in[0], {0}), sum(in[1], {-1}), mean(in[1], {-1})};
  };
  Tensor cols = full({16384, 64}, 0.1), rows = rand({2, int64_t(1) << 20});
  CompiledFunction f = compile(fn, strict());
  std::vector<Tensor> got = f({cols, rows});
  ASSERT_EQ(got.size(), 4u);
  const float *c = cols.data_ptr<float>(), *r = rows.data_ptr<float>();
  for (int64_t j = 0; j < 64; ++j) {
    double s = 0;
    for (int64_t i = 0; i < 16384; ++i) s += c[i * 64 + j];
    EXPECT_LE(std::abs(got[0].data_ptr<float>()[j] - s), 1.2e-7 * s) << "sum, column " << j;
    EXPECT_LE(std::abs(got[1].data_ptr<float>()[j] - s / 16384), 1.2e-7 * s / 16384) << "mean, column " << j;
  }
  const int64_t len = int64_t(1) << 20;
  for (int64_t i = 0; i < 2; ++i) {
    double s = 0;
    for (int64_t j = 0; j < len; ++j) s += r[i * len + j];
    EXPECT_LE(std::abs(got[2].data_ptr<float>()[i] - s), 1e-6 * s) << "sum, row " << i;
    EXPECT_LE(std::abs(got[3].data_ptr<float>()[i] - s / double(len)), 1e-6 * s / double(len)) << "mean, row " << i;
  }
}

// var of a constant row is 0 exactly (eager and torch): the mean must be the
// constant itself, or every (x - mean)^2 adds a square of its error (2.3e-13
// for a row of 4.7 before). Rows along the last dim and down columns, several
// constants and lengths; std and layer_norm alike (layer_norm then gives the
// bias exactly).
TEST(ReducePrecision, VarianceOfAConstantRowIsExactlyZero) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{var(in[0], {1}), kiln::std(in[0], {1}), var(in[0], {0}), var(in[1], {1})};
  };
  CompiledFunction f = compile(fn, strict());
  for (double c : {4.7, 0.1, -3.3, 1000.7, 1e-3}) {
    for (int64_t len : {3, 1000, 5000}) {
      Tensor x = full({8, len}, c), y = full({len, 8}, c).t();
      std::vector<Tensor> got = f({x, y});
      ASSERT_EQ(got.size(), 4u);
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_EQ(amax(abs(got[o].to(kFloat64))).item<double>(), 0.0) << "output " << o << ", c " << c << ", len " << len;
    }
  }
  Tensor w = rand({1000}) + 0.5, b = randn({1000});
  ModelFn ln = [w, b](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{layer_norm(in[0], {1000}, w, b, 1e-5)};
  };
  Tensor x = full({4, 1000}, 4.7);
  EXPECT_EQ(amax(abs(compile(ln, strict())({x})[0] - b.expand({4, 1000}))).item<double>(), 0.0);
}

// The shifted mean (x - x[row, 0]) with a first element that is inf, -inf,
// NaN, too large to shift by (3e38) or -0 in an all -0 row: mean and var
// equal eager's, NaN and inf included.
TEST(ReducePrecision, ShiftedMeanKeepsInfNaNAndSignedZero) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{mean(in[0], {1}), var(in[0], {1}), sum(in[0], {1})};
  };
  manual_seed(16);
  const int64_t len = 3000;
  Tensor x = randn({6, len});
  float *p = x.data_ptr<float>();
  const float firsts[] = {INFINITY, -INFINITY, NAN, 3e38f, 0.f};
  for (int r = 0; r < 5; ++r) p[r * len] = firsts[r];
  for (int64_t j = 0; j < len; ++j) p[4 * len + j] = -0.f; // row 4: all -0
  std::vector<Tensor> got = compile(fn, strict())({x}), want = fn({x});
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o)
    for (int64_t r = 0; r < 6; ++r) {
      double g = got[o].data_ptr<float>()[r], w = want[o].data_ptr<float>()[r];
      if (std::isnan(w) || std::isinf(w)) {
        EXPECT_EQ(std::isnan(g), std::isnan(w)) << "output " << o << ", row " << r << ": " << g << " vs " << w;
        if (std::isinf(w)) {
          EXPECT_EQ(g, w) << "output " << o << ", row " << r;
        }
        continue;
      }
      EXPECT_NEAR(g, w, 1e-5 * std::max(1.0, std::abs(w))) << "output " << o << ", row " << r;
      if (w == 0) {
        EXPECT_EQ(std::signbit(g), std::signbit(w)) << "output " << o << ", row " << r;
      }
    }
}

int count_ops(const ir::Graph &g, OpId op) {
  int n = 0;
  for (const ir::Node *node : g.nodes()) n += node->kind() == ir::Node::Kind::Op && node->op() == op;
  return n;
}

// x.permute(0, 2, 1).sum(-1): the reduced dim is strided, the kept dims are
// [B, C] with C contiguous. Read in place (no `contiguous` copy first, which
// cost 10x the kernel) and equal to a double loop.
TEST(ReducePrecision, SumOverPermutedLastDimReadsTheViewInPlace) {
  manual_seed(14);
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].permute({0, 2, 1}).sum({-1}, false)}; };
  const int64_t B = 64, L = 256, C = 128;
  Tensor x = randn({B, L, C});
  CompiledFunction f = compile(fn, strict());
  Tensor got = f({x})[0];
  ASSERT_EQ(got.sizes().vec(), (std::vector<int64_t>{B, C}));
  const float *p = x.data_ptr<float>();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, scale = 0;
      for (int64_t l = 0; l < L; ++l) {
        s += p[(b * L + l) * C + c];
        scale += std::abs(p[(b * L + l) * C + c]);
      }
      worst = std::max(worst, std::abs(got.data_ptr<float>()[b * C + c] - s) / scale);
    }
  EXPECT_LE(worst, 1e-7);
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  EXPECT_EQ(count_ops(*g, OpId::Contiguous), 0);
  EXPECT_EQ(f.kernels_per_call({x}), 1);
}

// Tiles over the innermost of several outer dims: rows of [3, 100] (100 is
// not a multiple of the 64-row tile), elements 100 apart, chunks of 5 rows
// (so chunks start and end inside tiles and across the first outer dim), a
// sum, a max and an element-wise output (softmax) against double loops.
TEST(ReducePrecision, TilesOverSeveralOuterDimsMatchDouble) {
  const int64_t B = 3, C = 100, L = 37;
  std::vector<float> x = random_values<float>(size_t(B * C * L), -3.0, 3.0, 15); // x[b][l][c]
  KernelBuilder k({B, C, L});
  Expr in = k.input(DType::Float32, {L * C, 1, C});
  Expr e = exp(in - k.reduce(KOp::Max, in));
  k.output(e / k.reduce(KOp::Add, e), {L * C, 1, C});
  k.output_per_row(k.reduce(KOp::Add, in), {C, 1});
  k.set_grain(5 * L);
  std::vector<float> y(x.size(), -1.f), s(size_t(B * C), -1.f);
  auto bufs = run_jit(k.build(), {bytes_of(x), bytes_of(y), bytes_of(s)});
  std::vector<float> gy = values_of<float>(bufs[1]), gs = values_of<float>(bufs[2]);
  double worst_y = 0, worst_s = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      auto at = [&](int64_t l) { return size_t((b * L + l) * C + c); };
      double m = -INFINITY, sum = 0, total = 0;
      for (int64_t l = 0; l < L; ++l) m = std::max(m, double(x[at(l)]));
      for (int64_t l = 0; l < L; ++l) total += std::exp(double(x[at(l)]) - m), sum += x[at(l)];
      for (int64_t l = 0; l < L; ++l)
        worst_y = std::max(worst_y, std::abs(gy[at(l)] - std::exp(double(x[at(l)]) - m) / total));
      worst_s = std::max(worst_s, std::abs(gs[size_t(b * C + c)] - sum));
    }
  EXPECT_LE(worst_y, 1e-6);
  EXPECT_LE(worst_s, 1e-5);
}

// Batch-norm statistics and output over [N, 64, 32, 32] in one kernel (rows
// of [N, H * W] per channel): LLVM fully unrolled the loop over the N
// sub-rows, one copy of the vectorized loop per image (16 at N = 16, 1.4 s
// to compile). Counted as vector loop bodies in the optimized IR.
TEST(ReducePrecision, BatchNormSubRowLoopStaysRolled) {
  const int64_t N = 16, C = 64, HW = 1024;
  KernelBuilder k({C, N, HW}, 2);
  Expr in = k.input(DType::Float32, {HW, C * HW, 1});
  Expr w = k.input(DType::Float32, {1, 0, 0});
  Expr b = k.input(DType::Float32, {1, 0, 0});
  Expr mean = reduce_mean(in);
  Expr d = in - mean;
  Expr var = reduce_mean(d * d);
  k.output(d * rsqrt(var + 1e-5) * w + b, {HW, C * HW, 1});
  JitOptions opts;
  opts.capture_ir = true;
  Jit jit(opts);
  std::string ir = jit.compile(k.build())->llvm_ir();
  std::istringstream lines(ir);
  int vector_bodies = 0;
  std::regex label("^vector\\.body[0-9.]*:");
  for (std::string line; std::getline(lines, line);) vector_bodies += std::regex_search(line, label);
  EXPECT_GE(vector_bodies, 1);
  EXPECT_LE(vector_bodies, 6) << "the loop over sub-rows was unrolled";
}

} // namespace
