// kiln's own conv2d on the JIT GEMM micro-kernels (codegen/gemm/ukernel.h):
// an implicit GEMM with no im2col buffer.
//
//   ConvShape s = ...;                                   // NCHW geometry
//   auto w = kiln::gemm::pack_conv_weight<float>(s, W, wst);   // once per weight version
//                                                        // (codegen/gemm/versioned_pack.h)
//   kiln::gemm::conv2d<float>(s, x, xst, *w, bias, y, after, ctx);
//
// Per group, out[O/g, Ho*Wo] = W_g[O/g, C/g*kH*kW] @ col[C/g*kH*kW, Ho*Wo] is a
// GEMM whose A (the weight) is packed once into the micro-kernel's A panels
// (kc x mr, k-major) and whose B (the im2col of the input) is never built as a
// whole: each thread gathers the kc x nr B panels of its block of output pixels
// straight from the input (zeros in the padding) into an L2-sized scratch, and
// the micro-kernels write the NCHW output rows in place (ldc = Ho*Wo). Work
// items are (image, block of output pixels), spread over kiln's pool; after
// every group of an item is done, after(ctx, image, p0, np) runs on that thread
// while the block's pixels of every channel are still in its cache (the
// compiled epilogue: batch norm, relu, residual add), unless the epilogue runs
// in the micro-kernels' registers (ConvEpilogue below: the variants of
// gemm.h's Epilogue, applied on each group's last k block; no second pass).
//
// Covered: f32 and f64, any stride, padding, dilation and groups, any input
// strides, bias. The output is NCHW contiguous. conv_unsupported() names what
// is not (the callers then run the BLAS path): a depthwise conv (groups == C,
// one input channel per group: a GEMM with K = kH*kW per group), which runs
// kiln's depthwise kernel instead (codegen/gemm/depthwise.h). Stride-1 3x3
// convs whose shape pays for it run Winograd F(2x2, 3x3) on the same
// micro-kernels (codegen/gemm/winograd.h; PackedConvWeight::winograd).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "codegen/gemm/gemm.h"

namespace kiln::codegen::gemm {

struct ConvShape {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input [N, C, H, W]
  int64_t O = 0, kH = 0, kW = 0;       // weight [O, C / groups, kH, kW]
  int64_t Ho = 0, Wo = 0, groups = 1;  // output [N, O, Ho, Wo]
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t Cg() const { return C / groups; }
  int64_t Og() const { return O / groups; }
  int64_t K() const { return Cg() * kH * kW; } // the GEMM's k per group
  int64_t pixels() const { return Ho * Wo; }
  double flops() const { return 2.0 * double(N) * double(O) * double(pixels()) * double(K()); }
  std::string str() const;
};

// Why conv2d below does not take `s` (for the debug log of the fallback), or nothing.
std::optional<std::string> conv_unsupported(const ConvShape &s);

// The weight as per-group A panels: for group g and k block pc (kc rows, the
// last one shorter), row panels of mr output channels (the last one shorter),
// each kc x rows, k-major, as the micro-kernels read them. Copies share the
// panels.
template <class T> struct PackedConvWeight {
  ConvShape shape;
  Config config;
  const T *data = nullptr;  // the panels: `owned`'s, or a caller's buffer (pack_conv_weight_into)
  std::shared_ptr<T> owned; // null when the panels are the caller's
  // The micro-kernels (codegen/gemm/ukernel.h's MicroKernel<T>) for mr rows and
  // for the last O/groups % mr rows; null when not needed.
  using Kernel = void (*)(const T *a, const T *b, T *c, int64_t kc, int64_t ldc, int64_t n, T alpha, T beta);
  Kernel full = nullptr, tail = nullptr;
  // Winograd F(2x2, 3x3) (codegen/gemm/winograd.h), chosen by the shape: the
  // transformed weight (16 x O x C) follows the direct panels in `data`, and
  // conv2d's items are whole rows of 2x2 output tiles. An item runs the direct
  // panels instead where its input window, or the weight
  // (!winograd_weight_ok), holds a value the transforms would not keep exact
  // in its NaN and inf (winograd.h).
  bool winograd = false;
  bool winograd_weight_ok = false;
  int64_t bytes() const;
  int64_t direct_elems() const { return shape.groups * shape.Og() * shape.K(); }
  const T *panel(int64_t g, int64_t pc, int64_t row0) const {
    const int64_t kc = std::min(config.kc, shape.K() - pc);
    return data + g * shape.Og() * shape.K() + pc * shape.Og() + row0 * kc;
  }
  // Position xi's A panel of rows [row0, row0 + mr): C x rows, k-major.
  const T *winograd_panel(int64_t xi, int64_t row0) const {
    return data + direct_elems() + (xi * shape.O + row0) * shape.C;
  }
};

// The config conv2d uses for `s`: the host's tile, kc balanced over K.
template <class T> Config conv_config(const ConvShape &s);

// Packs W (element (o, c, kh, kw) at W[o*ws[0] + c*ws[1] + kh*ws[2] + kw*ws[3]])
// into panels it allocates.
template <class T>
std::shared_ptr<const PackedConvWeight<T>> pack_conv_weight(const ConvShape &s, const T *W, const int64_t ws[4]);

// The config and micro-kernels of `s` with no panels: compiles (or finds) the
// micro-kernels conv2d needs; kiln::Error if they cannot be (the callers then
// take the BLAS path). Resolved once, then given to pack_conv_weight_into.
template <class T> PackedConvWeight<T> conv_kernels(const ConvShape &s);

// Packs W as pack_conv_weight does into `dst` (kernels.bytes() bytes, 64-byte
// aligned; a per-call scratch): no allocation, no lock. `kernels` from conv_kernels.
template <class T>
PackedConvWeight<T> pack_conv_weight_into(const PackedConvWeight<T> &kernels, const T *W, const int64_t ws[4], T *dst);

using ConvBlockCallback = void (*)(void *ctx, int64_t image, int64_t p0, int64_t np);

// A compiled epilogue applied in the micro-kernels' registers (gemm.h's
// Epilogue): on each group's last k block, the variant of `kernels` (resolved
// by resolve_epilogue_kernels for w.config and O/groups rows) evaluates it on
// the accumulators and stores its outputs. In the conv's GEMM the rows are
// output channels (a per-channel operand is a Row one) and the columns the
// block's pixels (an NCHW residual is a Tile one with row stride Ho*Wo).
// Per work item, pointers(ctx, image, p0, ptrs, lds) fills, per buffer of the
// expression, its address at (channel 0, pixel p0) of that image and its row
// stride in elements (at most kMaxConvEpilogueBuffers buffers).
constexpr size_t kMaxConvEpilogueBuffers = 64;
struct ConvEpilogue {
  const KernelSet *kernels = nullptr;
  size_t buffers = 0;
  void (*pointers)(void *ctx, int64_t image, int64_t p0, const void **ptrs, int64_t *lds) = nullptr;
  void *ctx = nullptr;
};

// y (NCHW contiguous, [N, O, Ho, Wo]) = conv2d(x, W) + bias. x's element
// (n, c, h, w) is at x[n*xs[0] + c*xs[1] + h*xs[2] + w*xs[3]]; bias may be
// null (else O contiguous elements). `threads` 0: kiln::get_num_threads().
// Output pixels per work item (a multiple of the tile's nr, whole images at
// most) for `threads` threads (0: kiln::get_num_threads()): the B block of an
// item stays in L2. Callers that compile per-block epilogues fix it once.
template <class T> int64_t conv_block_pixels(const ConvShape &s, int threads = 0);

// `block_pixels` 0: conv_block_pixels<T>(s, threads); else rounded up to nr
// pixels, or for Winograd (PackedConvWeight::winograd) to whole pairs of
// output rows.
// `epi`, when given, runs in the micro-kernels' registers (before `after`).
template <class T>
void conv2d(const ConvShape &s, const T *x, const int64_t xs[4], const PackedConvWeight<T> &w, const T *bias, T *y,
            ConvBlockCallback after, void *ctx, int64_t block_pixels = 0, int threads = 0,
            const ConvEpilogue *epi = nullptr);

// How many conv2d calls ran since the process started (tests prove the path with it).
int64_t conv_calls();
// How many of them ran an epilogue in the micro-kernels' registers.
int64_t conv_register_epilogue_calls();
// Work items conv2d ran through Winograd F(2x2, 3x3), and items of a
// Winograd-shaped conv that took the direct conv (a value out of its range).
int64_t conv_winograd_items();
int64_t conv_winograd_direct_items();
// How many packings pack_conv_weight allocated since the process started (tests
// check that a compiled call packs a weight that is no parameter into its scratch).
int64_t conv_weight_heap_packs();

} // namespace kiln::codegen::gemm
