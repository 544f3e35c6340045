// INTERNAL to codegen/gemm (conv.cpp): Winograd F(2x2, 3x3) for kiln's conv2d.
//
// A stride-1, undilated, ungrouped 3x3 conv computes each 2x2 block of output
// pixels (a tile) from the 4x4 input patch under it as
//   Y = A^T [ sum_c (G g_c G^T) (.) (B^T d_c B) ] A
// ((.) elementwise; g_c the 3x3 taps of input channel c, d_c its patch): 16
// multiplies per tile and channel instead of 36. Summed over channels, each
// of the 16 positions xi of the 4x4 product is a GEMM
//   M_xi[O, tiles] = U_xi[O, C] @ V_xi[C, tiles]
// run on the same JIT micro-kernels as the direct conv: U (the transformed
// weight) is packed once per weight version as their A panels, V is written
// by the input transform straight into B-panel layout (C x nr, k-major) per
// panel of nr tiles, and M goes to a per-thread scratch that the output
// transform reads back while it is in L2. W7's 3x3 convs (C = O = 64):
// docs/performance.md, "Winograd F(2x2, 3x3)".
//
// Rounding: with u the unit roundoff, an output differs from the exact conv by
// at most about (C + 8) u times the same formula evaluated on magnitudes,
// |A^T| [ sum_c (|G| |g_c| |G^T|) (.) (|B^T| |d_c| |B|) ] |A|, plus |bias| u
// (test/unit/conv_jit_test.cpp checks twice that against a double loop). That
// sum is larger than the direct conv's sum |w x| by a small factor, not by
// the size of the conv.
//
// Non-finite or huge values take the direct conv: the transforms subtract
// neighbouring inputs (inf - inf is NaN where the direct sum has inf), so a
// work item whose input window holds a value that is not finite or exceeds
// kWinogradLimit in magnitude, or a weight with one (checked when packed),
// runs the direct implicit GEMM for that item, and every result equals eager's
// NaN and inf included.
#pragma once

#include <cstdint>

#include "codegen/gemm/conv.h"

namespace kiln::codegen::gemm {

// Below it, transformed products summed over C and the 16 positions cannot
// overflow where the direct conv does not (2^32 * 2^32 * 36 * C * 16 << 2^127).
constexpr double kWinogradLimit = 4294967296.0; // 2^32

// A panel's tiles (the micro-kernels' nr, at most 4 vectors of 16 floats)
// bound the transforms' stack buffers.
constexpr int64_t kWinogradMaxNr = 64;

// Whether Winograd computes `s` at all: 3x3, stride 1, dilation 1, one group.
bool winograd_eligible(const ConvShape &s);

// Whether conv2d takes Winograd for `s` (its shape only) with micro-kernels
// of nr columns: 3x3, stride 1, dilation 1, one group, enough channels that
// the GEMMs dominate the transforms, tiles that fill the panels well enough
// to save a quarter of the multiplies, and KILN_CONV_WINOGRAD not 0.
bool winograd_shape(const ConvShape &s, int64_t nr);

// Output tiles of `s`: ceil(Ho / 2) rows of ceil(Wo / 2).
inline int64_t winograd_tile_rows(const ConvShape &s) { return (s.Ho + 1) / 2; }
inline int64_t winograd_tile_cols(const ConvShape &s) { return (s.Wo + 1) / 2; }

// Tile rows per work item for `threads` threads: the items' tiles fill the
// panels of nr tiles with the least padding, in whole tile rows (an item's
// pixels are then whole output rows: the blocks the epilogue's tiles take).
int64_t winograd_item_tile_rows(const ConvShape &s, int64_t nr, int threads);

// Elements of the transformed weight: 16 x O x C.
inline int64_t winograd_weight_elems(const ConvShape &s) { return 16 * s.O * s.C; }

// Writes U = G g G^T for every (o, c) into dst as 16 blocks of O x C, each as
// the micro-kernels' A panels (row panels of mr output channels, the last one
// shorter, each C x rows, k-major). Returns false when a weight is not finite
// or exceeds kWinogradLimit (conv2d then runs the direct conv throughout).
template <class T> bool winograd_pack_weight(const ConvShape &s, int mr, const T *W, const int64_t ws[4], T *dst);

// Scratch elements run_winograd_item needs for items of `tile_rows` tile rows.
int64_t winograd_scratch_elems(const ConvShape &s, int64_t nr, int64_t tile_rows);

// Image n, tile rows [t0, t1): y's output rows [2 t0, min(2 t1, Ho)) of
// every channel, bias included. Returns false, having written nothing, when
// the input window holds a value that is not finite or exceeds
// kWinogradLimit (the caller then runs the direct conv on the item).
template <class T>
bool run_winograd_item(const ConvShape &s, const PackedConvWeight<T> &w, const T *x, const int64_t xs[4],
                       const T *bias, T *y, int64_t n, int64_t t0, int64_t t1, T *scratch);

} // namespace kiln::codegen::gemm
