// Row-wise reductions in the kernel builder (KernelBuilder::reduce): softmax and
// layer_norm rows against naive double references, NaN/integer semantics, per-row
// outputs, random kernels against the interpreter, the pass schedule, vector code.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <time.h>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/jit.h"
#include "codegen/row_schedule.h"
#include "expect_error.h"
#include "jit_test_util.h"
#include "runtime/error.h"
#include "runtime/ops.h"

using namespace kiln::codegen;
using namespace kiln::test;
using kiln::DType;

namespace {

// softmax over the last dim of a [rows, cols] iteration space; x has `x_strides`.
KernelDesc softmax_desc(int64_t rows, int64_t cols, DType t, std::vector<int64_t> x_strides = {}) {
  KernelBuilder k({rows, cols});
  Expr x = k.input(t, std::move(x_strides));
  Expr e = exp(x - reduce_max(x));
  k.output(e / reduce_sum(e));
  return k.build();
}

// torch's CPU softmax kernel multiplies by 1 / sum instead of dividing: one
// division per row instead of one per element (results differ by an ulp).
KernelDesc softmax_reciprocal_desc(int64_t rows, int64_t cols) {
  KernelBuilder k({rows, cols});
  Expr x = k.input(DType::Float32);
  Expr e = exp(x - reduce_max(x));
  k.output(e * (k.constant(1, DType::Float32) / reduce_sum(e)));
  return k.build();
}

// y = (x - mean) * rsqrt(var + eps) * w + b, w and b per column; optionally
// also the per-row mean and rstd (torch's saved statistics).
KernelDesc layer_norm_desc(int64_t rows, int64_t cols, DType t, bool stats = false) {
  KernelBuilder k({rows, cols});
  Expr x = k.input(t);
  Expr w = k.input(t, {0, 1});
  Expr b = k.input(t, {0, 1});
  Expr mean = reduce_mean(x);
  Expr d = x - mean;
  Expr rstd = rsqrt(reduce_mean(d * d) + 1e-5);
  k.output(d * rstd * w + b);
  if (stats) {
    k.output_per_row(mean);
    k.output_per_row(rstd);
  }
  return k.build();
}

// x is read at x[r * rs + c * cs].
template <class T>
std::vector<double> softmax_ref(const std::vector<T> &x, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  std::vector<double> y(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    double m = -kInf, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(x[r * rs + c * cs]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double(x[r * rs + c * cs]) - m);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(double(x[r * rs + c * cs]) - m) / s;
  }
  return y;
}

struct LnRef {
  std::vector<double> y, mean, rstd;
};

template <class T>
LnRef layer_norm_ref(const std::vector<T> &x, const std::vector<T> &w, const std::vector<T> &b, int64_t rows,
                     int64_t cols) {
  LnRef ref;
  ref.y.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
    m /= double(cols);
    for (int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    double rstd = 1 / std::sqrt(v / double(cols) + 1e-5);
    for (int64_t c = 0; c < cols; ++c) ref.y[r * cols + c] = (x[r * cols + c] - m) * rstd * w[c] + b[c];
    ref.mean.push_back(m);
    ref.rstd.push_back(rstd);
  }
  return ref;
}

template <class T> double max_abs_diff(const std::vector<T> &got, const std::vector<double> &want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double d = std::abs(double(got[i]) - want[i]);
    if (!(d <= worst)) worst = d; // NaN sticks
  }
  return worst;
}

template <class T> void check_softmax(int64_t rows, int64_t cols, DType t, double tol, bool transposed) {
  auto x = random_values<T>(size_t(rows * cols), -8, 8, uint32_t(cols));
  int64_t rs = transposed ? 1 : cols, cs = transposed ? rows : 1;
  auto kernel = test_jit().compile(softmax_desc(rows, cols, t, {rs, cs}));
  std::vector<T> y(size_t(rows * cols), T(kNaN));
  void *bufs[] = {x.data(), y.data()};
  kernel->run(bufs);
  double err = max_abs_diff(y, softmax_ref(x, rows, cols, rs, cs));
  EXPECT_LE(err, tol) << rows << "x" << cols << (transposed ? " transposed" : "");
}

template <class T> void check_layer_norm(int64_t rows, int64_t cols, DType t, double tol) {
  auto x = random_values<T>(size_t(rows * cols), -3, 5, uint32_t(cols) + 1);
  auto w = random_values<T>(size_t(cols), 0.5, 1.5, 2);
  auto b = random_values<T>(size_t(cols), -1, 1, 3);
  auto kernel = test_jit().compile(layer_norm_desc(rows, cols, t, true));
  std::vector<T> y(static_cast<size_t>(rows * cols), T(kNaN));
  std::vector<T> mean(static_cast<size_t>(rows), T(kNaN)), rstd(static_cast<size_t>(rows), T(kNaN));
  void *bufs[] = {x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data()};
  kernel->run(bufs);
  LnRef ref = layer_norm_ref(x, w, b, rows, cols);
  EXPECT_LE(max_abs_diff(y, ref.y), tol) << rows << "x" << cols;
  EXPECT_LE(max_abs_diff(mean, ref.mean), tol) << rows << "x" << cols;
  // rstd is large (up to 1/sqrt(eps) ~ 316 for a row of 1): compare relatively.
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_NEAR(rstd[r] / ref.rstd[r], 1.0, tol) << "row " << r << " of " << rows << "x" << cols;
}

// Runs `desc` compiled and interpreted on the same inputs; floats must agree
// within `tol` (absolute), everything else exactly.
void expect_matches_interpreter(const KernelDesc &desc, const std::vector<std::vector<uint8_t>> &inputs,
                                const std::vector<size_t> &output_bytes, double tol,
                                const std::string &what) {
  std::vector<std::vector<uint8_t>> jit_bufs = inputs, ref_bufs = inputs;
  for (size_t n : output_bytes) {
    jit_bufs.emplace_back(n, 0xcd);
    ref_bufs.emplace_back(n, 0xcd);
  }
  std::vector<void *> pj, pr;
  for (auto &b : jit_bufs) pj.push_back(b.data());
  for (auto &b : ref_bufs) pr.push_back(b.data());
  test_jit().compile(desc)->run(pj.data());
  interpret(desc, pr.data());
  for (size_t o = 0; o < desc.outputs.size(); ++o) {
    size_t buf = inputs.size() + o;
    DType t = desc.outputs[o].buffer.dtype;
    if (!kiln::is_floating(t)) {
      EXPECT_EQ(jit_bufs[buf], ref_bufs[buf]) << what << " output " << o << "\n" << desc.to_string();
      continue;
    }
    size_t size = kiln::itemsize(t), n = jit_bufs[buf].size() / size;
    for (size_t i = 0; i < n; ++i) {
      double x = 0, y = 0;
      if (t == DType::Float32) {
        float fx, fy;
        std::memcpy(&fx, &jit_bufs[buf][i * 4], 4);
        std::memcpy(&fy, &ref_bufs[buf][i * 4], 4);
        x = fx, y = fy;
      } else {
        std::memcpy(&x, &jit_bufs[buf][i * 8], 8);
        std::memcpy(&y, &ref_bufs[buf][i * 8], 8);
      }
      bool same = (std::isnan(x) && std::isnan(y)) || x == y || std::abs(x - y) <= tol;
      ASSERT_TRUE(same) << what << " output " << o << " element " << i << ": jit " << x << " vs interpreter "
                        << y << "\n" << desc.to_string();
    }
  }
}

} // namespace

// ---- softmax and layer_norm against double references

TEST(RowReduce, SoftmaxFloat32MatchesDouble) {
  for (int64_t cols : {1, 7, 1024, 4099}) check_softmax<float>(37, cols, DType::Float32, 1e-5, false);
}

TEST(RowReduce, SoftmaxTransposedInput) {
  for (int64_t cols : {1, 7, 1024, 4099}) check_softmax<float>(19, cols, DType::Float32, 1e-5, true);
}

TEST(RowReduce, SoftmaxFloat64MatchesDouble) {
  for (int64_t cols : {1, 7, 1024, 4099}) check_softmax<double>(13, cols, DType::Float64, 1e-13, false);
}

TEST(RowReduce, LayerNormFloat32MatchesDouble) {
  for (int64_t cols : {1, 7, 1024, 4099}) check_layer_norm<float>(37, cols, DType::Float32, 1e-5);
}

TEST(RowReduce, LayerNormFloat64MatchesDouble) {
  for (int64_t cols : {1, 7, 1024, 4099}) check_layer_norm<double>(13, cols, DType::Float64, 1e-12);
}

TEST(RowReduce, FullSizeWorkloadsAtOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    kiln::set_num_threads(threads);
    check_softmax<float>(4096, 1024, DType::Float32, 1e-5, false);
    check_layer_norm<float>(4096, 1024, DType::Float32, 1e-5);
  }
  kiln::set_num_threads(1);
}

// y = f(x) written over x: every pass reads the row before the last one
// stores it (and the store of element j follows the loads of element j).
TEST(RowReduce, InPlaceSoftmaxAndLayerNorm) {
  const int64_t rows = 33, cols = 1000;
  auto x = random_values<float>(rows * cols, -4, 4, 21);
  auto w = random_values<float>(cols, 0.5, 1.5, 22);
  auto b = random_values<float>(cols, -1, 1, 23);
  std::vector<float> y = x;
  void *sm_bufs[] = {y.data(), y.data()};
  test_jit().compile(softmax_desc(rows, cols, DType::Float32))->run(sm_bufs);
  EXPECT_LE(max_abs_diff(y, softmax_ref(x, rows, cols, cols, 1)), 1e-5);
  y = x;
  void *ln_bufs[] = {y.data(), w.data(), b.data(), y.data()};
  test_jit().compile(layer_norm_desc(rows, cols, DType::Float32))->run(ln_bufs);
  EXPECT_LE(max_abs_diff(y, layer_norm_ref(x, w, b, rows, cols).y), 1e-5);
}

// The same with the alias declared (KernelDesc::output_aliases_input): the
// kernel writes through x's pointer (its output slot is ignored) and its loops
// need no runtime overlap check.
TEST(RowReduce, AliasedSoftmaxAndLayerNormInPlace) {
  const int64_t rows = 33, cols = 1000;
  auto x = random_values<float>(rows * cols, -4, 4, 31);
  auto w = random_values<float>(cols, 0.5, 1.5, 32);
  auto b = random_values<float>(cols, -1, 1, 33);
  JitOptions opts;
  opts.capture_ir = true;
  Jit jit(opts);
  KernelDesc sm = softmax_desc(rows, cols, DType::Float32), ln = layer_norm_desc(rows, cols, DType::Float32);
  sm.output_aliases_input = {0};
  ln.output_aliases_input = {0};
  std::vector<float> y = x, untouched(8, -7.f);
  void *sm_bufs[] = {y.data(), untouched.data()};
  auto sm_kernel = jit.compile(sm);
  sm_kernel->run(sm_bufs);
  EXPECT_LE(max_abs_diff(y, softmax_ref(x, rows, cols, cols, 1)), 1e-5);
  y = x;
  void *ln_bufs[] = {y.data(), w.data(), b.data(), untouched.data()};
  auto ln_kernel = jit.compile(ln);
  ln_kernel->run(ln_bufs);
  EXPECT_LE(max_abs_diff(y, layer_norm_ref(x, w, b, rows, cols).y), 1e-5);
  EXPECT_EQ(untouched, std::vector<float>(8, -7.f));
  // softmax has no other buffer: no overlap check at all (layer_norm keeps the
  // one between y and w, b, which passes).
  for (const char *check : {"diff.check", "found.conflict", "vector.memcheck"}) // LLVM's overlap check
    EXPECT_EQ(sm_kernel->llvm_ir().find(check), std::string::npos) << check << " in " << sm_kernel->llvm_ir();
  for (const auto &k : {sm_kernel, ln_kernel})
    EXPECT_NE(k->llvm_ir().find("x float>"), std::string::npos) << "no vector IR";
}

// Two outputs stored in the same pass, the first over x: the second still
// reads x as it was (every value of element j is computed before any store).
TEST(RowReduce, InPlaceOutputBeforeAnotherOutputOfItsPass) {
  const int64_t rows = 5, cols = 300;
  KernelBuilder k({rows, cols});
  Expr x = k.input(DType::Float32);
  Expr s = reduce_sum(x);
  k.output(s + k.constant(0, DType::Float32)); // per-row value stored at every element, pass 1
  k.output(x * s);                              // pass 1, loads x after output 0's store
  k.alias_output(0, 0);
  auto xs = random_values<float>(rows * cols, -1, 1, 41);
  std::vector<float> y0 = xs, y1(rows * cols);
  void *bufs[] = {y0.data(), nullptr, y1.data()};
  test_jit().compile(k.build())->run(bufs);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += xs[r * cols + c];
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_NEAR(y0[r * cols + c], sum, 1e-4) << r << "," << c;
      ASSERT_NEAR(y1[r * cols + c], xs[r * cols + c] * sum, 1e-4) << r << "," << c;
    }
  }
}

// An output stored in a pass after which another pass reads the input again
// cannot overwrite it: validation refuses (the executor then runs eagerly).
TEST(RowReduce, InPlaceRefusedWhenALaterPassRereadsTheInput) {
  auto two_outputs = [](size_t aliased) {
    KernelBuilder k({4, 64});
    Expr x = k.input(DType::Float32);
    k.output(x * 2.0);            // stored in pass 0
    k.output(x / reduce_sum(x));  // pass 1 reads x again
    k.alias_output(aliased, 0);
    return k;
  };
  kiln::testing::expect_error([&] { two_outputs(0).build(); },
                              {"output 0 overwrites input 0 in pass 0", "output 1 reads that input again in pass 1"});
  EXPECT_NO_THROW(two_outputs(1).build());
  KernelBuilder stats({4, 64}); // a per-row output is stored before the row's passes end
  Expr x = stats.input(DType::Float32);
  stats.output(x - reduce_max(x));
  stats.output_per_row(reduce_sum(x));
  KernelDesc d = stats.build();
  d.output_aliases_input = {-1, 0};
  EXPECT_THROW(d.validate(), kiln::Error);
  KernelBuilder nested({4, 64}); // layer-norm-like: x - mean stored in pass 1, the variance pass reads x again
  Expr v = nested.input(DType::Float32);
  Expr dev = v - reduce_mean(v);
  nested.output(dev);
  nested.output(dev * rsqrt(reduce_mean(dev * dev) + 1e-5));
  nested.alias_output(0, 0);
  kiln::testing::expect_error([&] { nested.build(); }, {"output 0 overwrites input 0 in pass 1", "output 1 reads that input again in pass 2"});
}

// A row longer than the scratch budget recomputes exp instead of keeping it.
TEST(RowReduce, SoftmaxRowBeyondScratchBudget) {
  KernelDesc big = softmax_desc(2, 200000, DType::Float32);
  EXPECT_EQ(schedule_rows(big, 512 * 1024).scratch_bytes, 0);
  check_softmax<float>(2, 200000, DType::Float32, 1e-5, false);
}

// softmax over the last dim of a rank-3 and a rank-1 kernel (outer dims collapse,
// the row never does), with a broadcast per-row bias: x + bias[r].
TEST(RowReduce, RanksOneAndThreeWithPerRowBroadcast) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 5, 33}, std::vector<int64_t>{1000}}) {
    size_t rank = shape.size();
    KernelBuilder k(shape);
    Expr x = k.input(DType::Float32);
    std::vector<int64_t> bias_strides(rank, 0);
    int64_t rows = 1;
    for (size_t d = rank - 1; d-- > 0;) {
      bias_strides[d] = rows;
      rows *= shape[d];
    }
    Expr z = x + k.input(DType::Float32, bias_strides);
    Expr e = exp(z - reduce_max(z));
    k.output(e / reduce_sum(e));
    KernelDesc desc = k.build();
    int64_t cols = shape.back();
    auto xs = random_values<float>(size_t(rows * cols), -5, 5, 7);
    auto bias = random_values<float>(size_t(rows), -30, 30, 8);
    std::vector<float> shifted(xs);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) shifted[r * cols + c] += bias[r];
    auto out = run_jit(desc, {bytes_of(xs), bytes_of(bias), std::vector<uint8_t>(xs.size() * 4)});
    EXPECT_LE(max_abs_diff(values_of<float>(out[2]), softmax_ref(shifted, rows, cols, cols, 1)), 1e-5);
  }
}

// ---- semantics: NaN, signed zeros, integers, empty rows, per-row outputs

TEST(RowReduce, MaxMinPropagateNaNLikeTorchAmax) {
  const int64_t rows = 4, cols = 67;
  std::vector<float> x = random_values<float>(rows * cols, -1, 1, 11);
  x[0 * cols + 5] = float(kNaN);    // row 0: one NaN in the middle
  x[1 * cols + cols - 1] = float(kNaN); // row 1: NaN in the scalar tail
  x[2 * cols + 0] = float(kInf);    // row 2: +inf, no NaN
  for (int64_t c = 0; c < cols; ++c) x[3 * cols + c] = (c % 2) ? -0.f : 0.f; // row 3: signed zeros
  KernelBuilder k({rows, cols});
  Expr in = k.input(DType::Float32);
  k.output_per_row(reduce_max(in));
  k.output_per_row(reduce_min(in));
  k.output_per_row(reduce_sum(in));
  KernelDesc desc = k.build();
  std::vector<size_t> out_bytes(3, rows * 4);
  auto out = run_jit(desc, {bytes_of(x), std::vector<uint8_t>(rows * 4), std::vector<uint8_t>(rows * 4),
                            std::vector<uint8_t>(rows * 4)});
  auto mx = values_of<float>(out[1]), mn = values_of<float>(out[2]), sum = values_of<float>(out[3]);
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mn[0]) && std::isnan(sum[0]));
  EXPECT_TRUE(std::isnan(mx[1]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], float(kInf));
  EXPECT_EQ(mx[3], 0.f); // -0 or +0: the sign of a zero max/min is unspecified (codegen/kernel.h)
  EXPECT_EQ(mn[3], 0.f);
  EXPECT_FALSE(std::signbit(sum[3])); // a sum of zeros is +0
  expect_matches_interpreter(desc, {bytes_of(x)}, out_bytes, 0, "nan rows");
}

// The row path folds float max/min with a NaN-ignoring max plus a separate
// "saw a NaN" flag: a NaN anywhere in a row (vector body, interleaved copies,
// scalar tail, first or last element, a row of several dims) must still make
// that row's max and min NaN, and only that row's; infinities must not.
TEST(RowReduce, MaxMinNaNFlagAtEveryPosition) {
  for (std::vector<int64_t> row : {std::vector<int64_t>{1024}, {67}, {1000}, {3, 70}}) {
    int64_t cols = 1;
    for (int64_t d : row) cols *= d;
    const std::vector<int64_t> nan_at = {0, 1, 15, 16, 63, 64, cols / 2, cols - 2, cols - 1};
    const int64_t rows = int64_t(nan_at.size()) + 3; // + a clean row, a +-inf row, an all -inf row
    std::vector<float> x = random_values<float>(size_t(rows * cols), -100, 100, 23);
    for (size_t r = 0; r < nan_at.size(); ++r) x[r * cols + nan_at[r]] = float(kNaN);
    const int64_t inf_row = rows - 2, neg_row = rows - 1;
    x[inf_row * cols + 3] = float(kInf);
    x[inf_row * cols + cols - 1] = -float(kInf);
    for (int64_t c = 0; c < cols; ++c) x[neg_row * cols + c] = -float(kInf);
    std::vector<int64_t> shape = {rows};
    shape.insert(shape.end(), row.begin(), row.end());
    KernelBuilder k(shape, int(row.size()));
    Expr in = k.input(DType::Float32);
    k.output_per_row(reduce_max(in));
    k.output_per_row(reduce_min(in));
    k.output(in - reduce_max(in)); // a per-row value used element-wise, as softmax does
    auto out = run_jit(k.build(), {bytes_of(x), std::vector<uint8_t>(rows * 4), std::vector<uint8_t>(rows * 4),
                                   std::vector<uint8_t>(size_t(rows * cols * 4))});
    auto mx = values_of<float>(out[1]), mn = values_of<float>(out[2]), d = values_of<float>(out[3]);
    for (int64_t r = 0; r < rows; ++r) {
      double want_max = -kInf, want_min = kInf;
      bool nan = false;
      for (int64_t c = 0; c < cols; ++c) {
        double v = x[size_t(r * cols + c)];
        nan |= std::isnan(v);
        want_max = std::max(want_max, v);
        want_min = std::min(want_min, v);
      }
      std::string where = "row dims " + std::to_string(row.size()) + " x " + std::to_string(cols) + ", row " +
                          std::to_string(r);
      if (nan) {
        EXPECT_TRUE(std::isnan(mx[size_t(r)]) && std::isnan(mn[size_t(r)])) << where;
        EXPECT_TRUE(std::isnan(d[size_t(r * cols)])) << where;
        continue;
      }
      EXPECT_EQ(double(mx[size_t(r)]), want_max) << where;
      EXPECT_EQ(double(mn[size_t(r)]), want_min) << where;
      if (r == neg_row || r == inf_row) continue; // x - max is NaN / -inf there
      EXPECT_EQ(double(d[size_t(r * cols + 7)]), double(float(x[size_t(r * cols + 7)] - want_max))) << where;
    }
  }
}

TEST(RowReduce, Float64MaxWithNaN) {
  std::vector<double> x = {1, 2, kNaN, 4, 5, 6, 7, 8, 9, 10, -3, -4, -5, -6, -7, -8};
  KernelBuilder k({2, 8});
  Expr in = k.input(DType::Float64);
  k.output(in - reduce_max(in)); // row 0 all NaN, row 1 shifted by 10
  auto out = run_jit(k.build(), {bytes_of(x), std::vector<uint8_t>(16 * 8)});
  auto y = values_of<double>(out[1]);
  for (int c = 0; c < 8; ++c) {
    EXPECT_TRUE(std::isnan(y[c])) << c;
    EXPECT_EQ(y[8 + c], x[8 + c] - 10) << c;
  }
}

TEST(RowReduce, IntegerReductionsAreExactAndWrap) {
  for (DType t : {DType::Int32, DType::Int64}) {
    const int64_t rows = 5, cols = 301;
    KernelBuilder k({rows, cols});
    Expr x = k.input(t);
    k.output_per_row(reduce_sum(x));
    k.output_per_row(reduce_prod(x));
    k.output_per_row(reduce_max(x));
    k.output_per_row(reduce_min(x));
    k.output(x * reduce_max(x) - reduce_sum(x)); // element-wise use, wrapping
    KernelDesc desc = k.build();
    std::mt19937 g(5);
    size_t size = kiln::itemsize(t);
    std::vector<uint8_t> xs(rows * cols * size);
    for (int64_t i = 0; i < rows * cols; ++i) {
      int64_t v = int64_t(g() % 2000001) - 1000000;
      if (i % 97 == 0) v = t == DType::Int32 ? INT32_MIN : INT64_MIN;
      if (t == DType::Int32) {
        int32_t v32 = int32_t(v);
        std::memcpy(&xs[i * 4], &v32, 4);
      } else {
        std::memcpy(&xs[i * 8], &v, 8);
      }
    }
    std::vector<size_t> out_bytes(4, rows * size);
    out_bytes.push_back(rows * cols * size);
    expect_matches_interpreter(desc, {xs}, out_bytes, 0, std::string(kiln::name(t)));
  }
}

TEST(RowReduce, EmptyRowsGiveIdentities) {
  KernelBuilder k({3, 0});
  Expr x = k.input(DType::Float32);
  Expr i = k.input(DType::Int32);
  k.output_per_row(reduce_sum(x));
  k.output_per_row(reduce_max(x));
  k.output_per_row(reduce_min(i));
  k.output_per_row(reduce_prod(x));
  k.output_per_row(reduce_mean(x));
  KernelDesc desc = k.build();
  std::vector<std::vector<uint8_t>> bufs(2);
  for (int o = 0; o < 5; ++o) bufs.emplace_back(3 * 4, 0xcd);
  auto out = run_jit(desc, bufs);
  for (int r = 0; r < 3; ++r) {
    float sum = values_of<float>(out[2])[r];
    EXPECT_EQ(sum, 0.f);
    EXPECT_FALSE(std::signbit(sum));
    EXPECT_EQ(values_of<float>(out[3])[r], -float(kInf));
    EXPECT_EQ(values_of<int32_t>(out[4])[r], INT32_MAX);
    EXPECT_EQ(values_of<float>(out[5])[r], 1.f);
    EXPECT_TRUE(std::isnan(values_of<float>(out[6])[r]));
  }
  expect_matches_interpreter(desc, bufs, std::vector<size_t>(5, 12), 0, "empty rows");
}

// Row statistics stored through explicit strides: a [2, 3] iteration space of
// rows laid out transposed in the statistics buffer, and a row-varying output
// next to them.
TEST(RowReduce, PerRowOutputsWithStrides) {
  KernelBuilder k({2, 3, 10});
  Expr x = k.input(DType::Float32);
  k.output_per_row(reduce_sum(x), {1, 2}); // stats[c][r] for row (r, c)
  k.output(x - reduce_mean(x));
  k.output(reduce_max(x), {3, 1, 0});      // the same as output_per_row
  KernelDesc desc = k.build();
  auto xs = random_values<float>(60, -2, 2, 4);
  auto out = run_jit(desc, {bytes_of(xs), std::vector<uint8_t>(24), std::vector<uint8_t>(240),
                            std::vector<uint8_t>(24)});
  auto sums = values_of<float>(out[1]), centered = values_of<float>(out[2]), maxes = values_of<float>(out[3]);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      const float *row = &xs[(r * 3 + c) * 10];
      double s = 0, m = -kInf;
      for (int j = 0; j < 10; ++j) s += row[j], m = std::max(m, double(row[j]));
      EXPECT_NEAR(sums[c * 2 + r], s, 1e-5);
      EXPECT_EQ(maxes[r * 3 + c], float(m));
      for (int j = 0; j < 10; ++j) EXPECT_NEAR(centered[(r * 3 + c) * 10 + j], row[j] - s / 10, 1e-5);
    }
  EXPECT_THROW(k.output_per_row(x), kiln::Error);        // varies along the row
  EXPECT_THROW(k.output_per_row(reduce_sum(x), {1}), kiln::Error); // one stride per outer dim
}

TEST(RowReduce, BuilderRejectsBadReductions) {
  KernelBuilder scalar({});
  Expr s = scalar.input(DType::Float32);
  EXPECT_THROW(scalar.reduce(KOp::Add, s), kiln::Error); // rank 0: no row
  KernelBuilder k({4, 8});
  Expr x = k.input(DType::Float32);
  EXPECT_THROW(k.reduce(KOp::Sub, x), kiln::Error);
  EXPECT_THROW(k.reduce(KOp::Add, k.binary(KOp::Lt, x, x)), kiln::Error); // bool
  EXPECT_THROW(reduce_mean(k.cast(x, DType::Int32)), kiln::Error);
  k.output(x * reduce_sum(x));
  KernelDesc d = k.build();
  EXPECT_NE(d.to_string().find("Reduce.f32 Add"), std::string::npos);
  d.nodes.back().combine = KOp::Add; // a combine on a non-Reduce node
  EXPECT_THROW(d.validate(), kiln::Error);
  // Equal expressions with different combines are different kernels.
  KernelBuilder a({4, 8}), b({4, 8});
  a.output(reduce_max(a.input(DType::Float32)) + a.constant(0, DType::Float32));
  b.output(reduce_min(b.input(DType::Float32)) + b.constant(0, DType::Float32));
  EXPECT_NE(a.build().key(), b.build().key());
}

// ---- the pass schedule

TEST(RowReduce, PlanKeepsExpInScratchForSoftmax) {
  KernelDesc sm = softmax_desc(8, 1024, DType::Float32);
  RowSchedule p = schedule_rows(sm, 512 * 1024);
  EXPECT_EQ(p.passes, 3); // max, sum of exp, store
  EXPECT_EQ(p.scratch_bytes, 1024 * 4);
  int materialized = 0;
  for (size_t i = 0; i < sm.nodes.size(); ++i)
    if (p.materialized(int32_t(i))) {
      EXPECT_EQ(sm.nodes[i].op, KOp::Exp);
      EXPECT_EQ(p.scratch_pass[i], 1);
      ++materialized;
    }
  EXPECT_EQ(materialized, 1);

  KernelDesc ln = layer_norm_desc(8, 1024, DType::Float32, true);
  RowSchedule q = schedule_rows(ln, 512 * 1024);
  EXPECT_EQ(q.passes, 3); // mean, variance, store
  EXPECT_EQ(q.scratch_bytes, 0); // x - mean is cheap: recomputed
  EXPECT_EQ(q.output_pass, (std::vector<int>{2, -1, -1}));

  // tanh(exp(x)) feeding two passes: only the outer value is kept.
  KernelBuilder k({4, 64});
  Expr x = k.input(DType::Float32);
  Expr t = tanh(exp(x));
  k.output(t - reduce_sum(t));
  KernelDesc d = k.build();
  RowSchedule r = schedule_rows(d, 512 * 1024);
  EXPECT_EQ(r.scratch_bytes, 64 * 4);
  EXPECT_TRUE(r.materialized(t.id));
}

// ---- random kernels against the interpreter

namespace {

struct RandomCase {
  KernelDesc desc;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<size_t> output_bytes;
};

// Random float DAGs mixing element-wise ops and (nested) row reductions, on
// random shapes with broadcast / per-row / transposed operands. Values stay
// O(1) (squashing, means instead of sums) so float32 tolerances stay absolute.
RandomCase random_case(std::mt19937 &g, DType t) {
  size_t rank = 1 + g() % 3;
  std::vector<int64_t> shape(rank);
  for (size_t d = 0; d + 1 < rank; ++d) shape[d] = 1 + g() % 4;
  shape[rank - 1] = std::vector<int64_t>{1, 2, 7, 16, 33, 100, 257}[g() % 7];
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  KernelBuilder k(shape);
  RandomCase c;
  std::vector<Expr> pool;
  int inputs = 1 + g() % 3;
  for (int i = 0; i < inputs; ++i) {
    std::vector<int64_t> strides = contiguous_strides(shape);
    int kind = i == 0 ? int(g() % 2) : int(g() % 4);
    if (kind == 1 && rank >= 2) { // transposed: the row is the slow dim in memory
      std::vector<int64_t> perm(shape.rbegin(), shape.rend());
      std::vector<int64_t> rev = contiguous_strides(perm);
      for (size_t d = 0; d < rank; ++d) strides[d] = rev[rank - 1 - d];
    }
    if (kind == 2) strides.back() = 0;            // per-row operand
    if (kind == 3) std::fill(strides.begin(), strides.end() - 1, 0); // per-column operand
    int64_t span = 1;
    for (size_t d = 0; d < rank; ++d) span += (shape[d] - 1) * strides[d];
    pool.push_back(k.input(t, strides));
    uint32_t seed = g();
    c.inputs.push_back(t == DType::Float32 ? bytes_of(random_values<float>(size_t(span), -2, 2, seed))
                                           : bytes_of(random_values<double>(size_t(span), -2, 2, seed)));
  }
  auto pick = [&] { // prefer recent values so that DAGs get deep
    size_t n = pool.size();
    return g() % 3 ? pool[n - 1 - g() % std::min<size_t>(n, 3)] : pool[g() % n];
  };
  int steps = 4 + g() % 8;
  for (int s = 0; s < steps; ++s) {
    Expr a = pick(), b = pick();
    switch (g() % 10) {
    case 0: pool.push_back(a - reduce_max(a)); break;
    case 1: pool.push_back(a * reduce_mean(b)); break;
    case 2: { Expr e = exp(tanh(a)); pool.push_back(e / reduce_sum(e)); break; } // softmax-like
    case 3: pool.push_back(tanh(a - reduce_min(b))); break;
    case 4: { Expr d = a - reduce_mean(a); pool.push_back(d * rsqrt(reduce_mean(d * d) + 1e-3)); break; }
    case 5: pool.push_back(tanh(a + b)); break;
    case 6: pool.push_back(a * sigmoid(b)); break;
    case 7: pool.push_back(max(a, b * 0.5)); break;
    case 8: pool.push_back(tanh(reduce_mean(a) * b)); break;
    default: pool.push_back(erf(k.fma(a, b, pick()))); break;
    }
  }
  size_t item = kiln::itemsize(t);
  k.output(pool.back());
  c.output_bytes.push_back(size_t(numel) * item);
  if (g() % 2) {
    k.output_per_row(reduce_mean(pool[pool.size() / 2]));
    c.output_bytes.push_back(size_t(numel / shape.back()) * item);
  }
  if (g() % 3 == 0) {
    k.output(tanh(pool[pool.size() - 2]), std::vector<int64_t>(rank, 0)); // last write wins
    c.output_bytes.push_back(item);
  }
  c.desc = k.build();
  return c;
}

void run_random(DType t, int count, double tol) {
  for (int seed = 0; seed < count; ++seed) {
    std::mt19937 g(7000u + 100u * unsigned(t) + unsigned(seed));
    RandomCase c = random_case(g, t);
    expect_matches_interpreter(c.desc, c.inputs, c.output_bytes, tol, "seed " + std::to_string(seed));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

} // namespace

// Integer reductions are exact in any order: compiled and interpreted results
// must be bit-identical, wrap-around included.
TEST(RowReduce, RandomIntegerKernelsMatchInterpreterExactly) {
  for (int seed = 0; seed < 20; ++seed) {
    std::mt19937 g(9100u + unsigned(seed));
    DType t = seed % 2 ? DType::Int64 : DType::Int32;
    size_t item = kiln::itemsize(t);
    std::vector<int64_t> shape = {1 + int64_t(g() % 5), std::vector<int64_t>{1, 3, 16, 45, 300}[g() % 5]};
    KernelBuilder k(shape);
    std::vector<Expr> pool;
    std::vector<std::vector<uint8_t>> inputs;
    for (int i = 0; i < 2; ++i) {
      std::vector<int64_t> strides = i == 0 ? contiguous_strides(shape) : std::vector<int64_t>{0, 1};
      pool.push_back(k.input(t, strides));
      int64_t n = i == 0 ? shape[0] * shape[1] : shape[1];
      std::vector<uint8_t> bytes(size_t(n) * item);
      for (int64_t e = 0; e < n; ++e) {
        int64_t v = g() % 10 == 0 ? (t == DType::Int32 ? INT32_MIN : INT64_MIN) : int64_t(g() % 201) - 100;
        std::memcpy(&bytes[size_t(e) * item], &v, item); // little-endian: the low bytes for int32
      }
      inputs.push_back(std::move(bytes));
    }
    KOp combines[] = {KOp::Add, KOp::Mul, KOp::Max, KOp::Min};
    for (int step = 0; step < 6; ++step) {
      Expr a = pool[pool.size() - 1 - g() % 2], b = pool[g() % pool.size()];
      switch (g() % 4) {
      case 0: pool.push_back(a - k.reduce(combines[g() % 4], b)); break;
      case 1: pool.push_back(a * b + k.reduce(combines[g() % 4], a)); break;
      case 2: pool.push_back(max(a, k.reduce(KOp::Add, a * b))); break;
      default: pool.push_back(a / (k.reduce(KOp::Min, b) + k.constant(3, t))); break;
      }
    }
    k.output(pool.back());
    k.output_per_row(k.reduce(combines[g() % 4], pool[pool.size() / 2]));
    size_t rows = size_t(shape[0]), n = rows * size_t(shape[1]);
    expect_matches_interpreter(k.build(), inputs, {n * item, rows * item}, 0, "seed " + std::to_string(seed));
  }
}

TEST(RowReduce, RandomFloat32KernelsMatchInterpreter) { run_random(DType::Float32, 40, 2e-5); }
TEST(RowReduce, RandomFloat64KernelsMatchInterpreter) { run_random(DType::Float64, 20, 1e-11); }

// ---- vector code

TEST(RowReduce, SoftmaxAndLayerNormAssemblyIsPackedVectorCode) {
  JitOptions opts;
  opts.capture_asm = true;
  Jit jit(opts);
  std::string sm = jit.compile(softmax_desc(64, 1024, DType::Float32))->assembly();
  std::string ln = jit.compile(layer_norm_desc(64, 1024, DType::Float32))->assembly();
  ASSERT_FALSE(sm.empty());
  // The max pass, the exp+sum pass and the store pass are each vector loops.
  EXPECT_GT(count_lines(sm, "vmaxps", true), 0) << sm;
  EXPECT_GT(count_lines(sm, "vaddps", true), 0) << sm;
  EXPECT_GT(count_lines(sm, "vfmadd", true), 0) << sm; // the exp polynomial
  EXPECT_GT(count_lines(sm, "vdivps", true) + count_lines(sm, "vmulps", true), 0) << sm;
  EXPECT_GT(count_lines(ln, "vaddps", true), 0) << ln;
  EXPECT_GT(count_lines(ln, "vmulps", true) + count_lines(ln, "vfmadd", true), 0) << ln;
}

// ---- measurements (print only)

namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

struct Timing {
  double wall_ms = 1e30, cpu_ms = 1e30;
};

template <class F> Timing best_of(int reps, F &&f) {
  Timing t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_ms();
    f();
    double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    t.wall_ms = std::min(t.wall_ms, wall);
    t.cpu_ms = std::min(t.cpu_ms, cpu_ms() - c0);
  }
  return t;
}

} // namespace

TEST(RowReducePerf, SoftmaxAndLayerNorm4096x1024) {
  const int64_t rows = 4096, cols = 1024, n = rows * cols;
  const double bytes = 2.0 * double(n) * 4; // read x once, write y once
  auto x = random_values<float>(size_t(n), -4, 4, 1);
  auto w = random_values<float>(size_t(cols), 0.5, 1.5, 2);
  auto b = random_values<float>(size_t(cols), -1, 1, 3);
  std::vector<float> y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
  auto sm = test_jit().compile(softmax_desc(rows, cols, DType::Float32));
  auto smr = test_jit().compile(softmax_reciprocal_desc(rows, cols));
  auto ln = test_jit().compile(layer_norm_desc(rows, cols, DType::Float32));
  KernelBuilder copy_builder({rows, cols});
  copy_builder.output(copy_builder.input(DType::Float32) * 1.0);
  auto copy = test_jit().compile(copy_builder.build()); // the element-wise JIT's floor: y = x * 1
  std::printf("compile: softmax %.1f ms, layer_norm %.1f ms\n", sm->compile_ms(), ln->compile_ms());
  void *sm_bufs[] = {x.data(), y.data()};
  void *ln_bufs[] = {x.data(), w.data(), b.data(), y.data()};
  void *copy_bufs[] = {x.data(), y.data()};
  auto report = [&](const char *what, int threads, Timing t) {
    std::printf("%-11s %d thread(s): %7.1f ns/row  %6.1f GB/s  wall %.3f ms, process cpu %.3f ms\n", what,
                threads, t.wall_ms * 1e6 / double(rows), bytes / (t.wall_ms * 1e6), t.wall_ms, t.cpu_ms);
  };
  for (int threads : {1, 2}) {
    kiln::set_num_threads(threads);
    sm->run(sm_bufs);
    ln->run(ln_bufs);
    report("softmax", threads, best_of(20, [&] { sm->run(sm_bufs); }));
    report("softmax*1/s", threads, best_of(20, [&] { smr->run(sm_bufs); }));
    report("layer_norm", threads, best_of(20, [&] { ln->run(ln_bufs); }));
    report("jit x*1", threads, best_of(20, [&] { copy->run(copy_bufs); }));
    report("memcpy", 1, best_of(20, [&] { std::memcpy(z.data(), x.data(), size_t(n) * 4); }));
  }
  kiln::set_num_threads(1);
  // The same kernels on 64 rows that stay in L2: the compute cost per row.
  auto sm_small = test_jit().compile(softmax_desc(64, cols, DType::Float32));
  auto ln_small = test_jit().compile(layer_norm_desc(64, cols, DType::Float32));
  auto smr_small = test_jit().compile(softmax_reciprocal_desc(64, cols));
  Timing ts = best_of(200, [&] { sm_small->run(sm_bufs); });
  Timing tr = best_of(200, [&] { smr_small->run(sm_bufs); });
  Timing tl = best_of(200, [&] { ln_small->run(ln_bufs); });
  std::printf("in cache (64 rows, 1 thread): softmax %.1f ns/row, softmax*1/s %.1f ns/row, "
              "layer_norm %.1f ns/row\n",
              ts.wall_ms * 1e6 / 64, tr.wall_ms * 1e6 / 64, tl.wall_ms * 1e6 / 64);
}
