// conv2d (NCHW, stride, padding, dilation, groups, optional bias) by im2col + GEMM;
// a channels-last input runs the NHWC variant below (conv_nhwc).
//
// Per image and group: col[C/g * kH * kW, Hout * Wout] is gathered from the
// input (zeros in the padding), then out_g[O/g, Hout * Wout] = W_g @ col is one
// GEMM written straight into the output. A 1x1 / stride 1 / no padding conv
// skips im2col: the image itself is the GEMM operand. Several images run in
// parallel with single-threaded BLAS; one image uses OpenBLAS's threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/linalg_internal.h"
#include "runtime/kernels/simd_vec.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {
using namespace detail::nn;

struct ConvGeom {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t O = 0, kH = 0, kW = 0;       // weight [O, C / groups, kH, kW]
  int64_t Ho = 0, Wo = 0, groups = 1;  // output
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool direct() const { return kH == 1 && kW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

// One 2-element list from a 1- or 2-element argument.
std::vector<int64_t> pair_arg(IntArrayRef v, const char *arg, int64_t min) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, "conv2d: expected ", arg, " to have 1 or 2 elements, got ",
             shape_str(v));
  std::vector<int64_t> r{v[0], v.size() == 2 ? v[1] : v[0]};
  KILN_CHECK(r[0] >= min && r[1] >= min, "conv2d: expected ", arg, " elements to be >= ", min, ", got ",
             shape_str(v));
  return r;
}

// Unfolds image `in` ([C_g, H, W], contiguous) for output rows [oh0, oh1) into
// col ([C_g * kH * kW, (oh1 - oh0) * Wo]), filling col's rows [r0, r1) only.
template <class T>
void im2col(const ConvGeom &g, const T *in, T *col, int64_t r0, int64_t r1, int64_t oh0, int64_t oh1) {
  const int64_t np = (oh1 - oh0) * g.Wo;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / (g.kH * g.kW), kh = (r / g.kW) % g.kH, kw = r % g.kW;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      T *dst = col + r * np + (oh - oh0) * g.Wo;
      const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
      if (ih < 0 || ih >= g.H) {
        std::fill(dst, dst + g.Wo, T(0));
        continue;
      }
      const T *src = in + (c * g.H + ih) * g.W;
      for (int64_t ow = 0; ow < g.Wo; ++ow) {
        const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
        dst[ow] = iw >= 0 && iw < g.W ? src[iw] : T(0);
      }
    }
  }
}

// out[n] for one image; `col` is a scratch of Ckk * Hout * Wout elements.
// `inner_parallel`: parallelize im2col (only when images are not already).
template <class T>
void conv_image(const ConvGeom &g, int64_t n, const T *x, const T *w, const T *bias, T *y, T *col,
                bool inner_parallel) {
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups, hw = g.Ho * g.Wo, ckk = Cg * g.kH * g.kW;
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    const T *xin = x + (n * g.C + gi * Cg) * g.H * g.W;
    T *yout = y + (n * g.O + gi * Og) * hw;
    const T *b = xin; // the direct case reads the image as the [Cg, H*W] operand
    if (!g.direct()) {
      if (inner_parallel)
        parallel_for(0, ckk, std::max<int64_t>(1, 32768 / std::max<int64_t>(hw, 1)),
                     [&](int64_t lo, int64_t hi) { im2col(g, xin, col, lo, hi, 0, g.Ho); });
      else
        im2col(g, xin, col, 0, ckk, 0, g.Ho);
      b = col;
    }
    if (bias)
      for (int64_t o = 0; o < Og; ++o) std::fill(yout + o * hw, yout + (o + 1) * hw, bias[gi * Og + o]);
    gemm<T>(Og, hw, ckk, T(1), w + gi * Og * ckk, ckk, 1, b, hw, 1, bias ? T(1) : T(0), yout, hw);
  }
}

template <class T> void conv_run(const ConvGeom &g, const Tensor &x, const Tensor &w, const Tensor &bias,
                                 const Tensor &out) {
  const T *xp = static_cast<const T *>(x.raw_data());
  const T *wp = static_cast<const T *>(w.raw_data());
  const T *bp = bias.defined() ? static_cast<const T *>(bias.raw_data()) : nullptr;
  T *yp = static_cast<T *>(out.raw_data());
  const size_t col_elems = g.direct() ? 0 : size_t(g.C / g.groups * g.kH * g.kW * g.Ho * g.Wo);
  const int64_t flops_per_image = g.O * g.Ho * g.Wo * (g.C / g.groups) * g.kH * g.kW;
  if (batch_parallel(g.N, flops_per_image)) {
    parallel_for(0, g.N, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> col(col_elems); // one scratch per chunk of images
      for (int64_t n = lo; n < hi; ++n) conv_image(g, n, xp, wp, bp, yp, col.data(), false);
    });
    return;
  }
  std::vector<T> col(col_elems);
  for (int64_t n = 0; n < g.N; ++n) conv_image(g, n, xp, wp, bp, yp, col.data(), true);
}

// ---- blocked: output rows [oh0, oh1) of an image at a time (conv2d_into)

// Output rows [oh0, oh1) of image n, every group, then after(ctx, n, p0, np).
template <class T>
void conv_block(const ConvGeom &g, int64_t n, int64_t oh0, int64_t oh1, const T *x, const T *w, const T *bias, T *y,
                T *col, detail::nn::BlockCallback after, void *ctx) {
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups, hw = g.Ho * g.Wo, ckk = Cg * g.kH * g.kW;
  const int64_t p0 = oh0 * g.Wo, np = (oh1 - oh0) * g.Wo;
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    const T *xin = x + (n * g.C + gi * Cg) * g.H * g.W;
    T *yout = y + (n * g.O + gi * Og) * hw + p0;
    const T *b = xin + p0; // direct: the image's pixels [p0, p0 + np) of [Cg, H*W]
    int64_t ldb = hw;
    if (!g.direct()) {
      im2col(g, xin, col, 0, ckk, oh0, oh1);
      b = col, ldb = np;
    }
    if (bias)
      for (int64_t o = 0; o < Og; ++o) std::fill(yout + o * hw, yout + o * hw + np, bias[gi * Og + o]);
    gemm<T>(Og, np, ckk, T(1), w + gi * Og * ckk, ckk, 1, b, ldb, 1, bias ? T(1) : T(0), yout, hw);
  }
  if (after) after(ctx, n, p0, np);
}

// Runs run(lo, hi) over [0, items): over the pool when there is more than one
// item and we are not inside a parallel region (each item's GEMM then runs on
// its thread alone), else on the caller (whose GEMMs split over the pool).
template <class F> void run_items(int64_t items, const F &run) {
  if (items > 1 && get_num_threads() > 1 && !in_parallel_region()) {
    parallel_for(0, items, 1, run);
    return;
  }
  run(0, items);
}

// block(col, n, oh0, oh1) for every (image n, block of output rows [oh0, oh1))
// item, spread as run_items does; `col` is the running thread's reusable
// im2col scratch (a compiled call's steady state allocates none).
template <class T, class Block> void for_each_row_block(const ConvGeom &g, int64_t block_rows, const Block &block) {
  const int64_t blocks = (g.Ho + block_rows - 1) / block_rows;
  const size_t col_elems = g.direct() ? 0 : size_t(g.C / g.groups * g.kH * g.kW * block_rows * g.Wo);
  run_items(g.N * blocks, [&](int64_t lo, int64_t hi) {
    T *col = static_cast<T *>(thread_scratch(ScratchSlot::ConvColumns, col_elems * sizeof(T)));
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n = i / blocks, oh0 = i % blocks * block_rows;
      block(col, n, oh0, std::min(g.Ho, oh0 + block_rows));
    }
  });
}

// Blocks of whole output rows whose im2col buffer stays within L2, spread over
// the pool as (image, block) items with single-threaded BLAS.
template <class T>
void conv_run_blocked(const ConvGeom &g, int64_t block_rows, const Tensor &x, const Tensor &w, const Tensor &bias,
                      const Tensor &out, detail::nn::BlockCallback after, void *ctx) {
  const T *xp = static_cast<const T *>(x.raw_data());
  const T *wp = static_cast<const T *>(w.raw_data());
  const T *bp = bias.defined() ? static_cast<const T *>(bias.raw_data()) : nullptr;
  T *yp = static_cast<T *>(out.raw_data());
  for_each_row_block<T>(g, block_rows, [&](T *col, int64_t n, int64_t oh0, int64_t oh1) {
    conv_block(g, n, oh0, oh1, xp, wp, bp, yp, col, after, ctx);
  });
}

// ---- channels-last (NHWC): the torch layout [N, C, H, W] with strides (H*W*C, 1, W*C, C)
//
// Per block of output rows of one image and group: col[np, kH * kW * Cg] is
// gathered as contiguous runs of Cg channels (one per kernel tap and output
// pixel), and out[np, Og] = col @ W_g^T is one GEMM whose [pixels, channels]
// result is the NHWC output itself (ldc = O), with no transpose. The weight is
// repacked once per call to [O, kH, kW, Cg] so each output channel's row
// matches col's (kh, kw, c) order; GEMM reads it transposed (no copy).

// Unfolds output rows [oh0, oh1) of image `img` ([H, W, C], channels at c0 of
// group's Cg) into col ([(oh1 - oh0) * Wo, kH * kW * Cg], row-major).
template <class T>
void im2col_nhwc(const ConvGeom &g, const T *img, int64_t c0, T *col, int64_t oh0, int64_t oh1) {
  const int64_t Cg = g.C / g.groups;
  T *dst = col;
  for (int64_t oh = oh0; oh < oh1; ++oh)
    for (int64_t ow = 0; ow < g.Wo; ++ow)
      for (int64_t kh = 0; kh < g.kH; ++kh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        const bool row_in = ih >= 0 && ih < g.H;
        for (int64_t kw = 0; kw < g.kW; ++kw, dst += Cg) {
          const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
          if (!row_in || iw < 0 || iw >= g.W) {
            std::fill(dst, dst + Cg, T(0));
            continue;
          }
          const T *src = img + (ih * g.W + iw) * g.C + c0;
          std::copy(src, src + Cg, dst);
        }
      }
}

// Output rows [oh0, oh1) of image n (NHWC), every group, then after(ctx, n, p0, np).
// `wt` is the weight as [O, kH, kW, Cg].
template <class T>
void conv_block_nhwc(const ConvGeom &g, int64_t n, int64_t oh0, int64_t oh1, const T *x, const T *wt,
                     const T *bias, T *y, T *col, detail::nn::BlockCallback after, void *ctx) {
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups, kk = g.kH * g.kW * Cg;
  const int64_t p0 = oh0 * g.Wo, np = (oh1 - oh0) * g.Wo;
  const T *img = x + n * g.H * g.W * g.C;
  T *yblk = y + (n * g.Ho * g.Wo + p0) * g.O;
  if (bias)
    for (int64_t p = 0; p < np; ++p) std::copy(bias, bias + g.O, yblk + p * g.O);
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    // direct (1x1, stride 1, no padding): the image's pixel rows are the GEMM operand.
    const T *a = img + p0 * g.C + gi * Cg;
    int64_t lda = g.C;
    if (!g.direct()) {
      im2col_nhwc(g, img, gi * Cg, col, oh0, oh1);
      a = col, lda = kk;
    }
    gemm<T>(np, Og, kk, T(1), a, lda, 1, wt + gi * Og * kk, 1, kk, bias ? T(1) : T(0), yblk + gi * Og, g.O);
  }
  if (after) after(ctx, n, p0, np);
}

// A channels-last input into an NCHW output (the last conv of a channels-last
// chain, whose result the user sees): the same NHWC im2col, then the GEMM the
// other way round, out[Og, np] = W_g @ col^T, reading col transposed (a BLAS
// flag, no copy), so the block lands in NCHW rows and the epilogue after it
// reads and writes the NCHW buffers contiguously.
template <class T>
void conv_block_nhwc_to_nchw(const ConvGeom &g, int64_t n, int64_t oh0, int64_t oh1, const T *x, const T *wt,
                             const T *bias, T *y, T *col, detail::nn::BlockCallback after, void *ctx) {
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups, kk = g.kH * g.kW * Cg, hw = g.Ho * g.Wo;
  const int64_t p0 = oh0 * g.Wo, np = (oh1 - oh0) * g.Wo;
  const T *img = x + n * g.H * g.W * g.C;
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    T *yout = y + (n * g.O + gi * Og) * hw + p0;
    const T *b = img + p0 * g.C + gi * Cg; // direct: pixel rows, read transposed
    int64_t ldb = g.C;
    if (!g.direct()) {
      im2col_nhwc(g, img, gi * Cg, col, oh0, oh1);
      b = col, ldb = kk;
    }
    if (bias)
      for (int64_t o = 0; o < Og; ++o) std::fill(yout + o * hw, yout + o * hw + np, bias[gi * Og + o]);
    gemm<T>(Og, np, kk, T(1), wt + gi * Og * kk, kk, 1, b, 1, ldb, bias ? T(1) : T(0), yout, hw);
  }
  if (after) after(ctx, n, p0, np);
}

// (image, block of output rows) items over the pool, as conv_run_blocked.
template <class T>
void conv_run_nhwc(const ConvGeom &g, int64_t block_rows, const T *xp, const T *wp, const Tensor &bias,
                   const Tensor &out, bool nchw_out, detail::nn::BlockCallback after, void *ctx) {
  const T *bp = bias.defined() ? static_cast<const T *>(bias.raw_data()) : nullptr;
  T *yp = static_cast<T *>(out.raw_data());
  for_each_row_block<T>(g, block_rows, [&](T *col, int64_t n, int64_t oh0, int64_t oh1) {
    if (nchw_out) conv_block_nhwc_to_nchw(g, n, oh0, oh1, xp, wp, bp, yp, col, after, ctx);
    else conv_block_nhwc(g, n, oh0, oh1, xp, wp, bp, yp, col, after, ctx);
  });
}

// The weight [O, Cg, kH, kW] (any strides) as [O, kH, kW, Cg] in this thread's
// scratch: each output channel's taps in col's order. Per call, but in reused
// memory, so a compiled call in steady state allocates nothing for it.
template <class T> const T *repack_weight_nhwc(const Tensor &weight) {
  const int64_t O = weight.size(0), Cg = weight.size(1), kH = weight.size(2), kW = weight.size(3);
  const IntArrayRef st = weight.strides();
  const T *w = static_cast<const T *>(weight.raw_data());
  T *wt = static_cast<T *>(thread_scratch(ScratchSlot::ConvWeight, size_t(O * kH * kW * Cg) * sizeof(T)));
  T *dst = wt;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t kh = 0; kh < kH; ++kh)
      for (int64_t kw = 0; kw < kW; ++kw)
        for (int64_t c = 0; c < Cg; ++c) *dst++ = w[o * st[0] + c * st[1] + kh * st[2] + kw * st[3]];
  return wt;
}

// The NHWC conv of `x` (channels-last input data, N*H*W*C elements) into `out`
// (channels-last, or contiguous NCHW; checked by the callers).
void conv_nhwc(const ConvGeom &g, const void *x, DType dtype, const Tensor &weight, const Tensor &bias,
               const Tensor &out, int64_t block_rows, detail::nn::BlockCallback after, void *ctx) {
  Tensor bc = bias.defined() ? packed(bias) : Tensor();
  dispatch_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      conv_run_nhwc<T>(g, std::clamp<int64_t>(block_rows, 1, g.Ho), static_cast<const T *>(x),
                       repack_weight_nhwc<T>(weight), bc, out, out.is_contiguous(), after, ctx);
  });
}

// An NCHW input converted to channels-last in this thread's scratch (a tiled
// transpose), or a packed copy when it is not a contiguous float image batch.
// `keep` holds the copy alive in that rare case.
const void *channels_last_data(const Tensor &input, Tensor &keep) {
  const size_t bytes = size_t(input.numel()) * input.element_size();
  void *dst = thread_scratch(ScratchSlot::ConvInput, bytes);
  if (detail::nchw_to_channels_last_into(input, dst)) return dst;
  keep = input.contiguous(MemoryFormat::ChannelsLast);
  return keep.raw_data();
}

// Whether conv2d takes the NHWC path: a 4-D input in channels-last layout
// (and not also contiguous, which C == 1 or H * W == 1 make ambiguous).
bool use_channels_last(const Tensor &input) {
  return input.dim() == 4 && !input.is_contiguous() && input.is_contiguous(MemoryFormat::ChannelsLast);
}

// ---- depthwise: one input channel per group (C == groups), a direct kernel
//
// Output channel o of O = C * M (M = O / C, the channel multiplier) is input
// channel o / M convolved with its own kH x kW taps. There is no reduction over
// channels, so im2col + GEMM (K = kH * kW) spends its time moving columns: the
// direct loops below read the input from L1 once per tap instead. Every output
// is bias + the in-range taps in (kh, kw) order with out-of-range taps skipped,
// as a plain loop: NaN and inf propagate the same way, and a NaN or inf weight
// never meets the padding (no 0 * inf).
//   NCHW input: vectorized along output rows. Per (image, row block, input
//     channel) the input rows the block reads are copied once, zero-padded, into
//     a small scratch, so every output row is a run of full vector chunks with
//     no bounds checks (the last chunk overlaps the one before instead of a
//     tail). Zero padding equals skipping only for finite weights: a channel
//     whose taps are not all finite, or a geometry whose padded rows would be
//     much larger than the block's output, takes the bounds-checked loop.
//   NHWC input: vectorized across channels, one output pixel at a time, with
//     the weight repacked to [kH * kW, O] so each tap's channels are contiguous.
// Both keep 8 accumulators in flight (4 rows x 2 chunks, or 8 channel chunks):
// one chain of dependent FMAs per output vector would wait on FMA latency.
// Blocks are (image, output rows [oh0, oh1)) for every channel, spread over
// kiln's pool; after(ctx, n, p0, np) runs per block as conv_block's does. No BLAS.

bool is_depthwise(const ConvGeom &g) { return g.C == g.groups; }

using detail::simd::kLanes;
using detail::simd::load;
using detail::simd::load_strided;
using detail::simd::Vec;
template <class T, int L> inline void store_strided(T *p, int64_t s, Vec<T, L> v) {
  if (s == 1) {
    std::memcpy(p, &v, sizeof v);
    return;
  }
  for (int i = 0; i < L; ++i) p[i * s] = v[i];
}

// Where outputs go: channel o, output pixel p of image n at n * ns + o * cs + p * ps.
struct DwOut {
  int64_t ns, cs, ps;
};
DwOut dw_out_strides(const ConvGeom &g, bool channels_last) {
  const int64_t hw = g.Ho * g.Wo;
  return channels_last ? DwOut{hw * g.O, 1, g.O} : DwOut{g.O * hw, hw, 1};
}

template <class T> bool finite_taps(const T *w, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(w[i])) return false;
  return true;
}

// -- NCHW

// Output row oh (of Wo pixels) of one channel, bounds-checked: `plane` is the
// input channel [H, W], wk its kH * kW taps.
template <class T>
void dw_row_checked(const ConvGeom &g, const T *plane, const T *wk, T b, int64_t oh, T *dst, int64_t ps) {
  for (int64_t ow = 0; ow < g.Wo; ++ow) {
    T acc = b;
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
        if (iw >= 0 && iw < g.W) acc += wk[kh * g.kW + kw] * plane[ih * g.W + iw];
      }
    }
    dst[ow * ps] = acc;
  }
}

// The padded rows of one input channel and where one output channel's rows go.
template <class T> struct DwRows {
  const T *P;     // padded rows: P[r * wp + j] is input row ih0 + r, column j - pw
  int64_t wp;     // pitch
  const T *wk;    // the output channel's taps
  T b;            // its bias
  T *dst;         // its output row oh0
  int64_t rstep;  // output row stride (elements)
  int64_t ps;     // output pixel stride
};

// R output rows [r0, r0 + R) (of the block) x K chunks of L pixels starting at
// ow[0..K): R * K independent accumulators. KH, KW: the kernel size when fixed
// at compile time (3 x 3: the taps unroll), else 0 (read from g).
template <class T, int L, int R, int K, int S, int KH, int KW>
inline void dw_tile(const ConvGeom &g, const DwRows<T> &d, int64_t r0, const int64_t *ow) {
  const int64_t kH = KH ? KH : g.kH, kW = KW ? KW : g.kW;
  Vec<T, L> acc[R][K];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) acc[r][k] = Vec<T, L>{} + d.b;
  const int64_t rs = g.sh * d.wp;
  for (int64_t kh = 0; kh < kH; ++kh) {
    const T *row = d.P + (r0 * g.sh + kh * g.dh) * d.wp;
    for (int64_t kw = 0; kw < kW; ++kw) {
      const T w = d.wk[kh * kW + kw];
      const T *src = row + kw * g.dw;
      for (int r = 0; r < R; ++r)
        for (int k = 0; k < K; ++k) acc[r][k] += w * load_strided<T, L, S>(src + r * rs + ow[k] * g.sw, g.sw);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) store_strided<T, L>(d.dst + (r0 + r) * d.rstep + ow[k] * d.ps, d.ps, acc[r][k]);
}

// Rows [r0, r0 + R) in chunks of L: pairs of chunks, then a lone one; the last
// chunk starts at Wo - L (overlapping the previous) when L does not divide Wo.
template <class T, int L, int R, int S, int KH, int KW>
void dw_rows(const ConvGeom &g, const DwRows<T> &d, int64_t r0) {
  const int64_t chunks = (g.Wo + L - 1) / L;
  int64_t c = 0;
  auto start = [&](int64_t i) { return std::min<int64_t>(i * L, g.Wo - L); };
  for (; c + 2 <= chunks; c += 2) {
    const int64_t ow[2] = {start(c), start(c + 1)};
    dw_tile<T, L, R, 2, S, KH, KW>(g, d, r0, ow);
  }
  if (c < chunks) {
    const int64_t ow[1] = {start(c)};
    dw_tile<T, L, R, 1, S, KH, KW>(g, d, r0, ow);
  }
}

// Block rows [0, rows) four at a time, then two, then one.
template <class T, int L, int S, int KH, int KW>
void dw_block_rows(const ConvGeom &g, const DwRows<T> &d, int64_t rows) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) dw_rows<T, L, 4, S, KH, KW>(g, d, r);
  for (; r + 2 <= rows; r += 2) dw_rows<T, L, 2, S, KH, KW>(g, d, r);
  for (; r < rows; ++r) dw_rows<T, L, 1, S, KH, KW>(g, d, r);
}

// The widest chunk no wider than a row (16 floats, then 8, 4, 1).
template <class T, int S, int KH, int KW>
void dw_block_rows_width(const ConvGeom &g, const DwRows<T> &d, int64_t rows) {
  constexpr int V = kLanes<T>;
  if (g.Wo >= V) return dw_block_rows<T, V, S, KH, KW>(g, d, rows);
  if (g.Wo >= V / 2) return dw_block_rows<T, V / 2, S, KH, KW>(g, d, rows);
  if (g.Wo >= V / 4) return dw_block_rows<T, V / 4, S, KH, KW>(g, d, rows);
  dw_block_rows<T, 1, 0, 0, 0>(g, d, rows);
}
// By stride (1 and 2 have their own loads) and kernel size (3 x 3 unrolled).
template <class T, int KH, int KW> void dw_padded_k(const ConvGeom &g, const DwRows<T> &d, int64_t rows) {
  if (g.sw == 1) return dw_block_rows_width<T, 1, KH, KW>(g, d, rows);
  if (g.sw == 2) return dw_block_rows_width<T, 2, KH, KW>(g, d, rows);
  dw_block_rows_width<T, 0, 0, 0>(g, d, rows);
}
template <class T> void dw_padded(const ConvGeom &g, const DwRows<T> &d, int64_t rows) {
  if (g.kH == 3 && g.kW == 3) return dw_padded_k<T, 3, 3>(g, d, rows);
  dw_padded_k<T, 0, 0>(g, d, rows);
}

// n elements from src (nullptr: zeros) to dst, in vector moves: rows are a few
// dozen elements, too short for a libc call per row to pay off.
// The last vector overlaps the one before rather than leaving a scalar tail.
template <class T> inline void dw_copy(T *dst, const T *src, int64_t n) {
  constexpr int V = kLanes<T>;
  auto move = [&](int64_t i) {
    const Vec<T, V> v = src ? load<T, V>(src + i) : Vec<T, V>{};
    std::memcpy(dst + i, &v, sizeof v);
  };
  if (n < V) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src ? src[i] : T(0);
    return;
  }
  int64_t i = 0;
  for (; i + V <= n; i += V) move(i);
  if (i < n) move(n - V);
}

// Input rows [ih0, ih0 + rows) of `plane` into P (pitch W + 2 pw), zero outside the image.
template <class T> void dw_pad_rows(const ConvGeom &g, const T *plane, int64_t ih0, int64_t rows, T *P) {
  const int64_t wp = g.W + 2 * g.pw;
  for (int64_t r = 0; r < rows; ++r) {
    T *d = P + r * wp;
    const int64_t ih = ih0 + r;
    if (ih < 0 || ih >= g.H) {
      dw_copy<T>(d, nullptr, wp);
      continue;
    }
    dw_copy<T>(d, nullptr, g.pw);
    dw_copy<T>(d + g.pw, plane + ih * g.W, g.W);
    dw_copy<T>(d + g.pw + g.W, nullptr, g.pw);
  }
}

// Input rows a block of `rows` output rows reads, plus slack for a stride-2
// chunk's second load, and whether that padded copy is small next to the
// block's output (a huge padding, stride or dilation takes the checked loop
// rather than a huge scratch).
int64_t dw_pad_rows_needed(const ConvGeom &g, int64_t rows) { return (rows - 1) * g.sh + g.dh * (g.kH - 1) + 2; }
bool dw_padded_fits(const ConvGeom &g, int64_t rows) {
  const double elems = double(dw_pad_rows_needed(g, rows)) * double(g.W + 2 * g.pw);
  return elems <= 16.0 * double(rows) * double(g.Wo) + 65536.0;
}

// Output rows [oh0, oh1) of image n, every channel (NCHW input x, weight w [O, kH * kW]).
template <class T>
void dw_block_nchw(const ConvGeom &g, int64_t n, int64_t oh0, int64_t oh1, const T *x, const T *w, const T *bias,
                   T *y, DwOut os, T *P, bool padded) {
  const int64_t M = g.O / g.C, kk = g.kH * g.kW, wp = g.W + 2 * g.pw;
  const int64_t need = dw_pad_rows_needed(g, oh1 - oh0);
  const int64_t ih0 = std::max<int64_t>(oh0 * g.sh - g.ph, 0), ih1 = std::min(g.H, oh0 * g.sh - g.ph + need - 1);
  for (int64_t c = 0; c < g.C; ++c) {
    const T *plane = x + (n * g.C + c) * g.H * g.W;
    // The next channel's rows are a separate stream: fetch them while this one computes.
    if (padded && c + 1 < g.C)
      for (const T *p = plane + g.H * g.W + ih0 * g.W, *e = plane + g.H * g.W + ih1 * g.W; p < e; p += 64 / sizeof(T))
        __builtin_prefetch(p);
    if (padded) {
      dw_pad_rows(g, plane, oh0 * g.sh - g.ph, need - 1, P);
      dw_copy<T>(P + (need - 1) * wp, nullptr, wp); // the slack row: read, never used
    }
    for (int64_t o = c * M; o < (c + 1) * M; ++o) {
      const T *wk = w + o * kk;
      const T b = bias ? bias[o] : T(0);
      T *yo = y + n * os.ns + o * os.cs + oh0 * g.Wo * os.ps;
      if (padded && finite_taps(wk, kk)) {
        dw_padded(g, DwRows<T>{P, wp, wk, b, yo, g.Wo * os.ps, os.ps}, oh1 - oh0);
        continue;
      }
      for (int64_t oh = oh0; oh < oh1; ++oh) dw_row_checked(g, plane, wk, b, oh, yo + (oh - oh0) * g.Wo * os.ps, os.ps);
    }
  }
}

// -- NHWC

// Output channels o0[k] .. o0[k] + L of one output pixel, k < K: `img` is the
// NHWC image, wt the weight as [kH * kW, O]; M == 1 reads input channels o0..
// directly, else channel (o0 + i) / M per lane.
template <class T, int L, int K>
inline void dw_pixel_tile(const ConvGeom &g, const T *img, const T *wt, const T *bias, int64_t oh, int64_t ow,
                          const int64_t *o0, int64_t M, T *dst, int64_t cs) {
  Vec<T, L> acc[K];
  for (int k = 0; k < K; ++k) acc[k] = bias ? load<T, L>(bias + o0[k]) : Vec<T, L>{};
  for (int64_t kh = 0; kh < g.kH; ++kh) {
    const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
    if (ih < 0 || ih >= g.H) continue;
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
      if (iw < 0 || iw >= g.W) continue;
      const T *px = img + (ih * g.W + iw) * g.C;
      const T *wtap = wt + (kh * g.kW + kw) * g.O;
      for (int k = 0; k < K; ++k) {
        Vec<T, L> xv;
        if (M == 1) xv = load<T, L>(px + o0[k]);
        else
          for (int i = 0; i < L; ++i) xv[i] = px[(o0[k] + i) / M];
        acc[k] += load<T, L>(wtap + o0[k]) * xv;
      }
    }
  }
  for (int k = 0; k < K; ++k) store_strided<T, L>(dst + o0[k] * cs, cs, acc[k]);
}

// All O channels of one pixel: 8 chunks at a time, then 4, 2, 1; the last
// chunk starts at O - L (overlapping) when L does not divide O.
template <class T, int L>
void dw_pixel(const ConvGeom &g, const T *img, const T *wt, const T *bias, int64_t oh, int64_t ow, int64_t M, T *dst,
              int64_t cs) {
  const int64_t chunks = (g.O + L - 1) / L;
  int64_t o[8];
  int64_t c = 0;
  auto run = [&]<int K>() {
    for (; c + K <= chunks; c += K) {
      for (int k = 0; k < K; ++k) o[k] = std::min<int64_t>((c + k) * L, g.O - L);
      dw_pixel_tile<T, L, K>(g, img, wt, bias, oh, ow, o, M, dst, cs);
    }
  };
  run.template operator()<8>();
  run.template operator()<4>();
  run.template operator()<2>();
  run.template operator()<1>();
}

// Output rows [oh0, oh1) of image n, every channel (NHWC input x, weight wt [kH * kW, O]).
template <class T>
void dw_block_nhwc(const ConvGeom &g, int64_t n, int64_t oh0, int64_t oh1, const T *x, const T *wt, const T *bias,
                   T *y, DwOut os) {
  constexpr int V = kLanes<T>;
  const int64_t M = g.O / g.C;
  const T *img = x + n * g.H * g.W * g.C;
  for (int64_t oh = oh0; oh < oh1; ++oh)
    for (int64_t ow = 0; ow < g.Wo; ++ow) {
      T *dst = y + n * os.ns + (oh * g.Wo + ow) * os.ps;
      if (g.O >= V) dw_pixel<T, V>(g, img, wt, bias, oh, ow, M, dst, os.cs);
      else if (g.O >= V / 2) dw_pixel<T, V / 2>(g, img, wt, bias, oh, ow, M, dst, os.cs);
      else if (g.O >= V / 4) dw_pixel<T, V / 4>(g, img, wt, bias, oh, ow, M, dst, os.cs);
      else dw_pixel<T, 1>(g, img, wt, bias, oh, ow, M, dst, os.cs);
    }
}

// The weight [O, 1, kH, kW] (any strides) as [kH * kW, O] in this thread's scratch.
template <class T> const T *repack_weight_taps_major(const Tensor &weight) {
  const int64_t O = weight.size(0), kH = weight.size(2), kW = weight.size(3);
  const IntArrayRef st = weight.strides();
  const T *w = static_cast<const T *>(weight.raw_data());
  T *wt = static_cast<T *>(thread_scratch(ScratchSlot::ConvWeight, size_t(O * kH * kW) * sizeof(T)));
  for (int64_t kh = 0; kh < kH; ++kh)
    for (int64_t kw = 0; kw < kW; ++kw)
      for (int64_t o = 0; o < O; ++o) wt[(kh * kW + kw) * O + o] = w[o * st[0] + kh * st[2] + kw * st[3]];
  return wt;
}

// The depthwise conv of `input` into `out` (contiguous or channels-last, of the
// result's shape; checked by the callers) in blocks of block_rows output rows.
template <class T>
void dw_run(const ConvGeom &g, const Tensor &input, const Tensor &weight, const Tensor &bias, const Tensor &out,
            int64_t block_rows, detail::nn::BlockCallback after, void *ctx) {
  const bool nhwc_in = use_channels_last(input);
  const DwOut os = dw_out_strides(g, !out.is_contiguous());
  Tensor xc = nhwc_in ? input : packed(input), wc = nhwc_in ? Tensor() : packed(weight);
  Tensor bc = bias.defined() ? packed(bias) : Tensor();
  const T *xp = static_cast<const T *>(xc.raw_data());
  const T *wp = nhwc_in ? repack_weight_taps_major<T>(weight) : static_cast<const T *>(wc.raw_data());
  const T *bp = bc.defined() ? static_cast<const T *>(bc.raw_data()) : nullptr;
  T *yp = static_cast<T *>(out.raw_data());
  const int64_t rows = std::clamp<int64_t>(block_rows, 1, g.Ho), blocks = (g.Ho + rows - 1) / rows;
  const bool padded = !nhwc_in && dw_padded_fits(g, rows);
  const size_t pad_elems = padded ? size_t(dw_pad_rows_needed(g, rows) * (g.W + 2 * g.pw)) : 0;
  parallel_for(0, g.N * blocks, 1, [&](int64_t lo, int64_t hi) {
    T *P = static_cast<T *>(thread_scratch(ScratchSlot::ConvColumns, pad_elems * sizeof(T)));
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n = i / blocks, oh0 = i % blocks * rows, oh1 = std::min(g.Ho, oh0 + rows);
      if (nhwc_in) dw_block_nhwc(g, n, oh0, oh1, xp, wp, bp, yp, os);
      else dw_block_nchw(g, n, oh0, oh1, xp, wp, bp, yp, os, P, padded);
      if (after) after(ctx, n, oh0 * g.Wo, (oh1 - oh0) * g.Wo);
    }
  });
}

void depthwise(const ConvGeom &g, const Tensor &input, const Tensor &weight, const Tensor &bias, const Tensor &out,
               int64_t block_rows, detail::nn::BlockCallback after, void *ctx) {
  dispatch_dtype(input.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) dw_run<T>(g, input, weight, bias, out, block_rows, after, ctx);
  });
}

// Checks conv2d's arguments (kiln::Error naming the one at fault) and returns the geometry.
ConvGeom conv_geometry(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride,
                       IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  detail::check_defined(input, "conv2d", "input");
  detail::check_defined(weight, "conv2d", "weight");
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             shape_str(input.sizes()));
  KILN_CHECK(weight.dim() == 4, "conv2d: expected 4-D weight [out_channels, in_channels / groups, kH, kW], got shape ",
             shape_str(weight.sizes()));
  check_floating(input, "conv2d", "input");
  check_same_dtype(weight, input.dtype(), "conv2d", "weight", "input");
  const std::vector<int64_t> st = pair_arg(stride, "stride", 1), pd = pair_arg(padding, "padding", 0),
                             dl = pair_arg(dilation, "dilation", 1);
  KILN_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  const bool batched = input.dim() == 4;
  ConvGeom g;
  g.N = batched ? input.size(0) : 1;
  g.C = input.size(-3), g.H = input.size(-2), g.W = input.size(-1);
  g.O = weight.size(0), g.kH = weight.size(2), g.kW = weight.size(3), g.groups = groups;
  g.sh = st[0], g.sw = st[1], g.ph = pd[0], g.pw = pd[1], g.dh = dl[0], g.dw = dl[1];
  KILN_CHECK(g.O % groups == 0, "conv2d: out_channels ", g.O, " (weight ", shape_str(weight.sizes()),
             ") must be divisible by groups ", groups);
  KILN_CHECK(g.C == weight.size(1) * groups, "conv2d: given groups=", groups, ", weight of size ",
             shape_str(weight.sizes()), ", expected input", shape_str(input.sizes()), " to have ",
             weight.size(1) * groups, " channels, but got ", g.C, " channels instead");
  if (bias.defined()) {
    check_same_dtype(bias, input.dtype(), "conv2d", "bias", "input");
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == g.O, "conv2d: expected bias of shape [", g.O, "], got ",
               shape_str(bias.sizes()));
  }
  // Sizes and attributes can come from a hand-written or fuzzed graph: keep the geometry in range.
  const __int128 big = INT64_MAX / 4;
  KILN_CHECK(__int128(g.dh) * g.kH < big && __int128(g.dw) * g.kW < big && g.ph < big && g.pw < big &&
                 g.H < big && g.W < big,
             "conv2d: dilation ", shape_str(dl), " and padding ", shape_str(pd), " are too large for input ",
             shape_str(input.sizes()), " and weight ", shape_str(weight.sizes()));
  const int64_t eh = g.dh * (g.kH - 1) + 1, ew = g.dw * (g.kW - 1) + 1; // dilated kernel extent
  KILN_CHECK(g.H + 2 * g.ph >= eh && g.W + 2 * g.pw >= ew, "conv2d: padded input size per channel (",
             g.H + 2 * g.ph, " x ", g.W + 2 * g.pw, ") is smaller than the dilated kernel size (", eh, " x ", ew,
             ") for input ", shape_str(input.sizes()), " and weight ", shape_str(weight.sizes()));
  g.Ho = (g.H + 2 * g.ph - eh) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

Dims conv_out_shape(const ConvGeom &g, bool batched) {
  Dims out_shape;
  if (batched) out_shape.push_back(g.N);
  for (int64_t s : {g.O, g.Ho, g.Wo}) out_shape.push_back(s);
  return out_shape;
}
} // namespace

Tensor conv2d(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride,
              IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  const ConvGeom g = conv_geometry(input, weight, bias, stride, padding, dilation, groups);
  KILN_TRACE(Conv2d, KILN_NN_INPUTS(input, weight, bias), .stride = pair_arg(stride, "stride", 1),
             .padding = pair_arg(padding, "padding", 0), .dilation = pair_arg(dilation, "dilation", 1),
             .groups = groups);
  Tensor out = detail::make_result(conv_out_shape(g, input.dim() == 4), input.dtype(), {&input, &weight, &bias});
  // torch's rule: a channels-last input gives a channels-last output. Meta
  // tensors too: tracing records eager's output strides from them.
  if (use_channels_last(input))
    out = detail::make_view(out, out.sizes(), detail::channels_last_strides(out.sizes()), 0);
  if (out.is_meta() || out.numel() == 0) return out;
  if (is_depthwise(g)) {
    depthwise(g, input, weight, bias, out, detail::nn::conv2d_block_rows(weight.sizes(), g.Ho, g.Wo), nullptr,
              nullptr);
    return out;
  }
  if (use_channels_last(input)) {
    conv_nhwc(g, input.raw_data(), input.dtype(), weight, bias, out,
              detail::nn::conv2d_block_rows(weight.sizes(), g.Ho, g.Wo), nullptr, nullptr);
    return out;
  }
  Tensor xc = packed(input), wc = packed(weight), bc = bias.defined() ? packed(bias) : Tensor();
  dispatch_dtype(input.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) conv_run<T>(g, xc, wc, bc, out);
  });
  return out;
}

namespace detail::nn {
void conv2d_into(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride,
                 IntArrayRef padding, IntArrayRef dilation, int64_t groups, const Tensor &out, int64_t block_rows,
                 BlockCallback after, void *ctx) {
  const ConvGeom g = conv_geometry(input, weight, bias, stride, padding, dilation, groups);
  const Dims want = conv_out_shape(g, input.dim() == 4);
  if (out.dim() == 4 && !out.is_contiguous()) { // a channels-last output: the NHWC conv, converting the input if needed
    KILN_CHECK(out.sizes() == IntArrayRef(want) && out.dtype() == input.dtype() &&
                   out.is_contiguous(MemoryFormat::ChannelsLast) && !out.is_meta(),
               "conv2d: output buffer ", shape_str(out.sizes()), " ", out.dtype(), " strides ",
               shape_str(out.strides()), " is neither contiguous nor channels-last for the result ", shape_str(want),
               " ", input.dtype());
    if (out.numel() == 0) return;
    if (is_depthwise(g)) return depthwise(g, input, weight, bias, out, block_rows, after, ctx);
    if (use_channels_last(input)) {
      conv_nhwc(g, input.raw_data(), input.dtype(), weight, bias, out, block_rows, after, ctx);
      return;
    }
    Tensor keep;
    conv_nhwc(g, channels_last_data(input, keep), input.dtype(), weight, bias, out, block_rows, after, ctx);
    return;
  }
  KILN_CHECK(out.sizes() == IntArrayRef(want) && out.dtype() == input.dtype() && out.is_contiguous() && !out.is_meta(),
             "conv2d: output buffer ", shape_str(out.sizes()), " ", out.dtype(), " does not match the result ",
             shape_str(want), " ", input.dtype(), " (contiguous)");
  if (out.numel() == 0) return;
  if (is_depthwise(g)) return depthwise(g, input, weight, bias, out, block_rows, after, ctx);
  if (use_channels_last(input)) { // no conversion: NHWC im2col, GEMM into NCHW rows
    conv_nhwc(g, input.raw_data(), input.dtype(), weight, bias, out, block_rows, after, ctx);
    return;
  }
  Tensor xc = packed(input), wc = packed(weight), bc = bias.defined() ? packed(bias) : Tensor();
  dispatch_dtype(input.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      conv_run_blocked<T>(g, std::clamp<int64_t>(block_rows, 1, g.Ho), xc, wc, bc, out, after, ctx);
  });
}

int64_t conv2d_block_rows(IntArrayRef weight, int64_t ho, int64_t wo) {
  // Depthwise (direct kernel): up to 128K outputs of all channels (512 KiB of
  // float, in L2 for the epilogue), in multiples of its 4-row tiles. Whole
  // images when they fit: each channel's input and output are then one
  // sequential stream (measured [8,128,28,28]: 28-row blocks 380 us, 8-row 460).
  if (weight[1] == 1) {
    const int64_t rows = std::max<int64_t>((int64_t(128) << 10) / std::max<int64_t>(weight[0] * wo, 1) / 4 * 4, 4);
    return std::clamp<int64_t>(rows, 1, std::max<int64_t>(ho, 1));
  }
  // 128K floats (512 KiB) of im2col per block: weight is [O, C/groups, kH, kW].
  const int64_t ckk = weight[1] * weight[2] * weight[3];
  return std::clamp<int64_t>((int64_t(128) << 10) / std::max<int64_t>(ckk * wo, 1), 1, std::max<int64_t>(ho, 1));
}
} // namespace detail::nn

namespace adapters {
std::vector<Tensor> Conv2d(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Conv2d at{a};
  check_num_inputs(in, 3, "conv2d");
  return {conv2d(in[0], in[1], in[2], at.stride(), at.padding(), at.dilation(), at.groups())};
}
} // namespace adapters

} // namespace kiln
