// Row blocks (codegen/lower_row_block.cpp emit_row_block, codegen/row_schedule.h
// choose_row_block): short contiguous row reductions -- matrix-vector products
// such as W6's linear layers -- evaluated a block of rows at a time. Numerics
// against naive double loops (block rows, remainder rows, masked row tails,
// NaN), kernels that must keep the row-by-row path, the schedule's decision, and
// the assembly of W6's kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "codegen/kernel.h"
#include "codegen/row_schedule.h"
#include "runtime/ops.h"

#include "jit_test_util.h"

using namespace kiln::codegen;
using namespace kiln::test;
using kiln::DType;

namespace {

// A linear layer as kiln traces it: out[n] = relu(fold_k x[k] * W[n, k] + b[n])
// over an iteration space [rows, len]; x broadcast over rows, W rows with
// stride `w_row_stride` (len = contiguous) and element stride `w_col_stride`.
// Optionally a second per-row output: the raw fold, stored with outer stride
// `raw_stride`.
struct LayerSpec {
  int64_t rows = 64, len = 64;
  KOp combine = KOp::Add;
  DType dtype = DType::Float32;
  int64_t w_row_stride = -1, w_col_stride = 1; // -1: len
  bool relu = true;
  int64_t raw_stride = 0;                      // 0: no raw output
  int64_t grain = 0;
};

KernelDesc layer_desc(const LayerSpec &s) {
  int64_t wr = s.w_row_stride < 0 ? s.len : s.w_row_stride;
  KernelBuilder k({s.rows, s.len});
  Expr x = k.input(s.dtype, {0, 1});
  Expr w = k.input(s.dtype, {wr, s.w_col_stride});
  Expr b = k.input(s.dtype, {1, 0});
  Expr fold = k.reduce(s.combine, x * w);
  Expr y = fold + b;
  k.output_per_row(s.relu ? max(y, k.constant(0, s.dtype)) : y);
  if (s.raw_stride > 0) k.output_per_row(fold, {s.raw_stride});
  if (s.grain > 0) k.set_grain(s.grain);
  return k.build();
}

struct LayerRef {
  std::vector<double> out, raw, tol; // tol: per row, for the fold
};

template <class T>
LayerRef layer_ref(const LayerSpec &s, const std::vector<T> &x, const std::vector<T> &w, const std::vector<T> &b) {
  int64_t wr = s.w_row_stride < 0 ? s.len : s.w_row_stride;
  LayerRef ref;
  for (int64_t n = 0; n < s.rows; ++n) {
    double acc = s.combine == KOp::Add ? 0 : s.combine == KOp::Max ? -kInf : kInf, mag = 0;
    bool nan = false;
    for (int64_t k = 0; k < s.len; ++k) {
      // The kernel multiplies in T; only the fold's order is unspecified.
      double p = double(T(x[size_t(k)] * w[size_t(n * wr + k * s.w_col_stride)]));
      nan |= std::isnan(p);
      mag += std::abs(p);
      if (s.combine == KOp::Add) acc += p;
      else if (s.combine == KOp::Max) acc = std::max(acc, p);
      else acc = std::min(acc, p);
    }
    if (nan) acc = kNaN; // torch: max/min propagate NaN
    double y = acc + double(b[size_t(n)]);
    ref.raw.push_back(acc);
    ref.out.push_back(s.relu ? (std::isnan(y) ? y : std::max(y, 0.0)) : y);
    // float32 sums in any order: a few ulps of the sum of magnitudes.
    double eps = std::numeric_limits<T>::epsilon();
    ref.tol.push_back(s.combine == KOp::Add ? 4 * eps * mag + 1e-30 : 0);
  }
  return ref;
}

void expect_close(double got, double want, double tol, const std::string &what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
    return;
  }
  EXPECT_NEAR(got, want, tol) << what;
}

std::string describe(const LayerSpec &s) {
  std::ostringstream os;
  os << s.rows << "x" << s.len << " " << op_name(s.combine) << (s.dtype == DType::Float64 ? " f64" : " f32")
     << " w strides (" << s.w_row_stride << ", " << s.w_col_stride << ") raw stride " << s.raw_stride;
  return os.str();
}

// Compiles and runs the layer; compares out (and raw) with the double loop.
// `nan_row`: if >= 0, one weight of that row is NaN.
template <class T> void check_layer(const LayerSpec &s, int64_t nan_row = -1) {
  int64_t wr = s.w_row_stride < 0 ? s.len : s.w_row_stride;
  int64_t w_size = (s.rows - 1) * wr + (s.len - 1) * s.w_col_stride + 1;
  auto x = random_values<T>(size_t(s.len), -1, 1, uint32_t(s.len));
  auto w = random_values<T>(size_t(w_size), -1, 1, uint32_t(s.rows * 7 + s.len));
  auto b = random_values<T>(size_t(s.rows), -0.5, 0.5, 3);
  if (nan_row >= 0) w[size_t(nan_row * wr + (s.len / 2) * s.w_col_stride)] = T(kNaN);
  std::vector<T> out(size_t(s.rows), T(-777)), raw(size_t(s.rows * std::max<int64_t>(s.raw_stride, 1)), T(-777));
  std::vector<void *> bufs = {x.data(), w.data(), b.data(), out.data()};
  if (s.raw_stride > 0) bufs.push_back(raw.data());
  test_jit().compile(layer_desc(s))->run(bufs.data());
  LayerRef ref = layer_ref(s, x, w, b);
  for (int64_t n = 0; n < s.rows; ++n) {
    std::string what = describe(s) + " row " + std::to_string(n);
    expect_close(double(out[size_t(n)]), ref.out[size_t(n)], ref.tol[size_t(n)] + 1e-7, what + " out");
    if (s.raw_stride > 0)
      expect_close(double(raw[size_t(n * s.raw_stride)]), ref.raw[size_t(n)], ref.tol[size_t(n)] + 1e-7, what + " raw");
  }
  for (int64_t i = 0; s.raw_stride > 1 && i < s.rows * s.raw_stride; ++i) {
    if (i % s.raw_stride == 0) continue;
    ASSERT_EQ(raw[size_t(i)], T(-777)) << describe(s) << ": wrote between rows at " << i;
  }
}

// The decision for the kernel as lowered (its outer dims already one dim here).
int64_t block_of(const KernelDesc &desc, int64_t lanes = 16) {
  return choose_row_block(desc, schedule_rows(desc, 1 << 20), lanes);
}

} // namespace

// ---- numerics of the block path

TEST(RowBlock, SumMaxMinMatchDoubleOverRowCountsAndLengths) {
  // 1024: beyond kMaxBlockRowLength, the row path (same checks).
  for (KOp combine : {KOp::Add, KOp::Max, KOp::Min})
    for (int64_t len : {16, 64, 100, 256, 1024})
      for (int64_t rows : {1, 15, 16, 17, 64, 100}) {
        LayerSpec s;
        s.rows = rows, s.len = len, s.combine = combine;
        check_layer<float>(s);
      }
}

TEST(RowBlock, ShortRowsAndTailsOnly) {
  // Rows shorter than one vector (all tail) and lengths around the vector width.
  for (int64_t len : {1, 3, 15, 17, 31, 33})
    for (KOp combine : {KOp::Add, KOp::Max}) {
      LayerSpec s;
      s.rows = 40, s.len = len, s.combine = combine;
      check_layer<float>(s);
    }
}

TEST(RowBlock, SecondPerRowOutputContiguousAndStrided) {
  // raw stride 1: the stage runs as vectors across the block; stride 3: row by row.
  for (int64_t raw_stride : {1, 3})
    for (KOp combine : {KOp::Add, KOp::Min}) {
      LayerSpec s;
      s.rows = 50, s.len = 64, s.combine = combine, s.raw_stride = raw_stride;
      check_layer<float>(s);
    }
}

TEST(RowBlock, NaNPropagatesInItsRowOnly) {
  for (KOp combine : {KOp::Add, KOp::Max, KOp::Min})
    for (int64_t len : {64, 100}) {
      LayerSpec s;
      s.rows = 48, s.len = len, s.combine = combine, s.relu = false;
      check_layer<float>(s, 21);
    }
}

TEST(RowBlock, ChunksOfBlocksOnTwoThreads) {
  // A grain of one block: the parallel loop hands out blocks, the last one short.
  kiln::set_num_threads(2);
  for (int64_t rows : {64, 100, 257}) {
    LayerSpec s;
    s.rows = rows, s.len = 64, s.grain = 16 * 64;
    check_layer<float>(s);
  }
  kiln::set_num_threads(1);
}

TEST(RowBlock, TwoReductionsOfOneRow) {
  // sum and max of the same products: two accumulators per row.
  const int64_t rows = 37, len = 80;
  KernelBuilder k({rows, len});
  Expr x = k.input(DType::Float32, {0, 1});
  Expr w = k.input(DType::Float32);
  Expr p = x * w;
  k.output_per_row(reduce_sum(p) * 0.5);
  k.output_per_row(reduce_max(abs(p)));
  KernelDesc desc = k.build();
  EXPECT_EQ(block_of(desc), 16);
  auto xs = random_values<float>(size_t(len), -2, 2, 1);
  auto ws = random_values<float>(size_t(rows * len), -2, 2, 2);
  std::vector<float> s(static_cast<size_t>(rows)), m(static_cast<size_t>(rows));
  void *bufs[] = {xs.data(), ws.data(), s.data(), m.data()};
  test_jit().compile(desc)->run(bufs);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0, mag = 0, mx = -kInf;
    for (int64_t c = 0; c < len; ++c) {
      double v = double(xs[size_t(c)] * ws[size_t(r * len + c)]);
      sum += v, mag += std::abs(v), mx = std::max(mx, std::abs(v));
    }
    EXPECT_NEAR(s[size_t(r)], 0.5 * sum, 4e-7 * mag) << "row " << r;
    EXPECT_EQ(m[size_t(r)], float(mx)) << "row " << r;
  }
}

// ---- kernels that keep the row-by-row path, and still right

TEST(RowBlock, Float64KeepsRowPathAndMatches) {
  for (int64_t rows : {16, 33}) {
    LayerSpec s;
    s.rows = rows, s.len = 64, s.dtype = DType::Float64;
    EXPECT_EQ(block_of(layer_desc(s)), 0);
    check_layer<double>(s);
  }
}

TEST(RowBlock, NonContiguousRowsKeepRowPathAndMatch) {
  LayerSpec strided; // every other weight of a row
  strided.rows = 32, strided.len = 64, strided.w_row_stride = 128, strided.w_col_stride = 2;
  LayerSpec transposed; // W stored [len, rows]: rows run down columns (tiles)
  transposed.rows = 48, transposed.len = 64, transposed.w_row_stride = 1, transposed.w_col_stride = 48;
  for (const LayerSpec &s : {strided, transposed}) {
    EXPECT_EQ(block_of(layer_desc(s)), 0) << describe(s);
    check_layer<float>(s);
  }
}

TEST(RowBlock, PlanDecision) {
  LayerSpec s;
  EXPECT_EQ(block_of(layer_desc(s)), 16);
  EXPECT_EQ(block_of(layer_desc(s), 8), 8);
  s.rows = 15; // fewer rows than one block
  EXPECT_EQ(block_of(layer_desc(s)), 0);
  s.rows = 64, s.len = kMaxBlockRowLength;
  EXPECT_EQ(block_of(layer_desc(s)), 16);
  s.len = kMaxBlockRowLength + 1; // long rows
  EXPECT_EQ(block_of(layer_desc(s)), 0);
  s.len = 64, s.combine = KOp::Mul; // products: not a block combine
  EXPECT_EQ(block_of(layer_desc(s)), 0);
  {
    KernelBuilder k({64, 64}); // a second pass (softmax-like): not one pass
    Expr x = k.input(DType::Float32);
    k.output(x - reduce_max(x));
    EXPECT_EQ(block_of(k.build()), 0);
  }
  {
    KernelBuilder k({64, 64}); // exp inside the fold: not a lane op
    Expr x = k.input(DType::Float32);
    k.output_per_row(reduce_sum(exp(x)));
    EXPECT_EQ(block_of(k.build()), 0);
  }
  {
    KernelBuilder k({64, 64}); // an element-wise output besides the fold
    Expr x = k.input(DType::Float32);
    k.output_per_row(reduce_sum(x));
    k.output(x * 2.0);
    EXPECT_EQ(block_of(k.build()), 0);
  }
}

// ---- assembly

namespace {

// W6's layer kernel exactly as traced (KILN_DUMP=kernels): [1, 64, 64].
KernelDesc w6_layer_desc() {
  KernelBuilder k({1, 64, 64});
  Expr x = k.input(DType::Float32, {0, 0, 1});
  Expr w = k.input(DType::Float32, {0, 64, 1});
  Expr b = k.input(DType::Float32, {0, 1, 0});
  k.output(max(reduce_sum(x * w) + b, k.constant(0, DType::Float32)), {64, 1, 0});
  return k.build();
}

} // namespace

TEST(RowBlock, W6KernelIsAShuffleTreeWithoutScalarSums) {
  JitOptions opts;
  opts.capture_asm = true;
  Jit jit(opts);
  std::string block = jit.compile(w6_layer_desc())->assembly();
  ASSERT_FALSE(block.empty());
  bool avx512 = jit.cpu_features().find("+avx512f") != std::string::npos;
  bool avx = jit.cpu_features().find("+avx") != std::string::npos;
  if (avx512) {
    // 16 rows per zmm; the transposing tree's lane moves (LLVM picks among these).
    EXPECT_GT(count_lines(block, "vshuff64x2") + count_lines(block, "vpermt2ps") + count_lines(block, "vpermt2pd") +
                  count_lines(block, "vinsertf64x4"),
              8)
        << block;
    EXPECT_NE(block.find("%zmm"), std::string::npos) << block;
  }
  if (avx) {
    EXPECT_GT(count_lines(block, "vfmadd"), 0) << block; // fmuladd contracted
  }
  // 64 rows = whole blocks: no row is summed horizontally into a scalar, and
  // the relu epilogue is one vector per block.
  EXPECT_EQ(count_lines(block, "vaddss") + count_lines(block, "addss"), 0) << block;
  EXPECT_EQ(count_lines(block, "vmaxss") + count_lines(block, "maxss"), 0) << block;
  // The same layer with strided rows keeps the row path: scalar sums, so the
  // checks above can tell the paths apart.
  KernelBuilder k({1, 64, 64});
  Expr x = k.input(DType::Float32, {0, 0, 2});
  Expr w = k.input(DType::Float32, {0, 128, 2});
  Expr b = k.input(DType::Float32, {0, 1, 0});
  k.output(max(reduce_sum(x * w) + b, k.constant(0, DType::Float32)), {64, 1, 0});
  std::string rows = jit.compile(k.build())->assembly();
  EXPECT_GT(count_lines(rows, "vaddss") + count_lines(rows, "addss"), 0) << rows;
}
