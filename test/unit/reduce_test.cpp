// Reductions against naive double-precision references written here: every value
// is read through sizes/strides by hand and grouped per output, never through the
// kernels under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "runtime/kernels/reduce_rows.h"
#include "runtime/op_registry.h"
#include "runtime/trace_hook.h"

using namespace kiln;

namespace {

using Vec = std::vector<int64_t>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- reading and making tensors

// Element at storage offset `off` as a double.
double read_at(const Tensor &t, int64_t off) {
  const char *base = static_cast<const char *>(t.impl().storage->data());
  switch (t.dtype()) {
  case kBool: return reinterpret_cast<const bool *>(base)[off];
  case kInt32: return reinterpret_cast<const int32_t *>(base)[off];
  case kInt64: return double(reinterpret_cast<const int64_t *>(base)[off]);
  case kFloat32: return reinterpret_cast<const float *>(base)[off];
  case kFloat64: return reinterpret_cast<const double *>(base)[off];
  case kUInt8: return reinterpret_cast<const uint8_t *>(base)[off];
  case kInt8: return reinterpret_cast<const int8_t *>(base)[off];
  case kInt16: return reinterpret_cast<const int16_t *>(base)[off];
  case kFloat16: return float(reinterpret_cast<const Half *>(base)[off]);
  case kBFloat16: return float(reinterpret_cast<const BFloat16 *>(base)[off]);
  }
  return 0;
}

// Storage offset of logical row-major element `linear`.
int64_t offset_of(const Tensor &t, int64_t linear) {
  int64_t off = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t size = t.sizes()[d];
    off += (linear % size) * t.strides()[d];
    linear /= size;
  }
  return off;
}

// All values in logical row-major order.
std::vector<double> vals(const Tensor &t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(read_at(t, offset_of(t, i)));
  return out;
}

std::vector<int64_t> ivals(const Tensor &t) {
  EXPECT_EQ(t.dtype(), kInt64);
  std::vector<int64_t> out;
  const int64_t *base = static_cast<const int64_t *>(t.impl().storage->data());
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(base[offset_of(t, i)]);
  return out;
}

// Deterministic test data: floats from randn, integers and bools from an LCG.
Tensor data(IntArrayRef shape, DType dt = kFloat32, uint64_t seed = 1) {
  if (is_floating(dt)) {
    manual_seed(seed);
    return randn(shape, dt);
  }
  Tensor t = detail::make_tensor(shape, dt);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int64_t v = int64_t((s >> 33) % 11) - 5;
    if (dt == kBool) static_cast<bool *>(t.raw_data())[i] = v > 0;
    else if (dt == kInt32) static_cast<int32_t *>(t.raw_data())[i] = int32_t(v);
    else static_cast<int64_t *>(t.raw_data())[i] = v;
  }
  return t;
}

template <class T> Tensor make(IntArrayRef shape, const std::vector<T> &v) {
  Tensor t = detail::make_tensor(shape, dtype_of<T>);
  std::copy(v.begin(), v.end(), static_cast<T *>(t.raw_data()));
  return t;
}

// ---------------------------------------------------------------- the reference

// The values folded into each output of a reduction over `dims` (empty = all),
// in logical order, and the result shape.
struct Groups {
  std::vector<std::vector<double>> g;
  Vec shape;
};

Groups group(const Tensor &x, Vec dims, bool keepdim) {
  int64_t nd = x.dim();
  std::vector<bool> red(size_t(std::max<int64_t>(nd, 1)), dims.empty());
  for (int64_t d : dims) red[size_t(d < 0 ? d + std::max<int64_t>(nd, 1) : d)] = true;
  Groups r;
  int64_t n_out = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!red[d]) n_out *= x.size(d), r.shape.push_back(x.size(d));
    else if (keepdim) r.shape.push_back(1);
  }
  r.g.resize(size_t(n_out));
  std::vector<double> v = vals(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, o = 0, mul = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t c = rem % x.size(d);
      rem /= x.size(d);
      if (!red[d]) o += c * mul, mul *= x.size(d);
    }
    r.g[size_t(o)].push_back(v[size_t(i)]);
  }
  return r;
}

using Fold = std::function<double(const std::vector<double> &)>;

double ref_sum(const std::vector<double> &v) {
  double s = 0;
  for (double a : v) s += a;
  return s;
}
double ref_prod(const std::vector<double> &v) {
  double s = 1;
  for (double a : v) s *= a;
  return s;
}
double ref_mean(const std::vector<double> &v) { return ref_sum(v) / double(v.size()); }
// Index of the first max (min), NaN counting as the largest (it propagates).
int64_t ref_argext(const std::vector<double> &v, bool is_max) {
  int64_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return int64_t(i);
    if (is_max ? v[i] > v[best] : v[i] < v[best]) best = int64_t(i);
  }
  return best;
}
double ref_max(const std::vector<double> &v) { return v[size_t(ref_argext(v, true))]; }
double ref_min(const std::vector<double> &v) { return v[size_t(ref_argext(v, false))]; }
Fold ref_var(double correction, bool sqrt_it) {
  return [=](const std::vector<double> &v) {
    double n = double(v.size()), m = ref_mean(v), ss = 0;
    for (double a : v) ss += (a - m) * (a - m);
    double var = ss / std::max(0.0, n - correction);
    return sqrt_it ? std::sqrt(var) : var;
  };
}
Fold ref_norm(double p) {
  return [=](const std::vector<double> &v) {
    if (std::isinf(p)) {
      double r = p > 0 ? 0 : kInf;
      for (double a : v) {
        if (std::isnan(a)) return kNaN;
        r = p > 0 ? std::max(r, std::abs(a)) : std::min(r, std::abs(a));
      }
      return r;
    }
    double s = 0;
    for (double a : v) s += p == 0 ? (a != 0) : std::pow(std::abs(a), p);
    return p == 0 ? s : std::pow(s, 1 / p);
  };
}

std::string what(const Tensor &x, const Vec &dims, bool keepdim) {
  return "shape " + shape_str(x.sizes()) + " strides " + shape_str(x.strides()) + " dims " + shape_str(dims) +
         " keepdim " + std::to_string(keepdim);
}

// got == fold(group) for every output, within rtol (relative to max(1, |want|)).
void expect_reduces(const Tensor &got, const Tensor &x, const Vec &dims, bool keepdim, const Fold &fold,
                    double rtol, const std::string &ctx) {
  Groups r = group(x, dims, keepdim);
  ASSERT_EQ(got.sizes().vec(), r.shape) << ctx;
  std::vector<double> v = vals(got);
  for (size_t o = 0; o < r.g.size(); ++o) {
    double want = fold(r.g[o]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v[o])) << ctx << " output " << o;
      continue;
    }
    if (std::isinf(want)) {
      EXPECT_EQ(v[o], want) << ctx << " output " << o;
      continue;
    }
    EXPECT_NEAR(v[o], want, rtol * std::max(1.0, std::abs(want))) << ctx << " output " << o;
  }
}

// Indices of the first max/min per output, and the values at them.
void expect_arg(const Tensor &idx, const Tensor &values, const Tensor &x, const Vec &dims, bool keepdim,
                bool is_max, const std::string &ctx) {
  Groups r = group(x, dims, keepdim);
  ASSERT_EQ(idx.sizes().vec(), r.shape) << ctx;
  ASSERT_EQ(idx.dtype(), kInt64) << ctx;
  std::vector<int64_t> got = ivals(idx);
  std::vector<double> got_values = values.defined() ? vals(values) : std::vector<double>();
  for (size_t o = 0; o < r.g.size(); ++o) {
    int64_t want = ref_argext(r.g[o], is_max);
    EXPECT_EQ(got[o], want) << ctx << " output " << o;
    if (!values.defined()) continue;
    double wv = r.g[o][size_t(want)], gv = got_values[o];
    if (std::isnan(wv)) EXPECT_TRUE(std::isnan(gv)) << ctx;
    else EXPECT_EQ(gv, wv) << ctx;
  }
}

// Inputs of one logical shape laid out in several ways.
std::vector<std::pair<std::string, Tensor>> layouts(DType dt) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.push_back({"contiguous", data({3, 4, 5}, dt)});
  out.push_back({"transposed", data({5, 4, 3}, dt, 2).transpose(0, 2)});
  out.push_back({"permuted", data({4, 5, 3}, dt, 3).permute({2, 0, 1})});
  out.push_back({"sliced", data({3, 8, 10}, dt, 4).slice(1, 0, 8, 2).slice(2, 1, 6)});
  out.push_back({"expanded", data({3, 1, 5}, dt, 5).expand({3, 4, 5})});
  out.push_back({"size-1 dims", data({3, 1, 4, 1, 5}, dt, 6).squeeze(3)});
  return out;
}

std::vector<Vec> dim_lists(int64_t nd) {
  std::vector<Vec> out = {{}};
  for (int64_t d = 0; d < nd; ++d) out.push_back({d}), out.push_back({d - nd});
  for (int64_t a = 0; a < nd; ++a)
    for (int64_t b = a + 1; b < nd; ++b) out.push_back({b, a - nd});
  return out;
}

template <class F> void expect_error(F f, const std::vector<std::string> &parts) {
  try {
    f();
    ADD_FAILURE() << "no kiln::Error thrown; expected one mentioning " << parts[0];
  } catch (const Error &e) {
    for (const std::string &p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message: " << e.what() << "\nmissing: " << p;
  }
}

// Runs f with n threads, restoring the previous count.
template <class F> auto with_threads(int n, F f) {
  int saved = get_num_threads();
  set_num_threads(n);
  auto r = f();
  set_num_threads(saved);
  return r;
}

void expect_same_values(const Tensor &a, const Tensor &b, const std::string &ctx) {
  ASSERT_EQ(a.sizes().vec(), b.sizes().vec()) << ctx;
  std::vector<double> va = vals(a), vb = vals(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i])) EXPECT_TRUE(std::isnan(vb[i])) << ctx;
    else EXPECT_EQ(va[i], vb[i]) << ctx << " element " << i;
  }
}

} // namespace

// ---------------------------------------------------------------- values over layouts and dims

TEST(Reduce, SumMeanOverLayoutsAndDims) {
  for (DType dt : {kFloat32, kFloat64})
    for (auto &[name, x] : layouts(dt))
      for (const Vec &dims : dim_lists(x.dim()))
        for (bool keepdim : {false, true}) {
          std::string ctx = name + " " + what(x, dims, keepdim);
          double tol = dt == kFloat32 ? 1e-5 : 1e-12;
          Tensor s = sum(x, dims, keepdim);
          EXPECT_EQ(s.dtype(), dt) << ctx;
          expect_reduces(s, x, dims, keepdim, ref_sum, tol, ctx);
          Tensor m = mean(x, dims, keepdim);
          EXPECT_EQ(m.dtype(), dt) << ctx;
          expect_reduces(m, x, dims, keepdim, ref_mean, tol, ctx);
        }
}

TEST(Reduce, AmaxAminOverLayoutsAndDims) {
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBool})
    for (auto &[name, x] : layouts(dt))
      for (const Vec &dims : dim_lists(x.dim()))
        for (bool keepdim : {false, true}) {
          std::string ctx = name + " " + std::string(kiln::name(dt)) + " " + what(x, dims, keepdim);
          Tensor hi = amax(x, dims, keepdim), lo = amin(x, dims, keepdim);
          EXPECT_EQ(hi.dtype(), dt) << ctx;
          EXPECT_EQ(lo.dtype(), dt) << ctx;
          expect_reduces(hi, x, dims, keepdim, ref_max, 0, ctx);
          expect_reduces(lo, x, dims, keepdim, ref_min, 0, ctx);
        }
}

TEST(Reduce, VarStdOverLayoutsAndDims) {
  for (DType dt : {kFloat32, kFloat64})
    for (auto &[name, x] : layouts(dt))
      for (const Vec &dims : dim_lists(x.dim()))
        for (bool keepdim : {false, true})
          for (double c : {1.0, 0.0, 2.5}) {
            std::string ctx = name + " " + what(x, dims, keepdim) + " correction " + std::to_string(c);
            double tol = dt == kFloat32 ? 1e-5 : 1e-12;
            std::optional<double> corr = c == 1.0 ? std::nullopt : std::optional<double>(c);
            expect_reduces(var(x, dims, corr, keepdim), x, dims, keepdim, ref_var(c, false), tol, ctx);
            expect_reduces(kiln::std(x, dims, corr, keepdim), x, dims, keepdim, ref_var(c, true), tol, ctx);
          }
}

TEST(Reduce, NormOverLayoutsDimsAndOrders) {
  for (DType dt : {kFloat32, kFloat64})
    for (auto &[name, x] : layouts(dt))
      for (const Vec &dims : dim_lists(x.dim()))
        for (bool keepdim : {false, true})
          for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5, -1.5}) {
            std::string ctx = name + " " + what(x, dims, keepdim) + " p " + std::to_string(p);
            Tensor n = norm(x, p, dims, keepdim);
            EXPECT_EQ(n.dtype(), dt) << ctx;
            expect_reduces(n, x, dims, keepdim, ref_norm(p), dt == kFloat32 ? 1e-5 : 1e-12, ctx);
          }
  // Integer p arrives as an integral Scalar.
  Tensor x = data({4, 6});
  expect_reduces(norm(x, 2, {1}), x, {1}, false, ref_norm(2), 1e-5, "int p");
  expect_reduces(x.norm(), x, {}, false, ref_norm(2), 1e-5, "default p");
}

TEST(Reduce, ProdOverLayoutsAndDims) {
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBool})
    for (auto &[name, x] : layouts(dt)) {
      DType want = is_floating(dt) ? dt : kInt64;
      std::string ctx = name + " " + std::string(kiln::name(dt));
      Tensor full = prod(x);
      EXPECT_EQ(full.dtype(), want) << ctx;
      EXPECT_EQ(full.dim(), 0) << ctx;
      // Integer products of 60 values would overflow (and wrap); ProdDtypes covers them.
      if (is_floating(dt) || dt == kBool) expect_reduces(full, x, {}, false, ref_prod, 1e-5, ctx + " full");
      for (int64_t d = -x.dim(); d < x.dim(); ++d)
        for (bool keepdim : {false, true}) {
          Tensor p = prod(x, d, keepdim);
          EXPECT_EQ(p.dtype(), want) << ctx;
          expect_reduces(p, x, {d}, keepdim, ref_prod, 1e-5, ctx + " " + what(x, {d}, keepdim));
        }
    }
}

TEST(Reduce, MaxMinDimAndArgOverLayouts) {
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBool})
    for (auto &[name, x] : layouts(dt))
      for (int64_t d = -x.dim(); d < x.dim(); ++d)
        for (bool keepdim : {false, true}) {
          std::string ctx = name + " " + std::string(kiln::name(dt)) + " " + what(x, {d}, keepdim);
          auto [mv, mi] = max(x, d, keepdim);
          EXPECT_EQ(mv.dtype(), dt) << ctx;
          expect_arg(mi, mv, x, {d}, keepdim, true, ctx);
          auto [nv, ni] = min(x, d, keepdim);
          expect_arg(ni, nv, x, {d}, keepdim, false, ctx);
          if (dt == kBool) continue;
          expect_arg(argmax(x, d, keepdim), Tensor(), x, {d}, keepdim, true, ctx);
          expect_arg(argmin(x, d, keepdim), Tensor(), x, {d}, keepdim, false, ctx);
        }
}

// ---------------------------------------------------------------- dtypes

TEST(Reduce, SumDtypes) {
  Tensor i32 = data({4, 5}, kInt32), b = data({4, 5}, kBool), i64 = data({4, 5}, kInt64);
  for (Tensor x : {i32, b, i64}) {
    Tensor s = sum(x, {1});
    EXPECT_EQ(s.dtype(), kInt64);
    expect_reduces(s, x, {1}, false, ref_sum, 0, "int sum");
    EXPECT_EQ(sum(x).dtype(), kInt64);
    expect_reduces(sum(x), x, {}, false, ref_sum, 0, "int full sum");
  }
  // dtype= casts each element first, then sums in that dtype.
  Tensor f = make<float>({4}, {1.5f, -2.7f, 3.9f, 0.2f});
  Tensor si = sum(f, kInt64);
  EXPECT_EQ(si.dtype(), kInt64);
  EXPECT_EQ(si.item<int64_t>(), 1 - 2 + 3 + 0);
  Tensor sd = sum(f, {0}, false, kFloat64);
  EXPECT_EQ(sd.dtype(), kFloat64);
  EXPECT_NEAR(sd.item<double>(), double(1.5f) + double(-2.7f) + double(3.9f) + double(0.2f), 1e-12);
  Tensor s32 = sum(i64, {0}, true, kInt32);
  EXPECT_EQ(s32.dtype(), kInt32);
  expect_reduces(s32, i64, {0}, true, ref_sum, 0, "int32 dtype");
  Tensor sb = sum(make<int64_t>({3}, {0, 0, 2}), kBool);
  EXPECT_EQ(sb.dtype(), kBool);
  EXPECT_TRUE(sb.item<bool>());
  Tensor mf = mean(i32, {0}, false, kFloat32);
  EXPECT_EQ(mf.dtype(), kFloat32);
  expect_reduces(mf, i32, {0}, false, ref_mean, 1e-6, "mean of int with dtype");
  EXPECT_EQ(mean(data({3}), kFloat64).dtype(), kFloat64);
  // int64 sums wrap as torch's do, they are not done in double.
  int64_t big = int64_t(1) << 62;
  EXPECT_EQ(sum(make<int64_t>({3}, {big, big, -big})).item<int64_t>(), big);
  EXPECT_EQ(sum(make<int64_t>({2}, {(int64_t(1) << 53) + 1, 1})).item<int64_t>(), (int64_t(1) << 53) + 2);
}

TEST(Reduce, ProdDtypes) {
  Tensor x = make<int32_t>({2, 3}, {1, 2, 3, -4, 5, 6});
  EXPECT_EQ(prod(x).dtype(), kInt64);
  EXPECT_EQ(prod(x).item<int64_t>(), -720);
  EXPECT_EQ(prod(x, 1, false, kFloat64).dtype(), kFloat64);
  expect_reduces(prod(x, 1, false, kFloat64), x, {1}, false, ref_prod, 0, "prod dtype");
  Tensor b = make<bool>({2, 2}, {true, false, true, true});
  EXPECT_EQ(prod(b, 1).dtype(), kInt64);
  EXPECT_EQ(ivals(prod(b, 1)), (std::vector<int64_t>{0, 1}));
}

// ---------------------------------------------------------------- special values

TEST(Reduce, NanPropagatesAndTiesPickFirst) {
  Tensor x = make<float>({2, 5}, {1, 3, 3, -1, 3, 2, NAN, 5, NAN, 0});
  EXPECT_EQ(vals(amax(x, {1}))[0], 3);
  EXPECT_TRUE(std::isnan(vals(amax(x, {1}))[1]));
  EXPECT_TRUE(std::isnan(vals(amin(x, {1}))[1]));
  EXPECT_TRUE(std::isnan(max(x).item<float>()));
  EXPECT_TRUE(std::isnan(min(x).item<float>()));
  auto [v, i] = max(x, 1);
  EXPECT_EQ(ivals(i), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(std::isnan(vals(v)[1]));
  auto [mv, mi] = min(x, 1);
  EXPECT_EQ(ivals(mi), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 6);
  EXPECT_EQ(argmin(x).item<int64_t>(), 6);
  EXPECT_EQ(ivals(argmax(x, 1)), (std::vector<int64_t>{1, 1}));
  // Ties across the columns path (dim 0, contiguous rows).
  Tensor t = make<float>({3, 4}, {1, 7, 2, 2, 1, 7, 9, NAN, 0, 7, 9, NAN});
  auto [tv, ti] = max(t, 0);
  EXPECT_EQ(ivals(ti), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(ivals(argmin(t, 0)), (std::vector<int64_t>{2, 0, 0, 1}));
  // -inf everywhere: the first index, not a sentinel.
  Tensor ninf = make<float>({3}, {-INFINITY, -INFINITY, -INFINITY});
  EXPECT_EQ(argmax(ninf).item<int64_t>(), 0);
  EXPECT_EQ(max(ninf).item<float>(), -INFINITY);
  // Sums and norms carry NaN and inf.
  EXPECT_TRUE(std::isnan(sum(x, {1}).data_ptr<float>()[1]));
  EXPECT_TRUE(std::isnan(norm(x, kInf, {1}).data_ptr<float>()[1]));
  EXPECT_EQ(sum(make<float>({2}, {INFINITY, 1})).item<float>(), INFINITY);
}

TEST(Reduce, ArgmaxFlattenedFollowsLogicalOrder) {
  // The maximum's flat index counts the logical (transposed) order, not memory order.
  Tensor base = make<float>({2, 3}, {0, 1, 9, 3, 4, 5}); // 9 at memory index 2
  Tensor x = base.t();                                    // [3, 2]; 9 at (2, 0) -> flat 4
  EXPECT_EQ(argmax(x).item<int64_t>(), 4);
  EXPECT_EQ(argmin(x).item<int64_t>(), 0);
  Tensor k = argmax(x, std::nullopt, true);
  EXPECT_EQ(k.sizes().vec(), (Vec{1, 1}));
  EXPECT_EQ(k.dtype(), kInt64);
  for (auto &[name, y] : layouts(kFloat32)) {
    EXPECT_EQ(argmax(y).item<int64_t>(), ref_argext(vals(y), true)) << name;
    EXPECT_EQ(argmin(y).item<int64_t>(), ref_argext(vals(y), false)) << name;
  }
}

TEST(Reduce, ZeroDimAndSizeOneInputs) {
  Tensor s = make<float>({}, {2.5f});
  EXPECT_EQ(sum(s).dim(), 0);
  EXPECT_EQ(sum(s).item<float>(), 2.5f);
  EXPECT_EQ(sum(s, {0}, true).dim(), 0);
  EXPECT_EQ(sum(s, {-1}).item<float>(), 2.5f);
  EXPECT_EQ(amax(s).item<float>(), 2.5f);
  auto [v, i] = max(s, 0);
  EXPECT_EQ(v.item<float>(), 2.5f);
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(argmax(s).item<int64_t>(), 0);
  EXPECT_TRUE(std::isnan(var(s).item<float>())); // one element, correction 1: 0 / 0
  EXPECT_EQ(var(s, {}, 0.0).item<float>(), 0.f);
  EXPECT_EQ(prod(s, 0).item<float>(), 2.5f);
  Tensor one = data({1, 1, 1});
  EXPECT_EQ(sum(one, {1}).sizes().vec(), (Vec{1, 1}));
  EXPECT_EQ(sum(one, {1}).item<float>(), vals(one)[0]);
  EXPECT_EQ(mean(one).item<float>(), vals(one)[0]);
}

TEST(Reduce, EmptyTensors) {
  Tensor e = detail::make_tensor({0}, kFloat32);
  EXPECT_EQ(sum(e).item<float>(), 0.f);
  EXPECT_EQ(prod(e).item<float>(), 1.f);
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  EXPECT_TRUE(std::isnan(var(e).item<float>()));
  EXPECT_EQ(norm(e).item<float>(), 0.f);
  EXPECT_EQ(sum(detail::make_tensor({0}, kInt32)).item<int64_t>(), 0);
  Tensor e2 = detail::make_tensor({0, 3}, kFloat32);
  Tensor s0 = sum(e2, {0});
  EXPECT_EQ(s0.sizes().vec(), (Vec{3}));
  EXPECT_EQ(vals(s0), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(vals(prod(e2, 0, true)), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(prod(e2, 0, true).sizes().vec(), (Vec{1, 3}));
  EXPECT_EQ(sum(e2, {1}).sizes().vec(), (Vec{0}));
  EXPECT_EQ(amax(e2, {1}).sizes().vec(), (Vec{0}));     // nothing reduced over a 0-size dim
  EXPECT_EQ(std::get<1>(max(e2, 1)).sizes().vec(), (Vec{0}));
  EXPECT_EQ(argmax(e2, 1, true).sizes().vec(), (Vec{0, 1}));
  Tensor e3 = detail::make_tensor({4, 0}, kFloat32);
  std::vector<double> m = vals(mean(e3, {1}));
  ASSERT_EQ(m.size(), 4u);
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_EQ(vals(sum(e3, {1}, true)), (std::vector<double>{0, 0, 0, 0}));
  Tensor big_e = detail::make_tensor({0, 100000}, kFloat32); // the columns path, empty
  EXPECT_EQ(vals(sum(big_e, {0})), std::vector<double>(100000, 0.0));
}

TEST(Reduce, EmptyReductionsWithoutIdentityThrow) {
  Tensor e = detail::make_tensor({0, 3}, kFloat32);
  expect_error([&] { max(e); }, {"max: Expected reduction dim to be specified for input.numel() == 0", "[0, 3]"});
  expect_error([&] { min(e); }, {"min: Expected reduction dim to be specified", "[0, 3]"});
  expect_error([&] { amax(e); }, {"amax: Expected reduction dim to be specified", "[0, 3]"});
  expect_error([&] { amax(e, {0}); }, {"amax: Expected reduction dim 0 to have non-zero size", "[0, 3]"});
  expect_error([&] { amin(e, {-2, 1}); }, {"amin: Expected reduction dim 0 to have non-zero size"});
  expect_error([&] { max(e, 0); }, {"max: Expected reduction dim 0 to have non-zero size", "[0, 3]"});
  expect_error([&] { min(e, -2, true); }, {"min: Expected reduction dim 0"});
  expect_error([&] { argmax(e); }, {"argmax: Expected reduction dim to be specified", "[0, 3]"});
  expect_error([&] { argmin(e, 0); }, {"argmin: Expected reduction dim 0 to have non-zero size"});
  expect_error([&] { norm(e, kInf); }, {"norm: cannot compute the inf norm on an empty tensor", "[0, 3]"});
  expect_error([&] { norm(e, -1, {0}); }, {"norm: cannot compute the -1 norm"});
  EXPECT_EQ(vals(norm(e, 1, {0})), (std::vector<double>{0, 0, 0}));
}

TEST(Reduce, VarCorrectionLargerThanCount) {
  Tensor x = make<float>({2, 3}, {1, 2, 4, 5, 5, 5});
  std::vector<double> v = vals(var(x, {1}, 3.0));
  EXPECT_EQ(v[0], INFINITY); // spread / 0
  EXPECT_TRUE(std::isnan(v[1])); // 0 / 0
  EXPECT_EQ(vals(kiln::std(x, {1}, 5.0))[0], INFINITY);
  expect_reduces(var(x, {1}, 2.0), x, {1}, false, ref_var(2.0, false), 1e-6, "correction 2");
}

TEST(Reduce, VarIsNumericallyStable) {
  // A large offset and a small spread: E[x^2] - E[x]^2 would lose every digit.
  Tensor x = detail::make_tensor({4, 1000}, kFloat64);
  double *p = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = 1e8 + double(i % 7) * 1e-3;
  expect_reduces(var(x, {1}), x, {1}, false, ref_var(1.0, false), 1e-9, "offset rows");
  expect_reduces(var(x, {0}), x, {0}, false, ref_var(1.0, false), 1e-9, "offset columns");
  Tensor f = data({2048, 8});
  float *q = f.data_ptr<float>();
  for (int64_t i = 0; i < f.numel(); ++i) q[i] += 1e4f;
  expect_reduces(var(f, {0}), f, {0}, false, ref_var(1.0, false), 1e-4, "float32 offset columns");
  expect_reduces(var(f), f, {}, false, ref_var(1.0, false), 1e-4, "float32 offset full");
}

// ---------------------------------------------------------------- large inputs, paths, threads

TEST(Reduce, MillionFloatSumIsAccurate) {
  Tensor x = rand({1 << 20}); // all positive: rounding errors do not cancel
  double want = ref_sum(vals(x));
  EXPECT_NEAR(sum(x).item<float>(), want, 1e-5 * want);
  EXPECT_NEAR(sum(x, {0}).item<float>(), want, 1e-5 * want);
  EXPECT_NEAR(mean(x).item<float>(), want / double(1 << 20), 1e-5 * want / double(1 << 20));
  Tensor c = x.view({1024, 1024});
  expect_reduces(sum(c, {0}), c, {0}, false, ref_sum, 1e-6, "columns of 1024"); // columns path
  expect_reduces(sum(c, {1}), c, {1}, false, ref_sum, 1e-6, "rows of 1024");
  EXPECT_NEAR(sum(c.t()).item<float>(), want, 1e-5 * want);
  Tensor tall = x.view({1 << 18, 4});
  expect_reduces(sum(tall, {0}), tall, {0}, false, ref_sum, 1e-6, "split columns");
  Tensor wide = x.view({2, 1 << 19});
  expect_reduces(sum(wide, {1}), wide, {1}, false, ref_sum, 1e-6, "split rows");
}

TEST(Reduce, LargePathsMatchReference) {
  Tensor x = data({512, 300});
  std::vector<std::pair<std::string, Tensor>> ins = {
      {"rows", x}, {"transposed", x.t()}, {"strided", x.slice(1, 0, 300, 3)}, {"tall", x.view({51200, 3})}};
  for (auto &[name, t] : ins)
    for (int64_t d : {0, 1}) {
      std::string ctx = name + " dim " + std::to_string(d);
      expect_reduces(amax(t, {d}), t, {d}, false, ref_max, 0, ctx);
      expect_reduces(var(t, {d}), t, {d}, false, ref_var(1, false), 1e-5, ctx);
      expect_reduces(norm(t, 2, {d}), t, {d}, false, ref_norm(2), 1e-5, ctx);
      expect_arg(argmin(t, d), Tensor(), t, {d}, false, false, ctx);
      auto [v, i] = max(t, d);
      expect_arg(i, v, t, {d}, false, true, ctx);
    }
  Tensor big = data({3, 100000}); // few outputs: the reduction itself is split
  expect_arg(argmax(big, 1), Tensor(), big, {1}, false, true, "split argmax");
  EXPECT_EQ(argmax(big).item<int64_t>(), ref_argext(vals(big), true));
  expect_reduces(amin(big), big, {}, false, ref_min, 0, "split amin");
  expect_reduces(var(big, {1}), big, {1}, false, ref_var(1, false), 1e-5, "split var");
  Tensor big_t = data({100000, 5}); // split columns
  auto [bv, bi] = min(big_t, 0);
  expect_arg(bi, bv, big_t, {0}, false, false, "split columns min");
  expect_reduces(kiln::std(big_t, {0}), big_t, {0}, false, ref_var(1, true), 1e-5, "split columns std");
}

TEST(Reduce, LargeIntegerAndBoolPaths) {
  Tensor i = data({20000, 40}, kInt32), b = data({300, 2000}, kBool);
  expect_reduces(sum(i, {0}), i, {0}, false, ref_sum, 0, "int32 columns");
  expect_reduces(sum(i), i, {}, false, ref_sum, 0, "int32 split full");
  expect_reduces(amax(i, {0}), i, {0}, false, ref_max, 0, "int32 amax columns");
  expect_reduces(amin(i.t(), {1}), i.t(), {1}, false, ref_min, 0, "int32 amin transposed");
  expect_arg(argmax(i, 0), Tensor(), i, {0}, false, true, "int32 argmax columns");
  expect_reduces(sum(b, {1}), b, {1}, false, ref_sum, 0, "bool rows");
  expect_reduces(amax(b, {0}), b, {0}, false, ref_max, 0, "bool amax columns");
  expect_reduces(amin(b), b, {}, false, ref_min, 0, "bool amin full");
  auto [v, k] = max(b, 1);
  expect_arg(k, v, b, {1}, false, true, "bool max rows");
}

TEST(Reduce, ThreadCountDoesNotChangeResults) {
  Tensor x = data({1 << 20});
  Tensor m = data({4096, 1024}, kFloat32, 7);
  Tensor tall = data({200000, 6}, kFloat32, 8);
  std::vector<std::pair<std::string, std::function<Tensor()>>> cases = {
      {"sum full", [&] { return sum(x); }},
      {"mean rows", [&] { return mean(m, {-1}); }},
      {"sum cols", [&] { return sum(m, {0}); }},
      {"sum transposed", [&] { return sum(m.t(), {1}); }},
      {"var rows", [&] { return var(m, {1}); }},
      {"std cols", [&] { return kiln::std(m, {0}); }},
      {"norm full", [&] { return norm(m); }},
      {"sum tall", [&] { return sum(tall, {0}); }},
      {"amax rows", [&] { return amax(m, {1}); }},
      {"argmax full", [&] { return argmax(x); }},
      {"argmin cols", [&] { return argmin(tall, 0); }},
      {"prod", [&] { return prod(tall, 1); }},
  };
  for (auto &[name, f] : cases) {
    Tensor one = with_threads(1, f), two = with_threads(2, f);
    expect_same_values(one, two, name);
  }
}

// ---------------------------------------------------------------- errors

TEST(Reduce, BadDimsThrow) {
  Tensor x = data({2, 3});
  expect_error([&] { sum(x, {0, 0}); }, {"sum: dim 0 appears multiple times", "[2, 3]"});
  expect_error([&] { mean(x, {1, -1}); }, {"mean: dim 1 appears multiple times"});
  expect_error([&] { amax(x, {-2, 0}); }, {"amax: dim 0 appears multiple times"});
  expect_error([&] { var(x, {1, 1}); }, {"var: dim 1 appears multiple times"});
  expect_error([&] { norm(x, 2, {0, -2}); }, {"norm: dim 0 appears multiple times"});
  expect_error([&] { sum(x, {2}); }, {"sum: dim 2 is out of range", "[2, 3]"});
  expect_error([&] { prod(x, -3); }, {"prod: dim -3 is out of range", "[2, 3]"});
  expect_error([&] { max(x, 5); }, {"max: dim 5 is out of range", "[2, 3]"});
  expect_error([&] { argmin(x, 2); }, {"argmin: dim 2 is out of range"});
  expect_error([&] { kiln::std(x, {7}); }, {"std: dim 7 is out of range"});
  expect_error([&] { sum(make<float>({}, {1.f}), {1}); }, {"sum: dim 1 is out of range", "[]"});
  expect_error([&] { sum(Tensor()); }, {"sum: self is an undefined tensor"});
  expect_error([&] { argmax(Tensor(), 0); }, {"argmax: self is an undefined tensor"});
}

TEST(Reduce, BadDtypesThrow) {
  Tensor i = data({2, 3}, kInt64), b = data({2, 3}, kBool);
  expect_error([&] { mean(i); }, {"mean: could not infer output dtype", "int64", "[2, 3]"});
  expect_error([&] { mean(data({2}), kInt32); }, {"mean: could not infer output dtype", "int32"});
  expect_error([&] { var(i, {0}); }, {"var: std and var only support floating point", "int64", "[2, 3]"});
  expect_error([&] { kiln::std(b); }, {"std: std and var only support floating point", "bool"});
  expect_error([&] { norm(i); }, {"norm: expected a floating point input, got int64", "[2, 3]"});
  expect_error([&] { argmax(b); }, {"argmax: not implemented for bool", "[2, 3]"});
  expect_error([&] { argmin(b, 1); }, {"argmin: not implemented for bool"});
}

// ---------------------------------------------------------------- meta tensors, adapters, tracing

TEST(Reduce, MetaTensorsGiveShapeAndDtype) {
  Tensor m = detail::make_tensor({4, 5, 6}, kInt32, /*meta=*/true);
  Tensor s = sum(m, {1}, true);
  EXPECT_TRUE(s.is_meta());
  EXPECT_EQ(s.sizes().vec(), (Vec{4, 1, 6}));
  EXPECT_EQ(s.dtype(), kInt64);
  auto [v, i] = max(m, -1);
  EXPECT_TRUE(v.is_meta() && i.is_meta());
  EXPECT_EQ(v.sizes().vec(), (Vec{4, 5}));
  EXPECT_EQ(i.dtype(), kInt64);
  Tensor f = detail::make_tensor({4, 5}, kFloat32, true);
  EXPECT_EQ(var(f, {0}).sizes().vec(), (Vec{5}));
  EXPECT_EQ(norm(f, 1, {0, 1}, true).sizes().vec(), (Vec{1, 1}));
  EXPECT_EQ(argmax(f).dim(), 0);
  EXPECT_THROW(mean(m), Error); // the same checks as eager
}

namespace {
void expect_same(const std::vector<Tensor> &a, const std::vector<Tensor> &b, const std::string &ctx) {
  ASSERT_EQ(a.size(), b.size()) << ctx;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].dtype(), b[k].dtype()) << ctx;
    expect_same_values(a[k], b[k], ctx);
  }
}
} // namespace

TEST(Reduce, AdaptersMatchTypedCalls) {
  Tensor x = data({3, 4, 5}), i = data({3, 4}, kInt32);
  auto none = AttrValue();
  expect_same(run_op(OpId::Sum, {x}, {Vec{0, 2}, true, none}), {sum(x, {0, 2}, true)}, "Sum");
  expect_same(run_op(OpId::Sum, {i}, {Vec{}, false, kFloat64}), {sum(i, kFloat64)}, "Sum dtype");
  expect_same(run_op(OpId::Mean, {x}, {Vec{-1}, false, none}), {mean(x, {-1})}, "Mean");
  expect_same(run_op(OpId::Prod, {x}, {Vec{}, false, none}), {prod(x)}, "Prod full");
  expect_same(run_op(OpId::Prod, {i}, {Vec{1}, true, kInt32}), {prod(i, 1, true, kInt32)}, "Prod dim");
  EXPECT_THROW(run_op(OpId::Prod, {x}, {Vec{0, 1}, false, none}), Error);
  expect_same(run_op(OpId::Amax, {x}, {Vec{1}, false}), {amax(x, {1})}, "Amax");
  expect_same(run_op(OpId::Amax, {x}, {Vec{}, false}), {max(x)}, "Amax full");
  expect_same(run_op(OpId::Amin, {x}, {Vec{0, 1}, true}), {amin(x, {0, 1}, true)}, "Amin");
  auto [mv, mi] = max(x, 1, true);
  expect_same(run_op(OpId::MaxDim, {x}, {1, true}), {mv, mi}, "MaxDim");
  auto [nv, ni] = min(x, -1);
  expect_same(run_op(OpId::MinDim, {x}, {-1, false}), {nv, ni}, "MinDim");
  expect_same(run_op(OpId::Argmax, {x}, {none, false}), {argmax(x)}, "Argmax full");
  expect_same(run_op(OpId::Argmax, {x}, {2, true}), {argmax(x, 2, true)}, "Argmax dim");
  expect_same(run_op(OpId::Argmin, {x}, {0, false}), {argmin(x, 0)}, "Argmin");
  expect_same(run_op(OpId::Var, {x}, {Vec{1}, none, false}), {var(x, {1})}, "Var");
  expect_same(run_op(OpId::Var, {x}, {Vec{}, 0.0, true}), {var(x, {}, 0.0, true)}, "Var correction");
  expect_same(run_op(OpId::Std, {x}, {Vec{0, 2}, 2.0, false}), {kiln::std(x, {0, 2}, 2.0)}, "Std");
  expect_same(run_op(OpId::Norm, {x}, {Scalar(1), Vec{2}, true}), {norm(x, 1, {2}, true)}, "Norm");
  expect_same(run_op(OpId::Norm, {x}, {kInf, Vec{}, false}), {norm(x, kInf)}, "Norm inf");
  EXPECT_THROW(run_op(OpId::Sum, {x, x}, {Vec{}, false, none}), Error);
  EXPECT_THROW(run_op(OpId::Sum, {x}, {Vec{}, false}), Error); // attribute count
}

namespace {
// A stand-in tracer: records each op and hands back meta results of the right shape.
struct Recorded {
  OpId id;
  Attrs attrs;
};
std::vector<Recorded> g_recorded;

std::vector<Tensor> record(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  g_recorded.push_back({id, attrs});
  std::vector<Tensor> meta;
  for (const Tensor &t : inputs) meta.push_back(detail::make_tensor(t.sizes(), t.dtype(), true));
  detail::TracingOff off;
  std::vector<Tensor> out = run_op(id, meta, attrs); // the op's own shape rule
  return out;
}

// Traces f(x), then replays what was recorded through run_op on real data.
std::vector<Tensor> trace_and_replay(const Tensor &x, const std::function<std::vector<Tensor>(const Tensor &)> &f,
                                     OpId want_id, const Attrs &want_attrs) {
  g_recorded.clear();
  detail::TraceHooks hooks;
  hooks.record = record;
  detail::set_trace_hooks(hooks);
  detail::t_tracing = true;
  std::vector<Tensor> traced = f(x);
  detail::t_tracing = false;
  detail::set_trace_hooks(detail::TraceHooks{});
  EXPECT_EQ(g_recorded.size(), 1u);
  if (g_recorded.size() != 1) return {};
  EXPECT_EQ(g_recorded[0].id, want_id) << op_info(want_id).mnemonic;
  EXPECT_EQ(g_recorded[0].attrs, want_attrs) << op_info(want_id).mnemonic;
  for (const Tensor &t : traced) EXPECT_TRUE(t.is_meta());
  return run_op(g_recorded[0].id, {x}, g_recorded[0].attrs);
}
} // namespace

TEST(Reduce, TracingRecordsOpsDefAttributes) {
  Tensor x = data({3, 4});
  auto none = AttrValue();
  struct Case {
    std::function<std::vector<Tensor>(const Tensor &)> f;
    OpId id;
    Attrs attrs;
  };
  std::vector<Case> cases = {
      {[](const Tensor &t) { return std::vector<Tensor>{sum(t)}; }, OpId::Sum, {Vec{}, false, none}},
      {[](const Tensor &t) { return std::vector<Tensor>{sum(t, {-1}, true, kFloat64)}; }, OpId::Sum,
       {Vec{1}, true, kFloat64}},
      {[](const Tensor &t) { return std::vector<Tensor>{mean(t, {0, 1})}; }, OpId::Mean, {Vec{0, 1}, false, none}},
      {[](const Tensor &t) { return std::vector<Tensor>{prod(t)}; }, OpId::Prod, {Vec{}, false, none}},
      {[](const Tensor &t) { return std::vector<Tensor>{prod(t, -1, true)}; }, OpId::Prod, {Vec{1}, true, none}},
      {[](const Tensor &t) { return std::vector<Tensor>{max(t)}; }, OpId::Amax, {Vec{}, false}},
      {[](const Tensor &t) { return std::vector<Tensor>{min(t)}; }, OpId::Amin, {Vec{}, false}},
      {[](const Tensor &t) { return std::vector<Tensor>{amax(t, {-2})}; }, OpId::Amax, {Vec{0}, false}},
      {[](const Tensor &t) {
         auto [v, i] = max(t, -1, true);
         return std::vector<Tensor>{v, i};
       },
       OpId::MaxDim, {1, true}},
      {[](const Tensor &t) {
         auto [v, i] = min(t, 0);
         return std::vector<Tensor>{v, i};
       },
       OpId::MinDim, {0, false}},
      {[](const Tensor &t) { return std::vector<Tensor>{argmax(t)}; }, OpId::Argmax, {none, false}},
      {[](const Tensor &t) { return std::vector<Tensor>{argmin(t, -1, true)}; }, OpId::Argmin, {1, true}},
      {[](const Tensor &t) { return std::vector<Tensor>{var(t, {1})}; }, OpId::Var, {Vec{1}, none, false}},
      {[](const Tensor &t) { return std::vector<Tensor>{kiln::std(t, {}, 0.0, true)}; }, OpId::Std,
       {Vec{}, 0.0, true}},
      {[](const Tensor &t) { return std::vector<Tensor>{norm(t, 3, {-1})}; }, OpId::Norm, {Scalar(3), Vec{1}, false}},
  };
  for (Case &c : cases) {
    std::vector<Tensor> replayed = trace_and_replay(x, c.f, c.id, c.attrs);
    expect_same(replayed, c.f(x), std::string(op_info(c.id).mnemonic));
  }
  // Errors come before recording, as in eager mode.
  g_recorded.clear();
  detail::TraceHooks hooks;
  hooks.record = record;
  detail::set_trace_hooks(hooks);
  detail::t_tracing = true;
  EXPECT_THROW(sum(x, {0, 0}), Error);
  EXPECT_THROW(mean(data({2}, kInt64)), Error);
  detail::t_tracing = false;
  detail::set_trace_hooks(detail::TraceHooks{});
  EXPECT_TRUE(g_recorded.empty());
}

// ---------------------------------------------------------------- the shared row helpers

TEST(ReduceRows, HelpersMatchNaiveLoops) {
  using namespace kiln::reduce_rows;
  for (int64_t n : {0, 1, 5, 31, 32, 33, 64, 1000, 1025, 5000}) {
    Tensor t = data({n}, kFloat32, uint64_t(n) + 11);
    const float *p = t.data_ptr<float>();
    std::vector<double> v = vals(t);
    std::string ctx = "n " + std::to_string(n);
    EXPECT_NEAR(sum_f32(p, n), ref_sum(v), 1e-6 * std::max(1.0, std::abs(ref_sum(v)))) << ctx;
    if (n == 0) {
      EXPECT_EQ(extreme_contig<true>(p, n, -1.f), -1.f);
      EXPECT_EQ(find_first(p, n, 0.f), 0);
      continue;
    }
    float hi = extreme_contig<true>(p, n, -INFINITY), lo = extreme_contig<false>(p, n, INFINITY);
    EXPECT_EQ(hi, ref_max(v)) << ctx;
    EXPECT_EQ(lo, ref_min(v)) << ctx;
    EXPECT_EQ(find_first(p, n, hi), ref_argext(v, true)) << ctx;
    EXPECT_EQ(find_first(p, n, 12345.f), n) << ctx;
    std::vector<float> w(p, p + n);
    w[size_t(n / 2)] = NAN;
    if (n > 3) w[size_t(n - 1)] = NAN;
    EXPECT_TRUE(std::isnan(extreme_contig<true>(w.data(), n, -INFINITY))) << ctx;
    EXPECT_TRUE(std::isnan(extreme_contig<false>(w.data(), n, INFINITY))) << ctx;
    EXPECT_EQ(find_first(w.data(), n, NAN), n / 2) << ctx;
    Tensor i = data({n}, kInt32, uint64_t(n));
    std::vector<double> iv = vals(i);
    int32_t imax = extreme_contig<true>(i.data_ptr<int32_t>(), n, std::numeric_limits<int32_t>::lowest());
    EXPECT_EQ(imax, ref_max(iv)) << ctx;
    EXPECT_EQ(find_first(i.data_ptr<int32_t>(), n, imax), ref_argext(iv, true)) << ctx;
  }
}
