// Internal to nn.cpp / attention: row kernels shared by softmax, log_softmax,
// layer_norm and scaled_dot_product_attention.
//
// Floating-point reductions are written over kLanes independent accumulators
// so that g++ vectorizes them without -ffast-math (a single running sum would
// have to stay scalar under strict IEEE ordering).
#pragma once

#include "runtime/kernels/reduce_rows.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln::detail::nn {

template <class T> inline constexpr int kLanes = 64 / sizeof(T); // one 512-bit register

// exp for float in a form the vectorizer accepts (no libm call): Cephes'
// range reduction and degree-6 polynomial, max relative error ~2 ulp. Inputs
// below ~-87.3 (including -inf) give 0; NaN stays NaN.
inline float exp_vec(float x) {
  float xc = x > -87.33f ? x : -87.33f; // NaN -> -87.33 here, restored below
  xc = xc < 88.72f ? xc : 88.72f;
  const float magic = 12582912.f; // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504088896341f + magic) - magic;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  const float y = p * r * r + r + 1.f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float res = y * scale;
  return x < -87.33f ? 0.f : (x != x ? x : res);
}
inline double exp_vec(double x) { return std::exp(x); }

// The max reduction uses GCC vector extensions: written over a lane array like
// the sums below, g++ 12 keeps the lanes in scalar registers (vmaxss).
// NaN-propagating row max (reduce_rows.h): a NaN anywhere in the row must make
// softmax of that row NaN, as torch, even when the other values are -inf.
template <class T> T row_max(const T *x, int64_t n) {
  return reduce_rows::extreme_contig<true, T>(x, n, -std::numeric_limits<T>::infinity());
}

template <class T> T row_sum(const T *x, int64_t n) {
  constexpr int L = kLanes<T>;
  T acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += x[i + j];
  T s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

// y[i] = exp(x[i] - shift); returns the sum of y. y may equal x.
template <class T> T exp_shift_sum(const T *x, T *y, int64_t n, T shift) {
  constexpr int L = kLanes<T>;
  T acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) {
      const T e = exp_vec(x[i + j] - shift);
      y[i + j] = e;
      acc[j] += e;
    }
  T s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  for (; i < n; ++i) {
    y[i] = exp_vec(x[i] - shift);
    s += y[i];
  }
  return s;
}

// sum(exp(x[i] - shift)) without storing.
template <class T> T exp_shift_sum_only(const T *x, int64_t n, T shift) {
  constexpr int L = kLanes<T>;
  T acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += exp_vec(x[i + j] - shift);
  T s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  for (; i < n; ++i) s += exp_vec(x[i] - shift);
  return s;
}

// One softmax / log_softmax row. `safe`: a row whose max is -inf (fully masked
// attention row) gives zeros instead of NaN.
template <class T> void softmax_row(const T *x, T *y, int64_t n, bool log, bool safe = false) {
  if (n == 0) return;
  const T mx = row_max(x, n);
  if (safe && mx == -std::numeric_limits<T>::infinity()) {
    for (int64_t i = 0; i < n; ++i) y[i] = T(0);
    return;
  }
  if (log) {
    const T lse = mx + std::log(exp_shift_sum_only(x, n, mx));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
    return;
  }
  const T inv = T(1) / exp_shift_sum(x, y, n, mx);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

} // namespace kiln::detail::nn
