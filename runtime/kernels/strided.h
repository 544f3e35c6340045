// Internal helpers of the shape/indexing/pooling kernels: an N-operand strided
// row loop (dims coalesced, rows split over the thread pool) and a converting
// strided copy built on it. Not user API.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace kiln::kernels {

// Roughly the number of elements one parallel_for chunk should touch.
inline constexpr int64_t kGrainElems = 32768;

// Sizes and per-operand strides with size-1 dims dropped and mergeable
// neighbours merged, so the innermost row is as long as possible.
template <size_t N> struct Loop {
  Dims sizes;
  std::array<Dims, N> strides;
};

template <size_t N> Loop<N> coalesce(IntArrayRef sizes, const std::array<IntArrayRef, N> &strides) {
  Loop<N> l;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !l.sizes.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = l.strides[k][l.sizes.size() - 1] == strides[k][d] * sizes[d];
    if (merge) {
      l.sizes[l.sizes.size() - 1] *= sizes[d];
      for (size_t k = 0; k < N; ++k) l.strides[k][l.sizes.size() - 1] = strides[k][d];
      continue;
    }
    l.sizes.push_back(sizes[d]);
    for (size_t k = 0; k < N; ++k) l.strides[k].push_back(strides[k][d]);
  }
  if (l.sizes.empty()) { // a single element: one row of length 1
    l.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) l.strides[k].push_back(0);
  }
  return l;
}

// Calls row(offsets, len, inner_strides) for every innermost row of the
// iteration space `sizes`, where offsets[k] is the element offset of the row's
// first element in operand k. Rows are split over the thread pool.
template <size_t N, class RowFn>
void for_each_row(IntArrayRef sizes, const std::array<IntArrayRef, N> &strides, RowFn &&row) {
  for (int64_t s : sizes)
    if (s == 0) return;
  const Loop<N> l = coalesce<N>(sizes, strides);
  const int64_t outer = int64_t(l.sizes.size()) - 1; // dims before the innermost one (coalesce keeps >= 1)
  const int64_t len = l.sizes[size_t(outer)];
  std::array<int64_t, N> inner;
  for (size_t k = 0; k < N; ++k) inner[k] = l.strides[k][size_t(outer)];
  int64_t rows = 1;
  for (int64_t d = 0; d < outer; ++d) rows *= l.sizes[size_t(d)];
  int64_t grain = std::max<int64_t>(1, kGrainElems / len);
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    // Multi-index of row b over the outer dims, then an odometer.
    std::array<int64_t, kMaxDims> idx{};
    std::array<int64_t, N> off{};
    int64_t r = b;
    for (int64_t d = outer - 1; d >= 0; --d) {
      idx[size_t(d)] = r % l.sizes[size_t(d)];
      r /= l.sizes[size_t(d)];
      for (size_t k = 0; k < N; ++k) off[k] += idx[size_t(d)] * l.strides[k][size_t(d)];
    }
    for (int64_t i = b; i < e; ++i) {
      row(off, len, inner);
      for (int64_t d = outer - 1; d >= 0; --d) {
        const size_t u = size_t(d);
        for (size_t k = 0; k < N; ++k) off[k] += l.strides[k][u];
        if (++idx[u] < l.sizes[u]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= idx[u] * l.strides[k][u];
        idx[u] = 0;
      }
    }
  });
}

// A copy whose source walks its innermost dim with a large stride while its
// second-innermost dim is unit-stride (a transposed source): copied in square
// tiles so that both sides stay in cache. Returns false when that is not the case.
template <class S, class D>
bool copy_transposed(const S *src, IntArrayRef ss, D *dst, IntArrayRef ds, IntArrayRef sizes) {
  constexpr int64_t kTile = 32;
  const Loop<2> l = coalesce<2>(sizes, {ds, ss});
  const size_t nd = l.sizes.size();
  if (nd < 2) return false;
  const int64_t rows = l.sizes[nd - 2], cols = l.sizes[nd - 1];
  const int64_t drs = l.strides[0][nd - 2], dcs = l.strides[0][nd - 1];
  const int64_t srs = l.strides[1][nd - 2], scs = l.strides[1][nd - 1];
  if (srs != 1 || scs == 1 || rows < kTile || cols < kTile) return false;
  // One task per (outer plane, tile row); the plane's offsets come from its index.
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < nd; ++d) planes *= l.sizes[d];
  const int64_t tile_rows = (rows + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / (kTile * cols));
  parallel_for(0, planes * tile_rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      int64_t plane = task / tile_rows, r0 = (task % tile_rows) * kTile;
      int64_t doff = 0, soff = 0;
      for (size_t d = nd - 2; d-- > 0;) {
        const int64_t i = plane % l.sizes[d];
        plane /= l.sizes[d];
        doff += i * l.strides[0][d];
        soff += i * l.strides[1][d];
      }
      const int64_t nr = std::min(rows - r0, kTile);
      // Through a small buffer: each source and destination line is then touched in
      // one burst, so power-of-two strides cannot make the lines evict each other.
      D buf[kTile][kTile];
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t nc = std::min(cols - c0, kTile);
        for (int64_t c = 0; c < nc; ++c) {
          const S *in = src + soff + r0 + (c0 + c) * scs;
          for (int64_t r = 0; r < nr; ++r) buf[c][r] = static_cast<D>(in[r]);
        }
        for (int64_t r = 0; r < nr; ++r) {
          D *o = dst + doff + (r0 + r) * drs + c0 * dcs;
          for (int64_t c = 0; c < nc; ++c) o[c * dcs] = buf[c][r];
        }
      }
    }
  });
  return true;
}

// dst[i] = D(src[i]) over the common shape of two strided views (same sizes).
template <class S, class D> void copy_rows(const S *src, IntArrayRef ss, D *dst, IntArrayRef ds, IntArrayRef sizes) {
  if (copy_transposed(src, ss, dst, ds, sizes)) return;
  for_each_row<2>(sizes, {ds, ss}, [&](const std::array<int64_t, 2> &off, int64_t n, const std::array<int64_t, 2> &st) {
    D *o = dst + off[0];
    const S *in = src + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<D>(in[i]);
      return;
    }
    for (int64_t i = 0; i < n; ++i) o[i * st[0]] = static_cast<D>(in[i * st[1]]);
  });
}

// Copies `src` into `dst` (a view of equal sizes, any strides), converting the
// element type. Neither may be meta.
inline void copy_into(const Tensor &dst, const Tensor &src) {
  dispatch_storage_dtype(dst.dtype(), [&]<class D>() {
    dispatch_storage_dtype(src.dtype(), [&]<class S>() {
      copy_rows(static_cast<const S *>(src.raw_data()), src.strides(), static_cast<D *>(dst.raw_data()),
                dst.strides(), dst.sizes());
    });
  });
}

// Calls fn(offsets) for every line along dim d of `sizes`: offsets[k] is the element
// offset of the line's first element in operand k (whose stride along d the caller
// reads). Lines are independent tasks on the pool (scans, sorts, scatter).
template <size_t N, class Fn>
void for_each_line(IntArrayRef sizes, int64_t d, const std::array<IntArrayRef, N> &strides, Fn &&fn) {
  Dims outer(sizes);
  outer[size_t(d)] = 1;
  for_each_row<N>(outer, strides, [&](const std::array<int64_t, N> &off, int64_t len, const std::array<int64_t, N> &st) {
    std::array<int64_t, N> o;
    for (int64_t i = 0; i < len; ++i) {
      for (size_t k = 0; k < N; ++k) o[k] = off[k] + i * st[k];
      fn(o);
    }
  });
}

// A 0-dim tensor as the 1-element line [1], so that it has a dim to work along.
inline Tensor as_line(const Tensor &t) {
  return t.dim() > 0 ? t : detail::make_view(t, {1}, {1}, t.storage_offset());
}

// A view of `t` with dim `d` narrowed to [start, start + len) (no checks, no trace).
inline Tensor narrow_view(const Tensor &t, int64_t d, int64_t start, int64_t len) {
  Dims sz(t.sizes());
  sz[d] = len;
  return detail::make_view(t, sz, t.strides(), t.storage_offset() + start * t.strides()[d]);
}

} // namespace kiln::kernels
