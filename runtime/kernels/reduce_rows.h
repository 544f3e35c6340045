// Row reductions shared by the reduction kernels (runtime/kernels/reduce.cpp) and
// usable by any row-wise kernel (softmax, layer_norm): vectorized sum, max/min and
// first-index search over a contiguous row, with the NaN rules of torch.
//
// Every function's result depends on n and the data only (fixed lane and block
// layout), never on how a caller splits work across threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kiln::reduce_rows {

template <class T> inline constexpr bool kIsFloat = std::is_floating_point_v<T>;

struct Plus {
  template <class A> A operator()(A a, A b) const { return a + b; }
};
struct Times {
  template <class A> A operator()(A a, A b) const { return a * b; }
};

// v replaces a as the running max (IsMax) or min. NaN wins and stays; among
// equals the earlier one stays (indices report the first occurrence). Branch-free:
// on random data a branch here mispredicts often.
template <bool IsMax, class T> inline bool better(T v, T a) {
  bool b = IsMax ? v > a : v < a;
  if constexpr (kIsFloat<T>) b = b | ((v != v) & (a == a));
  return b;
}
// The running max/min of values only (no index), for scalar loops and the
// columns loop (which GCC vectorizes); a NaN v replaces a NaN a, which changes nothing.
template <bool IsMax> struct Pick {
  template <class T> T operator()(T a, T v) const {
    // Two plain selects: the first is exactly vmaxss/vminss, the second a blend.
    T m = IsMax ? (v > a ? v : a) : (v < a ? v : a);
    if constexpr (kIsFloat<T>) m = v != v ? v : m;
    return m;
  }
};

// Folds load(i), i < n, into L independent lanes: for sums and products the
// fixed-width inner loop is what GCC vectorizes without reassociating floating-point
// math (for max/min it emits branches: use extreme_contig). The lanes are folded in
// a fixed order, so the result depends on n only.
template <class Acc, int L = 16, class Load, class Comb>
inline Acc lane_reduce(int64_t n, Acc init, Load load, Comb comb) {
  if (n < L) { // short rows (many outputs of a few elements each): skip the lanes
    Acc acc = init;
    for (int64_t i = 0; i < n; ++i) acc = comb(acc, load(i));
    return acc;
  }
  Acc lanes[L];
  for (int l = 0; l < L; ++l) lanes[l] = init;
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) lanes[l] = comb(lanes[l], load(i + l));
  for (int w = L / 2; w > 0; w /= 2) // pairwise fold
    for (int l = 0; l < w; ++l) lanes[l] = comb(lanes[l], lanes[l + w]);
  Acc acc = lanes[0];
  for (; i < n; ++i) acc = comb(acc, load(i));
  return acc;
}

// The max (IsMax) or min of init and p[0, n), NaN propagating. GCC does not
// vectorize the compare-and-select of lane_reduce (it turns it into branches),
// so this one is written with GCC/Clang vector extensions: 64-byte vectors, one
// zmm with AVX-512, split into halves by the compiler on narrower machines.
template <bool IsMax, class T> T extreme_contig(const T *p, int64_t n, T init) {
  if constexpr (std::is_same_v<T, bool>) {
    return lane_reduce<T>(n, init, [p](int64_t i) { return p[i]; }, Pick<IsMax>{});
  } else {
    typedef T V __attribute__((vector_size(64)));
    constexpr int64_t W = 64 / sizeof(T);
    // By reference: a 64-byte vector passed by value changes the ABI without AVX-512 (-Wpsabi).
    auto pick = [](V &a, const V &v) {
      auto take = IsMax ? (v > a) : (v < a);
      if constexpr (kIsFloat<T>) take = take | (v != v);
      a = take ? v : a;
    };
    if (n < 2 * W) return lane_reduce<T>(n, init, [p](int64_t i) { return p[i]; }, Pick<IsMax>{});
    V a0 = V{} + init, a1 = a0;
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      V v0, v1;
      std::memcpy(&v0, p + i, sizeof(V));
      std::memcpy(&v1, p + i + W, sizeof(V));
      pick(a0, v0);
      pick(a1, v1);
    }
    pick(a0, a1);
    T acc = init;
    for (int64_t l = 0; l < W; ++l) acc = Pick<IsMax>{}(acc, T(a0[l]));
    for (; i < n; ++i) acc = Pick<IsMax>{}(acc, p[i]);
    return acc;
  }
}

// The first k < n with p[k] == m (m not NaN) or, when m is NaN, p[k] NaN; n if none.
// Vector compares 64 bytes at a time: the scalar scan cost as much as the max itself.
template <class T> int64_t find_first(const T *p, int64_t n, T m) {
  bool nan = m != m;
  int64_t k = 0;
  if constexpr (!std::is_same_v<T, bool>) {
    typedef T V __attribute__((vector_size(64)));
    constexpr int64_t W = 64 / sizeof(T);
    for (; k + W <= n; k += W) {
      V v;
      std::memcpy(&v, p + k, sizeof(V));
      auto hit = nan ? (v != v) : (v == m);
      uint64_t words[8], any = 0;
      std::memcpy(words, &hit, sizeof(words));
      for (uint64_t w : words) any |= w;
      if (any) break;
    }
  }
  for (; k < n; ++k)
    if (nan ? p[k] != p[k] : p[k] == m) return k;
  return n;
}

// A float32 sum: float lanes (full vector speed) over 1024-element blocks, each
// block's total added to a double. Each lane adds 32 values in float, so the
// rounding error stays ~1e-7 relative however long the row is.
inline double sum_f32(const float *p, int64_t n) {
  constexpr int64_t kBlock = 1024;
  double total = 0;
  for (int64_t i = 0; i < n; i += kBlock) {
    const float *q = p + i;
    total += lane_reduce<float, 32>(std::min(kBlock, n - i), 0.f, [q](int64_t j) { return q[j]; }, Plus{});
  }
  return total;
}

} // namespace kiln::reduce_rows
