// conv2d (NCHW, stride, padding, dilation, groups, optional bias) by im2col + GEMM;
// a channels-last input runs the NHWC variant below (conv_nhwc).
//
// Per image and group: col[C/g * kH * kW, Hout * Wout] is gathered from the
// input (zeros in the padding), then out_g[O/g, Hout * Wout] = W_g @ col is one
// GEMM written straight into the output. A 1x1 / stride 1 / no padding conv
// skips im2col: the image itself is the GEMM operand. Several images run in
// parallel with single-threaded BLAS; one image uses OpenBLAS's threads.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/linalg_internal.h"
#include "runtime/op_adapters.h"
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
  KILN_TRACE(Conv2d, KILN_NN_INPUTS(input, weight, bias), pair_arg(stride, "stride", 1),
             pair_arg(padding, "padding", 0), pair_arg(dilation, "dilation", 1), groups);
  Tensor out = detail::make_result(conv_out_shape(g, input.dim() == 4), input.dtype(), {&input, &weight, &bias});
  if (out.is_meta() || out.numel() == 0) return out;
  if (use_channels_last(input)) { // torch's rule: a channels-last input gives a channels-last output
    out = detail::make_view(out, out.sizes(), detail::channels_last_strides(out.sizes()), 0);
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
  // 128K floats (512 KiB) of im2col per block: weight is [O, C/groups, kH, kW].
  const int64_t ckk = weight[1] * weight[2] * weight[3];
  return std::clamp<int64_t>((int64_t(128) << 10) / std::max<int64_t>(ckk * wo, 1), 1, std::max<int64_t>(ho, 1));
}
} // namespace detail::nn

namespace adapters {
std::vector<Tensor> Conv2d(const std::vector<Tensor> &in, const Attrs &a) {
  check_num_inputs(in, 3, "conv2d");
  return {conv2d(in[0], in[1], in[2], a.at(0).as_ints(), a.at(1).as_ints(), a.at(2).as_ints(), a.at(3).as_int())};
}
} // namespace adapters

} // namespace kiln
