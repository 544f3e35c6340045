// Helpers shared by linalg_test.cpp and nn_test.cpp: inputs filled by hand and
// values read back through sizes/strides, so no op under test is involved.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "runtime/op_registry.h"

namespace nntest {
using namespace kiln;
using Shape = std::vector<int64_t>;

// Deterministic values in [-1, 1) (floats) or small integers in [-4, 4].
inline Tensor rnd(const Shape &shape, DType dt = kFloat32, uint32_t seed = 1) {
  Tensor t = detail::make_tensor(shape, dt);
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  dispatch_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_floating_point_v<T>) p[i] = T(u(g));
      else if constexpr (std::is_same_v<T, bool>) p[i] = u(g) > 0;
      else p[i] = T(std::lround(u(g) * 4));
    }
  });
  return t;
}

// A contiguous tensor holding `v` (row-major) in dtype dt.
inline Tensor from_values(const Shape &shape, const std::vector<double> &v, DType dt) {
  Tensor t = detail::make_tensor(shape, dt);
  dispatch_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(v[size_t(i)]);
  });
  return t;
}

// Element at a multi-index, read through strides, as double.
inline double at(const Tensor &t, const Shape &idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return dispatch_dtype(t.dtype(), [&]<class T>() { return double(static_cast<const T *>(t.raw_data())[off]); });
}

// Multi-index of the i-th element (row-major) of `shape`.
inline Shape unravel(int64_t i, const Shape &shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return idx;
}

inline int64_t numel_of(const Shape &s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

// All values of t in row-major order.
inline std::vector<double> values(const Tensor &t) {
  std::vector<double> v;
  const Shape shape = t.sizes().vec();
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(at(t, unravel(i, shape)));
  return v;
}

// A reference result: shape and row-major double values.
struct Want {
  Shape shape;
  std::vector<double> v;
};

inline void expect_close(const Tensor &got, const Want &ref, double atol, double rtol = 0) {
  ASSERT_EQ(got.sizes().vec(), ref.shape);
  ASSERT_EQ(size_t(got.numel()), ref.v.size());
  std::vector<double> g = values(got);
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = ref.v[i], tol = atol + rtol * std::fabs(want);
    const bool ok = (std::isnan(want) && std::isnan(g[i])) || std::fabs(g[i] - want) <= tol ||
                    (std::isinf(want) && g[i] == want);
    if (!ok && bad++ < 5) ADD_FAILURE() << "element " << i << ": got " << g[i] << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
}

// Bitwise-equal values (adapter vs typed call).
inline void expect_same(const Tensor &a, const Tensor &b) {
  ASSERT_EQ(a.sizes().vec(), b.sizes().vec());
  ASSERT_EQ(a.dtype(), b.dtype());
  std::vector<double> x = values(a), y = values(b);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_TRUE(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) << i << ": " << x[i] << " vs " << y[i];
}

inline Tensor meta(const Shape &shape, DType dt = kFloat32) { return detail::make_tensor(shape, dt, true); }

// The message of the kiln::Error f throws ("<no error>" if none).
inline std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const kiln::Error &e) {
    return e.what();
  }
  return "<no error>";
}
} // namespace nntest

#define EXPECT_KILN_ERROR(stmt, substr)                                                                         \
  do {                                                                                                          \
    std::string msg_ = ::nntest::error_of([&] { (void)(stmt); });                                               \
    EXPECT_NE(msg_.find(substr), std::string::npos) << "message: " << msg_;                                     \
  } while (0)
