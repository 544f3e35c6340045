// kiln's compiled depthwise conv2d (groups == C: one input channel per group,
// channel multiplier M = O / C >= 1), the kernel of a compiled conv step whose
// conv is depthwise under KILN_GEMM=jit (codegen/epilogue.cpp).
//
//   ConvShape s = ...;                                          // NCHW geometry, groups == C
//   auto w = kiln::gemm::pack_depthwise_weight<float>(s, W, ws);   // once per weight version
//   DwBlocking b = kiln::gemm::depthwise_blocking<float>(s);    // fixed when the step is built
//   kiln::gemm::depthwise_conv2d<float>(s, x, xs, *w, bias, y, after, ctx, b);
//
// Implicit GEMM (codegen/gemm/conv.h) has K = kH * kW per group there, nine
// FMAs per loaded column: this is a direct kernel instead. A work item is
// (image, block of output channels, block of output rows); for each channel of
// the block the input rows the block reads are copied once, zero padded, into
// an L1-sized scratch (the whole plane when it fits: one sequential stream per
// channel, and the next channel's rows are prefetched meanwhile), then each
// output row is computed in vectors of L pixels with R rows x K chunks of
// accumulators, the taps unrolled for 1x1, 3x3 and 5x5 and the input rows read
// once for all kernel rows at stride 1 (no dilation). after(ctx, image, c0, nc,
// p0, np) runs on the item's [nc channels, np pixels] output while it is in L1
// (the compiled epilogue: bias, batch norm, relu, residual add).
//
// Semantics are eager's (runtime/kernels/conv.cpp, the depthwise kernel):
// every output is bias + the in-range taps in (kh, kw) order, out-of-range taps
// skipped. Zero padding equals skipping for finite weights only: a channel
// whose taps are not all finite takes a bounds-checked scalar loop, so a NaN or
// inf weight never meets the padding (no 0 * inf).
//
// Covered: f32 and f64, any kernel size, stride, padding and dilation, any
// input strides with contiguous rows, NCHW contiguous output.
// depthwise_unsupported() names what is not (the callers keep eager's kernel).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "codegen/gemm/conv.h"

namespace kiln::codegen::gemm {

// Whether `s` is a depthwise conv (eager's rule: groups == C).
inline bool is_depthwise(const ConvShape &s) { return s.groups == s.C; }

// Why depthwise_conv2d does not take `s` (for the debug log), or nothing.
std::optional<std::string> depthwise_unsupported(const ConvShape &s);

// The weight [O, 1, kH, kW] as O contiguous runs of kH * kW taps.
template <class T> struct DepthwiseWeight {
  ConvShape shape;
  const T *data = nullptr;  // owned's, or a caller's buffer (pack_depthwise_weight_into)
  std::shared_ptr<T> owned; // null when the taps are the caller's
  int64_t bytes() const { return shape.O * shape.kH * shape.kW * int64_t(sizeof(T)); }
};

// W's element (o, 0, kh, kw) is at W[o*ws[0] + kh*ws[2] + kw*ws[3]].
template <class T>
std::shared_ptr<const DepthwiseWeight<T>> pack_depthwise_weight(const ConvShape &s, const T *W, const int64_t ws[4]);
// The same into dst (64-byte aligned, DepthwiseWeight<T>{s}.bytes() bytes: a
// call's scratch): no allocation.
template <class T>
DepthwiseWeight<T> pack_depthwise_weight_into(const ConvShape &s, const T *W, const int64_t ws[4], T *dst);

// Output channels and rows per work item (the epilogue's tile is [channels, rows * Wo]).
struct DwBlocking {
  int64_t channels = 1, rows = 1;
};
// The blocking for `threads` threads (0: kiln::get_num_threads()): an item's
// output and padded input stay in L1, and every thread gets several items.
template <class T> DwBlocking depthwise_blocking(const ConvShape &s, int threads = 0);

// The output block of an item: channels [c0, c0 + nc) x pixels [p0, p0 + np)
// of `image`, channel c0 + i's pixels at block + i * ldc (contiguous).
using DwBlockCallback = void (*)(void *ctx, int64_t image, int64_t c0, int64_t nc, int64_t p0, int64_t np,
                                 void *block, int64_t ldc);

// y (NCHW contiguous, [N, O, Ho, Wo]) = depthwise conv2d(x, W) + bias. x's
// element (n, c, h, w) is at x[n*xs[0] + c*xs[1] + h*xs[2] + w] (rows
// contiguous); bias null or O contiguous elements. `threads` 0:
// kiln::get_num_threads(); inside a parallel region the call runs serially.
// y null (when only the epilogue's results are wanted): each block is written
// to the running thread's scratch instead (ldc = blocking.rows * Wo) and never
// reaches memory; `after` is then required.
template <class T>
void depthwise_conv2d(const ConvShape &s, const T *x, const int64_t xs[4], const DepthwiseWeight<T> &w, const T *bias,
                      T *y, DwBlockCallback after, void *ctx, DwBlocking blocking, int threads = 0);

// How many depthwise_conv2d calls ran since the process started (tests prove the path with it).
int64_t depthwise_calls();
// How many weights pack_depthwise_weight prepared into memory it allocated
// (tests check that a weight that is no parameter goes to the call's scratch).
int64_t depthwise_weight_heap_packs();

} // namespace kiln::codegen::gemm
