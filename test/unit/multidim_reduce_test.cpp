// Reductions over several dims, or over dims other than the last: kernels with
// a row rank R > 1 (KernelBuilder(shape, R)) against naive double loops and the
// interpreter, including empty and strided rows; then the whole path through
// fuse and codegen (batch-norm statistics, mean/sum over leading dims) against
// eager.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <kiln/kiln.h>

#include "codegen/interpret.h"
#include "codegen/jit.h"
#include "frontend/compile.h"
#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "ir/printer.h"
#include "runtime/error.h"

#include "jit_test_util.h"

using namespace kiln;
using namespace kiln::codegen;
using namespace kiln::test;

namespace {

// x laid out as an NCHW tensor at x[n*sn + c*sc + h*sh + w*sw] (strides may leave gaps).
struct Nchw {
  int64_t n, c, h, w;
  int64_t sn, sc, sh, sw;
  int64_t span() const { return n == 0 || c == 0 || h == 0 || w == 0 ? 1 : (n - 1) * sn + (c - 1) * sc + (h - 1) * sh + (w - 1) * sw + 1; }
  int64_t at(int64_t i, int64_t j, int64_t k, int64_t l) const { return i * sn + j * sc + k * sh + l * sw; }
};

Nchw contiguous(int64_t n, int64_t c, int64_t h, int64_t w) { return {n, c, h, w, c * h * w, h * w, w, 1}; }

// Batch-norm statistics and output in one kernel: iteration [C, N, H, W], a row
// per channel (R = 3). Outputs: y (contiguous NCHW), mean and biased var per channel.
KernelDesc batch_norm_desc(const Nchw &x, DType t, double eps) {
  KernelBuilder k({x.c, x.n, x.h, x.w}, 3);
  Expr in = k.input(t, {x.sc, x.sn, x.sh, x.sw});
  Expr w = k.input(t, {1, 0, 0, 0});
  Expr b = k.input(t, {1, 0, 0, 0});
  Expr mean = reduce_mean(in);
  Expr d = in - mean;
  Expr var = reduce_mean(d * d);
  k.output(d * rsqrt(var + eps) * w + b, {x.h * x.w, x.c * x.h * x.w, x.w, 1});
  k.output_per_row(mean);
  k.output_per_row(var);
  return k.build();
}

struct BnRef {
  std::vector<double> y, mean, var;
};

template <class T>
BnRef batch_norm_ref(const std::vector<T> &xs, const Nchw &x, const std::vector<T> &w, const std::vector<T> &b,
                     double eps) {
  BnRef r;
  r.y.assign(size_t(x.n * x.c * x.h * x.w), 0);
  double count = double(x.n * x.h * x.w);
  for (int64_t c = 0; c < x.c; ++c) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < x.n; ++i)
      for (int64_t h = 0; h < x.h; ++h)
        for (int64_t l = 0; l < x.w; ++l) s += double(xs[size_t(x.at(i, c, h, l))]);
    double m = s / count; // NaN for an empty channel, as torch
    for (int64_t i = 0; i < x.n; ++i)
      for (int64_t h = 0; h < x.h; ++h)
        for (int64_t l = 0; l < x.w; ++l) q += (double(xs[size_t(x.at(i, c, h, l))]) - m) * (double(xs[size_t(x.at(i, c, h, l))]) - m);
    double v = q / count;
    for (int64_t i = 0; i < x.n; ++i)
      for (int64_t h = 0; h < x.h; ++h)
        for (int64_t l = 0; l < x.w; ++l)
          r.y[size_t(((i * x.c + c) * x.h + h) * x.w + l)] =
              (double(xs[size_t(x.at(i, c, h, l))]) - m) / std::sqrt(v + eps) * double(w[size_t(c)]) + double(b[size_t(c)]);
    r.mean.push_back(m);
    r.var.push_back(v);
  }
  return r;
}

template <class T> double max_abs_diff(const std::vector<T> &got, const std::vector<double> &want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(double(got[i]))) continue;
    double d = std::abs(double(got[i]) - want[i]);
    if (!(d <= worst)) worst = d; // NaN sticks
  }
  return worst;
}

template <class T> void check_batch_norm(const Nchw &x, DType t, double tol, const char *what) {
  SCOPED_TRACE(what);
  auto xs = random_values<T>(size_t(x.span()), -2, 6, uint32_t(x.c * 7 + x.w));
  auto w = random_values<T>(size_t(x.c), 0.5, 1.5, 2), b = random_values<T>(size_t(x.c), -1, 1, 3);
  const double eps = 1e-5;
  KernelDesc desc = batch_norm_desc(x, t, eps);
  auto kernel = test_jit().compile(desc);
  std::vector<T> y(size_t(x.n * x.c * x.h * x.w), T(-77)), mean(size_t(x.c), T(-77)), var(size_t(x.c), T(-77));
  void *bufs[] = {xs.data(), w.data(), b.data(), y.data(), mean.data(), var.data()};
  kernel->run(bufs);
  BnRef ref = batch_norm_ref(xs, x, w, b, eps);
  EXPECT_LE(max_abs_diff(y, ref.y), tol);
  EXPECT_LE(max_abs_diff(mean, ref.mean), tol);
  EXPECT_LE(max_abs_diff(var, ref.var), tol * 10);
  // The interpreter follows the same semantics.
  std::vector<T> yi(y.size(), T(-77)), mi(mean.size(), T(-77)), vi(var.size(), T(-77));
  void *ibufs[] = {xs.data(), w.data(), b.data(), yi.data(), mi.data(), vi.data()};
  interpret(desc, ibufs);
  EXPECT_LE(max_abs_diff(yi, ref.y), tol);
  EXPECT_LE(max_abs_diff(mi, ref.mean), tol);
  EXPECT_LE(max_abs_diff(vi, ref.var), tol * 10);
}

} // namespace

TEST(MultiDimReduce, BatchNormStatisticsMatchNaiveLoops) {
  check_batch_norm<float>(contiguous(2, 3, 5, 7), DType::Float32, 2e-5, "f32 2x3x5x7");
  check_batch_norm<double>(contiguous(2, 3, 5, 7), DType::Float64, 1e-12, "f64 2x3x5x7");
  check_batch_norm<float>(contiguous(4, 16, 9, 33), DType::Float32, 5e-5, "f32 4x16x9x33");
  check_batch_norm<float>(contiguous(1, 5, 1, 1), DType::Float32, 1e-5, "one element per channel");
}

TEST(MultiDimReduce, StridedRowsThatDoNotCollapse) {
  // Rows of W padded to 8 and channels-last-ish strides: no two row dims merge.
  Nchw padded{3, 2, 4, 5, /*sn=*/2 * 4 * 8, /*sc=*/4 * 8, /*sh=*/8, /*sw=*/1};
  check_batch_norm<float>(padded, DType::Float32, 2e-5, "padded W");
  Nchw channels_last{3, 4, 5, 6, /*sn=*/5 * 6 * 4, /*sc=*/1, /*sh=*/6 * 4, /*sw=*/4};
  check_batch_norm<float>(channels_last, DType::Float32, 2e-5, "NHWC");
  check_batch_norm<double>(channels_last, DType::Float64, 1e-12, "NHWC f64");
}

TEST(MultiDimReduce, ColumnRowsRunInTilesOfNeighbouringRows) {
  // [N, C] batch norm: each channel's row runs down a column (stride C) while
  // neighbouring channels are neighbours in memory: codegen evaluates tiles of
  // channels side by side. 150 channels = two full tiles and a partial one.
  check_batch_norm<float>(contiguous(33, 150, 1, 1), DType::Float32, 2e-5, "[33, 150]");
  check_batch_norm<double>(contiguous(33, 150, 1, 1), DType::Float64, 1e-12, "[33, 150] f64");
  check_batch_norm<float>(contiguous(5, 3, 1, 1), DType::Float32, 2e-5, "[5, 3]: less than a tile");
  check_batch_norm<float>(contiguous(0, 70, 1, 1), DType::Float32, 0, "[0, 70]: empty columns");
  // Channels-last with more channels than a tile.
  Nchw nhwc{3, 80, 2, 5, /*sn=*/2 * 5 * 80, /*sc=*/1, /*sh=*/5 * 80, /*sw=*/80};
  check_batch_norm<float>(nhwc, DType::Float32, 2e-5, "NHWC 80 channels");
}

TEST(MultiDimReduce, EmptyReducedDimsGiveIdentitiesAndNaNMeans) {
  // N = 0: every channel's row is empty; mean and var are 0 * inf = NaN as torch's.
  Nchw empty = contiguous(0, 3, 4, 5);
  KernelDesc desc = batch_norm_desc(empty, DType::Float32, 1e-5);
  auto kernel = test_jit().compile(desc);
  std::vector<float> x(1), w(3, 1), b(3, 0), y(1), mean(3, -77), var(3, -77);
  void *bufs[] = {x.data(), w.data(), b.data(), y.data(), mean.data(), var.data()};
  kernel->run(bufs);
  for (int c = 0; c < 3; ++c) {
    EXPECT_TRUE(std::isnan(mean[size_t(c)])) << c;
    EXPECT_TRUE(std::isnan(var[size_t(c)])) << c;
  }
  // Sum, max and min of an empty multi-dim row: 0, -inf, +inf.
  KernelBuilder k({2, 0, 3}, 2);
  Expr v = k.input(DType::Float32);
  k.output_per_row(reduce_sum(v));
  k.output_per_row(reduce_max(v));
  k.output_per_row(reduce_min(v));
  std::vector<float> in(1), s(2, -77), mx(2, -77), mn(2, -77);
  void *b2[] = {in.data(), s.data(), mx.data(), mn.data()};
  test_jit().compile(k.build())->run(b2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[size_t(r)], 0.0f);
    EXPECT_FALSE(std::signbit(s[size_t(r)]));
    EXPECT_EQ(mx[size_t(r)], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(mn[size_t(r)], std::numeric_limits<float>::infinity());
  }
}

TEST(MultiDimReduce, SoftmaxOverTwoDimsKeepsScratchPerElement) {
  // exp() feeds two passes: the scratch row must hold every element of a row of
  // two dims (a scratch indexed by the last dim only would mix sub-rows). x's
  // rows are padded (W = 37 of 40) so that the two row dims cannot collapse.
  const int64_t B = 3, H = 5, W = 37, Wp = 40;
  KernelBuilder k({B, H, W}, 2);
  Expr x = k.input(DType::Float32, {H * Wp, Wp, 1});
  Expr e = exp(x - reduce_max(x));
  k.output(e / reduce_sum(e));
  auto xs = random_values<float>(size_t(B * H * Wp), -6, 6, 11);
  std::vector<float> y(size_t(B * H * W), -1);
  void *bufs[] = {xs.data(), y.data()};
  test_jit().compile(k.build())->run(bufs);
  std::vector<double> want(y.size());
  auto at = [&](int64_t r, int64_t h, int64_t w) { return double(xs[size_t(r * H * Wp + h * Wp + w)]); };
  for (int64_t r = 0; r < B; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) m = std::max(m, at(r, h, w));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) s += std::exp(at(r, h, w) - m);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) want[size_t((r * H + h) * W + w)] = std::exp(at(r, h, w) - m) / s;
  }
  EXPECT_LE(max_abs_diff(y, want), 1e-6);
}

TEST(MultiDimReduce, IntegerAndMaxCombinesAgreeWithTheInterpreter) {
  // [K, A, B] with a transposed row ([A, B] read as B-major): sum, max, min of int32, then an epilogue.
  const int64_t K = 4, A = 6, Bd = 9;
  KernelBuilder k({K, A, Bd}, 2);
  Expr x = k.input(DType::Int32, {1, K, K * A}); // buffer laid out [B][A][K]
  Expr s = reduce_sum(x), mx = reduce_max(x), mn = reduce_min(x);
  k.output(x * (mx - mn) + s, {A * Bd, Bd, 1});
  k.output_per_row(s);
  KernelDesc desc = k.build();
  std::vector<int32_t> xs(size_t(K * A * Bd));
  std::mt19937 g(5);
  for (auto &v : xs) v = int32_t(g() % 2001) - 1000;
  std::vector<int32_t> yj(xs.size(), 7), yi(xs.size(), 9), sj(size_t(K), 7), si(size_t(K), 9);
  void *bj[] = {xs.data(), yj.data(), sj.data()};
  void *bi[] = {xs.data(), yi.data(), si.data()};
  test_jit().compile(desc)->run(bj);
  interpret(desc, bi);
  EXPECT_EQ(yj, yi);
  EXPECT_EQ(sj, si);
  // And against a naive loop.
  for (int64_t c = 0; c < K; ++c) {
    int64_t sum = 0;
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < Bd; ++b) sum += xs[size_t(c + a * K + b * K * A)];
    EXPECT_EQ(sj[size_t(c)], int32_t(sum)) << c;
  }
}

TEST(MultiDimReduce, RowRankIsPartOfTheKeyAndValidated) {
  auto desc = [](int32_t r) {
    KernelBuilder k({4, 5, 6}, r);
    k.output_per_row(reduce_sum(k.input(DType::Float32)));
    return k.build();
  };
  KernelDesc one = desc(1), two = desc(2);
  EXPECT_NE(one.key(), two.key());
  EXPECT_NE(one.hash(), two.hash());
  // Row rank 1 keeps the key encoding of kernels built before row ranks existed.
  KernelDesc plain = one;
  plain.row_rank = 1;
  EXPECT_EQ(plain.key(), one.key());
  EXPECT_EQ(two.outputs[0].buffer.strides, (std::vector<int64_t>{1, 0, 0}));
  EXPECT_THROW(KernelBuilder({4, 5}, 3), Error);
  EXPECT_THROW(KernelBuilder({4, 5}, 0), Error);
  KernelDesc bad = two;
  bad.row_rank = 4;
  EXPECT_THROW(bad.validate(), Error);
}

// ---- through fuse and codegen

namespace {

double max_diff(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.sizes().vec(), b.sizes().vec());
  return amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

int count_groups(const ir::Graph &g) {
  int n = 0;
  for (const ir::Node *node : g.nodes()) n += node->kind() == ir::Node::Kind::FusionGroup;
  return n;
}

bool reduction_outside_groups(const ir::Graph &g) {
  for (const ir::Node *n : g.nodes())
    if (n->kind() == ir::Node::Kind::Op && n->info().kind == OpKind::Reduction) return true;
  return false;
}

// Compiles `fn`, checks one kernel with every reduction inside, and compiled == eager.
void expect_one_kernel(const ModelFn &fn, const std::vector<Tensor> &in, double tol) {
  CompiledFunction f = compile(fn);
  std::vector<Tensor> got = f(in), want = fn(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(max_diff(got[i], want[i]), tol) << "output " << i;
  auto g = f.graph_for(in);
  ASSERT_TRUE(g);
  EXPECT_EQ(count_groups(*g), 1);
  EXPECT_FALSE(reduction_outside_groups(*g));
  EXPECT_EQ(f.kernels_per_call(in), 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// Without running statistics (torch allows None in training mode): the
// statistics and the output are the whole graph. With them, see
// BatchNormTrainingUpdatesRunningStatistics.
ModelFn batch_norm_training(int64_t c) {
  Tensor w = rand({c}) + 0.5, b = randn({c});
  return [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{batch_norm(in[0], w, b, Tensor(), Tensor(), /*training=*/true, 0.1, 1e-5)};
  };
}

} // namespace

TEST(MultiDimReduceCompile, BatchNormTrainingIsOneKernel4D) {
  manual_seed(3);
  Tensor x = randn({8, 64, 56, 56}) * 2.0 + 1.0;
  expect_one_kernel(batch_norm_training(64), {x}, 2e-4);
}

// torch's training mode updates running_mean / running_var in place
// (momentum, unbiased variance). Compiled, the update is traced as ops with
// write-backs: the statistics stay one kernel over x (shared with the
// normalization by cse), plus tiny [C] update kernels. After two calls the
// running tensors equal eager's and a naive double-precision reference.
TEST(MultiDimReduceCompile, BatchNormTrainingUpdatesRunningStatistics) {
  manual_seed(6);
  const int64_t N = 4, C = 5, H = 3, W = 7, n = N * H * W;
  const double momentum = 0.25;
  Tensor w = rand({C}) + 0.5, b = randn({C});
  Tensor x = randn({N, C, H, W}) * 2.0 + 1.0;
  auto model = [&](Tensor rm, Tensor rv) -> ModelFn {
    return [=](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{batch_norm(in[0], w, b, rm, rv, /*training=*/true, momentum, 1e-5)};
    };
  };
  // Reference: per channel mean and unbiased variance in double, two updates.
  std::vector<double> ref_m(size_t(C), 0.0), ref_v(size_t(C), 1.0);
  Tensor xc = x.contiguous();
  const float *xp = xc.data_ptr<float>();
  auto at = [&](int64_t i, int64_t c, int64_t h, int64_t k) { return double(xp[((i * C + c) * H + h) * W + k]); };
  for (int call = 0; call < 2; ++call)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t k = 0; k < W; ++k) s += at(i, c, h, k);
      const double m = s / double(n);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t k = 0; k < W; ++k) q += std::pow(at(i, c, h, k) - m, 2);
      ref_m[size_t(c)] = (1 - momentum) * ref_m[size_t(c)] + momentum * m;
      ref_v[size_t(c)] = (1 - momentum) * ref_v[size_t(c)] + momentum * q / double(n - 1);
    }
  Tensor erm = zeros({C}), erv = ones({C}), crm = zeros({C}), crv = ones({C});
  ModelFn eager = model(erm, erv);
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(model(crm, crv), o);
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> got = f({x}), want = eager({x});
    EXPECT_LE(max_diff(got[0], want[0]), 1e-5);
  }
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(double(erm.data_ptr<float>()[c]), ref_m[size_t(c)], 1e-6) << "eager running_mean " << c;
    EXPECT_NEAR(double(erv.data_ptr<float>()[c]), ref_v[size_t(c)], 1e-5) << "eager running_var " << c;
    EXPECT_NEAR(double(crm.data_ptr<float>()[c]), ref_m[size_t(c)], 1e-5) << "compiled running_mean " << c;
    EXPECT_NEAR(double(crv.data_ptr<float>()[c]), ref_v[size_t(c)], 1e-4) << "compiled running_var " << c;
  }
  EXPECT_EQ(f.stats().eager_calls, 0);
  // The statistics over x are computed once: one group reads x.
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  int groups_reading_x = 0;
  for (const ir::Node *node : g->nodes()) {
    if (node->kind() != ir::Node::Kind::FusionGroup) continue;
    for (const ir::Value *v : node->operands()) groups_reading_x += v == g->inputs().at(0);
  }
  EXPECT_EQ(groups_reading_x, 1) << ir::print(*g);
  EXPECT_FALSE(reduction_outside_groups(*g));
  // Evaluation mode leaves them alone.
  Tensor before = crm.clone();
  batch_norm(x, w, b, crm, crv, /*training=*/false, momentum, 1e-5);
  EXPECT_EQ(max_diff(crm, before), 0.0);
}

TEST(MultiDimReduceCompile, BatchNormTrainingIsOneKernel2D) {
  manual_seed(4);
  expect_one_kernel(batch_norm_training(16), {randn({32, 16}) * 3.0}, 1e-5);
}

TEST(MultiDimReduceCompile, BatchNormTrainingOnAStridedInput) {
  manual_seed(5);
  Tensor x = randn({4, 6, 7, 8}).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); // channels-last
  expect_one_kernel(batch_norm_training(6), {x}, 1e-5);
}

TEST(MultiDimReduceCompile, BatchNormTrainingOverSeveralTiles) {
  manual_seed(8);
  expect_one_kernel(batch_norm_training(100), {randn({37, 100}) * 2.0 + 3.0}, 2e-5);
  expect_one_kernel(batch_norm_training(256), {randn({512, 256})}, 5e-5);
}

TEST(MultiDimReduceCompile, BatchNormWithAPrologueIsOneKernel) {
  manual_seed(10);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4, 8, 6, 10}, std::vector<int64_t>{50, 70}}) {
    ModelFn bn = batch_norm_training(shape[1]);
    ModelFn fn = [bn](const std::vector<Tensor> &in) { return bn({in[0] * 2.0 + 1.0}); };
    expect_one_kernel(fn, {randn(shape)}, 5e-5);
  }
}

TEST(MultiDimReduceCompile, BatchNormOverAGroupResultComputesInPlace) {
  // t = exp(x / 4) is a group's result; its full mean m runs eagerly, so t - m
  // cannot join t's group (a cycle) and heads the statistics group, which reads
  // t for the last time and stores its result (y * r, r random) in its last
  // pass: the memory plan puts that over t, and the kernel writes through one
  // pointer (sub-rows for NCHW, tiles for [N, C]). Eager full reductions of it
  // are the outputs (a random projection: any wrong element shows).
  manual_seed(10);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{16, 32, 24, 24}, std::vector<int64_t>{800, 384}}) {
    ModelFn bn = batch_norm_training(shape[1]);
    Tensor r = randn(shape);
    ModelFn fn = [bn, r](const std::vector<Tensor> &in) {
      Tensor t = exp(in[0] * 0.25);
      Tensor y = bn({t - mean(t)})[0] * r;
      return std::vector<Tensor>{sum(y), amax(y)};
    };
    std::vector<Tensor> in = {randn(shape)};
    CompiledFunction f = compile(fn);
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> got = f(in), want = fn(in);
      EXPECT_LE(max_diff(got[0], want[0]), 1e-2) << shape_str(shape);
      EXPECT_LE(max_diff(got[1], want[1]), 1e-4) << shape_str(shape);
    }
    EXPECT_EQ(f.kernels_per_call(in), 2) << shape_str(shape);
    auto g = f.graph_for(in);
    ASSERT_TRUE(g && g->memory_plan());
    std::vector<const ir::Node *> groups;
    for (const ir::Node *n : g->nodes())
      if (n->kind() == ir::Node::Kind::FusionGroup) groups.push_back(n);
    ASSERT_EQ(groups.size(), 2u) << ir::print(*g);
    const ir::BufferAssignment *a = g->memory_plan()->find(groups[0]->result()),
                               *b = g->memory_plan()->find(groups[1]->result());
    ASSERT_TRUE(a && b) << ir::print(*g);
    EXPECT_EQ(a->offset, b->offset) << "not in place:\n" << ir::print(*g);
  }
}

TEST(MultiDimReduceCompile, SoftmaxOverTheFirstDim) {
  manual_seed(9);
  Tensor x = randn({40, 70}) * 3.0;
  expect_one_kernel([](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(in[0], 0)}; }, {x}, 1e-6);
  expect_one_kernel([](const std::vector<Tensor> &in) { return std::vector<Tensor>{log_softmax(in[0], 0)}; }, {x},
                    1e-5);
}

TEST(MultiDimReduceCompile, MeanAndSumOverLeadingDims) {
  manual_seed(6);
  Tensor x = randn({5, 7, 9});
  expect_one_kernel([](const std::vector<Tensor> &in) { return std::vector<Tensor>{mean(exp(in[0]), {0})}; }, {x},
                    1e-5);
  expect_one_kernel(
      [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * sum(in[0], {1}, true)}; }, {x}, 1e-5);
  expect_one_kernel(
      [](const std::vector<Tensor> &in) { return std::vector<Tensor>{sum(in[0] * 2.0, {0, 2}, true) - 1.0}; }, {x},
      1e-5);
  // Reductions without keepdim reading the group's input directly (the input is
  // read at every element, not once per row).
  expect_one_kernel([](const std::vector<Tensor> &in) { return std::vector<Tensor>{mean(in[0], {0})}; }, {x}, 1e-5);
  expect_one_kernel([](const std::vector<Tensor> &in) { return std::vector<Tensor>{sum(in[0], {2}) * 3.0}; }, {x},
                    1e-5);
  expect_one_kernel([](const std::vector<Tensor> &in) { return std::vector<Tensor>{amax(in[0], {0, 2})}; }, {x}, 0);
  // An operand of a row node broadcasts against the kept dims ([7, 9] here), not the kernel's order.
  Tensor w = randn({9}), v = randn({7, 1});
  expect_one_kernel(
      [w, v](const std::vector<Tensor> &in) { return std::vector<Tensor>{mean(in[0], {0}) * 0.5 + w - v}; }, {x},
      1e-5);
}

TEST(MultiDimReduceCompile, DroppedRowValueThatBroadcastsElsewhereStaysCorrect) {
  // sum(x, {1}) of [6, 6] is indexed by dim 0, but x + it broadcasts it along
  // dim 1: the two cannot share a kernel's row, whatever fuse decides.
  manual_seed(7);
  Tensor x = randn({6, 6});
  // (Before reductions over any dims, fuse put this in one group and the kernel
  // computed e[i, j] + s[i]: a max difference of 13.)
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor e = exp(in[0]);
    return std::vector<Tensor>{e + sum(e, {1})};
  };
  CompiledFunction f = compile(fn);
  EXPECT_LE(max_diff(f({x})[0], fn({x})[0]), 1e-4);
  ModelFn fn0 = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + sum(in[0], {0})}; };
  CompiledFunction f0 = compile(fn0);
  EXPECT_LE(max_diff(f0({x})[0], fn0({x})[0]), 1e-5);
  EXPECT_EQ(f0.kernels_per_call({x}), 1); // here numpy's alignment is the row's
}
