// Native vectors for hand-vectorized kernels (GCC/Clang vector extension; the
// library is built for the host CPU, so 16 floats are one zmm register): the
// accumulators stay in registers across runtime loops. Used by eager's direct
// depthwise conv (runtime/kernels/conv.cpp) and kiln's compiled one
// (codegen/gemm/depthwise.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace kiln::detail::simd {

template <class T, int L> struct VecOf {
  typedef T type __attribute__((vector_size(L * sizeof(T))));
};
template <class T, int L> using Vec = typename VecOf<T, L>::type;
template <class T> constexpr int kLanes = int(64 / sizeof(T)); // one 512-bit register

template <class T, int L> inline Vec<T, L> load(const T *p) {
  Vec<T, L> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Lanes 0, 2, 4, ... of the 2L lanes of a then b (__builtin_shufflevector: GCC >= 12 and Clang).
template <class V, int... I> inline V even_lanes(V a, V b, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(a, b, (2 * I)...);
}
// Elements p[0], p[s], ..., p[(L - 1) s]: S is the stride when known (1, 2), else 0 and s is read.
template <class T, int L, int S> inline Vec<T, L> load_strided(const T *p, int64_t s) {
  if constexpr (S == 1) {
    return load<T, L>(p);
  } else if constexpr (S == 2 && L > 1) { // two loads, even lanes (one permute)
    return even_lanes(load<T, L>(p), load<T, L>(p + L), std::make_integer_sequence<int, L>{});
  } else {
    Vec<T, L> v;
    for (int i = 0; i < L; ++i) v[i] = p[i * s];
    return v;
  }
}

} // namespace kiln::detail::simd
