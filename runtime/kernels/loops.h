// The strided N-ary loop every elementwise kernel runs through.
//
//   Arg a(x, kFloat32), b(y, kFloat32);                 // operands, converted to the compute type
//   run_loop<float, float, float>(out, {&a, &b}, [](float p, float q) { return p + q; });
//
// Operand 0 is the output; inputs broadcast to its shape. The loop
//   1. takes a flat path when the output is contiguous and every input is either
//      contiguous with the output's numel or a single element (stride 0);
//   2. otherwise drops size-1 dims, orders dims by the output's strides and merges
//      dims that are contiguous for every operand (coalescing), and walks the rest;
//   3. hands each innermost run to a tight loop: when every run is contiguous or a
//      broadcast scalar, a plain indexed loop the compiler vectorizes (scalars are
//      read once, outside the loop); otherwise a byte-strided loop;
//   4. splits runs of more than kGrain elements over kiln::parallel_for.
// No heap allocation, no std::function: a 1-element op costs a few branches.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace kiln::detail {

// Elements per parallel chunk: small ops stay on the calling thread.
inline constexpr int64_t kGrain = 32768;

// T -> Out as torch's static_cast, but defined for NaN and out-of-range floats
// converted to integers (C++ leaves those undefined; this gives x86's "integer
// indefinite" value, what torch gets). A compare and a blend: it vectorizes.
template <class Out, class T> inline Out convert_value(T v) {
  if constexpr (std::is_same_v<Out, T>) return v;
  else if constexpr (is_reduced_float_v<T>) return convert_value<Out>(static_cast<float>(v)); // exact
  else if constexpr (is_reduced_float_v<Out>) return Out(convert_value<float>(v)); // as torch: through float
  else if constexpr (std::is_same_v<Out, bool>) return v != T(0);
  else if constexpr (std::is_integral_v<Out> && sizeof(Out) < 4 && std::is_floating_point_v<T>) {
    // torch goes through int64 for the small integers (c10's static_cast_with_inter_type):
    // -1.0 -> uint8 255, 300.0 -> int8 44.
    return static_cast<Out>(convert_value<int64_t>(v));
  } else if constexpr (std::is_integral_v<Out> && std::is_floating_point_v<T>) {
    constexpr T lo = T(std::numeric_limits<Out>::min());
    return v >= lo && v < -lo ? static_cast<Out>(v) : std::numeric_limits<Out>::min();
  } else return static_cast<Out>(v);
}

// Contiguity and the first element's address straight from the impl: the op has
// already checked that nothing is meta, and these run several times per call.
inline bool impl_contiguous(const TensorImpl &t) { return detail::is_contiguous(t); }
inline char *impl_data(const TensorImpl &t) {
  return static_cast<char *>(t.storage->data()) + t.storage_offset * int64_t(itemsize(t.dtype));
}

// One input of an elementwise loop, already in the compute dtype `want`:
// the tensor itself when its dtype matches; a single value converted into `buf`
// when it has one element (scalars, wrapped numbers); otherwise a converted copy.
struct Arg {
  char *data = nullptr;
  IntArrayRef sizes, strides; // element strides; empty for an inline value
  int64_t numel = 1;
  int64_t itemsize = 0;
  bool contiguous = true;
  Tensor keep; // the converted copy, when one was made
  alignas(8) char buf[8];

  Arg(const Tensor &t, DType want) {
    const TensorImpl &ti = *t.unsafeGetTensorImpl();
    if (ti.dtype != want) {
      convert(t, want);
      return;
    }
    itemsize = int64_t(kiln::itemsize(want));
    data = impl_data(ti);
    sizes = ti.sizes;
    strides = ti.strides;
    numel = ti.numel;
    contiguous = impl_contiguous(ti);
  }
  Arg(const Arg &) = delete;
  Arg &operator=(const Arg &) = delete;

private:
  void convert(const Tensor &t, DType want); // elementwise_copy.cpp
};

// ---------------------------------------------------------------- innermost runs

// A contiguous run: inputs whose bit is set in M are broadcast scalars, read once.
// flatten: everything f calls is inlined into the loop, however large (the
// float32 transcendentals of vecmath.h are ~100 instructions behind two lambda
// layers, past GCC's inlining limits); a call left in the body stops vectorization.
template <unsigned M, class Out, class... In, class F, size_t... I>
[[gnu::flatten]] inline void contig_run(char *const *ptrs, int64_t n, F &f, std::index_sequence<I...>) {
  Out *o = reinterpret_cast<Out *>(ptrs[0]);
  const std::tuple<const In *...> p{reinterpret_cast<const In *>(ptrs[I + 1])...};
  const std::tuple<In...> s{(((M >> I) & 1u) ? *std::get<I>(p) : In{})...};
  for (int64_t k = 0; k < n; ++k)
    o[k] = static_cast<Out>(f((((M >> I) & 1u) ? std::get<I>(s) : std::get<I>(p)[k])...));
}

template <class Out, class... In, class F, size_t... I>
inline void strided_run(char *const *ptrs, const int64_t *st, int64_t n, F &f, std::index_sequence<I...>) {
  for (int64_t k = 0; k < n; ++k)
    *reinterpret_cast<Out *>(ptrs[0] + k * st[0]) =
        static_cast<Out>(f(*reinterpret_cast<const In *>(ptrs[I + 1] + k * st[I + 1])...));
}

// Picks the vectorizable loop when every operand's run is contiguous or a scalar.
template <class Out, class... In, class F>
inline void inner_run(char *const *ptrs, const int64_t *st, int64_t n, F &f) {
  constexpr size_t K = sizeof...(In);
  using Seq = std::make_index_sequence<K>;
  constexpr int64_t isz[K + 1] = {int64_t(sizeof(In))..., 0}; // +1: fill has no inputs
  bool flat = st[0] == int64_t(sizeof(Out));
  unsigned mask = 0;
  for (size_t i = 0; i < K; ++i) {
    if (st[i + 1] == 0) mask |= 1u << i;
    else if (st[i + 1] != isz[i]) flat = false;
  }
  if (flat) {
    if (mask == 0) return contig_run<0, Out, In...>(ptrs, n, f, Seq{});
    if constexpr (K <= 2) {
      if (mask == 1) return contig_run<1, Out, In...>(ptrs, n, f, Seq{});
    }
    if constexpr (K == 2) {
      if (mask == 2) return contig_run<2, Out, In...>(ptrs, n, f, Seq{});
      if (mask == 3) return contig_run<3, Out, In...>(ptrs, n, f, Seq{});
    }
    if constexpr (K == 3) { // where(c, x, 0.0), where(c, 0.0, x), lerp(a, b, w)
      if (mask == 4) return contig_run<4, Out, In...>(ptrs, n, f, Seq{});
      if (mask == 2) return contig_run<2, Out, In...>(ptrs, n, f, Seq{});
    }
  }
  strided_run<Out, In...>(ptrs, st, n, f, Seq{});
}

// ---------------------------------------------------------------- the N-d walk

template <int N> struct Plan {
  int ndim = 0;                 // after coalescing; innermost last
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N]; // in bytes; operand 0 is the output
  char *data[N];
};

// Broadcast strides (0 on expanded dims), size-1 dims dropped, dims ordered so the
// output's smallest stride is innermost, then adjacent dims merged where possible.
template <int N>
inline void build_plan(Plan<N> &p, const Tensor &out, char *odata, const Arg *const *args) {
  IntArrayRef shape = out.sizes();
  const int nd = int(shape.size());
  int k = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    p.sizes[k] = shape[d];
    p.strides[k][0] = out.strides()[d] * int64_t(out.element_size());
    for (int i = 1; i < N; ++i) {
      const Arg &a = *args[i - 1];
      int ad = d - (nd - int(a.sizes.size()));
      p.strides[k][i] = (ad < 0 || a.sizes[ad] == 1) ? 0 : a.strides[ad] * a.itemsize;
    }
    ++k;
  }
  // Insertion sort by |output stride|, descending (stable): matters for in-place
  // ops on transposed outputs; a fresh contiguous output is already in order.
  for (int i = 1; i < k; ++i) {
    for (int j = i; j > 0; --j) {
      int64_t hi = p.strides[j - 1][0] < 0 ? -p.strides[j - 1][0] : p.strides[j - 1][0];
      int64_t lo = p.strides[j][0] < 0 ? -p.strides[j][0] : p.strides[j][0];
      if (hi >= lo) break;
      std::swap(p.sizes[j - 1], p.sizes[j]);
      for (int o = 0; o < N; ++o) std::swap(p.strides[j - 1][o], p.strides[j][o]);
    }
  }
  // Coalesce: outer dim `w-1` absorbs inner dim `d` when every operand steps evenly.
  int w = 0;
  for (int d = 0; d < k; ++d) {
    bool merge = w > 0;
    for (int o = 0; merge && o < N; ++o) merge = p.strides[w - 1][o] == p.strides[d][o] * p.sizes[d];
    if (merge) {
      p.sizes[w - 1] *= p.sizes[d];
      for (int o = 0; o < N; ++o) p.strides[w - 1][o] = p.strides[d][o];
      continue;
    }
    p.sizes[w] = p.sizes[d];
    for (int o = 0; o < N; ++o) p.strides[w][o] = p.strides[d][o];
    ++w;
  }
  if (w == 0) { // a single element
    p.sizes[0] = 1;
    for (int o = 0; o < N; ++o) p.strides[0][o] = 0;
    w = 1;
  }
  p.ndim = w;
  p.data[0] = odata;
  for (int i = 1; i < N; ++i) p.data[i] = args[i - 1]->data;
}

// Runs `inner(ptrs, strides, n)` over the elements [b, e) of the plan (in its order).
template <int N, class Inner> inline void walk_range(const Plan<N> &p, int64_t b, int64_t e, Inner &inner) {
  const int nd = p.ndim;
  const int64_t *ist = p.strides[nd - 1];
  int64_t idx[kMaxDims];
  char *ptrs[N];
  for (int o = 0; o < N; ++o) ptrs[o] = p.data[o];
  int64_t rem = b;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % p.sizes[d];
    rem /= p.sizes[d];
    for (int o = 0; o < N; ++o) ptrs[o] += idx[d] * p.strides[d][o];
  }
  while (b < e) {
    int64_t run = std::min(p.sizes[nd - 1] - idx[nd - 1], e - b);
    inner(ptrs, ist, run);
    b += run;
    idx[nd - 1] += run;
    for (int o = 0; o < N; ++o) ptrs[o] += run * ist[o];
    for (int d = nd - 1; d > 0 && idx[d] == p.sizes[d]; --d) { // carry
      idx[d] = 0;
      ++idx[d - 1];
      for (int o = 0; o < N; ++o) ptrs[o] += p.strides[d - 1][o] - p.sizes[d] * p.strides[d][o];
    }
  }
}

// True when an input can be indexed like the contiguous output (same numel, contiguous)
// or is a single element.
inline bool flat_arg(const Arg &a, int64_t numel) { return a.numel == 1 || (a.contiguous && a.numel == numel); }

// out[i] = f(in_0[i], ..., in_{K-1}[i]) with broadcasting; In... are the inputs'
// C++ types (each Arg must hold that type), Out the output's.
template <class Out, class... In, class F>
void run_loop(const Tensor &out, const std::array<const Arg *, sizeof...(In)> &args, F f) {
  constexpr int K = int(sizeof...(In));
  constexpr int N = K + 1;
  const TensorImpl &oi = *out.unsafeGetTensorImpl();
  const int64_t numel = oi.numel;
  if (numel == 0) return;
  char *odata = impl_data(oi);
  auto inner = [&f](char *const *ptrs, const int64_t *st, int64_t n) { inner_run<Out, In...>(ptrs, st, n, f); };

  bool flat = impl_contiguous(oi);
  for (int i = 0; flat && i < K; ++i) flat = flat_arg(*args[i], numel);
  if (flat) {
    int64_t st[N];
    char *base[N];
    st[0] = int64_t(sizeof(Out));
    base[0] = odata;
    for (int i = 0; i < K; ++i) {
      st[i + 1] = args[i]->numel == 1 ? 0 : args[i]->itemsize;
      base[i + 1] = args[i]->data;
    }
    if (numel <= kGrain) return inner(base, st, numel);
    parallel_for(0, numel, kGrain, [&](int64_t b, int64_t e) {
      char *ptrs[N];
      for (int o = 0; o < N; ++o) ptrs[o] = base[o] + b * st[o];
      inner(ptrs, st, e - b);
    });
    return;
  }
  Plan<N> plan;
  build_plan<N>(plan, out, odata, args.data());
  if (numel <= kGrain) return walk_range(plan, 0, numel, inner);
  parallel_for(0, numel, kGrain, [&](int64_t b, int64_t e) { walk_range(plan, b, e, inner); });
}

} // namespace kiln::detail
