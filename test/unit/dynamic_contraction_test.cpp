// Contractions over a symbolic batch (issue 17): a matmul whose rows M are
// symbolic runs on kiln's GEMM with its fused epilogue, reading M per call, and
// a conv2d whose batch is symbolic reads its images per call
// (EpilogueStep::build_rows_per_call). One compile must serve every M, including
// each tail M % mr of the micro-kernels and more rows than one row tile, and
// every batch of images; every result must equal a naive loop.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include <kiln/kiln.h>

#include "codegen/epilogue.h"
#include "codegen/executable.h"
#include "codegen/gemm/conv.h"
#include "codegen/gemm/depthwise.h"
#include "codegen/gemm/path.h"
#include "ir/printer.h"

using namespace kiln;

namespace {

// Row-major [rows, k] @ [k, n] in double, B given by element.
template <class B> std::vector<double> naive_matmul(const std::vector<double> &a, int64_t rows, int64_t k, int64_t n, B b) {
  std::vector<double> c(size_t(rows * n), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[size_t(i * k + p)] * b(p, j);
      c[size_t(i * n + j)] = s;
    }
  return c;
}

std::vector<double> values(const Tensor &t) {
  Tensor c = t.contiguous().to(kFloat64);
  const double *p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

void expect_near(const Tensor &got, const std::vector<double> &want, const std::string &where) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << where;
  const std::vector<double> g = values(got);
  for (size_t i = 0; i < want.size(); ++i)
    // f32 sums of up to 384 products of O(1) terms: ~1e-4 apart from the exact
    // sums; a wrong row or tile is O(1) off.
    ASSERT_NEAR(g[i], want[i], 2e-3 + 1e-4 * std::abs(want[i])) << where << ", element " << i;
}

// NaN and inf where eager puts them, and the finite elements within `tol` of
// eager's (plus 1e-4 of their size).
void expect_same_non_finite(const Tensor &got, const Tensor &want, const std::string &where, double tol = 1e-3) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << where;
  EXPECT_TRUE(equal(isnan(got), isnan(want))) << where;
  EXPECT_TRUE(equal(isinf(got), isinf(want))) << where;
  Tensor finite = isfinite(want);
  const double err = amax(abs(kiln::where(finite, got - want, 0.0)) - abs(kiln::where(finite, want, 0.0)) * 1e-4)
                         .item<double>();
  EXPECT_LT(err, tol) << where;
}

// A linear layer with relu (x @ w1.t() + b1: B is a transposed parameter, the
// product is no result), a product with a residual, and a lone product:
// over rows [b, 20] (2-D) or [b, 3, 20] (3-D, the rows folding two dims).
struct Model {
  // N = 384 for the first product: its column tiles depend on M (enough tiles
  // per thread), and its C tile lives in the thread's scratch.
  static constexpr int64_t kHidden = 384;
  Tensor w1 = randn({kHidden, 20}), b1 = randn({kHidden}), w2 = randn({kHidden, 24}), w3 = randn({24, 8});
  std::vector<Tensor> operator()(const std::vector<Tensor> &in) const {
    Tensor h = relu(matmul(in[0], w1.t()) + b1);
    Tensor y = matmul(h, w2) + in[1];
    return {y, matmul(y, w3)};
  }
  // The same by naive loops over `rows` rows.
  std::vector<std::vector<double>> reference(const std::vector<Tensor> &in, int64_t rows) const {
    const std::vector<double> W1 = values(w1), B1 = values(b1), W2 = values(w2), W3 = values(w3);
    std::vector<double> h =
        naive_matmul(values(in[0]), rows, 20, kHidden, [&](int64_t p, int64_t j) { return W1[size_t(j * 20 + p)]; });
    for (size_t i = 0; i < h.size(); ++i) h[i] = std::max(0.0, h[i] + B1[i % size_t(kHidden)]);
    std::vector<double> y = naive_matmul(h, rows, kHidden, 24, [&](int64_t p, int64_t j) { return W2[size_t(p * 24 + j)]; });
    const std::vector<double> r = values(in[1]);
    for (size_t i = 0; i < y.size(); ++i) y[i] += r[i];
    std::vector<double> z = naive_matmul(y, rows, 24, 8, [&](int64_t p, int64_t j) { return W3[size_t(p * 8 + j)]; });
    return {y, z};
  }
};

bool on_kilns_gemm() { return codegen::gemm::path() == codegen::gemm::Path::Jit; }

// Compiles `m` with every input dim symbolic, calls it at each batch and
// checks every result against the naive loops; returns the function's stats.
CompileStats run_batches(const Model &m, std::initializer_list<int64_t> batches, bool three_d) {
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile([&m](const std::vector<Tensor> &in) { return m(in); }, o);
  for (int64_t b : batches) {
    std::vector<Tensor> in = three_d ? std::vector<Tensor>{randn({b, 3, 20}), randn({b, 3, 24})}
                                     : std::vector<Tensor>{randn({b, 20}), randn({b, 24})};
    const int64_t rows = three_d ? 3 * b : b;
    std::vector<Tensor> got = f(in);
    std::vector<std::vector<double>> want = m.reference(in, rows);
    const std::string where = "batch " + std::to_string(b);
    EXPECT_EQ(got.at(0).sizes().vec(), in[1].sizes().vec()) << where;
    expect_near(got.at(0), want[0], where + ", y");
    expect_near(got.at(1), want[1], where + ", z");
  }
  return f.stats();
}

} // namespace

// M = b: 1..17 reach every tail M % mr of the micro-kernels (mr <= 16), and
// 300 takes two row tiles (at most 256 rows each) with a tail.
TEST(DynamicContraction, OneCompileServesEveryRowCount) {
  manual_seed(3);
  Model m;
  const int64_t built = codegen::gemm_jit_steps_built(), in_registers = codegen::register_epilogues_built();
  CompileStats s = run_batches(m, {5, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 64, 300, 5}, false);
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.dynamic_specializations, 1);
  EXPECT_EQ(s.eager_calls, 0);
  if (!on_kilns_gemm()) GTEST_SKIP() << "KILN_GEMM=blas: the products run on BLAS";
  // The three products on kiln's GEMM, once, with the two epilogues in its registers.
  EXPECT_EQ(codegen::gemm_jit_steps_built() - built, 3);
  EXPECT_EQ(codegen::register_epilogues_built() - in_registers, 2);
  EXPECT_GE(s.packed_weight_bytes, int64_t(sizeof(float)) * (20 * Model::kHidden + Model::kHidden * 24 + 24 * 8));
}

// Rows folding a symbolic batch and a static dim: M = 3b.
TEST(DynamicContraction, RowsFoldingTwoDims) {
  manual_seed(4);
  Model m;
  CompileStats s = run_batches(m, {6, 1, 2, 3, 5, 7, 11, 13, 90}, true);
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
}

// An input that is a strided view (the step reads rows contiguously): made
// contiguous first, so the values still match.
TEST(DynamicContraction, StridedInputs) {
  manual_seed(5);
  Model m;
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile([&m](const std::vector<Tensor> &in) { return m(in); }, o);
  for (int64_t b : {4, 9, 2}) {
    std::vector<Tensor> in{randn({20, b}).t(), randn({24, b}).t()};
    std::vector<Tensor> got = f(in);
    std::vector<std::vector<double>> want = m.reference(in, b);
    expect_near(got.at(0), want[0], "batch " + std::to_string(b) + ", y");
    expect_near(got.at(1), want[1], "batch " + std::to_string(b) + ", z");
  }
}

namespace {

// x [n, c, h, w] (*) w [o, c / groups, kh, kw] (+ bias), stride s, padding p, by a naive loop.
std::vector<double> naive_conv(const Tensor &x, const Tensor &w, const Tensor &bias, int64_t s, int64_t p,
                               int64_t groups = 1) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3), o = w.size(0), kh = w.size(2),
                kw = w.size(3), ho = (h + 2 * p - kh) / s + 1, wo = (wd + 2 * p - kw) / s + 1, cg = c / groups;
  const std::vector<double> X = values(x), W = values(w), B = bias.defined() ? values(bias) : std::vector<double>(size_t(o), 0.0);
  std::vector<double> y(size_t(n * o * ho * wo), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double acc = B[size_t(oc)];
          const int64_t g = oc / (o / groups);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ki = 0; ki < kh; ++ki)
              for (int64_t kj = 0; kj < kw; ++kj) {
                const int64_t ii = i * s + ki - p, jj = j * s + kj - p;
                if (ii < 0 || ii >= h || jj < 0 || jj >= wd) continue;
                acc += X[size_t(((b * c + g * cg + ci) * h + ii) * wd + jj)] *
                       W[size_t(((oc * cg + ci) * kh + ki) * kw + kj)];
              }
          y[size_t(((b * o + oc) * ho + i) * wo + j)] = acc;
        }
  return y;
}

// A 3x3 conv with stride 1 and padding 1.
std::vector<double> naive_conv3x3(const Tensor &x, const Tensor &w, const Tensor &bias, int64_t groups) {
  return naive_conv(x, w, bias, 1, 1, groups);
}

// A conv with relu (its output no result), then a depthwise conv with a
// residual, over [b, 16, 10, 10].
struct ConvModel {
  Tensor w1 = randn({16, 16, 3, 3}) * 0.2, b1 = randn({16}), w2 = randn({16, 1, 3, 3}), b2 = randn({16});
  std::vector<Tensor> operator()(const std::vector<Tensor> &in) const {
    Tensor h = relu(conv2d(in[0], w1, b1, 1, 1));
    return {conv2d(h, w2, b2, 1, 1, 1, 16) + in[0]};
  }
  std::vector<double> reference(const Tensor &x) const {
    std::vector<double> h = naive_conv3x3(x, w1, b1, 1);
    for (double &v : h) v = std::max(0.0, v);
    Tensor ht = from_blob(h.data(), x.sizes(), TensorOptions(kFloat64)).clone();
    std::vector<double> y = naive_conv3x3(ht, w2, b2, 16);
    const std::vector<double> r = values(x);
    for (size_t i = 0; i < y.size(); ++i) y[i] += r[i];
    return y;
  }
};

} // namespace

// Every batch of images from one compile, on the conv kernels that read the batch per call.
TEST(DynamicContraction, ConvReadsItsImagesPerCall) {
  manual_seed(6);
  ConvModel m;
  CompileOptions o;
  o.dynamic = Dynamic::On;
  o.static_dims = {{0, 1}, {0, 2}, {0, 3}}; // the batch alone is symbolic
  CompiledFunction f = compile([&m](const std::vector<Tensor> &in) { return m(in); }, o);
  const int64_t convs = codegen::gemm::conv_calls();
  for (int64_t b : {3, 1, 2, 5, 8, 3}) {
    Tensor x = randn({b, 16, 10, 10});
    std::vector<Tensor> got = f({x});
    expect_near(got.at(0), m.reference(x), "batch " + std::to_string(b));
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
  if (!on_kilns_gemm()) GTEST_SKIP() << "KILN_GEMM=blas: the convs run on eager's kernels";
  EXPECT_EQ(codegen::gemm::conv_calls() - convs, 6); // the dense conv per call, on kiln's conv
  EXPECT_GE(s.packed_weight_bytes, int64_t(sizeof(float)) * 16 * 16 * 9);
}

// Threads calling one compiled function with batches (and image sizes) that
// change per call: the steps that read M or the images per call share their
// packed weights and kernels, and each call tiles for its own size (the TSan
// stage runs this).
TEST(DynamicContraction, ConcurrentCallersWithChangingBatches) {
  manual_seed(7);
  Model m;
  ConvModel cm;
  CompileOptions o;
  o.dynamic = Dynamic::On;
  o.static_dims = {{2, 1}}; // the channels; the images' height and width change too
  auto both = [&](const std::vector<Tensor> &in) {
    std::vector<Tensor> out = m({in[0], in[1]});
    out.push_back(cm({in[2]})[0]);
    return out;
  };
  CompiledFunction f = compile(both, o);
  std::vector<std::vector<Tensor>> inputs, want;
  for (int64_t b : {2, 3, 5, 7, 9, 12}) {
    inputs.push_back({randn({b, 20}), randn({b, 24}), randn({b, 16, 4 + b, 17 - b})});
    want.push_back(both(inputs.back()));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const size_t k = size_t(i * (t + 1) + t) % inputs.size();
        std::vector<Tensor> got = f(inputs[k]);
        for (size_t r = 0; r < got.size(); ++r)
          if (amax(abs(got[r] - want[k][r]) - abs(want[k][r]) * 1e-4).item<double>() > 2e-3) bad.fetch_add(1);
      }
    });
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().calls, 120);
}

namespace {

// A ResNet-style unit over [b, 32, h, w]: a 3x3 conv (Winograd-shaped at the
// traced size) with a per-channel affine, the residual and relu in its
// epilogue; and a lone unpadded 3x3 conv with a bias whose output is a result
// (its image is 2 smaller each way; strided convs: StridedConvsAndPools... below).
struct ImageModel {
  Tensor w1 = randn({32, 32, 3, 3}) * 0.1, scale = randn({32, 1, 1}), shift = randn({32, 1, 1});
  Tensor w2 = randn({8, 32, 3, 3}) * 0.1, b2 = randn({8});
  std::vector<Tensor> operator()(const std::vector<Tensor> &in) const {
    return {relu(conv2d(in[0], w1, {}, 1, 1) * scale + shift + in[0]), conv2d(in[0], w2, b2, 1, 0)};
  }
  std::vector<std::vector<double>> reference(const Tensor &x) const {
    std::vector<double> y = naive_conv(x, w1, {}, 1, 1);
    const std::vector<double> X = values(x), S = values(scale), T = values(shift);
    const int64_t pixels = x.size(2) * x.size(3);
    for (size_t i = 0; i < y.size(); ++i) {
      const size_t ch = size_t(int64_t(i) / pixels % 32);
      y[i] = std::max(0.0, y[i] * S[ch] + T[ch] + X[i]);
    }
    return {y, naive_conv(x, w2, b2, 1, 0)};
  }
};

} // namespace

// Images whose batch, height and width all change (dynamic = On, W7's case):
// one compile, both convs on kiln's conv with the call's image size, the
// epilogue in the micro-kernels' registers at the call's strides; every
// result equals the naive loops, and NaN and inf land where eager puts them.
TEST(DynamicContraction, ConvReadsItsImageSizePerCall) {
  manual_seed(8);
  ImageModel m;
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile([&m](const std::vector<Tensor> &in) { return m(in); }, o);
  const int64_t convs = codegen::gemm::conv_calls();
  // The traced size (h != w: duck sizing would merge equal ones; batch 1
  // would specialize), odd, small,
  // tall, wide, and larger than traced; unpadded outputs of one row or column.
  const int64_t sizes[][3] = {{2, 20, 24}, {3, 7, 9}, {3, 5, 3}, {4, 33, 17}, {2, 3, 40}, {5, 12, 11}, {2, 20, 24}};
  for (const auto &sz : sizes) {
    const std::string at = "[" + std::to_string(sz[0]) + ", 32, " + std::to_string(sz[1]) + ", " + std::to_string(sz[2]) + "]";
    Tensor x = randn({sz[0], 32, sz[1], sz[2]});
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u) << at;
    const std::vector<std::vector<double>> want = m.reference(x);
    expect_near(got[0], want[0], at + ", y");
    expect_near(got[1], want[1], at + ", z");
  }
  // NaN and inf in the input: the same non-finite elements as eager.
  Tensor x = randn({3, 32, 9, 14});
  float *p = x.data_ptr<float>();
  p[0] = NAN, p[x.numel() / 2] = INFINITY, p[x.numel() - 1] = -INFINITY;
  std::vector<Tensor> got = f({x}), want = m({x});
  for (size_t r = 0; r < 2; ++r) expect_same_non_finite(got[r], want[r], "result " + std::to_string(r));
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
  if (!on_kilns_gemm()) GTEST_SKIP() << "KILN_GEMM=blas: the convs run on eager's kernels";
  EXPECT_EQ(codegen::gemm::conv_calls() - convs, 2 * 8); // both convs of every call on kiln's conv
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 32, 9, 14})});
  ASSERT_TRUE(graph);
  int per_call = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(graph))
    per_call += line.find("conv-jit") == 0 && line.find("reads its batch and image size per call") != std::string::npos;
  EXPECT_EQ(per_call, 2);
}

namespace {

// A depthwise conv2d by naive loops in double: out[n, o, i, j] = bias[o] +
// the in-range taps of input channel o / (O / C).
std::vector<double> naive_depthwise(const Tensor &x, const Tensor &w, const Tensor &b, int64_t stride, int64_t pad,
                                    int64_t dil) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), k = w.size(2);
  const int64_t Ho = (H + 2 * pad - dil * (k - 1) - 1) / stride + 1, Wo = (W + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  const std::vector<double> X = values(x), Wt = values(w), B = values(b);
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = B[size_t(o)];
          const int64_t c = o / (O / C);
          for (int64_t kh = 0; kh < k; ++kh)
            for (int64_t kw = 0; kw < k; ++kw) {
              const int64_t h = i * stride - pad + kh * dil, v = j * stride - pad + kw * dil;
              if (h < 0 || h >= H || v < 0 || v >= W) continue;
              acc += X[size_t(((n * C + c) * H + h) * W + v)] * Wt[size_t((o * k + kh) * k + kw)];
            }
          out.push_back(acc);
        }
  return out;
}

} // namespace

// Depthwise convs over symbolic image sizes (dynamic = On): each runs on
// kiln's depthwise kernel with its image size and blocks read per call, the
// first with its epilogue (bias, the residual and relu) on each block through
// one kernel that reads the block's extents and strides.
// A 3x3 with padding and a strided, dilated 3x3 with channel multiplier 2, at
// widths below, across and above the kernel's vectors; against naive loops,
// then NaN and inf against eager.
TEST(DynamicContraction, DepthwiseConvReadsItsImageSizePerCall) {
  manual_seed(9);
  Tensor w = randn({16, 1, 3, 3}), b = randn({16}), w2 = randn({32, 1, 3, 3}), b2 = randn({32});
  auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    return {relu(conv2d(in[0], w, b, 1, 1, 1, 16) + in[0]), conv2d(in[0], w2, b2, 2, 2, 2, 16)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t before = codegen::gemm::depthwise_calls();
  const std::array<int64_t, 3> sizes[] = {{2, 6, 8}, {3, 11, 5}, {2, 6, 8}, {4, 2, 19}, {2, 9, 40}, {3, 33, 3}};
  for (const auto &sz : sizes) {
    Tensor x = randn({sz[0], 16, sz[1], sz[2]});
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u);
    const std::string at = "[" + std::to_string(sz[0]) + ", 16, " + std::to_string(sz[1]) + ", " + std::to_string(sz[2]) + "]";
    std::vector<double> want = naive_depthwise(x, w, b, 1, 1, 1);
    const std::vector<double> X = values(x);
    for (size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0, want[i] + X[i]);
    ASSERT_EQ(got[0].sizes().vec(), x.sizes().vec()) << at;
    expect_near(got[0], want, at + ", 3x3");
    expect_near(got[1], naive_depthwise(x, w2, b2, 2, 2, 2), at + ", strided and dilated");
  }
  // Padded input rows over the depthwise kernel's 128K elements (3 x 44002,
  // 5 x 44004): the steps run eager's conv kernel (then the epilogue over each image), and
  // the depthwise kernel is not called (the count below).
  {
    Tensor x = randn({2, 16, 1, 44000});
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u);
    std::vector<double> want = naive_depthwise(x, w, b, 1, 1, 1);
    const std::vector<double> X = values(x);
    for (size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0, want[i] + X[i]);
    expect_near(got[0], want, "a 44000-wide row, 3x3");
    expect_near(got[1], naive_depthwise(x, w2, b2, 2, 2, 2), "a 44000-wide row, strided and dilated");
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  // NaN and inf in the input: the same non-finite elements as eager.
  Tensor x = randn({2, 16, 7, 21});
  float *p = x.data_ptr<float>();
  p[3] = NAN, p[x.numel() / 2] = INFINITY, p[x.numel() - 5] = -INFINITY;
  std::vector<Tensor> got = f({x}), want = fn({x});
  for (size_t r = 0; r < 2; ++r) expect_same_non_finite(got[r], want[r], "result " + std::to_string(r));
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 16, 9, 14})});
  ASSERT_TRUE(graph);
  int per_call = 0, with_epilogue = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(graph)) {
    const bool reads = line.find("conv-jit") == 0 && line.find("reads its batch and image size per call") != std::string::npos;
    per_call += reads;
    with_epilogue += reads && line.find("a contraction and its epilogue") != std::string::npos;
  }
  if (!on_kilns_gemm()) GTEST_SKIP() << "KILN_GEMM=blas: the convs run eager's kernel";
  EXPECT_EQ(per_call, 2);
  EXPECT_EQ(with_epilogue, 1);
  EXPECT_EQ(codegen::gemm::depthwise_calls() - before, 2 * int64_t(std::size(sizes)) + 2);
}

namespace {

// A downsampling ResNet unit over [b, 16, h, w]: a stride-2 3x3 conv with a
// per-channel affine and relu, a 3x3 conv whose epilogue adds the stride-2
// 1x1 projection of the input, relu, a 2x2 max pool, and the pool's mean over
// its width and over the whole image. Its sizes are floor divisions of h and w ((h + 1) // 2,
// (h + 1) // 4): the mean's row of (w + 1) // 4 stays 6 from w = 23 to 26, so
// a kernel that probed its sizes at w + 1 alone took it for a constant.
struct DownModel {
  Tensor w1 = randn({32, 16, 3, 3}) * 0.1, s1 = randn({32, 1, 1}), t1 = randn({32, 1, 1});
  Tensor w2 = randn({32, 32, 3, 3}) * 0.1, s2 = randn({32, 1, 1}), t2 = randn({32, 1, 1});
  Tensor wd = randn({32, 16, 1, 1}) * 0.2;
  std::vector<Tensor> operator()(const std::vector<Tensor> &in) const {
    Tensor y = relu(conv2d(in[0], w1, {}, 2, 1) * s1 + t1);
    Tensor z = relu(conv2d(y, w2, {}, 1, 1) * s2 + t2 + conv2d(in[0], wd, {}, 2, 0));
    Tensor p = max_pool2d(z, {2, 2});
    return {z, p, p.mean(3), p.mean({2, 3})};
  }
};

} // namespace

// Strided convs and pooling over symbolic image sizes (dynamic = On): their
// output sizes fit as floor divisions of the input's (ir::fit_symbolic_dims),
// so one compile serves odd and even heights and widths, and the convs read
// their image size per call. Against eager, NaN and inf included.
TEST(DynamicContraction, StridedConvsAndPoolsOverImagesOfEverySize) {
  manual_seed(10);
  DownModel m;
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile([&m](const std::vector<Tensor> &in) { return m(in); }, o);
  const int64_t sizes[][3] = {{2, 20, 24}, {3, 7, 9}, {2, 33, 16}, {4, 5, 6}, {2, 12, 41}, {2, 20, 24}};
  for (const auto &sz : sizes) {
    const std::string at = "[" + std::to_string(sz[0]) + ", 16, " + std::to_string(sz[1]) + ", " + std::to_string(sz[2]) + "]";
    Tensor x = randn({sz[0], 16, sz[1], sz[2]});
    float *p = x.data_ptr<float>();
    if (sz[0] == 2) p[7] = NAN, p[x.numel() - 3] = INFINITY;
    std::vector<Tensor> got = f({x}), want = m({x});
    ASSERT_EQ(got.size(), 4u) << at;
    for (size_t r = 0; r < 4; ++r) expect_same_non_finite(got[r], want[r], at + ", result " + std::to_string(r), 1e-4);
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 16, 9, 14})});
  ASSERT_TRUE(graph);
  EXPECT_NE(ir::print(*graph).find("floordiv(s1 + 1, 2)"), std::string::npos) << ir::print(*graph);
  if (!on_kilns_gemm()) return;
  int per_call = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(graph))
    per_call += line.find("reads its batch and image size per call") != std::string::npos;
  EXPECT_GE(per_call, 2); // the two 3x3 convs with their epilogues (the 1x1 projection may join one)
  int rows = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(graph))
    rows += line.find("reads its dim 0 and row length per call") != std::string::npos;
  EXPECT_EQ(rows, 2); // the means over the width and over the whole image
}

namespace {

// Single-head attention over [b, s, 24]: the scores q @ k^T and p @ v have
// the symbolic sequence as N and K and a symbolic batch B does not share.
struct Attention {
  static constexpr int64_t kD = 24;
  Tensor wq = randn({kD, kD}) * 0.3, wk = randn({kD, kD}) * 0.3, wv = randn({kD, kD}) * 0.3;
  std::vector<Tensor> operator()(const std::vector<Tensor> &in) const {
    Tensor x = in[0];
    Tensor q = matmul(x, wq), k = matmul(x, wk), v = matmul(x, wv);
    Tensor p = softmax(matmul(q, k.transpose(-2, -1)) * 0.2, -1);
    return {matmul(p, v) + x};
  }
  // The same by naive loops in double.
  std::vector<double> reference(const Tensor &x) const {
    const int64_t b = x.size(0), s = x.size(1), D = kD;
    const std::vector<double> X = values(x), Q = values(wq), K = values(wk), V = values(wv);
    auto proj = [&](const std::vector<double> &W) {
      return naive_matmul(X, b * s, D, D, [&](int64_t p, int64_t j) { return W[size_t(p * D + j)]; });
    };
    const std::vector<double> q = proj(Q), k = proj(K), v = proj(V);
    std::vector<double> out(size_t(b * s * D));
    for (int64_t n = 0; n < b; ++n)
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> e(static_cast<size_t>(s));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < s; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += q[size_t((n * s + i) * D + c)] * k[size_t((n * s + j) * D + c)];
          e[size_t(j)] = d * 0.2;
          mx = std::max(mx, e[size_t(j)]);
        }
        for (double &t : e) sum += (t = std::exp(t - mx));
        for (int64_t c = 0; c < D; ++c) {
          double o = 0;
          for (int64_t j = 0; j < s; ++j) o += e[size_t(j)] / sum * v[size_t((n * s + j) * D + c)];
          out[size_t((n * s + i) * D + c)] = o + X[size_t((n * s + i) * D + c)];
        }
      }
    return out;
  }
};

} // namespace

// Attention over a symbolic batch and sequence (dynamic = On): the two
// products between activations read their batches, M, N and K per call
// (codegen/product_step.h) instead of running eagerly. Sequences that cross
// the micro-tiles' rows and panels (1..2 panels of 32 or 48 columns, tails).
TEST(DynamicContraction, AttentionReadsItsSequenceLengthPerCall) {
  manual_seed(10);
  Attention m;
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile([&m](const std::vector<Tensor> &in) { return m(in); }, o);
  for (const auto &sz : {std::array<int64_t, 2>{3, 20}, {2, 7}, {5, 33}, {2, 64}, {4, 97}, {3, 20}, {2, 130}}) {
    Tensor x = randn({sz[0], sz[1], Attention::kD});
    Tensor got = f({x})[0];
    ASSERT_EQ(got.sizes().vec(), x.sizes().vec());
    expect_near(got, m.reference(x), "[" + std::to_string(sz[0]) + ", " + std::to_string(sz[1]) + "]");
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 21, Attention::kD})});
  ASSERT_TRUE(graph);
  int every_size = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(graph))
    every_size += line.find("reads its batches, M, N and K per call") != std::string::npos;
  EXPECT_EQ(every_size, on_kilns_gemm() ? 2 : 0);
}

// bmm over a symbolic batch with static M, N, K, a matmul whose B broadcasts
// over A's symbolic leading batch dim, and float64: each against a naive loop
// per batch; NaN and inf where eager has them.
TEST(DynamicContraction, BatchedProductsOverSymbolicBatches) {
  manual_seed(11);
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor w = randn({3, 8, 5}).to(dt);
    auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
      return {bmm(in[0], in[1]), matmul(in[2], w)};
    };
    CompileOptions o;
    o.dynamic = Dynamic::On;
    CompiledFunction f = compile(fn, o);
    for (int64_t b : {4, 2, 9, 3}) {
      Tensor x = randn({b, 6, 10}).to(dt), y = randn({b, 10, 7}).to(dt), z = randn({b, 3, 11, 8}).to(dt);
      std::vector<Tensor> got = f({x, y, z});
      ASSERT_EQ(got.size(), 2u);
      const std::string where = std::string(name(dt)) + ", batch " + std::to_string(b);
      std::vector<double> want0, want1;
      for (int64_t n = 0; n < b; ++n) {
        const std::vector<double> Y = values(y[n]);
        std::vector<double> c = naive_matmul(values(x[n]), 6, 10, 7, [&](int64_t p, int64_t j) { return Y[size_t(p * 7 + j)]; });
        want0.insert(want0.end(), c.begin(), c.end());
        for (int64_t h = 0; h < 3; ++h) {
          const std::vector<double> W = values(w[h]);
          std::vector<double> d =
              naive_matmul(values(z[n][h]), 11, 8, 5, [&](int64_t p, int64_t j) { return W[size_t(p * 5 + j)]; });
          want1.insert(want1.end(), d.begin(), d.end());
        }
      }
      ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{b, 6, 7})) << where;
      ASSERT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{b, 3, 11, 5})) << where;
      expect_near(got[0], want0, where + ", bmm");
      expect_near(got[1], want1, where + ", matmul");
    }
    // Non-finite values land where eager puts them.
    Tensor x = randn({5, 6, 10}).to(dt), y = randn({5, 10, 7}).to(dt), z = randn({5, 3, 11, 8}).to(dt);
    if (dt == kFloat32) x.data_ptr<float>()[13] = NAN, y.data_ptr<float>()[200] = INFINITY, z.data_ptr<float>()[0] = NAN;
    else x.data_ptr<double>()[13] = NAN, y.data_ptr<double>()[200] = INFINITY, z.data_ptr<double>()[0] = NAN;
    std::vector<Tensor> got = f({x, y, z}), want = fn({x, y, z});
    for (size_t r = 0; r < 2; ++r) {
      expect_same_non_finite(got[r], want[r], std::string(name(dt)) + ", result " + std::to_string(r));
      EXPECT_GT(isnan(got[r]).sum().item<double>(), 0) << name(dt) << ", result " << r;
    }
    EXPECT_EQ(f.stats().compiles, 1) << name(dt);
    EXPECT_EQ(f.stats().eager_calls, 0) << name(dt);
    std::shared_ptr<const ir::Graph> graph = f.graph_for({x, y, z});
    ASSERT_TRUE(graph);
    int every_size = 0;
    for (const std::string &line : codegen::describe_symbolic_executable(graph))
      every_size += line.find("reads its batches, M, N and K per call") != std::string::npos;
    EXPECT_EQ(every_size, on_kilns_gemm() ? 2 : 0) << name(dt);
  }
}
