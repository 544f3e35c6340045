// kiln's compiled depthwise conv2d: see codegen/gemm/depthwise.h.
#include "codegen/gemm/depthwise.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/kernels/simd_vec.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

namespace kiln::codegen::gemm {

namespace {

std::atomic<int64_t> g_calls{0};
std::atomic<int64_t> g_heap_packs{0};

using kiln::detail::simd::kLanes;
using kiln::detail::simd::load;
using kiln::detail::simd::load_strided;
using kiln::detail::simd::Vec;

// Measurement knob (bench only): KILN_DW_BLOCK=channels[,rows] overrides the
// blocking; 0 keeps a default.
DwBlocking knob() {
  static const DwBlocking k = [] {
    DwBlocking k{0, 0};
    const char *s = std::getenv("KILN_DW_BLOCK");
    if (!s || !*s) return k;
    long c = 0, r = 0;
    if (std::sscanf(s, "%ld,%ld", &c, &r) < 1 || c < 0 || r < 0) {
      kiln::log()->warn("KILN_DW_BLOCK='{}' is not CHANNELS[,ROWS]: ignored", s);
      return k;
    }
    return DwBlocking{c, r};
  }();
  return k;
}

// The padded rows of one item: input rows the block of output rows reads,
// pw zeros either side, plus a slack row a stride-2 chunk's second load may
// reach (read, never used).
int64_t padded_width(const ConvShape &s) { return s.W + 2 * s.pw; }
int64_t padded_rows(const ConvShape &s, int64_t rows) { return (rows - 1) * s.sh + (s.kH - 1) * s.dh + 2; }

template <class T> bool finite_taps(const T *w, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(w[i])) return false;
  return true;
}

// n elements from src (nullptr: zeros) to dst in whole vectors, the last one
// overlapping the one before rather than a scalar tail.
template <class T> inline void copy_row(T *dst, const T *src, int64_t n) {
  constexpr int V = kLanes<T>;
  if (n < V) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src ? src[i] : T(0);
    return;
  }
  auto move = [&](int64_t i) {
    const Vec<T, V> v = src ? load<T, V>(src + i) : Vec<T, V>{};
    std::memcpy(dst + i, &v, sizeof v);
  };
  int64_t i = 0;
  for (; i + V <= n; i += V) move(i);
  if (i < n) move(n - V);
}

// What one channel's rows of an item are computed from and written to.
template <class T> struct Rows {
  const T *P;    // padded rows: P[r * wp + j] is input row (first output row) * sh - ph + r, column j - pw
  int64_t wp;    // their pitch
  const T *wk;   // the channel's taps
  T b;           // its bias
  T *dst;        // its first output row of the item (pitch Wo)
};

// Output rows [r0, r0 + R) x K chunks of L pixels at columns ow[0..K).
// Stride 1 and no dilation along rows (ROWS): input row r0 + i serves output
// rows r0 + i - kh for every kh, so each is loaded once per kw for all of
// them; the sum per output is still bias, then the taps in (kh, kw) order.
// Otherwise each tap loads its own rows. KH, KW: the kernel size (0: read from s).
template <class T, int L, int R, int K, int S, int KH, int KW, bool ROWS>
inline void tile(const ConvShape &s, const Rows<T> &d, int64_t r0, const int64_t *ow) {
  Vec<T, L> acc[R][K];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) acc[r][k] = Vec<T, L>{} + d.b;
  const int64_t sw = S ? S : s.sw, dw = s.dw;
  if constexpr (ROWS) {
    static_assert(KH > 0 && KW > 0);
#pragma GCC unroll 16
    for (int i = 0; i < R + KH - 1; ++i) {
      const T *row = d.P + (r0 + i) * d.wp;
#pragma GCC unroll 8
      for (int kw = 0; kw < KW; ++kw)
#pragma GCC unroll 4
        for (int k = 0; k < K; ++k) {
          const Vec<T, L> v = load_strided<T, L, S>(row + ow[k] * sw + kw * dw, sw);
#pragma GCC unroll 8
          for (int kh = 0; kh < KH; ++kh)
            if (i - kh >= 0 && i - kh < R) acc[i - kh][k] += d.wk[kh * KW + kw] * v;
        }
    }
  } else {
    const int64_t kH = KH ? KH : s.kH, kW = KW ? KW : s.kW, rs = s.sh * d.wp;
    for (int64_t kh = 0; kh < kH; ++kh) {
      const T *row = d.P + (r0 * s.sh + kh * s.dh) * d.wp;
      for (int64_t kw = 0; kw < kW; ++kw) {
        const T w = d.wk[kh * kW + kw];
        for (int r = 0; r < R; ++r)
          for (int k = 0; k < K; ++k)
            acc[r][k] += w * load_strided<T, L, S>(row + r * rs + ow[k] * sw + kw * dw, sw);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) std::memcpy(d.dst + (r0 + r) * s.Wo + ow[k], &acc[r][k], sizeof acc[r][k]);
}

// Rows [r0, r0 + R) in chunks of L pixels, two chunks at a time; the last
// chunk starts at Wo - L (overlapping the one before) when L does not divide Wo.
template <class T, int L, int R, int S, int KH, int KW, bool ROWS>
inline void row_group(const ConvShape &s, const Rows<T> &d, int64_t r0) {
  const int64_t chunks = (s.Wo + L - 1) / L;
  auto start = [&](int64_t c) { return std::min<int64_t>(c * L, s.Wo - L); };
  int64_t c = 0;
  for (; c + 2 <= chunks; c += 2) {
    const int64_t ow[2] = {start(c), start(c + 1)};
    tile<T, L, R, 2, S, KH, KW, ROWS>(s, d, r0, ow);
  }
  if (c < chunks) {
    const int64_t ow[1] = {start(c)};
    tile<T, L, R, 1, S, KH, KW, ROWS>(s, d, r0, ow);
  }
}

template <class T, int L, int S, int KH, int KW, bool ROWS>
void rows_of(const ConvShape &s, const Rows<T> &d, int64_t rows) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) row_group<T, L, 4, S, KH, KW, ROWS>(s, d, r);
  for (; r + 2 <= rows; r += 2) row_group<T, L, 2, S, KH, KW, ROWS>(s, d, r);
  for (; r < rows; ++r) row_group<T, L, 1, S, KH, KW, ROWS>(s, d, r);
}

// The compiled variants: kernel size (1x1, 3x3, 5x5 unrolled), column stride
// (1, 2, any) and the widest vector no wider than an output row.
using RowsFn = void (*)(const ConvShape &, const void *, int64_t);
template <class T, int L, int S, int KH, int KW, bool ROWS>
void rows_fn(const ConvShape &s, const void *d, int64_t rows) {
  rows_of<T, L, S, KH, KW, ROWS>(s, *static_cast<const Rows<T> *>(d), rows);
}
template <class T, int L, int S> RowsFn pick_k(const ConvShape &s) {
  const bool rows = s.sh == 1 && s.dh == 1;
  if constexpr (S > 0) {
    if (s.kH == 3 && s.kW == 3) return rows ? rows_fn<T, L, S, 3, 3, true> : rows_fn<T, L, S, 3, 3, false>;
    if (s.kH == 5 && s.kW == 5) return rows ? rows_fn<T, L, S, 5, 5, true> : rows_fn<T, L, S, 5, 5, false>;
    if (s.kH == 1 && s.kW == 1) return rows_fn<T, L, S, 1, 1, false>;
  }
  return rows_fn<T, L, S, 0, 0, false>;
}
template <class T, int L> RowsFn pick_s(const ConvShape &s) {
  if (s.sw == 1) return pick_k<T, L, 1>(s);
  if (s.sw == 2) return pick_k<T, L, 2>(s);
  return pick_k<T, L, 0>(s);
}
template <class T> RowsFn pick(const ConvShape &s) {
  constexpr int V = kLanes<T>;
  if (s.Wo >= V) return pick_s<T, V>(s);
  if (s.Wo >= V / 2) return pick_s<T, V / 2>(s);
  if (s.Wo >= V / 4) return pick_s<T, V / 4>(s);
  return pick_s<T, 1>(s);
}

// Output rows [oh0, oh1) of one channel, bounds-checked (a channel whose taps
// are not all finite): `plane` is the input channel, rows xs2 apart.
template <class T>
void rows_checked(const ConvShape &s, const T *plane, int64_t xs2, const T *wk, T b, int64_t oh0, int64_t oh1, T *dst) {
  for (int64_t oh = oh0; oh < oh1; ++oh)
    for (int64_t ow = 0; ow < s.Wo; ++ow) {
      T acc = b;
      for (int64_t kh = 0; kh < s.kH; ++kh) {
        const int64_t ih = oh * s.sh - s.ph + kh * s.dh;
        if (ih < 0 || ih >= s.H) continue;
        for (int64_t kw = 0; kw < s.kW; ++kw) {
          const int64_t iw = ow * s.sw - s.pw + kw * s.dw;
          if (iw >= 0 && iw < s.W) acc += wk[kh * s.kW + kw] * plane[ih * xs2 + iw];
        }
      }
      dst[(oh - oh0) * s.Wo + ow] = acc;
    }
}

// Input rows [ih0, ih0 + rows) of `plane` into P (pitch wp), zero outside the image.
template <class T> void pad_rows(const ConvShape &s, const T *plane, int64_t xs2, int64_t ih0, int64_t rows, T *P) {
  const int64_t wp = padded_width(s);
  for (int64_t r = 0; r < rows; ++r) {
    T *d = P + r * wp;
    const int64_t ih = ih0 + r;
    if (ih < 0 || ih >= s.H) {
      copy_row<T>(d, nullptr, wp);
      continue;
    }
    copy_row<T>(d, nullptr, s.pw);
    copy_row<T>(d + s.pw, plane + ih * xs2, s.W);
    copy_row<T>(d + s.pw + s.W, nullptr, s.pw);
  }
}

template <class T> struct Call {
  const ConvShape &s;
  const T *x;
  const int64_t *xs;
  const T *w;
  const T *bias;
  T *y;
  DwBlockCallback after;
  void *ctx;
  DwBlocking b;
  RowsFn fn;

  // Item (image n, output channels [o0, o1), output rows [oh0, oh1)).
  // Its output goes to y, or to `blk` (ldc = rows * Wo) when y is null.
  void run(int64_t n, int64_t o0, int64_t o1, int64_t oh0, int64_t oh1, T *P, T *blk) const {
    T *out = y ? y + (n * s.O + o0) * s.pixels() + oh0 * s.Wo : blk;
    const int64_t ldc = y ? s.pixels() : b.rows * s.Wo;
    const int64_t M = s.O / s.C, kk = s.kH * s.kW, wp = padded_width(s);
    const int64_t need = padded_rows(s, oh1 - oh0), ih0 = oh0 * s.sh - s.ph;
    const int64_t lo = std::max<int64_t>(ih0, 0), hi = std::min(s.H, ih0 + need - 1); // rows read
    int64_t have = -1; // the input channel in P
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t c = o / M;
      const T *plane = x + n * xs[0] + c * xs[1];
      const T *wk = w + o * kk;
      T *dst = out + (o - o0) * ldc;
      const T b = bias ? bias[o] : T(0);
      if (!finite_taps(wk, kk)) {
        rows_checked(s, plane, xs[2], wk, b, oh0, oh1, dst);
        continue;
      }
      if (c != have) {
        // The next input channel's rows are the next stream (this item's, or
        // the next item's on this thread): fetch them while this one computes.
        if (c + 1 < s.C)
          for (int64_t r = lo; r < hi; ++r)
            for (int64_t j = 0; j < s.W; j += 64 / int64_t(sizeof(T))) __builtin_prefetch(plane + xs[1] + r * xs[2] + j);
        pad_rows(s, plane, xs[2], ih0, need - 1, P);
        copy_row<T>(P + (need - 1) * wp, nullptr, wp);
        have = c;
      }
      const Rows<T> d{P, wp, wk, b, dst};
      fn(s, &d, oh1 - oh0);
    }
    if (after) after(ctx, n, o0, o1 - o0, oh0 * s.Wo, (oh1 - oh0) * s.Wo, out, ldc);
  }
};

} // namespace

std::optional<std::string> depthwise_unsupported(const ConvShape &s) {
  if (!is_depthwise(s) || s.C <= 0 || s.O % s.C) return "not depthwise (groups == C, O a multiple of C)";
  if (s.N <= 0 || s.O <= 0 || s.Ho <= 0 || s.Wo <= 0 || s.kH <= 0 || s.kW <= 0) return "an empty conv";
  if (s.sh < 1 || s.sw < 1 || s.dh < 1 || s.dw < 1 || s.ph < 0 || s.pw < 0) return "a stride, dilation or padding out of range";
  // One output row's padded input rows in L2 at most: a huge padding or
  // dilation keeps eager's kernel (which has a bounds-checked loop for it).
  if (double(padded_rows(s, 1)) * double(padded_width(s)) > double(1 << 17))
    return "the padded input rows of one output row exceed 128K elements";
  return std::nullopt;
}

template <class T>
DepthwiseWeight<T> pack_depthwise_weight_into(const ConvShape &s, const T *W, const int64_t ws[4], T *dst) {
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t kh = 0; kh < s.kH; ++kh)
      for (int64_t kw = 0; kw < s.kW; ++kw) dst[(o * s.kH + kh) * s.kW + kw] = W[o * ws[0] + kh * ws[2] + kw * ws[3]];
  DepthwiseWeight<T> p;
  p.shape = s;
  p.data = dst;
  return p;
}

template <class T>
std::shared_ptr<const DepthwiseWeight<T>> pack_depthwise_weight(const ConvShape &s, const T *W, const int64_t ws[4]) {
  KILN_CHECK(!depthwise_unsupported(s), "depthwise conv2d: ", s.str(), ": ", *depthwise_unsupported(s));
  const size_t n = size_t(s.O * s.kH * s.kW);
  const size_t bytes = (std::max<size_t>(n * sizeof(T), 1) + 63) / 64 * 64;
  std::shared_ptr<T> owned(static_cast<T *>(std::aligned_alloc(64, bytes)), std::free);
  KILN_CHECK(owned, "depthwise conv2d: out of memory packing ", n, " taps");
  g_heap_packs.fetch_add(1, std::memory_order_relaxed);
  auto p = std::make_shared<DepthwiseWeight<T>>(pack_depthwise_weight_into<T>(s, W, ws, owned.get()));
  p->owned = std::move(owned);
  return p;
}

template <class T> DwBlocking depthwise_blocking(const ConvShape &s, int threads) {
  const DwBlocking k = knob();
  const int64_t wp = padded_width(s);
  // Rows: the padded input rows of an item within ~16 KiB (the whole plane
  // for MobileNet's sizes).
  const int64_t budget = 16 * 1024 / int64_t(sizeof(T));
  int64_t rows = s.Ho;
  while (rows > 1 && padded_rows(s, rows) * wp > budget) rows = (rows + 1) / 2;
  if (k.rows > 0) rows = std::min(k.rows, s.Ho);
  // Channels: the item's output within ~16 KiB, while the epilogue reads it.
  const int64_t out = std::max<int64_t>(rows * s.Wo * int64_t(sizeof(T)), 1);
  int64_t ch = std::clamp<int64_t>(16 * 1024 / out, 1, s.O);
  // Several items per thread (the last ones balance the load).
  const int64_t t = threads > 0 ? threads : get_num_threads();
  const int64_t row_blocks = (s.Ho + rows - 1) / rows;
  while (ch > 1 && s.N * row_blocks * ((s.O + ch - 1) / ch) < 8 * t) ch = (ch + 1) / 2;
  if (k.channels > 0) ch = std::min(k.channels, s.O);
  return {ch, rows};
}

template <class T>
void depthwise_conv2d(const ConvShape &s, const T *x, const int64_t xs[4], const DepthwiseWeight<T> &w, const T *bias,
                      T *y, DwBlockCallback after, void *ctx, DwBlocking b, int threads) {
  KILN_CHECK(!depthwise_unsupported(s), "depthwise conv2d: ", s.str(), " is not covered: ", *depthwise_unsupported(s));
  const ConvShape &ps = w.shape;
  KILN_CHECK(ps.C == s.C && ps.O == s.O && ps.kH == s.kH && ps.kW == s.kW,
             "depthwise conv2d: the weight was packed for ", ps.str(), ", called with ", s.str());
  KILN_CHECK(s.W <= 1 || xs[3] == 1, "depthwise conv2d: input rows are not contiguous");
  KILN_CHECK(b.channels >= 1 && b.rows >= 1, "depthwise conv2d: an empty blocking");
  KILN_CHECK(y || after, "depthwise conv2d: no output and no epilogue");
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (threads <= 0) threads = get_num_threads();
  const int64_t rows = std::min(b.rows, s.Ho), cb = std::min(b.channels, s.O);
  const int64_t row_blocks = (s.Ho + rows - 1) / rows, ch_blocks = (s.O + cb - 1) / cb;
  const size_t p_elems = size_t(padded_rows(s, rows) * padded_width(s) + kLanes<T>);
  const Call<T> call{s, x, xs, w.data, bias, y, after, ctx, {cb, rows}, pick<T>(s)};
  const size_t blk_elems = y ? 0 : size_t(cb * rows * s.Wo);
  auto work = [&](int64_t lo, int64_t hi) {
    T *P = static_cast<T *>(thread_scratch(ScratchSlot::ConvColumns, p_elems * sizeof(T)));
    T *blk = y ? nullptr : static_cast<T *>(thread_scratch(ScratchSlot::GemmTile, blk_elems * sizeof(T)));
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n = i / (ch_blocks * row_blocks), cbi = i / row_blocks % ch_blocks, rbi = i % row_blocks;
      const int64_t o0 = cbi * cb, oh0 = rbi * rows;
      call.run(n, o0, std::min(s.O, o0 + cb), oh0, std::min(s.Ho, oh0 + rows), P, blk);
    }
  };
  const int64_t items = s.N * ch_blocks * row_blocks;
  if (threads > 1 && items > 1 && !in_parallel_region()) parallel_for(0, items, 1, work);
  else work(0, items);
}

int64_t depthwise_calls() { return g_calls.load(std::memory_order_relaxed); }
int64_t depthwise_weight_heap_packs() { return g_heap_packs.load(std::memory_order_relaxed); }

#define KILN_DW_INSTANTIATE(T)                                                                                      \
  template DepthwiseWeight<T> pack_depthwise_weight_into<T>(const ConvShape &, const T *, const int64_t[4], T *);  \
  template std::shared_ptr<const DepthwiseWeight<T>> pack_depthwise_weight<T>(const ConvShape &, const T *,        \
                                                                              const int64_t[4]);                   \
  template DwBlocking depthwise_blocking<T>(const ConvShape &, int);                                               \
  template void depthwise_conv2d<T>(const ConvShape &, const T *, const int64_t[4], const DepthwiseWeight<T> &,    \
                                    const T *, T *, DwBlockCallback, void *, DwBlocking, int);
KILN_DW_INSTANTIATE(float)
KILN_DW_INSTANTIATE(double)

} // namespace kiln::codegen::gemm
