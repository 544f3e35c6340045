// Helpers for the tracer / interpreter / pass tests: seeded random tensors
// written element by element, strided reads in double, and closeness checks
// against eager results (never against the code under test).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <kiln/kiln.h>

#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::testing {

inline Tensor rnd(std::vector<int64_t> shape, uint64_t seed, DType dt = kFloat32, double lo = -2, double hi = 2) {
  Tensor t = detail::make_tensor(shape, dt);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  dispatch_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = is_floating(dt) ? T(dist(gen)) : T(std::floor(dist(gen)));
  });
  return t;
}

// Elements in row-major order, read through the strides.
inline std::vector<double> vals(const Tensor &t) {
  std::vector<double> out;
  std::vector<int64_t> idx(size_t(t.dim()), 0);
  const void *base = t.impl().storage->data();
  auto read = [&](int64_t off) {
    switch (t.dtype()) {
    case kFloat32: return double(static_cast<const float *>(base)[off]);
    case kFloat64: return static_cast<const double *>(base)[off];
    case kInt64: return double(static_cast<const int64_t *>(base)[off]);
    case kInt32: return double(static_cast<const int32_t *>(base)[off]);
    case kBool: return double(static_cast<const bool *>(base)[off]);
    case kUInt8: return double(static_cast<const uint8_t *>(base)[off]);
    case kInt8: return double(static_cast<const int8_t *>(base)[off]);
    case kInt16: return double(static_cast<const int16_t *>(base)[off]);
    case kFloat16: return double(float(static_cast<const kiln::Half *>(base)[off]));
    case kBFloat16: return double(float(static_cast<const kiln::BFloat16 *>(base)[off]));
    }
    return 0.0;
  };
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.strides()[d];
    out.push_back(read(off));
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

inline Tensor copy_of(const Tensor &t) {
  Tensor c = detail::make_tensor(t.sizes(), t.dtype());
  std::vector<double> v = vals(t);
  dispatch_storage_dtype(t.dtype(), [&]<class T>() {
    for (size_t i = 0; i < v.size(); ++i) static_cast<T *>(c.raw_data())[i] = T(v[i]);
  });
  return c;
}

inline std::vector<Tensor> copies(const std::vector<Tensor> &ts) {
  std::vector<Tensor> out;
  for (const Tensor &t : ts) out.push_back(copy_of(t));
  return out;
}

inline ::testing::AssertionResult close(const Tensor &got, const Tensor &want, double tol = 1e-5) {
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "dtype " << got.dtype() << " != " << want.dtype();
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.sizes()) << " != " << shape_str(want.sizes());
  std::vector<double> a = vals(got), b = vals(want);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (a[i] == b[i]) continue; // infinities
    if (!(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " != " << b[i];
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const std::vector<Tensor> &got, const std::vector<Tensor> &want,
                                            double tol = 1e-5) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " results, want " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    auto r = close(got[i], want[i], tol);
    if (!r) return ::testing::AssertionFailure() << "result " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// fn compiled with fallback off, called twice (compile, then the cached plan) on copies
// of `in`, equals fn run eagerly within tol; returns the compiled function for more checks.
inline CompiledFunction expect_compiled_equals_eager(const TracedFunction &fn, const std::vector<Tensor> &in,
                                                     double tol) {
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  const std::vector<Tensor> want = fn(copies(in));
  for (int call = 0; call < 2; ++call) EXPECT_TRUE(all_close(f(copies(in)), want, tol)) << "call " << call;
  return f;
}

inline int count_op(const ir::Graph &g, OpId id) {
  int n = 0;
  for (const ir::Node *node : g.nodes()) n += node->kind() == ir::Node::Kind::Op && node->op() == id;
  return n;
}

inline std::vector<OpId> ops_of(const ir::Graph &g) {
  std::vector<OpId> out;
  for (const ir::Node *n : g.nodes()) out.push_back(n->op());
  return out;
}


} // namespace kiln::testing
