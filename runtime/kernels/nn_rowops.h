// Internal to nn.cpp / attention: row kernels shared by softmax, log_softmax,
// layer_norm and scaled_dot_product_attention.
//
// Floating-point reductions are written over kLanes independent accumulators
// so that g++ vectorizes them without -ffast-math (a single running sum would
// have to stay scalar under strict IEEE ordering).
#pragma once

#include "runtime/kernels/reduce_rows.h"
#include "runtime/kernels/vecmath_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kiln::detail::nn {

template <class T> inline constexpr int kLanes = 64 / sizeof(T); // one 512-bit register

// y[i] = exp(y[i]), and y[i] = exp(x[i] - shift) (y may equal x). float32 through the
// generated vector-math kernel that eager exp() runs and the JIT inlines
// (runtime/kernels/vecmath_kernels.h), so softmax's exponentials are bit for bit
// the compiled ones; float64 through libm, as the JIT's float64 exp.
template <class T> void exp_in_place(T *y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    kiln_vm_exp_f32(y, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(y[i]);
  }
}
// y[i] = log(y[i]): float32 through the generated vector-math kernel the JIT
// inlines, float64 through the definition the JIT's float64 log calls.
template <class T> void log_in_place(T *y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    kiln_vm_log_f32(y, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = kiln_vm_log_f64(y[i]);
  }
}
template <class T> void exp_shifted(const T *x, T *y, int64_t n, T shift) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  exp_in_place(y, n);
}

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
  exp_shifted(x, y, n, shift);
  return row_sum(y, n);
}

// sum(exp(x[i] - shift)) without storing: the exponentials go through a stack
// chunk, added in the lane order of row_sum.
template <class T> T exp_shift_sum_only(const T *x, int64_t n, T shift) {
  constexpr int L = kLanes<T>;
  constexpr int64_t kChunk = 64 * L; // a multiple of L: every lane sees the elements it sees in row_sum
  T buf[kChunk];
  T acc[L] = {};
  int64_t i = 0, m = 0;
  for (int64_t c = 0; c < n; c += kChunk) {
    m = std::min(kChunk, n - c);
    exp_shifted(x + c, buf, m, shift);
    for (i = 0; i + L <= m; i += L)
      for (int j = 0; j < L; ++j) acc[j] += buf[i + j];
  }
  T s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  for (; i < m; ++i) s += buf[i]; // the tail, left in buf by the last chunk
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
    // (x - max) - log(sum), in the order of the compiled form (passes/decompose.cpp),
    // with its log; x - (max + log(sum)) would also lose the bits that max and x share.
    T ls = exp_shift_sum_only(x, n, mx);
    log_in_place(&ls, 1);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mx) - ls;
    return;
  }
  const T inv = T(1) / exp_shift_sum(x, y, n, mx);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

} // namespace kiln::detail::nn
