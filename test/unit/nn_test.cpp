// softmax, log_softmax, layer_norm, batch_norm, dropout, scaled_dot_product_attention
// and conv2d against naive double-precision loops.
#include <limits>
#include <mutex>

#include "runtime/kernels/linalg_internal.h"
#include "runtime/autograd.h"
#include "runtime/philox.h"
#include "runtime/random_stream.h"
#include "unit/nn_test_util.h"

using namespace kiln;
using namespace nntest;

namespace {
class NnF : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Floats, NnF, ::testing::Values(kFloat32, kFloat64),
                         [](const auto &info) { return std::string(name(info.param)); });

double tol(DType dt) { return dt == kFloat32 ? 2e-6 : 1e-12; }

// ---------------------------------------------------------------- references

Want ref_softmax(const Tensor &x, int64_t dim, bool log) {
  const Shape shape = x.sizes().vec();
  Want r{shape, std::vector<double>(size_t(x.numel()))};
  if (shape.empty()) { // 0-dim: a single-element row
    r.v[0] = log ? 0.0 : 1.0;
    return r;
  }
  if (dim < 0) dim += int64_t(shape.size());
  const size_t d = size_t(dim);
  int64_t inner = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape j = unravel(i, shape);
    if (j[d] != 0) continue; // one pass per line along dim, from its first element
    double mx = -INFINITY, s = 0;
    for (j[d] = 0; j[d] < shape[d]; ++j[d]) mx = std::max(mx, at(x, j));
    for (j[d] = 0; j[d] < shape[d]; ++j[d]) s += std::exp(at(x, j) - mx);
    for (j[d] = 0; j[d] < shape[d]; ++j[d]) {
      const double y = log ? at(x, j) - mx - std::log(s) : std::exp(at(x, j) - mx) / s;
      r.v[size_t(i + j[d] * inner)] = y;
    }
  }
  return r;
}

Want ref_layer_norm(const Tensor &x, const Shape &ns, const Tensor &w, const Tensor &b, double eps) {
  const Shape shape = x.sizes().vec();
  const int64_t n = numel_of(ns), rows = x.numel() / std::max<int64_t>(n, 1);
  Want r{shape, std::vector<double>(size_t(x.numel()))};
  for (int64_t row = 0; row < rows; ++row) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += at(x, unravel(row * n + i, shape));
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += std::pow(at(x, unravel(row * n + i, shape)) - mean, 2);
    var /= double(n);
    for (int64_t i = 0; i < n; ++i) {
      double y = (at(x, unravel(row * n + i, shape)) - mean) / std::sqrt(var + eps);
      if (w.defined()) y *= at(w, unravel(i, ns));
      if (b.defined()) y += at(b, unravel(i, ns));
      r.v[size_t(row * n + i)] = y;
    }
  }
  return r;
}

Want ref_batch_norm(const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &rm, const Tensor &rv,
                    bool training, double eps) {
  const Shape shape = x.sizes().vec();
  const int64_t C = shape[1];
  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    if (!training) {
      mean[size_t(c)] = at(rm, {c});
      var[size_t(c)] = at(rv, {c});
      continue;
    }
    double s = 0, q = 0, cnt = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      Shape idx = unravel(i, shape);
      if (idx[1] != c) continue;
      s += at(x, idx);
      cnt += 1;
    }
    for (int64_t i = 0; i < x.numel(); ++i) {
      Shape idx = unravel(i, shape);
      if (idx[1] == c) q += std::pow(at(x, idx) - s / cnt, 2);
    }
    mean[size_t(c)] = s / cnt;
    var[size_t(c)] = q / cnt;
  }
  Want r{shape, {}};
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, shape);
    const int64_t c = idx[1];
    double y = (at(x, idx) - mean[size_t(c)]) / std::sqrt(var[size_t(c)] + eps);
    if (w.defined()) y *= at(w, {c});
    if (b.defined()) y += at(b, {c});
    r.v.push_back(y);
  }
  return r;
}

// Index of `t` (right-aligned, size-1 dims broadcast) for a full index `idx`.
Shape bcast_index(const Tensor &t, const Shape &idx) {
  Shape r;
  const size_t off = idx.size() - size_t(t.dim());
  for (size_t d = 0; d < size_t(t.dim()); ++d) r.push_back(t.size(int64_t(d)) == 1 ? 0 : idx[off + d]);
  return r;
}

// softmax(q k^T * scale + mask) v; fully masked rows give zeros.
Want ref_sdpa(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &mask, bool causal,
              std::optional<double> scale_opt, const Shape &batch) {
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  const double scale = scale_opt ? *scale_opt : 1.0 / std::sqrt(double(E));
  Want r{batch, {}};
  r.shape.push_back(L);
  r.shape.push_back(Ev);
  for (int64_t bi = 0; bi < numel_of(batch); ++bi) {
    const Shape bidx = unravel(bi, batch);
    auto idx = [&](const Tensor &t, int64_t i, int64_t j) {
      Shape full = bidx;
      full.push_back(i);
      full.push_back(j);
      return bcast_index(t, full);
    };
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      for (int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += at(q, idx(q, i, e)) * at(k, idx(k, j, e));
        d *= scale;
        if (mask.defined() && mask.dtype() == kBool && at(mask, idx(mask, i, j)) == 0) d = -INFINITY;
        if (mask.defined() && mask.dtype() != kBool) d += at(mask, idx(mask, i, j));
        if (causal && j > i) d = -INFINITY;
        s[size_t(j)] = d;
      }
      double mx = -INFINITY, sum = 0;
      for (double d : s) mx = std::max(mx, d);
      for (double &d : s) sum += (d = mx == -INFINITY ? 0 : std::exp(d - mx));
      for (int64_t c = 0; c < Ev; ++c) {
        double o = 0;
        for (int64_t j = 0; j < S; ++j) o += (sum > 0 ? s[size_t(j)] / sum : 0) * at(v, idx(v, j, c));
        r.v.push_back(o);
      }
    }
  }
  return r;
}

// The textbook 7-loop convolution.
Want ref_conv2d(const Tensor &x, const Tensor &w, const Tensor &b, Shape st, Shape pd, Shape dl, int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3), Og = O / groups;
  const int64_t Ho = (H + 2 * pd[0] - dl[0] * (kH - 1) - 1) / st[0] + 1;
  const int64_t Wo = (W + 2 * pd[1] - dl[1] * (kW - 1) - 1) / st[1] + 1;
  (void)C;
  Want r{{N, O, Ho, Wo}, {}};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = b.defined() ? at(b, {o}) : 0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < kH; ++kh)
              for (int64_t kw = 0; kw < kW; ++kw) {
                const int64_t ih = oh * st[0] - pd[0] + kh * dl[0], iw = ow * st[1] - pd[1] + kw * dl[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += at(x, {n, g * Cg + c, ih, iw}) * at(w, {o, c, kh, kw});
              }
          r.v.push_back(s);
        }
  return r;
}
} // namespace

// ---------------------------------------------------------------- softmax / log_softmax

TEST_P(NnF, SoftmaxEveryDim) {
  const DType dt = GetParam();
  Tensor x = rnd({3, 4, 5}, dt, 1);
  for (int64_t d : {0, 1, 2, -1, -3}) {
    expect_close(softmax(x, d), ref_softmax(x, d, false), tol(dt));
    expect_close(log_softmax(x, d), ref_softmax(x, d, true), tol(dt) * 4);
    expect_close(x.softmax(d), ref_softmax(x, d, false), tol(dt));
  }
}

TEST_P(NnF, SoftmaxLongRowsAndTails) {
  const DType dt = GetParam();
  // Row lengths around the vector width (tails) and a W2-like row on many rows (parallel path).
  for (const Shape &s : std::vector<Shape>{{3, 1}, {5, 15}, {4, 17}, {2, 33}, {300, 1024}, {40, 1000}}) {
    Tensor x = rnd(s, dt, 2);
    expect_close(softmax(x, -1), ref_softmax(x, -1, false), tol(dt));
    expect_close(log_softmax(x, -1), ref_softmax(x, -1, true), tol(dt) * 8);
  }
  // A non-last dim with a long inner extent (several 256-column blocks).
  Tensor y = rnd({3, 7, 600}, dt, 3);
  expect_close(softmax(y, 1), ref_softmax(y, 1, false), tol(dt));
  expect_close(log_softmax(y, 1), ref_softmax(y, 1, true), tol(dt) * 8);
  // A long reduced dim: narrower column blocks.
  Tensor z = rnd({2, 3000, 40}, dt, 4);
  expect_close(softmax(z, 1), ref_softmax(z, 1, false), tol(dt));
  expect_close(log_softmax(z, -2), ref_softmax(z, -2, true), tol(dt) * 8);
}

TEST_P(NnF, SoftmaxNonContiguous) {
  const DType dt = GetParam();
  Tensor x = rnd({5, 6}, dt, 4).t();
  expect_close(softmax(x, 1), ref_softmax(x, 1, false), tol(dt));
  expect_close(softmax(x, 0), ref_softmax(x, 0, false), tol(dt));
  Tensor s = rnd({4, 10}, dt, 5).slice(1, 1, 10, 3);
  expect_close(log_softmax(s, -1), ref_softmax(s, -1, true), tol(dt) * 4);
  Tensor e = rnd({1, 6}, dt, 6).expand({3, 6});
  expect_close(softmax(e, 1), ref_softmax(e, 1, false), tol(dt));
}

TEST_P(NnF, SoftmaxStability) {
  const DType dt = GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_values({4, 3}, {1000, 1001, 1002, -1000, -1001, -1002, 88, 89, -200, -inf, 0, 1}, dt);
  Want want = ref_softmax(x, 1, false), lwant = ref_softmax(x, 1, true);
  expect_close(softmax(x, 1), want, tol(dt));
  expect_close(log_softmax(x, 1), lwant, dt == kFloat32 ? 1e-4 : 1e-10);
  for (double v : values(softmax(x, 1))) EXPECT_TRUE(std::isfinite(v));
}

TEST(Nn, SoftmaxDtypeEmptyAndScalar) {
  Tensor x = rnd({2, 3}, kFloat32, 7);
  Tensor y = softmax(x, 1, kFloat64);
  EXPECT_EQ(y.dtype(), kFloat64);
  expect_close(y, ref_softmax(x, 1, false), 1e-12); // computed in double from the float values
  Tensor xi = rnd({2, 3}, kInt64, 8);
  Tensor yi = log_softmax(xi, 0, kFloat32);
  EXPECT_EQ(yi.dtype(), kFloat32);
  expect_close(yi, ref_softmax(xi, 0, true), 1e-6);
  expect_close(softmax(rnd({0, 4}), 1), Want{{0, 4}, {}}, 0);
  expect_close(softmax(rnd({3, 0}), 1), Want{{3, 0}, {}}, 0);
  expect_close(softmax(rnd({}), 0), Want{{}, {1.0}}, 0);
  expect_close(log_softmax(rnd({}), -1), Want{{}, {0.0}}, 0);
}

TEST(Nn, SoftmaxErrors) {
  EXPECT_KILN_ERROR(softmax(rnd({2, 3}), 2), "softmax: dim 2 is out of range for a tensor with 2 dimensions");
  EXPECT_KILN_ERROR(softmax(rnd({2, 3}, kInt64), 1), "softmax: expected self to be a floating-point tensor, got int64");
  EXPECT_KILN_ERROR(log_softmax(rnd({2, 3}), 0, kInt32), "log_softmax: dtype must be a floating-point type, got int32");
  EXPECT_KILN_ERROR(log_softmax(Tensor(), 0), "log_softmax: self is an undefined tensor");
}

// ---------------------------------------------------------------- layer_norm

TEST_P(NnF, LayerNorm) {
  const DType dt = GetParam();
  Tensor x = rnd({3, 4, 5}, dt, 1);
  Tensor w = rnd({5}, dt, 2), b = rnd({5}, dt, 3);
  const double t = dt == kFloat32 ? 1e-5 : 1e-10;
  expect_close(layer_norm(x, {5}, w, b), ref_layer_norm(x, {5}, w, b, 1e-5), t);
  expect_close(layer_norm(x, {5}), ref_layer_norm(x, {5}, {}, {}, 1e-5), t);
  expect_close(layer_norm(x, {5}, w), ref_layer_norm(x, {5}, w, {}, 1e-5), t);
  expect_close(layer_norm(x, {5}, {}, b), ref_layer_norm(x, {5}, {}, b, 1e-5), t);
  // Multi-dim normalized_shape, non-default eps, non-contiguous input and weight.
  Tensor w2 = rnd({5, 4}, dt, 4).t(), b2 = rnd({4, 5}, dt, 5);
  expect_close(layer_norm(x, {4, 5}, w2, b2, 1e-3), ref_layer_norm(x, {4, 5}, w2, b2, 1e-3), t);
  Tensor xt = rnd({5, 4, 3}, dt, 6).permute({2, 1, 0});
  expect_close(layer_norm(xt, {4, 5}), ref_layer_norm(xt, {4, 5}, {}, {}, 1e-5), t);
  expect_close(layer_norm(x, {3, 4, 5}), ref_layer_norm(x, {3, 4, 5}, {}, {}, 1e-5), t);
  // W3-like rows (parallel path), rows with a large common offset (cancellation).
  Tensor big = rnd({200, 1024}, dt, 7);
  Tensor wb = rnd({1024}, dt, 8), bb = rnd({1024}, dt, 9);
  expect_close(layer_norm(big, {1024}, wb, bb), ref_layer_norm(big, {1024}, wb, bb, 1e-5), t * 4);
  std::vector<double> off;
  for (int i = 0; i < 64; ++i) off.push_back(1000.0 + (i % 7) * 0.01);
  Tensor xo = from_values({2, 32}, off, dt);
  expect_close(layer_norm(xo, {32}), ref_layer_norm(xo, {32}, {}, {}, 1e-5), dt == kFloat32 ? 5e-3 : 1e-8);
  expect_close(layer_norm(rnd({0, 5}, dt), {5}), Want{{0, 5}, {}}, 0);
}

TEST(Nn, LayerNormErrors) {
  EXPECT_KILN_ERROR(layer_norm(rnd({4, 512}), {1024}),
                    "layer_norm: given normalized_shape=[1024], expected input with shape [*, 1024], but got input of size [4, 512]");
  EXPECT_KILN_ERROR(layer_norm(rnd({4, 5}), {5}, rnd({4})), "layer_norm: expected weight of shape [5], got [4]");
  EXPECT_KILN_ERROR(layer_norm(rnd({4, 5}), {5}, {}, rnd({5}, kFloat64)), "layer_norm: expected bias to have dtype float32");
  EXPECT_KILN_ERROR(layer_norm(rnd({4, 5}, kInt64), {5}), "layer_norm: expected input to be a floating-point tensor");
  EXPECT_KILN_ERROR(layer_norm(rnd({4, 5}), {}), "layer_norm: normalized_shape must have at least one dimension");
}

// ---------------------------------------------------------------- batch_norm

TEST_P(NnF, BatchNorm) {
  const DType dt = GetParam();
  Tensor x = rnd({2, 3, 4, 5}, dt, 1);
  Tensor w = rnd({3}, dt, 2), b = rnd({3}, dt, 3), rm = rnd({3}, dt, 4);
  Tensor rv = from_values({3}, {0.5, 1.5, 2.0}, dt);
  const double t = dt == kFloat32 ? 1e-5 : 1e-10;
  expect_close(batch_norm(x, w, b, rm, rv), ref_batch_norm(x, w, b, rm, rv, false, 1e-5), t);
  expect_close(batch_norm(x, {}, {}, rm, rv, false, 0.1, 1e-3), ref_batch_norm(x, {}, {}, rm, rv, false, 1e-3), t);
  // Training: batch statistics; running stats are optional, and when given they
  // are updated in place as torch does: r = (1 - momentum) r + momentum stat,
  // with the unbiased variance (n = N * H * W = 40 values per channel).
  expect_close(batch_norm(x, w, b, {}, {}, true), ref_batch_norm(x, w, b, {}, {}, true, 1e-5), t * 10);
  const std::vector<double> xs = values(x), rm0 = values(rm), rv0 = values(rv);
  Tensor rmt = rm.clone(), rvt = rv.clone();
  expect_close(batch_norm(x, w, b, rmt, rvt, true, 0.3), ref_batch_norm(x, w, b, rm, rv, true, 1e-5), t * 10);
  Want rm_want{{3}, {}}, rv_want{{3}, {}};
  for (int64_t c = 0; c < 3; ++c) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 20; ++j) s += xs[size_t(i * 60 + c * 20 + j)];
    const double m = s / 40;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 20; ++j) q += (xs[size_t(i * 60 + c * 20 + j)] - m) * (xs[size_t(i * 60 + c * 20 + j)] - m);
    rm_want.v.push_back(0.7 * rm0[size_t(c)] + 0.3 * m);
    rv_want.v.push_back(0.7 * rv0[size_t(c)] + 0.3 * q / 39);
  }
  expect_close(rmt, rm_want, t);
  expect_close(rvt, rv_want, t);
  // Evaluation mode reads them and leaves them alone.
  const Want rm_after{{3}, values(rmt)};
  batch_norm(x, w, b, rmt, rvt, false);
  expect_close(rmt, rm_after, 0);
  // 2-D [N, C] and 3-D inputs, non-contiguous input and parameters.
  Tensor x2 = rnd({6, 3}, dt, 5), x3 = rnd({4, 3, 2}, dt, 6).permute({1, 0, 2}).transpose(0, 1);
  Tensor ws = rnd({6}, dt, 7).slice(0, 0, 6, 2);
  expect_close(batch_norm(x2, ws, b, rm, rv), ref_batch_norm(x2, ws, b, rm, rv, false, 1e-5), t);
  expect_close(batch_norm(x3, w, {}, rm, rv), ref_batch_norm(x3, w, {}, rm, rv, false, 1e-5), t);
  expect_close(batch_norm(rnd({0, 3, 2}, dt), w, b, rm, rv), Want{{0, 3, 2}, {}}, 0);
}

TEST(Nn, BatchNormErrors) {
  Tensor x = rnd({2, 3, 4}), p = rnd({3});
  EXPECT_KILN_ERROR(batch_norm(x, p, p, {}, {}), "batch_norm: running_mean and running_var must be defined");
  EXPECT_KILN_ERROR(batch_norm(x, rnd({4}), p, p, p), "batch_norm: expected weight of shape [3], got [4]");
  EXPECT_KILN_ERROR(batch_norm(rnd({3}), p, p, p, p), "batch_norm: expected input with at least 2 dimensions");
  EXPECT_KILN_ERROR(batch_norm(x, p, p, p, rnd({3}, kFloat64)), "batch_norm: expected running_var to have dtype float32");
}

// ---------------------------------------------------------------- dropout

TEST(Nn, Dropout) {
  Tensor x = rnd({3, 4});
  Tensor y = dropout(x, 0.5, false);
  expect_same(y, x);
  EXPECT_TRUE(y.is_alias_of(x));
  EXPECT_KILN_ERROR(dropout(x, 1.5, false), "dropout: probability has to be between 0 and 1, but got 1.5");
  expect_same(run_op(OpId::Dropout, {x}, {0.1, false}).at(0), x);
  EXPECT_EQ(dropout(meta({2, 7}), 0.2, false).sizes().vec(), (Shape{2, 7}));
}

// Training mode, as torch: each element kept with probability 1 - p and scaled by
// 1 / (1 - p), the rest zero; the mask is a function of the seed alone (any thread
// count); p = 1 drops everything; the gradient is the mask over 1 - p.
TEST(Nn, DropoutTraining) {
  const int64_t n = 200000;
  Tensor x = rand({n}) + 1.0; // no zeros: a zero output means dropped
  const double p = 0.3;
  manual_seed(5);
  Tensor y = dropout(x, p, true);
  const float *xp = x.data_ptr<float>(), *yp = y.data_ptr<float>();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yp[i] == 0.0f) continue;
    ++kept;
    ASSERT_FLOAT_EQ(yp[i], float(xp[i] / (1 - p))) << i;
  }
  EXPECT_NEAR(double(kept) / double(n), 1 - p, 0.005); // 5 standard deviations is ~0.005
  const int threads = get_num_threads();
  set_num_threads(1);
  manual_seed(5);
  Tensor y1 = dropout(x, p, true);
  set_num_threads(threads);
  expect_same(y1, y);
  Tensor again = dropout(x, p, true); // the stream moved on: another mask
  EXPECT_FALSE(equal(again, y));
  Tensor all = dropout(x, 1.0, true);
  EXPECT_EQ(sum(ne(all, 0.0)).item<int64_t>(), 0);
  Tensor xs = (rand({64}) + 1.0).requires_grad_();
  Tensor ys = dropout(xs, 0.5, true);
  sum(ys).backward();
  const float *gp = xs.grad().data_ptr<float>(), *ysp = ys.data_ptr<float>();
  for (int64_t i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(gp[i], ysp[i] == 0.0f ? 0.0f : 2.0f) << i;
}

// dropout_mask: the keep mask dropout multiplies by (same seed, same mask), its
// element i a function of the i-th Philox uniform alone; under a compiled call's
// random block a mask at `offset` draws what an eager reservation at that point would.
TEST(Nn, DropoutMask) {
  Tensor x = rand({3000}) + 1.0;
  manual_seed(11);
  Tensor y = dropout(x, 0.4, true);
  manual_seed(11);
  Tensor m = dropout_mask(x, 0.4);
  EXPECT_EQ(m.dtype(), kBool);
  expect_same(m, ne(y, 0.0));
  Tensor m2 = dropout_mask(x, 0.4); // the stream moved on
  // A block for both masks, in either order: each at its offset.
  manual_seed(11);
  {
    detail::RandomBlock block(6000);
    expect_same(dropout_mask(x, 0.4, 3000), m2);
    expect_same(dropout_mask(x, 0.4, 0), m);
  }
  EXPECT_EQ(run_op(OpId::DropoutMask, {x}, {0.4, int64_t(-1)}).at(0).sizes().vec(), m.sizes().vec());
  EXPECT_EQ(dropout_mask(meta({2, 7}), 0.2).sizes().vec(), (Shape{2, 7}));
  // Element i is the i-th uniform of the stream: after manual_seed(s) the first
  // reservation is (s, 0). Odd sizes, split across 1 and 2 threads.
  const int threads = get_num_threads();
  for (int t : {1, 2})
    for (int64_t n : {int64_t(1), int64_t(67), int64_t(9001)}) {
      set_num_threads(t);
      manual_seed(21);
      Tensor mask = dropout_mask(zeros({n}), 0.3);
      const bool *mp = mask.data_ptr<bool>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(mp[i], double(philox::uniform_at(21, 0, uint64_t(i))) >= 0.3) << "n " << n << " i " << i;
    }
  set_num_threads(threads);
  EXPECT_KILN_ERROR(dropout_mask(x, -0.5), "dropout_mask: probability has to be between 0 and 1, but got -0.5");
  EXPECT_KILN_ERROR(dropout_mask(Tensor(), 0.5), "dropout_mask");
}

// ---------------------------------------------------------------- scaled_dot_product_attention

TEST_P(NnF, SdpaPlainAndCausal) {
  const DType dt = GetParam();
  const double t = dt == kFloat32 ? 1e-5 : 1e-11;
  Tensor q = rnd({2, 3, 5, 8}, dt, 1), k = rnd({2, 3, 6, 8}, dt, 2), v = rnd({2, 3, 6, 4}, dt, 3);
  expect_close(scaled_dot_product_attention(q, k, v), ref_sdpa(q, k, v, {}, false, {}, {2, 3}), t);
  expect_close(scaled_dot_product_attention(q, k, v, {}, 0.0, true), ref_sdpa(q, k, v, {}, true, {}, {2, 3}), t);
  expect_close(scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.3), ref_sdpa(q, k, v, {}, false, 0.3, {2, 3}), t);
  // Square causal (GPT-like), single batch (BLAS-threaded path), 2-D operands.
  Tensor q2 = rnd({1, 16, 8}, dt, 4), k2 = rnd({1, 16, 8}, dt, 5), v2 = rnd({1, 16, 8}, dt, 6);
  expect_close(scaled_dot_product_attention(q2, k2, v2, {}, 0.0, true), ref_sdpa(q2, k2, v2, {}, true, {}, {1}), t);
  Tensor q3 = rnd({4, 3}, dt, 7), k3 = rnd({5, 3}, dt, 8), v3 = rnd({5, 2}, dt, 9);
  expect_close(scaled_dot_product_attention(q3, k3, v3), ref_sdpa(q3, k3, v3, {}, false, {}, {}), t);
  // Empty query rows; empty keys (every row sums nothing: zeros, as softmax over nothing times v).
  expect_close(scaled_dot_product_attention(rnd({2, 0, 3}, dt), rnd({2, 5, 3}, dt), rnd({2, 5, 2}, dt)),
               Want{{2, 0, 2}, {}}, 0);
  Tensor k0 = rnd({2, 0, 3}, dt), v0 = rnd({2, 0, 2}, dt), q0 = rnd({2, 4, 3}, dt);
  expect_close(scaled_dot_product_attention(q0, k0, v0), Want{{2, 4, 2}, std::vector<double>(16, 0.0)}, 0);
}

TEST_P(NnF, SdpaMasksAndLayouts) {
  const DType dt = GetParam();
  const double t = dt == kFloat32 ? 1e-5 : 1e-11;
  Tensor q = rnd({2, 4, 6}, dt, 1), k = rnd({2, 5, 6}, dt, 2), v = rnd({2, 5, 3}, dt, 3);
  // Bool mask broadcast over the batch, with one fully masked row (zeros).
  std::vector<double> mb;
  for (int i = 0; i < 20; ++i) mb.push_back(i / 5 == 2 ? 0 : ((i * 7) % 3 != 0));
  Tensor bmask = from_values({4, 5}, mb, kBool);
  expect_close(scaled_dot_product_attention(q, k, v, bmask), ref_sdpa(q, k, v, bmask, false, {}, {2}), t);
  // Float mask per batch, added to the scores.
  Tensor fmask = rnd({2, 4, 5}, dt, 4);
  expect_close(scaled_dot_product_attention(q, k, v, fmask), ref_sdpa(q, k, v, fmask, false, {}, {2}), t);
  Tensor fmask1 = rnd({5}, dt, 5); // broadcast over rows and batch
  expect_close(scaled_dot_product_attention(q, k, v, fmask1), ref_sdpa(q, k, v, fmask1, false, {}, {2}), t);
  // Heads split as in a transformer: [B, L, H, E] transposed to [B, H, L, E], and batch broadcast of k/v.
  Tensor qh = rnd({2, 7, 3, 4}, dt, 6).transpose(1, 2), kh = rnd({1, 3, 7, 4}, dt, 7), vh = rnd({3, 7, 4}, dt, 8);
  expect_close(scaled_dot_product_attention(qh, kh, vh, {}, 0.0, true), ref_sdpa(qh, kh, vh, {}, true, {}, {2, 3}), t);
  Tensor kt = rnd({2, 6, 5}, dt, 9).transpose(1, 2); // k stored transposed
  expect_close(scaled_dot_product_attention(q, kt, v), ref_sdpa(q, kt, v, {}, false, {}, {2}), t);
}

TEST(Nn, SdpaErrors) {
  Tensor q = rnd({2, 4, 6}), k = rnd({2, 5, 6}), v = rnd({2, 5, 3});
  const char *op = "scaled_dot_product_attention: ";
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, rnd({4, 5}), 0.0, true),
                    std::string(op) + "explicit attn_mask should not be set when is_causal=True");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, {}, 0.1), std::string(op) + "dropout_p must be 0");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, rnd({2, 5, 7}), v), "query [2, 4, 6] and key [2, 5, 7] must have the same embedding size");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, rnd({2, 6, 3})), "key [2, 5, 6] and value [2, 6, 3] must have the same sequence length");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, rnd({3, 5})), "attn_mask of shape [3, 5] cannot be broadcast");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, k, v, rnd({4, 5}, kInt64)), "expected attn_mask dtype to be bool or to match query dtype");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(q, rnd({2, 5, 6}, kFloat64), v), "expected key to have dtype float32");
  EXPECT_KILN_ERROR(scaled_dot_product_attention(rnd({6}), k, v), "expected query to have at least 2 dimensions");
}

// ---------------------------------------------------------------- conv2d

namespace {
struct ConvCase {
  Shape x, w;
  Shape st, pd, dl;
  int64_t groups;
  bool bias;
};

// The conv2d variants both layouts are checked on: padding, stride, dilation,
// groups, depthwise, 1x1 (no im2col).
const std::vector<ConvCase> kConvCases = {
    {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},
    {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},
    {{1, 3, 9, 7}, {5, 3, 3, 2}, {2, 1}, {1, 0}, {1, 1}, 1, true},
    {{2, 4, 10, 10}, {6, 2, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 2, true},
    {{3, 4, 6, 6}, {4, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 4, false}, // depthwise
    {{2, 6, 5, 5}, {6, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},  // 1x1: no im2col
    {{2, 6, 5, 5}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2, false}, // 1x1 grouped
    {{1, 2, 7, 7}, {3, 2, 2, 2}, {3, 3}, {0, 0}, {3, 2}, 1, true},
};
} // namespace

TEST_P(NnF, Conv2dCombinations) {
  const DType dt = GetParam();
  const double t = dt == kFloat32 ? 2e-5 : 1e-11;
  std::vector<ConvCase> cases = kConvCases;
  cases.push_back({{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true});
  uint32_t seed = 1;
  for (const ConvCase &c : cases) {
    Tensor x = rnd(c.x, dt, seed++), w = rnd(c.w, dt, seed++), b = c.bias ? rnd({c.w[0]}, dt, seed++) : Tensor();
    Tensor y = conv2d(x, w, b, c.st, c.pd, c.dl, c.groups);
    expect_close(y, ref_conv2d(x, w, b, c.st, c.pd, c.dl, c.groups), t);
  }
}

TEST_P(NnF, Conv2dScalarArgsLayoutsAndUnbatched) {
  const DType dt = GetParam();
  const double t = dt == kFloat32 ? 2e-5 : 1e-11;
  Tensor x = rnd({2, 3, 6, 6}, dt, 1), w = rnd({2, 3, 3, 3}, dt, 2), b = rnd({2}, dt, 3);
  expect_close(conv2d(x, w, b, 2, 1, 1), ref_conv2d(x, w, b, {2, 2}, {1, 1}, {1, 1}, 1), t);
  expect_close(conv2d(x, w), ref_conv2d(x, w, {}, {1, 1}, {0, 0}, {1, 1}, 1), t);
  // Channels-last style input (permuted view) is packed first.
  Tensor xp = rnd({2, 6, 6, 3}, dt, 4).permute({0, 3, 1, 2});
  expect_close(conv2d(xp, w, b, 1, 1), ref_conv2d(xp, w, b, {1, 1}, {1, 1}, {1, 1}, 1), t);
  // Unbatched [C, H, W] input gives [O, Ho, Wo].
  Tensor x3 = rnd({3, 6, 6}, dt, 5);
  Tensor y3 = conv2d(x3, w, b, 1, 1);
  Want want = ref_conv2d(x3.unsqueeze(0), w, b, {1, 1}, {1, 1}, {1, 1}, 1);
  want.shape.erase(want.shape.begin());
  expect_close(y3, want, t);
  expect_close(conv2d(rnd({0, 3, 6, 6}, dt), w, b), Want{{0, 2, 4, 4}, {}}, 0);
}

// Channels-last input: the NHWC path (im2col of channel runs + one GEMM per
// block whose result is the NHWC output), every variant of Conv2dCombinations
// plus W7's 3x3 shape; the output is channels-last, as torch's.
TEST_P(NnF, Conv2dChannelsLast) {
  const DType dt = GetParam();
  const double t = dt == kFloat32 ? 2e-5 : 1e-11;
  std::vector<ConvCase> cases = kConvCases;
  cases.push_back({{2, 16, 14, 14}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true}); // W7's conv, smaller
  uint32_t seed = 1;
  const int saved = get_num_threads();
  for (const ConvCase &c : cases) {
    Tensor x = rnd(c.x, dt, seed++).contiguous(MemoryFormat::ChannelsLast);
    Tensor w = rnd(c.w, dt, seed++), b = c.bias ? rnd({c.w[0]}, dt, seed++) : Tensor();
    ASSERT_TRUE(x.is_contiguous(MemoryFormat::ChannelsLast) && !x.is_contiguous()) << shape_str(c.x);
    const Want want = ref_conv2d(x, w, b, c.st, c.pd, c.dl, c.groups);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor y = conv2d(x, w, b, c.st, c.pd, c.dl, c.groups);
      EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << shape_str(c.x) << " strides " << shape_str(y.strides());
      expect_close(y, want, t);
      // Into an NCHW buffer (the last conv of a channels-last chain): the GEMM
      // reads the NHWC im2col transposed and writes NCHW rows, 2-row blocks.
      Tensor nchw = empty(want.shape, dt);
      detail::nn::conv2d_into(x, w, b, c.st, c.pd, c.dl, c.groups, nchw, 2, nullptr, nullptr);
      EXPECT_TRUE(nchw.is_contiguous());
      expect_close(nchw, want, t);
    }
  }
  set_num_threads(saved);
}

// conv2d_into with a channels-last output: every block reported once, after its GEMM.
TEST(Nn, Conv2dIntoChannelsLastBlocks) {
  Tensor x = rnd({2, 8, 9, 6}, kFloat32, 1).contiguous(MemoryFormat::ChannelsLast), w = rnd({5, 8, 3, 3}, kFloat32, 2);
  Tensor out = empty({2, 5, 9, 6}).contiguous(MemoryFormat::ChannelsLast);
  struct Seen {
    std::mutex m;
    std::vector<int64_t> pixels;
  } seen;
  seen.pixels.assign(2 * 9 * 6, 0);
  auto after = [](void *p, int64_t n, int64_t p0, int64_t np) {
    auto *s = static_cast<Seen *>(p);
    std::lock_guard<std::mutex> lock(s->m);
    for (int64_t i = p0; i < p0 + np; ++i) ++s->pixels[size_t(n * 54 + i)];
  };
  detail::nn::conv2d_into(x, w, {}, {1}, {1}, {1}, 1, out, 2, after, &seen);
  expect_close(out, ref_conv2d(x, w, {}, {1, 1}, {1, 1}, {1, 1}, 1), 2e-5);
  for (int64_t c : seen.pixels) EXPECT_EQ(c, 1);
  // A contiguous input is converted first (the layout pass's chain input).
  Tensor out2 = empty({2, 5, 9, 6}).contiguous(MemoryFormat::ChannelsLast);
  detail::nn::conv2d_into(x.contiguous(), w, {}, {1}, {1}, {1}, 1, out2, 4, nullptr, nullptr);
  expect_same(out2, out);
  // Any other output layout is refused, naming the strides.
  Tensor odd = empty({2, 5, 6, 9}).transpose(2, 3);
  EXPECT_KILN_ERROR(detail::nn::conv2d_into(x, w, {}, {1}, {1}, {1}, 1, odd, 2, nullptr, nullptr),
                    "conv2d: output buffer [2, 5, 9, 6] float32 strides [270, 54, 1, 9] is neither contiguous nor channels-last");
}

TEST(Nn, MemoryFormatChannelsLast) {
  Tensor x = rnd({2, 3, 4, 5}, kFloat32, 1);
  EXPECT_TRUE(x.is_contiguous(MemoryFormat::Contiguous));
  EXPECT_FALSE(x.is_contiguous(MemoryFormat::ChannelsLast));
  Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.strides().vec(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_TRUE(cl.contiguous(MemoryFormat::ChannelsLast).is_same(cl)); // no copy when it has the layout
  Tensor back = cl.contiguous();
  EXPECT_TRUE(back.is_contiguous());
  expect_same(back, x);
  // Size-1 channels: both layouts at once.
  EXPECT_TRUE(rnd({2, 1, 4, 5}).is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(rnd({3, 4, 5}).is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_KILN_ERROR(rnd({3, 4, 5}).contiguous(MemoryFormat::ChannelsLast),
                    "contiguous: ChannelsLast needs a 4-D [N, C, H, W] tensor, got shape [3, 4, 5]");
}

// W7-like shape: images in parallel with single-threaded BLAS vs one thread.
TEST(Nn, Conv2dThreads) {
  Tensor x = rnd({4, 16, 14, 14}, kFloat32, 1), w = rnd({16, 16, 3, 3}, kFloat32, 2);
  Want want = ref_conv2d(x, w, {}, {1, 1}, {1, 1}, {1, 1}, 1);
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    expect_close(conv2d(x, w, {}, 1, 1), want, 1e-4);
  }
  set_num_threads(saved);
}

TEST(Nn, Conv2dErrors) {
  Tensor x = rnd({1, 2, 8, 8}), w = rnd({4, 3, 3, 3});
  EXPECT_KILN_ERROR(conv2d(x, w), "conv2d: given groups=1, weight of size [4, 3, 3, 3], expected input[1, 2, 8, 8] to have 3 channels, but got 2 channels instead");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 3, 2, 2}), w), "conv2d: padded input size per channel (2 x 2) is smaller than the dilated kernel size (3 x 3)");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 6, 8, 8}), rnd({3, 3, 3, 3}), {}, 1, 0, 1, 2), "conv2d: out_channels 3 (weight [3, 3, 3, 3]) must be divisible by groups 2");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 3, 8, 8}), w, rnd({3})), "conv2d: expected bias of shape [4], got [3]");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 3, 8, 8}), w, {}, 0), "conv2d: expected stride elements to be >= 1");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 3, 8, 8}), w, {}, 1, {1, 1, 1}), "conv2d: expected padding to have 1 or 2 elements");
  EXPECT_KILN_ERROR(conv2d(rnd({3, 8, 8, 1, 1}), w), "conv2d: expected 3-D [C, H, W] or 4-D [N, C, H, W] input");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 3, 8, 8}, kInt64), rnd({4, 3, 3, 3}, kInt64)), "conv2d: expected input to be a floating-point tensor");
  EXPECT_KILN_ERROR(conv2d(rnd({1, 3, 8, 8}), rnd({4, 3, 3, 3}, kFloat64)), "conv2d: expected weight to have dtype float32");
}

// ---------------------------------------------------------------- meta shapes and adapters

TEST(Nn, MetaShapes) {
  EXPECT_EQ(softmax(meta({4, 9}), 1).sizes().vec(), (Shape{4, 9}));
  EXPECT_TRUE(log_softmax(meta({4, 9}), 0).is_meta());
  EXPECT_EQ(softmax(meta({4, 9}), 1, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(layer_norm(meta({2, 3, 8}), {8}, meta({8})).sizes().vec(), (Shape{2, 3, 8}));
  EXPECT_EQ(batch_norm(meta({2, 3, 4}), {}, {}, meta({3}), meta({3})).sizes().vec(), (Shape{2, 3, 4}));
  EXPECT_EQ(scaled_dot_product_attention(meta({2, 1, 5, 8}), meta({3, 7, 8}), meta({3, 7, 2})).sizes().vec(),
            (Shape{2, 3, 5, 2}));
  EXPECT_EQ(conv2d(meta({8, 64, 56, 56}), meta({64, 64, 3, 3}), {}, 1, 1).sizes().vec(), (Shape{8, 64, 56, 56}));
  EXPECT_EQ(conv2d(meta({1, 3, 224, 224}), meta({64, 3, 7, 7}), {}, 2, 3).sizes().vec(), (Shape{1, 64, 112, 112}));
}

TEST(Nn, Adapters) {
  Tensor x = rnd({3, 4, 5}, kFloat32, 1);
  expect_same(run_op(OpId::Softmax, {x}, {1}).at(0), softmax(x, 1));
  expect_same(run_op(OpId::LogSoftmax, {x}, {-1}).at(0), log_softmax(x, -1));
  Tensor w = rnd({4, 5}, kFloat32, 2), b = rnd({4, 5}, kFloat32, 3);
  expect_same(run_op(OpId::LayerNorm, {x, w, b}, {Shape{4, 5}, 1e-3}).at(0), layer_norm(x, {4, 5}, w, b, 1e-3));
  expect_same(run_op(OpId::LayerNorm, {x, Tensor(), Tensor()}, {Shape{5}, 1e-5}).at(0), layer_norm(x, {5}));
  Tensor p = rnd({4}, kFloat32, 4), rv = from_values({4}, {1, 2, 3, 4}, kFloat32);
  expect_same(run_op(OpId::BatchNorm, {x, p, p, p, rv}, {false, 0.1, 1e-5}).at(0), batch_norm(x, p, p, p, rv));
  expect_same(run_op(OpId::BatchNorm, {x, Tensor(), Tensor(), Tensor(), Tensor()}, {true, 0.1, 1e-5}).at(0),
              batch_norm(x, {}, {}, {}, {}, true));
  Tensor q = rnd({2, 4, 6}, kFloat32, 5), k = rnd({2, 5, 6}, kFloat32, 6), v = rnd({2, 5, 3}, kFloat32, 7);
  Tensor m = rnd({4, 5}, kFloat32, 8);
  expect_same(run_op(OpId::Sdpa, {q, k, v, m}, {0.0, false, AttrValue()}).at(0), scaled_dot_product_attention(q, k, v, m));
  expect_same(run_op(OpId::Sdpa, {q, k, v, Tensor()}, {0.0, true, 0.5}).at(0),
              scaled_dot_product_attention(q, k, v, {}, 0.0, true, 0.5));
  Tensor cx = rnd({2, 4, 6, 6}, kFloat32, 9), cw = rnd({6, 2, 3, 3}, kFloat32, 10), cb = rnd({6}, kFloat32, 11);
  expect_same(run_op(OpId::Conv2d, {cx, cw, cb}, {Shape{2, 1}, Shape{1, 0}, Shape{1, 2}, 2}).at(0),
              conv2d(cx, cw, cb, {2, 1}, {1, 0}, {1, 2}, 2));
  EXPECT_KILN_ERROR(run_op(OpId::Sdpa, {q, k, v}, {0.0, false, AttrValue()}), "scaled_dot_product_attention: expected 4 inputs, got 3");
}

// A NaN in a row whose other values are -inf must still give NaN (the row max
// must not drop the NaN and take the "all -inf" path).
TEST(NnNaN, SoftmaxRowWithNaNAndMinusInf) {
  std::vector<float> v(40, -INFINITY);
  v[3] = NAN;
  kiln::Tensor x = kiln::tensor(v).view({1, 40});
  kiln::Tensor y = kiln::softmax(x, -1);
  const float *p = y.data_ptr<float>();
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(std::isnan(p[i])) << i;
}
